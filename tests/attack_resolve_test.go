package tests

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// The proxy resolves an unqualified table name under the search_path, role
// and temporary relations it knows; a function can change all three inside
// the server where the proxy does not see it. These attacks make the
// server read another relation than the one the proxy filtered: each must
// end in the proxy's filter applied to what the server reads, or in an
// error, never in an expired row or value.

const resolveAttacker = "ttl_resolve_attacker"

// resolveStack has a row-rule table sessions and a column-TTL table vault in
// public, each with a shadow of the same name and columns in the schema
// evil of an ordinary login (DML grants, its own schema, no bypass).
func resolveStack(t *testing.T) *stack {
	t.Helper()
	rules := []ttl.Rule{
		sessionsRule,
		{Table: "vault", Kind: ttl.KindNone, Columns: []ttl.ColumnRule{{Column: "secret", ExpiresAtColumn: "secret_expires_at"}}},
	}
	return newStack(t, stackOptions{rules: rules, setup: append(append([]string{}, sessionsSetup...),
		`DO $$ BEGIN
			IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '`+resolveAttacker+`') THEN
				CREATE ROLE `+resolveAttacker+` LOGIN PASSWORD 'attack3r';
			END IF; END $$`,
		`CREATE TABLE vault (id int PRIMARY KEY, secret text, secret_expires_at timestamptz)`,
		`INSERT INTO vault VALUES (1, 'stale-secret', now() - interval '1 hour'), (2, 'fresh-secret', now() + interval '1 hour')`,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON sessions, vault, users TO `+resolveAttacker,
		`CREATE SCHEMA evil AUTHORIZATION `+resolveAttacker,
		`CREATE TABLE evil.sessions (id int PRIMARY KEY, owner int, note text, expires_at timestamptz)`,
		`INSERT INTO evil.sessions VALUES (9, 9, 'decoy', NULL)`,
		`CREATE TABLE evil.vault (id int PRIMARY KEY, secret text, secret_expires_at timestamptz)`,
		`INSERT INTO evil.vault VALUES (9, 'decoy', NULL)`,
		`ALTER TABLE evil.sessions OWNER TO `+resolveAttacker,
		`ALTER TABLE evil.vault OWNER TO `+resolveAttacker,
		// A view reading a TTL table directly, which the proxy expands
		// filtered, and the attacker's table of the same name.
		`CREATE VIEW public.v_notes AS SELECT id, note, expires_at FROM public.sessions`,
		`GRANT SELECT ON public.v_notes TO `+resolveAttacker,
		`CREATE TABLE evil.v_notes (id int, note text, expires_at timestamptz)`,
		`INSERT INTO evil.v_notes VALUES (9, 'decoy', NULL)`,
		`ALTER TABLE evil.v_notes OWNER TO `+resolveAttacker,
		// A function reading a TTL table, which the proxy refuses to call.
		`CREATE FUNCTION public.leak_notes() RETURNS SETOF text LANGUAGE sql AS 'SELECT note FROM public.sessions'`,
	)})
}

// attackerConn logs in to the proxy as the attacker.
func (s *stack) attackerConn(mode pgx.QueryExecMode) *pgx.Conn {
	s.t.Helper()
	cfg, err := pgx.ParseConfig(s.proxied)
	if err != nil {
		s.t.Fatal(err)
	}
	cfg.User, cfg.Password, cfg.DefaultQueryExecMode = resolveAttacker, "attack3r", mode
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		s.t.Fatalf("attacker login through the proxy: %v", err)
	}
	s.t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// resolveTables are the reads of the attacks and what they must never show.
var resolveTables = []struct{ name, read, expired string }{
	{"sessions", `SELECT note FROM sessions ORDER BY id`, "expired"},
	{"vault", `SELECT secret FROM vault ORDER BY id`, "stale-secret"},
}

// readNoLeak runs q and fails the test when it shows leak; an error is an
// acceptable end (the server's 42P01 for a relation that went away, the
// proxy's refusal).
func readNoLeak(t *testing.T, conn *pgx.Conn, what, q, leak string) {
	t.Helper()
	rows, err := conn.Query(context.Background(), q)
	var got []string
	if err == nil {
		got, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
			var v *string
			err := r.Scan(&v)
			if v == nil {
				return "NULL", err
			}
			return *v, err
		})
	}
	if err != nil {
		if code := sqlstate(err); code != "42P01" && code != "0A000" && code != "42501" {
			t.Errorf("%s: %s: %v", what, q, err)
		}
		return
	}
	if strings.Contains(strings.Join(got, ","), leak) {
		t.Errorf("%s: %s showed %q: %v", what, q, leak, got)
	}
}

func mustExec(t *testing.T, conn *pgx.Conn, q string) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// TestAttackResolveInsideFunction: search_path changed by set_config in a
// function, a procedure and a trigger function; a temporary table that
// shadowed the TTL table dropped by a function; a temporary view named like
// the TTL table created by a function. Each inside one transaction (which
// holds one server in transaction pooling) and rolled back after.
func TestAttackResolveInsideFunction(t *testing.T) {
	s := resolveStack(t)
	for _, m := range execModes {
		conn := s.attackerConn(m.mode)
		for _, q := range []string{
			`CREATE OR REPLACE FUNCTION evil.sp() RETURNS void LANGUAGE plpgsql AS
				$$ BEGIN PERFORM set_config('search_path', 'public', false); END $$`,
			`CREATE OR REPLACE FUNCTION evil.sp_local() RETURNS void LANGUAGE plpgsql AS
				$$ BEGIN PERFORM set_config('search_path', 'public', true); END $$`,
			`CREATE OR REPLACE PROCEDURE evil.pp() LANGUAGE plpgsql AS
				$$ BEGIN PERFORM set_config('search_path', 'public', false); END $$`,
			`CREATE TABLE IF NOT EXISTS evil.log (x int)`,
			`CREATE OR REPLACE FUNCTION evil.trg() RETURNS trigger LANGUAGE plpgsql AS
				$$ BEGIN PERFORM set_config('search_path', 'public', false); RETURN NEW; END $$`,
			`CREATE OR REPLACE TRIGGER log_path BEFORE INSERT ON evil.log FOR EACH ROW EXECUTE FUNCTION evil.trg()`,
			`CREATE OR REPLACE FUNCTION evil.drop_tmp(n text) RETURNS void LANGUAGE plpgsql AS
				$$ BEGIN EXECUTE format('DROP TABLE pg_temp.%I', n); END $$`,
			`CREATE OR REPLACE FUNCTION evil.mk_view(n text, body text) RETURNS void LANGUAGE plpgsql AS
				$$ BEGIN EXECUTE format('CREATE TEMP VIEW %I AS %s', n, body); END $$`,
		} {
			mustExec(t, conn, q)
		}
		for _, tb := range resolveTables {
			cols := "id int, owner int, note text, expires_at timestamptz"
			view := `SELECT id, owner, note, NULL::timestamptz AS expires_at FROM public.sessions`
			if tb.name == "vault" {
				cols = "id int, secret text, secret_expires_at timestamptz"
				view = `SELECT id, secret, NULL::timestamptz AS secret_expires_at FROM public.vault`
			}
			for _, a := range []struct {
				name, path string
				steps      []string
			}{
				{"set_config in a function", "evil, public", []string{`SELECT evil.sp()`}},
				{"set_config local in a function", "evil, public", []string{`SELECT evil.sp_local()`}},
				{"set_config in a procedure", "evil, public", []string{`CALL evil.pp()`}},
				{"set_config in a trigger", "evil, public", []string{`INSERT INTO evil.log VALUES (1)`}},
				{"temporary shadow dropped in a function", "public", []string{
					`CREATE TEMP TABLE ` + tb.name + ` (` + cols + `)`,
					`SELECT evil.drop_tmp('` + tb.name + `')`}},
				{"temporary view created in a function", "public", []string{
					`SELECT evil.mk_view('` + tb.name + `', '` + view + `')`}},
			} {
				what := m.name + ": " + tb.name + ": " + a.name
				mustExec(t, conn, `SET search_path = `+a.path)
				mustExec(t, conn, `BEGIN`)
				for _, q := range a.steps {
					mustExec(t, conn, q)
				}
				readNoLeak(t, conn, what, tb.read, tb.expired)
				mustExec(t, conn, `ROLLBACK`)
			}
		}
		mustExec(t, conn, `RESET search_path`)
	}
}

// TestAttackResolveFunctionCall: the attacker's harmless function of the
// same name as one that reads a TTL table stands first on the path the
// proxy knows; a function moves the server's path to the other. An
// unqualified call of such a name is refused, whatever the path.
func TestAttackResolveFunctionCall(t *testing.T) {
	s := resolveStack(t)
	for _, m := range execModes {
		conn := s.attackerConn(m.mode)
		for _, q := range []string{
			`CREATE OR REPLACE FUNCTION evil.sp() RETURNS void LANGUAGE plpgsql AS
				$$ BEGIN PERFORM set_config('search_path', 'public', false); END $$`,
			`CREATE OR REPLACE FUNCTION evil.leak_notes() RETURNS SETOF text LANGUAGE sql AS $$ SELECT 'decoy' $$`,
		} {
			mustExec(t, conn, q)
		}
		for _, path := range []string{"evil", "evil, public"} {
			mustExec(t, conn, `SET search_path = `+path)
			mustExec(t, conn, `BEGIN`)
			mustExec(t, conn, `SELECT evil.sp()`)
			readNoLeak(t, conn, m.name+": path "+path, `SELECT * FROM leak_notes()`, "expired")
			mustExec(t, conn, `ROLLBACK`)
		}
		// Qualified, the attacker's own function is called as written.
		mustExec(t, conn, `SET search_path = evil`)
		if got := ids(t, conn, `SELECT * FROM evil.leak_notes()`); got != "decoy" {
			t.Errorf("%s: evil.leak_notes() = %q", m.name, got)
		}
		mustExec(t, conn, `RESET search_path`)
	}
}

// TestAttackResolveView: a view reading a TTL table is expanded with the
// filter where the proxy resolves its name to it; where the path the proxy
// knows holds no such view, a function moving the server's path must not
// make the name reach it.
func TestAttackResolveView(t *testing.T) {
	s := resolveStack(t)
	for _, m := range execModes {
		conn := s.attackerConn(m.mode)
		mustExec(t, conn, `CREATE OR REPLACE FUNCTION evil.sp() RETURNS void LANGUAGE plpgsql AS
				$$ BEGIN PERFORM set_config('search_path', 'public', false); END $$`)
		for _, path := range []string{"evil", "evil, public", "public"} {
			mustExec(t, conn, `SET search_path = `+path)
			mustExec(t, conn, `BEGIN`)
			mustExec(t, conn, `SELECT evil.sp()`)
			readNoLeak(t, conn, m.name+": path "+path, `SELECT note FROM v_notes ORDER BY id`, "expired")
			mustExec(t, conn, `ROLLBACK`)
		}
		mustExec(t, conn, `RESET search_path`)
	}
}
