package proxy

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ttlproxy/ttlproxy/internal/pgtest"
	"github.com/ttlproxy/ttlproxy/rewrite"
)

// leakSchema makes items (a TTL table: 1 row without expiry, 1 live, 1
// expired) and, created directly, every kind of in-database path to it.
var leakSchema = []string{
	"CREATE TABLE items (id int PRIMARY KEY, expires_at timestamptz)",
	"INSERT INTO items VALUES (1, NULL), (2, now() + interval '1 hour'), (3, now() - interval '1 hour')",
	"CREATE VIEW v_items AS SELECT * FROM items",
	"CREATE VIEW v_items2 AS SELECT id FROM v_items WHERE id > 0",
	"CREATE VIEW v_barrier WITH (security_barrier) AS SELECT id FROM items WHERE id < 10",
	"CREATE VIEW v_alias (a, b) AS SELECT id, expires_at FROM items",
	"CREATE MATERIALIZED VIEW m_items AS SELECT * FROM items",
	"CREATE FUNCTION f_items() RETURNS bigint LANGUAGE sql AS 'SELECT count(*) FROM items'",
	"CREATE FUNCTION f_atomic() RETURNS bigint LANGUAGE sql BEGIN ATOMIC SELECT count(*) FROM v_items; END",
	"CREATE FUNCTION f_plpgsql() RETURNS bigint LANGUAGE plpgsql AS $$ BEGIN RETURN (SELECT count(*) FROM ITEMS); END $$",
	"CREATE FUNCTION f_calls() RETURNS bigint LANGUAGE plpgsql AS $$ BEGIN RETURN f_items() + 0; END $$",
	"CREATE FUNCTION f_trusted() RETURNS bigint LANGUAGE sql AS 'SELECT count(*) FROM items'",
	"CREATE FUNCTION f_other() RETURNS int LANGUAGE sql AS 'SELECT 7'",
}

