package sweeper

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// TestCreateIndex: with create_index the sweeper builds the missing
// indexes on the expiry column and on an expiring column's expiry column
// at start, concurrently, and sweeps as usual; a derived expiring column's
// base column gets none. Every connection, the pool's and the index
// builds' own, is dialled with Config.DialFunc.
func TestCreateIndex(t *testing.T) {
	e := setup(t)
	createSessions(t, e, "unindexed", 50, 5, 0)
	e.exec(t, "ALTER TABLE unindexed ADD COLUMN note_exp timestamptz, ADD COLUMN memo text, ADD COLUMN created_at timestamptz")
	r := sessionsRule("unindexed")
	r.CreateIndex = true
	r.Columns = []ttl.ColumnRule{
		{Column: "note", ExpiresAtColumn: "note_exp"},
		{Column: "memo", BaseColumn: "created_at", ExpireAfter: time.Hour},
	}
	var dials atomic.Int32
	var d net.Dialer
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return d.DialContext(ctx, network, addr)
	}
	s := e.newSweeper(t, Config{Rules: []ttl.Rule{r}, Interval: time.Hour, DialFunc: dial})
	if err := s.Start(e.ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var valid bool
		err := e.conn.QueryRow(e.ctx, `SELECT count(*) FILTER (WHERE i.indisvalid) = 2 FROM pg_index i
			JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
			WHERE i.indrelid = 'unindexed'::regclass AND a.attname IN ('expires_at', 'note_exp')`).Scan(&valid)
		if err != nil {
			t.Fatal(err)
		}
		if valid && e.count(t, "unindexed") == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no valid index on expires_at and note_exp, or not swept (%d rows)", e.count(t, "unindexed"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.Stop()
	// The pool's connection and one per index build.
	if n := dials.Load(); n < 3 {
		t.Errorf("%d connections dialled with Config.DialFunc, want at least 3", n)
	}
	// Exactly the two indexes were added.
	var n int
	if err := e.conn.QueryRow(e.ctx, "SELECT count(*) FROM pg_indexes WHERE tablename = 'unindexed'").Scan(&n); err != nil || n != 3 {
		t.Errorf("indexes on the table: %d, %v; want the primary key and the two expiry indexes", n, err)
	}
}

// TestIndexColumnsNone: create_index on a table with no row rule indexes
// its expiring columns' expiry columns alone.
func TestIndexColumnsNone(t *testing.T) {
	r := ordersRule("orders")
	r.Kind = ttl.KindNone
	r.CreateIndex = true
	if got := indexColumns(&r); len(got) != 1 || got[0] != "ip_exp" {
		t.Errorf("indexColumns = %v, want [ip_exp]", got)
	}
}
