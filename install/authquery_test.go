package install

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestAuthQuery: the function is SECURITY DEFINER with a pinned
// search_path, executable by the grantee only; install, reinstall and
// uninstall are idempotent; a reinstall for another grantee takes EXECUTE
// from the first; its rows follow rolcanlogin, VALID UNTIL and the
// pg_db_role_setting rows of the role and the database asked for.
func TestAuthQuery(t *testing.T) {
	e := setup(t)
	suffix := fmt.Sprint(os.Getpid())
	login, other, user := "aq_login_"+suffix, "aq_other_"+suffix, "aq_user_"+suffix
	for _, r := range []string{login, other, user} {
		e.exec("CREATE ROLE " + r + " LOGIN PASSWORD 'pw-" + r + "'")
	}
	t.Cleanup(func() {
		for _, r := range []string{login, other, user} {
			_, _ = e.conn.Exec(context.Background(), "DROP OWNED BY "+r+"; DROP ROLE IF EXISTS "+r)
		}
	})

	preview, err := PreviewAuthQuery(e.ctx, e.conn, login, false)
	if err != nil {
		t.Fatal(err)
	}
	installed := func() string {
		return e.strings(`SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = 'ttlproxy' AND p.proname = 'user_lookup'`)
	}
	if got := installed(); got != "" {
		t.Fatalf("the preview installed %s", got)
	}
	for range 2 {
		done, err := ApplyAuthQuery(e.ctx, e.conn, login, false)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(done, ";") != strings.Join(preview, ";") {
			t.Errorf("ran %q, previewed %q", done, preview)
		}
	}
	if got := installed(); got != "ttlproxy.user_lookup(text,text)" {
		t.Fatalf("installed %q", got)
	}
	if got := e.strings(`SELECT p.prosecdef::text || ' ' || array_to_string(p.proconfig, ';') FROM pg_proc p
WHERE p.oid = 'ttlproxy.user_lookup(text,text)'::regprocedure`); got != "true search_path=pg_catalog, pg_temp" {
		t.Errorf("prosecdef, proconfig: %q", got)
	}
	canExecute := func(role string) string {
		return e.strings("SELECT has_function_privilege(" + quoteLit(role) + ", 'ttlproxy.user_lookup(text,text)', 'EXECUTE')::text")
	}
	if got := e.strings(`SELECT count(*)::text FROM pg_proc p, aclexplode(p.proacl) a
WHERE p.oid = 'ttlproxy.user_lookup(text,text)'::regprocedure AND a.grantee = 0`); got != "0" {
		t.Errorf("PUBLIC holds %s privileges on the function", got)
	}
	if canExecute(login) != "true" || canExecute(user) != "false" {
		t.Errorf("EXECUTE: grantee %s, other login %s", canExecute(login), canExecute(user))
	}

	// The grantee, not a superuser, reads pg_authid through it.
	lookup := func(name, db string) string {
		t.Helper()
		e.exec("SET ROLE " + login)
		defer e.exec("RESET ROLE")
		rows, err := e.conn.Query(e.ctx, "SELECT username || ' ' || coalesce(left(password, 13), '<null>') || ' ' || settings FROM ttlproxy.user_lookup($1, $2)", name, db)
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(got, ",")
	}
	row := lookup(user, e.db)
	if !strings.HasPrefix(row, user+" SCRAM-SHA-256") {
		t.Fatalf("lookup of a scram login: %q", row)
	}
	hash := row[strings.LastIndexByte(row, ' ')+1:]
	if len(hash) != 64 {
		t.Fatalf("settings hash %q, want 64 hex digits", hash)
	}
	e.exec("ALTER ROLE " + user + " NOLOGIN")
	if got := lookup(user, e.db); got != "" {
		t.Errorf("NOLOGIN role: %q, want no row", got)
	}
	e.exec("ALTER ROLE " + user + " LOGIN VALID UNTIL '2000-01-01'")
	if got := lookup(user, e.db); got != user+" <null> "+hash {
		t.Errorf("expired role: %q, want a NULL password", got)
	}
	e.exec("ALTER ROLE " + user + " VALID UNTIL 'infinity'")
	if got := lookup("no_such_role", e.db); got != "" {
		t.Errorf("unknown role: %q", got)
	}

	// The settings hash follows every row that applies, and no other.
	settings := func(db string) string {
		row := lookup(user, db)
		return row[strings.LastIndexByte(row, ' ')+1:]
	}
	seen := map[string]string{"none": hash}
	for _, c := range []struct {
		name, sql string
		changes   bool
	}{
		{"role", "ALTER ROLE " + user + " SET work_mem = '8MB'", true},
		{"role in database", "ALTER ROLE " + user + " IN DATABASE " + e.db + " SET statement_timeout = '5s'", true},
		{"database", "ALTER DATABASE " + e.db + " SET lock_timeout = '3s'", true},
		{"all roles", "ALTER ROLE ALL IN DATABASE " + e.db + " SET idle_session_timeout = '1h'", true},
		{"role in database, same value", "ALTER ROLE " + user + " IN DATABASE " + e.db + " SET statement_timeout = '5s'", false},
		{"role in another database", "ALTER ROLE " + user + " IN DATABASE postgres SET work_mem = '16MB'", false},
		{"another role", "ALTER ROLE " + other + " SET work_mem = '16MB'", false},
	} {
		before := settings(e.db)
		e.exec(c.sql)
		after := settings(e.db)
		if (after != before) != c.changes {
			t.Errorf("%s: hash %s -> %s, want a change: %v", c.name, before, after, c.changes)
		}
		if c.changes {
			if prev, ok := seen[after]; ok {
				t.Errorf("%s: hash %s seen before, for %s", c.name, after, prev)
			}
			seen[after] = c.name
		}
	}
	if settings("postgres") == settings(e.db) {
		t.Error("the hash does not depend on the database asked for")
	}
	// dbname omitted: the current database.
	e.exec("SET ROLE " + login)
	var current string
	if err := e.conn.QueryRow(e.ctx, "SELECT settings FROM ttlproxy.user_lookup($1)", user).Scan(&current); err != nil {
		t.Fatal(err)
	}
	e.exec("RESET ROLE")
	if current != settings(e.db) {
		t.Errorf("user_lookup(name): %s, user_lookup(name, current database): %s", current, settings(e.db))
	}

	// Reinstalled for another grantee, the first loses EXECUTE.
	if _, err := ApplyAuthQuery(e.ctx, e.conn, other, false); err != nil {
		t.Fatal(err)
	}
	if canExecute(login) != "false" || canExecute(other) != "true" {
		t.Errorf("after a reinstall: EXECUTE old grantee %s, new %s", canExecute(login), canExecute(other))
	}

	// Errors say what the install needs.
	if _, err := ApplyAuthQuery(e.ctx, e.conn, "no_such_role", false); err == nil || !strings.Contains(err.Error(), `role "no_such_role" does not exist`) {
		t.Errorf("missing grantee: %v", err)
	}
	if _, err := ApplyAuthQuery(e.ctx, e.conn, "", false); err == nil || !strings.Contains(err.Error(), "grantee") {
		t.Errorf("no grantee: %v", err)
	}
	e.exec("SET ROLE " + login)
	_, err = ApplyAuthQuery(e.ctx, e.conn, login, false)
	e.exec("RESET ROLE")
	if err == nil || !strings.Contains(err.Error(), "superuser") {
		t.Errorf("install by a plain role: %v, want an error naming the superuser", err)
	}

	for range 2 {
		if _, err := ApplyAuthQuery(e.ctx, e.conn, "", true); err != nil {
			t.Fatal(err)
		}
	}
	if got := installed(); got != "" {
		t.Errorf("left after uninstall: %s", got)
	}
	if got := e.strings("SELECT nspname::text FROM pg_namespace WHERE nspname = 'ttlproxy'"); got != "" {
		t.Error("schema ttlproxy left empty after the uninstall")
	}
}

func quoteLit(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
