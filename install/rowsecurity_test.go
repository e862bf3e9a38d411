package install

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/internal/pgtest"
	"github.com/ttlproxy/ttlproxy/ttl"
)

// role creates a login role for the test, dropped at its end.
func (e *env) role(name string) string {
	e.t.Helper()
	name = name + "_" + e.db
	e.exec("CREATE ROLE " + name + " LOGIN PASSWORD 'rls-secret'")
	e.t.Cleanup(func() {
		ctx := context.Background()
		_, _ = e.conn.Exec(ctx, "DROP OWNED BY "+name)
		_, _ = e.conn.Exec(ctx, "DROP ROLE "+name)
	})
	return name
}

// connectAs connects to the test database as role.
func (e *env) connectAs(role string) *pgx.Conn {
	e.t.Helper()
	u, err := url.Parse(pgtest.Server(e.t).ConnString(e.db))
	if err != nil {
		e.t.Fatal(err)
	}
	u.User = url.UserPassword(role, "rls-secret")
	c, err := pgx.Connect(e.ctx, u.String())
	if err != nil {
		e.t.Fatalf("connecting as %s: %v", role, err)
	}
	e.t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func queryText(t *testing.T, ctx context.Context, c *pgx.Conn, sql string) string {
	t.Helper()
	var s string
	if err := c.QueryRow(ctx, sql).Scan(&s); err != nil {
		t.Fatalf("%s as %s: %v", sql, c.Config().User, err)
	}
	return s
}

// TestRowSecurity: with the policies installed, a role that reads the
// table directly, through a view owned by the table's owner, through SQL
// and SECURITY DEFINER functions and through a partition sees only live
// rows and may still write expired ones; the exempt sweeper sees every row;
// uninstall restores the table as it was.
func TestRowSecurity(t *testing.T) {
	e := setup(t)
	owner, app, sweep := e.role("rls_owner"), e.role("rls_app"), e.role("rls_sweep")
	e.exec(
		"CREATE TABLE s (id int PRIMARY KEY, expires_at timestamptz)",
		"INSERT INTO s VALUES (1, NULL), (2, now() + interval '1 hour'), (3, now() - interval '1 hour')",
		"CREATE TABLE p (id int, expires_at timestamptz) PARTITION BY RANGE (id)",
		"CREATE TABLE p1 PARTITION OF p FOR VALUES FROM (0) TO (100)",
		"INSERT INTO p VALUES (1, now() - interval '1 hour'), (2, NULL)",
		"ALTER TABLE s OWNER TO "+owner,
		"ALTER TABLE p OWNER TO "+owner,
		"ALTER TABLE p1 OWNER TO "+owner,
		"GRANT CREATE ON SCHEMA public TO "+owner,
		"SET ROLE "+owner,
		"CREATE VIEW v AS SELECT * FROM s",
		"CREATE FUNCTION f() RETURNS bigint LANGUAGE sql AS 'SELECT count(*) FROM s'",
		"CREATE FUNCTION fd() RETURNS bigint LANGUAGE sql SECURITY DEFINER AS 'SELECT count(*) FROM public.s'",
		"GRANT SELECT, INSERT ON s, v, p, p1 TO "+app,
		"GRANT SELECT, DELETE ON s TO "+sweep,
		"RESET ROLE",
	)
	rules := []ttl.Rule{{Table: "s"}, {Table: "p"}}
	out, err := ApplyRowSecurity(e.ctx, e.conn, rules, []string{sweep}, false)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(out, "\n"), "ENABLE ROW LEVEL SECURITY") {
		t.Errorf("install did not enable row security:\n%s", strings.Join(out, "\n"))
	}

	a := e.connectAs(app)
	for sql, want := range map[string]string{
		"SELECT count(*)::text FROM s":  "2",
		"SELECT count(*)::text FROM v":  "2",
		"SELECT f()::text":              "2",
		"SELECT fd()::text":             "2",
		"SELECT count(*)::text FROM p":  "1",
		"SELECT count(*)::text FROM p1": "1",
	} {
		if got := queryText(t, e.ctx, a, sql); got != want {
			t.Errorf("%s as the application = %s, want %s", sql, got, want)
		}
	}
	if _, err := a.Exec(e.ctx, "INSERT INTO s VALUES (4, now() - interval '1 day')"); err != nil {
		t.Errorf("writing an expired row: %v", err)
	}
	sw := e.connectAs(sweep)
	if got := queryText(t, e.ctx, sw, "SELECT count(*)::text FROM s"); got != "4" {
		t.Errorf("the sweeper sees %s rows, want 4", got)
	}
	if tag, err := sw.Exec(e.ctx, "DELETE FROM s WHERE expires_at < now()"); err != nil || tag.RowsAffected() != 2 {
		t.Errorf("the sweeper deleted %v rows (%v), want 2", tag.RowsAffected(), err)
	}

	// Installing again is a no-op for the data and keeps the record.
	if _, err := ApplyRowSecurity(e.ctx, e.conn, rules, []string{sweep}, false); err != nil {
		t.Fatalf("second install: %v", err)
	}
	e.exec("INSERT INTO s VALUES (5, now() - interval '1 hour')")
	if got := queryText(t, e.ctx, a, "SELECT count(*)::text FROM s"); got != "2" {
		t.Errorf("after a second install the application sees %s rows, want 2", got)
	}

	// Preview changes nothing.
	if _, err := PreviewRowSecurity(e.ctx, e.conn, rules, nil, true); err != nil {
		t.Fatal(err)
	}
	if got := queryText(t, e.ctx, a, "SELECT count(*)::text FROM s"); got != "2" {
		t.Errorf("after a preview the application sees %s rows, want 2", got)
	}

	if _, err := ApplyRowSecurity(e.ctx, e.conn, rules, nil, true); err != nil {
		t.Fatalf("uninstall: %v", err)
	}
	if got := queryText(t, e.ctx, a, "SELECT count(*)::text FROM s"); got != "3" {
		t.Errorf("after uninstall the application sees %s rows, want 3", got)
	}
	if got := e.strings(`SELECT relname || ':' || relrowsecurity || ':' || relforcerowsecurity FROM pg_class
		WHERE relname IN ('s', 'p', 'p1') ORDER BY 1`); got != "p1:false:false,p:false:false,s:false:false" {
		t.Errorf("after uninstall: %s", got)
	}
	if got := e.strings("SELECT count(*)::text FROM pg_policy"); got != "0" {
		t.Errorf("%s policies left", got)
	}
}

