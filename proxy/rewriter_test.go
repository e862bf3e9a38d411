package proxy

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/internal/pgtest"
	"github.com/ttlproxy/ttlproxy/rewrite"
)

// TestRealRewriter runs the proxy with the real rewriter: expired rows of
// the TTL table are hidden in both protocols. It is skipped while package
// rewrite does not filter yet.
func TestRealRewriter(t *testing.T) {
	parallel(t) // owns its database and proxy
	rw, err := rewrite.New(testRules, rewrite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const count = "SELECT count(*) FROM items"
	probe, err := rw.Rewrite(count, rewrite.NewState(rewrite.Session{
		SearchPath: []string{"public"},
		Catalog: rewrite.NewCatalog(rewrite.CatalogData{
			Tables: map[string]*rewrite.TableInfo{"public.items": {Columns: []rewrite.Column{
				{Name: "id", Type: "integer"}, {Name: "expires_at", Type: "timestamp with time zone"},
			}}},
			Schemas: map[string][]string{"items": {"public"}},
		}),
	}))
	if err != nil || !probe.Rewritten {
		t.Fatalf("the rewriter does not filter the probe (rewritten=%v, err=%v)", probe.Rewritten, err)
	}
	db := pgtest.NewDatabase(t)
	execDirect(t, db,
		"CREATE TABLE items (id int PRIMARY KEY, expires_at timestamptz)",
		"INSERT INTO items VALUES (1, NULL), (2, now() + interval '1 hour'), (3, now() - interval '1 hour')")
	p := startProxy(t, Config{Rewriter: rw, rewriter: rw})
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			conn := p.connect(t, db, m.mode)
			var n int
			if err := conn.QueryRow(testContext(t), count).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 2 {
				t.Fatalf("%s = %d through the proxy, want 2 live rows", count, n)
			}
			if err := conn.QueryRow(testContext(t), "SELECT count(*) FROM items WHERE id = $1", 3).Scan(&n); err != nil || n != 0 {
				t.Fatalf("expired row visible: n=%d err=%v", n, err)
			}
		})
	}
	direct := connectDirect(t, db, pgx.QueryExecModeSimpleProtocol)
	var n int
	if err := direct.QueryRow(testContext(t), count).Scan(&n); err != nil || n != 3 {
		t.Fatalf("direct count %d, %v", n, err)
	}
}
