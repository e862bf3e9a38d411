package tests

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// stampedMinutes returns the lifetime, in whole minutes, stamped on the
// sessions row id (read directly, bypassing the proxy).
func stampedMinutes(t *testing.T, direct *pgx.Conn, id int) string {
	t.Helper()
	return ids(t, direct, `SELECT round(extract(epoch FROM expires_at - now()) / 60)::int FROM sessions WHERE id = $1`, id)
}

// TestSessionTTL checks SET/RESET/SHOW ttlproxy.ttl through the proxy: the
// setting changes the lifetime stamped by this session's INSERTs only.
func TestSessionTTL(t *testing.T) {
	s := newStack(t, stackOptions{setup: sessionsSetup, rules: []ttl.Rule{sessionsRule}})
	conn := s.connectMode(pgx.QueryExecModeSimpleProtocol)
	other := s.connect(s.proxied)
	direct := s.connect(s.direct)
	ctx := context.Background()
	exec := func(c *pgx.Conn, sql string, args ...any) {
		t.Helper()
		if _, err := c.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}

	if got := ids(t, conn, `SHOW ttlproxy.ttl`); got != "" {
		t.Errorf("SHOW ttlproxy.ttl before any SET: %q, want empty (the tables' default)", got)
	}
	exec(conn, `SET ttlproxy.ttl = '10 minutes'`)
	if got := ids(t, conn, `SHOW ttlproxy.ttl`); got != "10 minutes" {
		t.Errorf("SHOW ttlproxy.ttl after SET: %q", got)
	}
	exec(conn, `INSERT INTO sessions (id, owner, note) VALUES (10, 1, 'ten minutes')`)
	exec(other, `INSERT INTO sessions (id, owner, note) VALUES (11, 1, 'default')`)
	if got := stampedMinutes(t, direct, 10); got != "10" {
		t.Errorf("row stamped after SET ttlproxy.ttl = '10 minutes' lives %s minutes", got)
	}
	if got := stampedMinutes(t, direct, 11); got != "60" {
		t.Errorf("another session's row lives %s minutes, want the default 60", got)
	}

	// An invalid value is refused before it reaches the server.
	_, err := conn.Exec(ctx, `SET ttlproxy.ttl = '3 parsecs'`)
	if sqlstate(err) != "22023" {
		t.Errorf("SET ttlproxy.ttl = '3 parsecs': %v, want 22023", err)
	}
	if got := ids(t, conn, `SHOW ttlproxy.ttl`); got != "10 minutes" {
		t.Errorf("SHOW after a refused SET: %q, want 10 minutes", got)
	}

	exec(conn, `RESET ttlproxy.ttl`)
	exec(conn, `INSERT INTO sessions (id, owner, note) VALUES (12, 1, 'after reset')`)
	if got := stampedMinutes(t, direct, 12); got != "60" {
		t.Errorf("row stamped after RESET lives %s minutes, want 60", got)
	}

	// A value the proxy could not check (a parameter) fails closed on the
	// next statement that would stamp; reads go on.
	ext := s.connect(s.proxied)
	exec(ext, `SELECT set_config('ttlproxy.ttl', $1, false)`, "3 parsecs")
	_, err = ext.Exec(ctx, `INSERT INTO sessions (id, owner, note) VALUES (13, 1, 'invalid ttl')`)
	if sqlstate(err) != "22023" {
		t.Errorf("stamping INSERT with an invalid session ttlproxy.ttl: %v, want 22023", err)
	}
	if got := ids(t, ext, `SELECT count(*) FROM sessions WHERE id < 10`); got != "2" {
		t.Errorf("read with an invalid session ttlproxy.ttl: %q", got)
	}
	if got := ids(t, direct, `SELECT count(*) FROM sessions WHERE id = 13`); got != "0" {
		t.Errorf("the INSERT refused for an invalid ttlproxy.ttl reached the table")
	}
}

// TestBypassRoles checks that a role listed in bypass_roles sees every row,
// also after SET ROLE, and that RESET ROLE filters again.
func TestBypassRoles(t *testing.T) {
	s := newStack(t, stackOptions{
		setup: append(append([]string{}, sessionsSetup...),
			`DROP ROLE IF EXISTS ttl_maintenance`,
			`CREATE ROLE ttl_maintenance`,
			`GRANT SELECT, UPDATE, DELETE ON sessions TO ttl_maintenance`),
		rules:       []ttl.Rule{sessionsRule},
		bypassRoles: []string{"ttl_maintenance"},
	})
	conn := s.connectMode(pgx.QueryExecModeSimpleProtocol)
	if got := ids(t, conn, `SELECT count(*) FROM sessions`); got != "2" {
		t.Fatalf("filtered count: %s", got)
	}
	if _, err := conn.Exec(context.Background(), `SET ROLE ttl_maintenance`); err != nil {
		t.Fatal(err)
	}
	if got := ids(t, conn, `SELECT count(*) FROM sessions`); got != "3" {
		t.Errorf("a bypass role sees %s rows, want all 3", got)
	}
	if _, err := conn.Exec(context.Background(), `RESET ROLE`); err != nil {
		t.Fatal(err)
	}
	if got := ids(t, conn, `SELECT count(*) FROM sessions`); got != "2" {
		t.Errorf("after RESET ROLE: %s rows, want 2", got)
	}
}