// TestRowSecurityColumnsOnly: a table with no row rule (rule none) gets
// no policy, and loses those an install under a row rule gave it.
func TestRowSecurityColumnsOnly(t *testing.T) {
	e := setup(t)
	e.exec(
		"CREATE TABLE c (id int PRIMARY KEY, expires_at timestamptz, phone text, phone_exp timestamptz)",
		"INSERT INTO c VALUES (1, now() - interval '1 hour', 'x', NULL)",
	)
	if _, err := ApplyRowSecurity(e.ctx, e.conn, []ttl.Rule{{Table: "c"}}, nil, false); err != nil {
		t.Fatal(err)
	}
	if got := e.strings("SELECT count(*)::text FROM pg_policy"); got != "2" {
		t.Fatalf("%s policies under a row rule, want 2", got)
	}
	none := []ttl.Rule{{Table: "c", Kind: ttl.KindNone, Columns: []ttl.ColumnRule{{Column: "phone", ExpiresAtColumn: "phone_exp"}}}}
	out, err := ApplyRowSecurity(e.ctx, e.conn, none, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if all := strings.Join(out, "\n"); strings.Contains(all, "CREATE POLICY") || !strings.Contains(all, "DROP POLICY") {
		t.Errorf("install for rule none:\n%s", all)
	}
	if got := e.strings("SELECT count(*)::text FROM pg_policy"); got != "0" {
		t.Errorf("%s policies left for rule none", got)
	}
	if got := e.strings("SELECT relrowsecurity::text FROM pg_class WHERE relname = 'c'"); got != "false" {
		t.Errorf("row security enabled = %s, want false (the earlier install enabled it)", got)
	}
	if out, err := ApplyRowSecurity(e.ctx, e.conn, none, nil, false); err != nil || len(out) != 0 {
		t.Errorf("second install for rule none: %v %v, want nothing to do", out, err)
	}
}

// TestRowSecurityKeepsOwnPolicies: on a table with row security and
// policies of its own, the live policy narrows what they allow, and
// uninstall leaves them and row security in place.
func TestRowSecurityKeepsOwnPolicies(t *testing.T) {
	e := setup(t)
	owner, app := e.role("rls_owner"), e.role("rls_app")
	e.exec(
		"CREATE TABLE s (id int PRIMARY KEY, expires_at timestamptz)",
		"INSERT INTO s VALUES (1, NULL), (2, now() - interval '1 hour'), (101, NULL), (102, now() - interval '1 hour')",
		"ALTER TABLE s OWNER TO "+owner,
		"ALTER TABLE s ENABLE ROW LEVEL SECURITY",
		"CREATE POLICY low ON s FOR SELECT TO PUBLIC USING (id < 100)",
		"GRANT SELECT ON s TO "+app,
	)
	rules := []ttl.Rule{{Table: "s"}}
	out, err := ApplyRowSecurity(e.ctx, e.conn, rules, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.Join(out, "\n"), allPolicy) {
		t.Errorf("a permissive policy was added to a table with its own:\n%s", strings.Join(out, "\n"))
	}
	a := e.connectAs(app)
	if got := queryText(t, e.ctx, a, "SELECT string_agg(id::text, ',' ORDER BY id) FROM s"); got != "1" {
		t.Errorf("the application sees %s, want 1", got)
	}
	if _, err := ApplyRowSecurity(e.ctx, e.conn, rules, nil, true); err != nil {
		t.Fatal(err)
	}
	if got := queryText(t, e.ctx, a, "SELECT string_agg(id::text, ',' ORDER BY id) FROM s"); got != "1,2" {
		t.Errorf("after uninstall the application sees %s, want 1,2", got)
	}
	if got := e.strings("SELECT relrowsecurity::text FROM pg_class WHERE relname = 's'"); got != "true" {
		t.Errorf("uninstall disabled the table's own row security")
	}
}
