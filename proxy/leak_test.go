package proxy

import (
	"errors"
	"strings"
	"testing"
	"time"

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
	"CREATE MATERIALIZED VIEW m_items AS SELECT * FROM items",
	"CREATE FUNCTION f_items() RETURNS bigint LANGUAGE sql AS 'SELECT count(*) FROM items'",
	"CREATE FUNCTION f_atomic() RETURNS bigint LANGUAGE sql BEGIN ATOMIC SELECT count(*) FROM v_items; END",
	"CREATE FUNCTION f_plpgsql() RETURNS bigint LANGUAGE plpgsql AS $$ BEGIN RETURN (SELECT count(*) FROM ITEMS); END $$",
	"CREATE FUNCTION f_calls() RETURNS bigint LANGUAGE plpgsql AS $$ BEGIN RETURN f_items() + 0; END $$",
	"CREATE FUNCTION f_trusted() RETURNS bigint LANGUAGE sql AS 'SELECT count(*) FROM items'",
	"CREATE FUNCTION f_other() RETURNS int LANGUAGE sql AS 'SELECT 7'",
}

// TestLeakPaths: views, materialized views and functions created directly
// that read a TTL table are rejected with 0A000 naming them, a trusted
// function runs, and a view created through the proxy is filtered and
// stays readable in later sessions.
func TestLeakPaths(t *testing.T) {
	t.Parallel() // owns its database and proxy
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
		"SELECT count(*) FROM v_items":         "view public.v_items",
		"SELECT count(*) FROM public.v_items2": "view public.v_items2",
		"SELECT count(*) FROM m_items":         "view public.m_items",
		"SELECT f_items()":                     "function public.f_items",
		"SELECT f_atomic()":                    "function public.f_atomic",
		"SELECT * FROM f_plpgsql()":            "function public.f_plpgsql",
		"SELECT f_calls()":                     "function public.f_calls",
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
				"SELECT count(*)::text FROM v_proxy":    "2",
				"SELECT count(*)::text FROM v_on_proxy": "2",
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
	// materialized view it creates, and a view made directly meanwhile, are
	// refused by the same session.
	for _, m := range modes {
		t.Run("after DDL/"+m.name, func(t *testing.T) {
			conn := p.connect(t, db, m.mode)
			suffix := strings.ReplaceAll(m.name, " ", "_")
			mustExec(t, conn, "SELECT count(*) FROM items")
			execDirect(t, db, "CREATE VIEW v_late_"+suffix+" AS SELECT * FROM items")
			mustExec(t, conn, "CREATE MATERIALIZED VIEW m_new_"+suffix+" AS SELECT * FROM items")
			for sql, name := range map[string]string{
				"SELECT count(*) FROM m_new_" + suffix:  "view public.m_new_" + suffix,
				"SELECT count(*) FROM v_late_" + suffix: "view public.v_late_" + suffix,
			} {
				var n int64
				err := conn.QueryRow(testContext(t), sql).Scan(&n)
				var pe *pgconn.PgError
				if !errors.As(err, &pe) || pe.Code != "0A000" || !strings.Contains(pe.Message, name) {
					t.Errorf("%s: n=%d err=%v; want 0A000 naming %s", sql, n, err, name)
				}
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
