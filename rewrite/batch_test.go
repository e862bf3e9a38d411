package rewrite

import "testing"

func TestRewriteStateChangeThenTTLTable(t *testing.T) {
	rw := newTestRewriter(t)
	sep := []string{"public.sessions", "same query string", "separate queries"}
	// Changes whose effect the text does not determine.
	for _, c := range []rejCase{
		{"SET ROLE", `SET ROLE alice; SELECT * FROM sessions`, "0A000", sep},
		{"SET SESSION AUTHORIZATION", `SET SESSION AUTHORIZATION bob; DELETE FROM sessions`, "0A000", sep},
		{"RESET", `RESET search_path; SELECT * FROM sessions`, "0A000", sep},
		{"SET TO DEFAULT", `SET search_path TO DEFAULT; SELECT * FROM sessions`, "0A000", sep},
		{"RESET ttlproxy.ttl", `RESET ttlproxy.ttl; INSERT INTO sessions (id) VALUES (1)`, "0A000", sep},
		{"RESET ROLE", `RESET ROLE; SELECT * FROM sessions`, "0A000", sep},
		{"DISCARD", `DISCARD ALL; SELECT * FROM sessions`, "0A000", sep},
		{"ROLLBACK of a transaction begun before", `ROLLBACK; SELECT * FROM sessions`, "0A000", sep},
		{"ROLLBACK TO SAVEPOINT", `BEGIN; SAVEPOINT a; SET search_path = app; ROLLBACK TO a; SELECT * FROM sessions`, "0A000", sep},
		{"$user", `SET search_path = "$user", public; SELECT * FROM sessions`, "0A000", sep},
		{"set_config with an expression", `SELECT set_config('search_path', current_user, false); SELECT * FROM sessions`, "0A000", sep},
		{"set_config inside a query", `SELECT set_config('search_path', 'app', false) FROM users; SELECT * FROM sessions`, "0A000", sep},
		{"CREATE TEMP TABLE", `CREATE TEMP TABLE sessions (id int); SELECT * FROM sessions`, "0A000", sep},
		{"CREATE TEMPORARY VIEW", `CREATE OR REPLACE TEMPORARY VIEW v AS SELECT 1; SELECT * FROM sessions`, "0A000", sep},
		{"INTO TEMP", `SELECT 1 AS id INTO TEMP t; SELECT * FROM sessions`, "0A000", sep},
		{"pg_temp", `CREATE TABLE pg_temp.sessions (id int); SELECT * FROM sessions`, "0A000", sep},
		{"later statement", `SELECT 1; RESET search_path; SELECT 2; SELECT * FROM sessions`, "0A000", sep},
		{"sidecar registry", `RESET search_path; SELECT * FROM docs_ttl`, "0A000", []string{"registry of TTL table public.docs"}},
		{"Unicode escapes", `RESET search_path; SELECT * FROM U&"\0073essions"`, "0A000", []string{`U&"`}},
		{"name only in a string", `RESET search_path; SELECT 'sessions'`, "0A000", sep},
	} {
		checkReject(t, rw, nil, c)
	}
	// A TTL table name the path the text sets does not place is refused:
	// the rewriter writes the schema of every such name (qualify.go).
	unresolved := []string{"cannot tell which schema"}
	for _, c := range []rejCase{
		{"SET search_path away from public", `SET search_path = app; SELECT * FROM sessions`, "0A000", unresolved},
		{"SET SCHEMA", `SET SCHEMA 'app'; UPDATE sessions SET note = 'x'`, "0A000", unresolved},
		{"SET LOCAL in the implicit transaction", `SET LOCAL search_path = app; SELECT * FROM sessions`, "0A000", unresolved},
		{"COMMIT keeps a SET", `BEGIN; SET search_path = app; COMMIT; SELECT * FROM sessions`, "0A000", unresolved},
		{"set_config", `SELECT set_config('search_path', 'app', false); SELECT * FROM sessions`, "0A000", unresolved},
		{"set_config local", `SELECT pg_catalog.set_config('search_path', 'app', true); SELECT * FROM sessions`, "0A000", unresolved},
		{"later statement", `SELECT 1; SET search_path = app; SELECT 2; SELECT * FROM sessions`, "0A000", unresolved},
		{"SET LOCAL until COMMIT", `BEGIN; SET LOCAL search_path = app; SELECT * FROM sessions; COMMIT; SELECT * FROM sessions`, "0A000", unresolved},
	} {
		checkReject(t, rw, nil, c)
	}
	S := `"sessions"`
	// Changes the text determines are followed: each statement is rewritten
	// under the state the server gives it.
	// sessions' default_ttl is 1 hour: the session's 2 hours must win.
	stamp2h := `(pg_catalog.now() OPERATOR(pg_catalog.+) interval '7200 seconds')`
	for _, c := range []rwCase{
		{"SET search_path keeping public", `SET search_path = vault, public; SELECT * FROM sessions`,
			`SET search_path = vault, public; SELECT * FROM ` + join(`"public".sessions`, S, 0)},
		{"SET search_path as one literal", `SET search_path = 'app, public'; SELECT * FROM sessions`,
			`SET search_path = 'app, public'; SELECT * FROM ` + join(`"public".sessions`, S, 0)},
		{"another rule's schema", `SET search_path = app; SELECT * FROM tokens`,
			`SET search_path = app; SELECT * FROM ("app".tokens JOIN (SELECT) AS _ttl_0 ON ("tokens"."valid_until" IS NULL OR "tokens"."valid_until" OPERATOR(pg_catalog.>=) (pg_catalog.now() AT TIME ZONE 'UTC')))`},
		{"ROLLBACK undoes a SET", `BEGIN; SET search_path = app; ROLLBACK; SELECT * FROM sessions`,
			`BEGIN; SET search_path = app; ROLLBACK; SELECT * FROM ` + join(`"public".sessions`, S, 0)},
		{"SET ttlproxy.ttl then INSERT", `SET ttlproxy.ttl = '2h'; INSERT INTO sessions (id) VALUES (1)`,
			`SET ttlproxy.ttl = '2h'; INSERT INTO "public".sessions (id, "expires_at") VALUES (1, ` + stamp2h + `)`},
		{"set_config of ttlproxy.ttl", `SELECT set_config('ttlproxy.ttl', '2 hours', false); INSERT INTO sessions (id) VALUES (1)`,
			`SELECT set_config('ttlproxy.ttl', '2 hours', false); INSERT INTO "public".sessions (id, "expires_at") VALUES (1, ` + stamp2h + `)`},
		{"SET ttlproxy.ttl LOCAL until COMMIT", `BEGIN; SET LOCAL ttlproxy.ttl = '2h'; COMMIT; INSERT INTO sessions (id) VALUES (1)`,
			`BEGIN; SET LOCAL ttlproxy.ttl = '2h'; COMMIT; INSERT INTO "public".sessions (id, "expires_at") VALUES (1, ` + stamp + `)`},
	} {
		checkRewrite(t, rw, nil, c)
	}
	for _, c := range []rwCase{
		{"change after the read", `SELECT * FROM sessions; SET search_path = app`,
			`SELECT * FROM ` + join(`"public".sessions`, S, 0) + `; SET search_path = app`},
		{"change in the TTL statement itself", `SELECT set_config('search_path', 'app', false), id FROM sessions`,
			`SELECT set_config('search_path', 'app', false), id FROM ` + join(`"public".sessions`, S, 0)},
		{"no TTL statement after the change", `SELECT * FROM sessions; SET search_path = app; SELECT * FROM users`,
			`SELECT * FROM ` + join(`"public".sessions`, S, 0) + `; SET search_path = app; SELECT * FROM users`},
		{"a column named role", `UPDATE users SET role = 'admin' WHERE id = 1; SELECT * FROM sessions`,
			`UPDATE users SET role = 'admin' WHERE id = 1; SELECT * FROM ` + join(`"public".sessions`, S, 0)},
		{"a column named schema", `UPDATE t SET schema = 'x'; SELECT * FROM sessions`,
			`UPDATE t SET schema = 'x'; SELECT * FROM ` + join(`"public".sessions`, S, 0)},
		{"other settings", `SET statement_timeout = 0; SELECT * FROM sessions`,
			`SET statement_timeout = 0; SELECT * FROM ` + join(`"public".sessions`, S, 0)},
		{"transaction", `BEGIN; SELECT * FROM sessions; COMMIT`,
			`BEGIN; SELECT * FROM ` + join(`"public".sessions`, S, 0) + `; COMMIT`},
		{"CREATE TABLE temp", `CREATE TABLE temp (id int); SELECT * FROM sessions`,
			`CREATE TABLE temp (id int); SELECT * FROM ` + join(`"public".sessions`, S, 0)},
	} {
		checkRewrite(t, rw, nil, c)
	}
	// Texts the cheap check clears are never parsed, changes or not.
	for _, in := range []string{
		`SET search_path = vault, public; SELECT * FROM notes`,
		`SET ROLE alice; SELECT * FROM users; RESET ROLE`,
	} {
		res, err := rw.Rewrite(in, nil)
		if err != nil || res.SQL != in || res.Parsed {
			t.Errorf("%s: got %q, parsed %v, %v; want it passed unparsed", in, res.SQL, res.Parsed, err)
		}
	}
}