// TestLeakPaths: views created directly that read a TTL table are expanded
// into their filtered definitions; materialized views and functions that
// read one are rejected with 0A000 naming them; a trusted function runs;
// and a view created through the proxy is filtered and stays readable in
// later sessions.
func TestLeakPaths(t *testing.T) {
	parallel(t) // owns its database and proxy
	rw, err := rewrite.New(testRules, rewrite.Options{TrustedFunctions: []string{"public.f_trusted"}})
	if err != nil {
		t.Fatal(err)
	}
	db := pgtest.NewDatabase(t)
	execDirect(t, db, leakSchema...)
	p := startProxy(t, Config{Rewriter: rw, rewriter: rw, CatalogTTL: time.Nanosecond})

	setup := p.connect(t, db, modes[0].mode)
	mustExec(t, setup, "CREATE VIEW v_proxy AS SELECT id FROM items")
	mustExec(t, setup, "CREATE VIEW v_on_proxy AS SELECT * FROM v_proxy")

	rejected := map[string]string{
		"SELECT count(*) FROM m_items": "view public.m_items",
		"UPDATE v_items2 SET id = id":  "view public.v_items2",
		"SELECT f_items()":             "function public.f_items",
		"SELECT f_atomic()":            "function public.f_atomic",
		"SELECT * FROM f_plpgsql()":    "function public.f_plpgsql",
		"SELECT f_calls()":             "function public.f_calls",
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			conn := p.connect(t, db, m.mode)
			for sql, name := range rejected {
				var n int64
				err := conn.QueryRow(testContext(t), sql).Scan(&n)
				var pe *pgconn.PgError
				if !errors.As(err, &pe) || pe.Code != "0A000" || !strings.Contains(pe.Message, name) {
					t.Errorf("%s: n=%d err=%v; want 0A000 naming %s", sql, n, err, name)
				}
			}
			for sql, want := range map[string]string{
				"SELECT count(*)::text FROM v_items":                               "2",
				"SELECT count(*)::text FROM public.v_items2":                       "2",
				"SELECT string_agg(id::text, ',' ORDER BY id) FROM v_items":        "1,2",
				"SELECT count(*)::text FROM v_barrier":                             "2",
				"SELECT count(*)::text FROM v_alias WHERE b IS NULL":               "1",
				"SELECT count(*)::text FROM v_items x JOIN items i ON i.id = x.id": "2",
				"SELECT count(*)::text FROM v_proxy":                               "2",
				"SELECT count(*)::text FROM v_on_proxy":                            "2",
				// A simple view: writes through it are filtered like the table\'s.
				"WITH u AS (UPDATE v_items SET id = id RETURNING 1) SELECT count(*)::text FROM u": "2",
				// A trusted function sees every row, as documented.
				"SELECT f_trusted()::text": "3",
				"SELECT f_other()::text":   "7",
			} {
				if got := queryString(t, conn, sql); got != want {
					t.Errorf("%s = %s, want %s", sql, got, want)
				}
			}
		})
	}
	// DDL through the proxy makes the session read the catalog again: a
	// materialized view it creates is refused, and a view made directly
	// meanwhile is expanded, by the same session.
	for _, m := range modes {
		t.Run("after DDL/"+m.name, func(t *testing.T) {
			conn := p.connect(t, db, m.mode)
			suffix := strings.ReplaceAll(m.name, " ", "_")
			mustExec(t, conn, "SELECT count(*) FROM items")
			execDirect(t, db, "CREATE VIEW v_late_"+suffix+" AS SELECT * FROM items")
			mustExec(t, conn, "CREATE MATERIALIZED VIEW m_new_"+suffix+" AS SELECT * FROM items")
			var n int64
			err := conn.QueryRow(testContext(t), "SELECT count(*) FROM m_new_"+suffix).Scan(&n)
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != "0A000" || !strings.Contains(pe.Message, "view public.m_new_"+suffix) {
				t.Errorf("the new materialized view: n=%d err=%v; want 0A000 naming it", n, err)
			}
			// Read raw, the view would show the expired row too.
			if got := queryString(t, conn, "SELECT count(*)::text FROM v_late_"+suffix); got != "2" {
				t.Errorf("the view made directly meanwhile: %s rows, want the 2 live ones", got)
			}
			// The session still works, and its unnamed statement survived.
			if got := queryString(t, conn, "SELECT count(*)::text FROM items"); got != "2" {
				t.Errorf("count after the reload %s, want 2", got)
			}
		})
	}

	direct := connectDirect(t, db, modes[0].mode)
	if got := queryString(t, direct, "SELECT count(*)::text FROM v_items"); got != "3" {
		t.Fatalf("direct count through the view %s, want 3", got)
	}
}

