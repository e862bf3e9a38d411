package rewrite

import "testing"

func TestRewriteStateChangeThenTTLTable(t *testing.T) {
	rw := newTestRewriter(t)
	sep := []string{"public.sessions", "same query string", "separate queries"}
	for _, c := range []rejCase{
		{"SET search_path", `SET search_path = vault, public; SELECT * FROM sessions`, "0A000", sep},
		{"SET LOCAL in a transaction", `BEGIN; SET LOCAL search_path = app; SELECT * FROM sessions; COMMIT`, "0A000", sep},
		{"set_config", `SELECT set_config('search_path', 'app', false); SELECT * FROM sessions`, "0A000", sep},
		{"SET ttlproxy.ttl then INSERT", `SET ttlproxy.ttl = '1h'; INSERT INTO sessions (id) VALUES (1)`, "0A000", sep},
		{"SET ROLE", `SET ROLE alice; SELECT * FROM sessions`, "0A000", sep},
		{"SET SESSION AUTHORIZATION", `SET SESSION AUTHORIZATION bob; DELETE FROM sessions`, "0A000", sep},
		{"SET SCHEMA", `SET SCHEMA 'app'; UPDATE sessions SET note = 'x'`, "0A000", sep},
		{"RESET", `RESET search_path; SELECT * FROM sessions`, "0A000", sep},
		{"RESET ROLE", `RESET ROLE; SELECT * FROM sessions`, "0A000", sep},
		{"DISCARD", `DISCARD ALL; SELECT * FROM sessions`, "0A000", sep},
		{"ROLLBACK undoing a SET", `ROLLBACK; SELECT * FROM sessions`, "0A000", sep},
		{"CREATE TEMP TABLE", `CREATE TEMP TABLE sessions (id int); SELECT * FROM sessions`, "0A000", sep},
		{"CREATE TEMPORARY VIEW", `CREATE OR REPLACE TEMPORARY VIEW v AS SELECT 1; SELECT * FROM sessions`, "0A000", sep},
		{"INTO TEMP", `SELECT 1 AS id INTO TEMP t; SELECT * FROM sessions`, "0A000", sep},
		{"pg_temp", `CREATE TABLE pg_temp.sessions (id int); SELECT * FROM sessions`, "0A000", sep},
		{"later statement", `SELECT 1; SET search_path = app; SELECT 2; SELECT * FROM sessions`, "0A000", sep},
		{"other rule", `SET search_path = app; SELECT * FROM tokens`, "0A000", []string{"app.tokens"}},
		{"sidecar registry", `SET search_path = app; SELECT * FROM docs_ttl`, "0A000", []string{"registry of TTL table public.docs"}},
		{"Unicode escapes", `SET search_path = app; SELECT * FROM U&"\0073essions"`, "0A000", []string{`U&"`}},
		{"name only in a string", `SET search_path = app; SELECT 'sessions'`, "0A000", sep},
	} {
		checkReject(t, rw, nil, c)
	}
	S := `"sessions"`
	for _, c := range []rwCase{
		{"change after the read", `SELECT * FROM sessions; SET search_path = app`,
			`SELECT * FROM ` + join("sessions", S, 0) + `; SET search_path = app`},
		{"change in the TTL statement itself", `SELECT set_config('search_path', 'app', false), id FROM sessions`,
			`SELECT set_config('search_path', 'app', false), id FROM ` + join("sessions", S, 0)},
		{"no TTL statement after the change", `SELECT * FROM sessions; SET search_path = app; SELECT * FROM users`,
			`SELECT * FROM ` + join("sessions", S, 0) + `; SET search_path = app; SELECT * FROM users`},
		{"a column named role", `UPDATE users SET role = 'admin' WHERE id = 1; SELECT * FROM sessions`,
			`UPDATE users SET role = 'admin' WHERE id = 1; SELECT * FROM ` + join("sessions", S, 0)},
		{"a column named schema", `UPDATE t SET schema = 'x'; SELECT * FROM sessions`,
			`UPDATE t SET schema = 'x'; SELECT * FROM ` + join("sessions", S, 0)},
		{"other settings", `SET statement_timeout = 0; SELECT * FROM sessions`,
			`SET statement_timeout = 0; SELECT * FROM ` + join("sessions", S, 0)},
		{"transaction", `BEGIN; SELECT * FROM sessions; COMMIT`,
			`BEGIN; SELECT * FROM ` + join("sessions", S, 0) + `; COMMIT`},
		{"CREATE TABLE temp", `CREATE TABLE temp (id int); SELECT * FROM sessions`,
			`CREATE TABLE temp (id int); SELECT * FROM ` + join("sessions", S, 0)},
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
	checkReject(t, rw, s, rejCase{"partition", `SET search_path = part, public; SELECT * FROM sessions_p1`, "0A000",
		[]string{"TTL table part.sessions_p1", "separate queries"}})
}