func TestRewriteStateChangeThenChild(t *testing.T) {
	rw := newTestRewriter(t)
	s := NewState(Session{Catalog: childCatalog()})
	checkReject(t, rw, s, rejCase{"partition", `RESET search_path; SELECT * FROM sessions_p1`, "0A000",
		[]string{"TTL table part.sessions_p1", "separate queries"}})
	checkRewrite(t, rw, s, rwCase{"partition on the new path", `SET search_path = part, public; SELECT * FROM sessions_p1`,
		`SET search_path = part, public; SELECT * FROM ("part".sessions_p1 JOIN (SELECT) AS _ttl_0 ON ("sessions_p1"."expires_at" IS NULL OR "sessions_p1"."expires_at" OPERATOR(pg_catalog.>=) pg_catalog.now()))`})
	checkReject(t, rw, s, rejCase{"partition off the new path", `SET search_path = public; SELECT * FROM sessions_p1`, "0A000",
		[]string{"cannot tell which schema"}})
}

// TestRewriteFollowsRole: with the session's roles and reset values known,
// SET ROLE, RESET ROLE and RESET in a text are followed: "$user" in the
// path follows the role, and so does the bypass.
func TestRewriteFollowsRole(t *testing.T) {
	rw, err := New(testRules, Options{BypassRoles: []string{"admin"}})
	if err != nil {
		t.Fatal(err)
	}
	as := func(current, session string, bypass bool) *State {
		return NewState(Session{
			SearchPath: []string{current, "public"}, SearchPathSetting: `"$user", public`,
			CurrentUser: current, SessionUser: session, Bypass: bypass,
			ResetSearchPath: `"$user", public`, ResetKnown: true,
		})
	}
	filtered := `("app".tokens JOIN (SELECT) AS _ttl_0 ON ("tokens"."valid_until" IS NULL OR "tokens"."valid_until" OPERATOR(pg_catalog.>=) (pg_catalog.now() AT TIME ZONE 'UTC')))`
	S := `"sessions"`
	for _, c := range []struct {
		name string
		st   *State
		c    rwCase
	}{
		{"$user is the login", as("app", "app", false), rwCase{"read", `SELECT * FROM tokens`, `SELECT * FROM ` + filtered}},
		{"RESET ROLE moves it back", as("bob", "app", false),
			rwCase{"reset role", `RESET ROLE; SELECT * FROM tokens`, `RESET ROLE; SELECT * FROM ` + filtered}},
		{"SET ROLE NONE", as("bob", "app", false),
			rwCase{"set role none", `SET ROLE NONE; SELECT * FROM tokens`, `SET ROLE NONE; SELECT * FROM ` + filtered}},
		{"SET ROLE to a bypass role", as("app", "app", false), rwCase{"bypass", `SET ROLE admin; SELECT * FROM sessions`, ""}},
		{"RESET ROLE leaves a bypass", as("admin", "app", true),
			rwCase{"leave", `RESET ROLE; SELECT * FROM sessions`, `RESET ROLE; SELECT * FROM ` + join(`"public".sessions`, S, 0)}},
		{"bypassed through the role, no change", as("admin", "app", true), rwCase{"still", `SELECT * FROM sessions`, ""}},
		{"a bypass login stays bypassed", as("bob", "admin", true), rwCase{"login", `SET ROLE bob; SELECT * FROM sessions`, ""}},
		{"$user in a SET", as("app", "app", false),
			rwCase{"$user", `SET search_path = "$user"; SELECT * FROM tokens`, `SET search_path = "$user"; SELECT * FROM ` + filtered}},
		{"RESET search_path", NewState(Session{SearchPath: []string{"archive"}, SearchPathSetting: "archive",
			CurrentUser: "app", SessionUser: "app", ResetSearchPath: `"$user", public`, ResetKnown: true}),
			rwCase{"reset", `RESET search_path; SELECT * FROM sessions`, `RESET search_path; SELECT * FROM ` + join(`"public".sessions`, S, 0)}},
	} {
		t.Run(c.name, func(t *testing.T) { checkRewrite(t, rw, c.st, c.c) })
	}
	// SET ROLE moves $user off app: tokens is on no schema of the path,
	// and a name the rewriter cannot place is refused.
	for _, in := range []string{`SET ROLE bob; SELECT * FROM tokens`, `BEGIN; SET LOCAL ROLE bob; SELECT * FROM tokens; COMMIT; SELECT * FROM tokens`} {
		checkReject(t, rw, as("app", "app", false), rejCase{"set role", in, "0A000", []string{"tokens", "cannot tell which schema"}})
	}
	// What the text does not determine is still refused.
	checkReject(t, rw, as("app", "app", false), rejCase{"SET SESSION AUTHORIZATION",
		`SET SESSION AUTHORIZATION bob; SELECT * FROM sessions`, "0A000", []string{"public.sessions"}})
	checkReject(t, rw, as("app", "app", false), rejCase{"RESET ALL", `RESET ALL; SELECT * FROM sessions`, "0A000", []string{"public.sessions"}})
}