// TestLeakPathsRowSecurity: a view that reads a table with row security is
// not expanded (the policies would apply to the reader, not the view's
// owner) unless it is security_invoker.
func TestLeakPathsRowSecurity(t *testing.T) {
	parallel(t) // owns its database and proxy
	rw, err := rewrite.New(testRules, rewrite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	db := pgtest.NewDatabase(t)
	execDirect(t, db,
		"CREATE TABLE items (id int PRIMARY KEY, expires_at timestamptz)",
		"INSERT INTO items VALUES (1, NULL), (2, now() - interval '1 hour')",
		"ALTER TABLE items ENABLE ROW LEVEL SECURITY",
		"CREATE VIEW v_owner AS SELECT * FROM items",
		"CREATE VIEW v_invoker WITH (security_invoker) AS SELECT * FROM items")
	p := startProxy(t, Config{Rewriter: rw, rewriter: rw})
	conn := p.connect(t, db, modes[0].mode)
	var n int64
	err = conn.QueryRow(testContext(t), "SELECT count(*) FROM v_owner").Scan(&n)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "0A000" || !strings.Contains(pe.Message, "public.v_owner") {
		t.Errorf("view over a table with row security: n=%d err=%v; want 0A000", n, err)
	}
	if got := queryString(t, conn, "SELECT count(*)::text FROM v_invoker"); got != "1" {
		t.Errorf("security_invoker view: %s rows, want 1", got)
	}
}

// TestLongSessionSeesViewMadeDirectly: a view over a TTL table created
// outside the proxy reaches a session that was open before it, within
// CatalogTTL, and with no DDL through that session: read through it, the
// view shows live rows only. A second session adopts the younger catalog
// the first one read.
func TestLongSessionSeesViewMadeDirectly(t *testing.T) {
	parallel(t) // owns its database and proxy
	db := pgtest.NewDatabase(t)
	execDirect(t, db, leakSchema[:2]...)
	rw, err := rewrite.New(testRules, rewrite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 300 * time.Millisecond
	p := startProxy(t, Config{Rewriter: rw, rewriter: rw, CatalogTTL: ttl})
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			first := p.connect(t, db, m.mode)
			second := p.connect(t, db, m.mode)
			for _, c := range []*pgx.Conn{first, second} {
				if got := queryString(t, c, "SELECT count(*)::text FROM items"); got != "2" {
					t.Fatalf("items: %s rows, want 2", got)
				}
			}
			view := "v_direct_" + strings.ReplaceAll(m.name, " ", "_")
			execDirect(t, db, "CREATE VIEW "+view+" AS SELECT * FROM items")
			// Read raw, the view would show the expired row too. Each
			// session reads until its catalog has aged (a statement it
			// prepared before must not keep the window open), then once
			// more.
			deadline := time.Now().Add(ttl + 10*time.Second)
			for i, c := range []*pgx.Conn{first, second} {
				for queryString(t, c, "SELECT count(*)::text FROM "+view) != "2" {
					if time.Now().After(deadline) {
						t.Fatalf("session %d, a view made directly after it started: still the expired row %v after the catalog's TTL", i+1, ttl)
					}
					time.Sleep(20 * time.Millisecond)
				}
				if got := queryString(t, c, "SELECT count(*)::text FROM "+view); got != "2" {
					t.Errorf("session %d, once it knew the view: %s rows, want the 2 live ones", i+1, got)
				}
			}
		})
	}
}

// TestPreparedBeforeViewKnown: a statement prepared while the session did
// not yet know of a view made directly (the window before its catalog is
// read again) is checked again once the session knows it: a client's
// statement cache binds it for good, and it must not go on reading the
// expired row.
func TestPreparedBeforeViewKnown(t *testing.T) {
	parallel(t) // owns its database and proxy
	db := pgtest.NewDatabase(t)
	execDirect(t, db, leakSchema[:2]...)
	rw, err := rewrite.New(testRules, rewrite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, Config{Rewriter: rw, rewriter: rw, CatalogTTL: time.Hour})
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			conn := p.connect(t, db, m.mode)
			if got := queryString(t, conn, "SELECT count(*)::text FROM items"); got != "2" {
				t.Fatalf("items: %s rows, want 2", got)
			}
			view := "v_before_" + strings.ReplaceAll(m.name, " ", "_")
			execDirect(t, db, "CREATE VIEW "+view+" AS SELECT * FROM items")
			read := "SELECT count(*)::text FROM " + view
			// The session's catalog predates the view: the window.
			if got := queryString(t, conn, read); got != "3" {
				t.Fatalf("the setup no longer opens the window: %s rows before the catalog is read again, want 3", got)
			}
			// DDL through the session makes it read the catalog again.
			mustExec(t, conn, "CREATE TABLE "+view+"_ddl (a int)")
			if got := queryString(t, conn, read); got != "2" {
				t.Errorf("the same statement once the session knows the view: %s rows, want the 2 live ones", got)
			}
			mustExec(t, conn, "BEGIN")
			if got := queryString(t, conn, read); got != "2" {
				t.Errorf("inside a transaction block: %s rows, want 2", got)
			}
			mustExec(t, conn, "COMMIT")
		})
	}
}