// TestSearchPathTracking checks that the proxy follows search_path: a
// same-named plain table in another schema is not filtered, the TTL table is,
// a SET and a TTL read in one query string are followed (a RESET ALL refused),
// and a prepared
// statement keeps reading the table it was prepared for.
func TestSearchPathTracking(t *testing.T) {
	s := newStack(t, stackOptions{
		setup: append(append([]string{}, sessionsSetup...),
			`CREATE SCHEMA archive`,
			`CREATE TABLE archive.sessions (id int, owner int, note text, expires_at timestamptz)`,
			`INSERT INTO archive.sessions VALUES (1, 1, 'old', now() - interval '1 day'), (2, 1, 'old', now() - interval '2 days')`),
		rules: []ttl.Rule{sessionsRule},
	})
	conn := s.connectMode(pgx.QueryExecModeSimpleProtocol)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `PREPARE live_count AS SELECT count(*) FROM sessions`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SET search_path = archive, public`); err != nil {
		t.Fatal(err)
	}
	if got := ids(t, conn, `SELECT count(*) FROM sessions`); got != "2" {
		t.Errorf("archive.sessions (not a TTL table) through the proxy: %s rows, want both", got)
	}
	if got := ids(t, conn, `EXECUTE live_count`); got != "2" {
		t.Errorf("statement prepared for public.sessions, executed after SET search_path: %s, want 2 live rows", got)
	}
	if _, err := conn.Exec(ctx, `SET search_path = public`); err != nil {
		t.Fatal(err)
	}
	if got := ids(t, conn, `SELECT count(*) FROM sessions`); got != "2" {
		t.Errorf("public.sessions after SET search_path = public: %s rows, want the 2 live ones", got)
	}
	// In one query string, each statement is rewritten under the
	// search_path the statements before it leave.
	for _, c := range []struct{ sql, want, path string }{
		// archive.sessions is no TTL table: both its (expired) rows.
		{`SET search_path = archive, public; SELECT id FROM sessions ORDER BY id`, "1,2", "archive, public"},
		// Back to public.sessions: the live rows only.
		{`SET search_path = public; SELECT id FROM sessions ORDER BY id`, "1,3", "public"},
		// SET LOCAL ends with the transaction; ROLLBACK undoes a SET.
		{`BEGIN; SET LOCAL search_path = archive; SELECT id FROM sessions ORDER BY id; COMMIT`, "1,2", "public"},
		{`BEGIN; SET search_path = archive; ROLLBACK; SELECT id FROM sessions ORDER BY id`, "1,3", "public"},
	} {
		results, err := conn.PgConn().Exec(ctx, c.sql).ReadAll()
		if err != nil {
			t.Errorf("%s: %v", c.sql, err)
			continue
		}
		var got []string
		for _, r := range results {
			for _, row := range r.Rows {
				got = append(got, string(row[0]))
			}
		}
		if strings.Join(got, ",") != c.want {
			t.Errorf("%s: ids %v, want %s", c.sql, got, c.want)
		}
		if path := ids(t, conn, `SHOW search_path`); path != c.path {
			t.Errorf("%s: search_path %q after it, want %q", c.sql, path, c.path)
		}
	}
	// A change the text does not determine is still refused before a TTL read.
	_, err := conn.Exec(ctx, `RESET ALL; SELECT count(*) FROM sessions`)
	if sqlstate(err) != "0A000" {
		t.Errorf("RESET ALL and a TTL read in one query string: %v, want 0A000", err)
	}
}

// TestBypassTempShadowFailedBlock: a bypass session whose temporary table
// shadows a TTL table can end a transaction block that failed (the state is
// not known while the block is aborted, yet COMMIT and ROLLBACK read no
// table), and reads the TTL table filtered once RESET ROLE has left the
// bypass role.
func TestBypassTempShadowFailedBlock(t *testing.T) {
	s := newStack(t, stackOptions{
		setup: append(append([]string{}, sessionsSetup...),
			`DROP ROLE IF EXISTS ttl_maintenance`,
			`CREATE ROLE ttl_maintenance`,
			`GRANT SELECT, UPDATE, DELETE ON sessions TO ttl_maintenance`,
			`GRANT CREATE, USAGE ON SCHEMA public TO ttl_maintenance`,
			`GRANT TEMPORARY ON DATABASE `+"postgres"+` TO ttl_maintenance`),
		rules:       []ttl.Rule{sessionsRule},
		bypassRoles: []string{"ttl_maintenance"},
	})
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		conn := s.connectMode(mode)
		ctx := context.Background()
		for _, q := range []string{`SET ROLE ttl_maintenance`, `CREATE TEMP TABLE sessions (id int)`, `BEGIN`} {
			if _, err := conn.Exec(ctx, q); err != nil {
				t.Fatalf("%v: %s: %v", mode, q, err)
			}
		}
		if _, err := conn.Exec(ctx, `SELECT 1/0`); err == nil {
			t.Fatalf("%v: division by zero succeeded", mode)
		}
		for _, q := range []string{`ROLLBACK`, `DROP TABLE pg_temp.sessions`, `RESET ROLE`} {
			if _, err := conn.Exec(ctx, q); err != nil {
				t.Fatalf("%v: %s after the failed block: %v", mode, q, err)
			}
		}
		if got := ids(t, conn, `SELECT count(*) FROM sessions`); got != "2" {
			t.Errorf("%v: after RESET ROLE: %s rows, want 2", mode, got)
		}
	}
}
