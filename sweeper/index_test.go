package sweeper

import (
	"testing"
	"time"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// TestCreateIndex: with create_index the sweeper builds the missing index
// on the expiry column at start, concurrently, and sweeps as usual.
func TestCreateIndex(t *testing.T) {
	e := setup(t)
	createSessions(t, e, "unindexed", 50, 5, 0)
	r := sessionsRule("unindexed")
	r.CreateIndex = true
	s := e.newSweeper(t, Config{Rules: []ttl.Rule{r}, Interval: time.Hour})
	if err := s.Start(e.ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var valid bool
		err := e.conn.QueryRow(e.ctx, `SELECT COALESCE(bool_and(i.indisvalid), false) FROM pg_index i
			JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
			WHERE i.indrelid = 'unindexed'::regclass AND a.attname = 'expires_at'`).Scan(&valid)
		if err != nil {
			t.Fatal(err)
		}
		if valid && e.count(t, "unindexed") == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no valid index on expires_at, or not swept (%d rows)", e.count(t, "unindexed"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.Stop()
	// Exactly the one index was added.
	var n int
	if err := e.conn.QueryRow(e.ctx, "SELECT count(*) FROM pg_indexes WHERE tablename = 'unindexed'").Scan(&n); err != nil || n != 2 {
		t.Errorf("indexes on the table: %d, %v; want the primary key and the expiry index", n, err)
	}
}
