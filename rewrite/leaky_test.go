package rewrite

import (
	"testing"
)

// leakyCatalogData adds to sessionsCatalogData the in-database paths of
// the leak test schema: a plain view of sessions, a view of that view, a
// materialized view, a view created through the proxy (filtered) and a view
// of it, and functions that read sessions.
func leakyCatalogData() CatalogData {
	d := sessionsCatalogData()
	d.Views = map[string]View{
		"public.v_sess":  {Reads: []string{"public.sessions"}, Definition: ` SELECT sessions.id, sessions.note FROM sessions;`},
		"public.v_sess2": {Reads: []string{"public.v_sess"}, Definition: ` SELECT v_sess.id FROM v_sess WHERE (v_sess.id > 3);`},
		"public.m_sess":  {Materialized: true, Reads: []string{"public.sessions"}},
		"public.v_filtered": {Reads: []string{"public.sessions"}, Definition: ` SELECT s.id
   FROM (sessions s
     JOIN ( SELECT) _ttl_0 ON (((s.expires_at IS NULL) OR (s.expires_at >= now()))));`},
		"public.v_on_filtered": {Reads: []string{"public.v_filtered"}, Definition: ` SELECT v_filtered.id FROM v_filtered;`},
		// Filtered once, read a second time without the filter.
		"public.v_half": {Reads: []string{"public.sessions"}, Definition: ` SELECT s.id
   FROM (sessions s JOIN ( SELECT) _ttl_0 ON (s.expires_at >= now())), sessions t;`},
		// The filter's shape, but an outer join keeps every row.
		"public.v_fake": {Reads: []string{"public.sessions"}, Definition: ` SELECT s.id
   FROM (sessions s LEFT JOIN ( SELECT) _ttl_0 ON (s.expires_at >= now()));`},
	}
	d.Functions = map[string]string{
		"public.f_sess":    "sessions",
		"public.f_calls":   "f_sess",
		"tools.f_sess_cnt": "sessions",
	}
	return d
}

func TestLeakyViews(t *testing.T) {
	got := leakyViews(leakyCatalogData().Views)
	want := map[string]string{
		"public.v_sess":  "public.sessions",
		"public.v_sess2": "public.v_sess",
		"public.m_sess":  "public.sessions",
		"public.v_half":  "public.sessions",
		"public.v_fake":  "public.sessions",
	}
	if len(got) != len(want) {
		t.Errorf("leaky views %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("leaky[%s] = %q, want %q", k, got[k], v)
		}
	}
}

// TestExpandViews: a read of a view that leaks becomes its definition,
// rewritten, under the view's (or the alias's) name and column names; a
// security_barrier view is fenced with OFFSET 0; what cannot be expanded
// exactly is refused.
func TestExpandViews(t *testing.T) {
	rw := newTestRewriter(t)
	d := leakyCatalogData()
	set := func(name string, f func(v *View)) {
		v := d.Views[name]
		f(&v)
		d.Views[name] = v
	}
	set("public.v_sess", func(v *View) {
		v.Columns = []string{"id", "note"}
		v.Definition = " SELECT sessions.id,\n    sessions.note\n   FROM public.sessions;"
	})
	set("public.v_sess2", func(v *View) {
		v.Columns = []string{"id"}
		v.Definition = " SELECT v_sess.id\n   FROM public.v_sess\n  WHERE (v_sess.id > 3);"
		v.SecurityBarrier = true
	})
	set("public.v_half", func(v *View) {
		v.Columns = []string{"id"}
		v.ReadsRowSecurity = true
	})
	s := NewState(Session{Catalog: NewCatalog(d)})
	inner := "(SELECT sessions.id,\n    sessions.note\n   FROM " + join("public.sessions", `"sessions"`, 0) + `)`
	for _, c := range []rwCase{
		{"view", `SELECT count(*) FROM v_sess`, `SELECT count(*) FROM ` + inner + ` AS "v_sess"("id", "note")`},
		{"alias with a column", `SELECT * FROM public.v_sess AS x(a) WHERE a = 1`, `SELECT * FROM ` + inner + ` AS "x"("a", "note") WHERE a = 1`},
		{"TABLE", `TABLE v_sess`, `SELECT * FROM ` + inner + ` AS "v_sess"("id", "note")`},
		{"barrier view of a view", `SELECT * FROM v_sess2 JOIN users u ON true`,
			"SELECT * FROM (SELECT * FROM (SELECT v_sess.id\n   FROM " + inner + ` AS "v_sess"("id", "note")` +
				"\n  WHERE (v_sess.id > 3)) AS _ttl_view OFFSET 0) AS \"v_sess2\"(\"id\") JOIN users u ON true"},
		{"subquery", `SELECT 1 WHERE EXISTS (SELECT FROM v_sess)`, `SELECT 1 WHERE EXISTS (SELECT FROM ` + inner + ` AS "v_sess"("id", "note"))`},
		{"schema.view.column", `SELECT public.v_sess.id, public.v_sess.* FROM public.v_sess WHERE public.v_sess.note = 'x'`,
			`SELECT v_sess.id, v_sess.* FROM ` + inner + ` AS "v_sess"("id", "note") WHERE v_sess.note = 'x'`},
	} {
		checkRewrite(t, rw, s, c)
	}
	// Writes through a simple view that shows the expiry column follow the
	// table's rule under the view's column names.
	d.Views["public.v_all"] = View{Reads: []string{"public.sessions"}, Columns: []string{"id", "note", "exp"},
		Definition: " SELECT sessions.id,\n    sessions.note,\n    sessions.expires_at AS exp\n   FROM public.sessions;"}
	s = NewState(Session{Catalog: NewCatalog(d)})
	liveV := func(q string) string {
		return `(` + q + `."exp" IS NULL OR ` + q + `."exp" OPERATOR(pg_catalog.>=) pg_catalog.now())`
	}
	for _, c := range []rwCase{
		{"update through a view", `UPDATE v_all SET note = 'x' WHERE id = 1`,
			`UPDATE "public".v_all SET note = 'x', "exp" = ` + stamp + ` WHERE (id = 1) AND ` + liveV(`"v_all"`)},
		{"delete through a view", `DELETE FROM v_all AS a WHERE a.id = 2`, `DELETE FROM "public".v_all AS a WHERE (a.id = 2) AND ` + liveV(`"a"`)},
		{"insert through a view", `INSERT INTO v_all (id, note) VALUES (1, 'a')`, `INSERT INTO "public".v_all (id, note, "exp") VALUES (1, 'a', ` + stamp + `)`},
		{"copy from a view", `COPY v_all TO STDOUT`, `COPY (SELECT * FROM "public".v_all WHERE ` + liveV(`"v_all"`) + `) TO STDOUT`},
	} {
		checkRewrite(t, rw, s, c)
	}
	for _, c := range []rejCase{
		{"row security", `SELECT * FROM v_half`, "0A000", []string{"public.v_half"}},
		{"materialized", `SELECT * FROM m_sess`, "0A000", []string{"public.m_sess", "last refresh"}},
		{"write through a view hiding the expiry", `UPDATE v_sess SET note = 'x'`, "0A000", []string{"public.v_sess"}},
		{"write through a view of a view", `DELETE FROM v_sess2`, "0A000", []string{"public.v_sess2"}},
		{"copy", `COPY v_sess TO STDOUT`, "0A000", []string{"public.v_sess"}},
	} {
		checkReject(t, rw, s, c)
	}
}

func TestRewriteLeakPaths(t *testing.T) {
	rw := newTestRewriter(t)
	s := NewState(Session{Catalog: NewCatalog(leakyCatalogData())})
	for _, c := range []rejCase{
		{"view", `SELECT count(*) FROM v_sess`, "0A000", []string{"view public.v_sess", "public.sessions"}},
		{"qualified view", `SELECT * FROM public.v_sess WHERE id = 1`, "0A000", []string{"public.v_sess"}},
		{"view of a view", `SELECT * FROM v_sess2`, "0A000", []string{"public.v_sess2", "public.v_sess"}},
		{"materialized view", `SELECT * FROM m_sess`, "0A000", []string{"public.m_sess", "last refresh"}},
		{"half filtered", `SELECT * FROM v_half`, "0A000", []string{"public.v_half"}},
		{"fake filter", `SELECT * FROM v_fake`, "0A000", []string{"public.v_fake"}},
		{"view in a subquery", `SELECT 1 WHERE EXISTS (SELECT FROM v_sess)`, "0A000", []string{"public.v_sess"}},
		{"view in a join", `SELECT * FROM users u JOIN v_sess v ON v.id = u.id`, "0A000", []string{"public.v_sess"}},
		{"view through a new view", `CREATE VIEW v3 AS SELECT * FROM v_sess`, "0A000", []string{"public.v_sess"}},
		{"copy from a view", `COPY (SELECT * FROM v_sess) TO STDOUT`, "0A000", []string{"public.v_sess"}},
		{"function", `SELECT f_sess()`, "0A000", []string{"function public.f_sess", "sessions"}},
		{"qualified function", `SELECT public.f_sess()`, "0A000", []string{"public.f_sess"}},
		{"function in FROM", `SELECT * FROM f_sess()`, "0A000", []string{"public.f_sess"}},
		{"function calling one", `SELECT 1 + f_calls()`, "0A000", []string{"public.f_calls", "f_sess"}},
		{"function in WHERE", `SELECT * FROM users WHERE id < f_sess()`, "0A000", []string{"public.f_sess"}},
		{"procedure", `CALL f_sess()`, "0A000", []string{"public.f_sess"}},
		{"other schema qualified", `SELECT tools.f_sess_cnt()`, "0A000", []string{"tools.f_sess_cnt"}},
		// Renamed, the view would be read under a name the catalog does
		// not know (protect.go).
		{"alter view", `ALTER VIEW v_sess RENAME TO v_old`, "42501", []string{"public.v_sess", "renaming"}},
	} {
		checkReject(t, rw, s, c)
	}
	for _, c := range []rwCase{
		{"view created through the proxy", `SELECT * FROM v_filtered`, ""},
		{"view of a filtered view", `SELECT * FROM v_on_filtered`, ""},
		{"CTE named like the view", `WITH v_sess AS (SELECT 1 AS id) SELECT * FROM v_sess`, ""},
		{"view of another schema", `SELECT * FROM other.v_sess`, ""},
		{"function of another schema", `SELECT other.f_sess()`, ""},
		{"alter another view", `ALTER VIEW v_filtered RENAME TO v_old`, ""},
		{"drop view and function", `DROP VIEW v_sess; DROP FUNCTION f_sess()`, ""},
		{"refresh", `COMMENT ON MATERIALIZED VIEW m_sess IS 'x'`, ""},
	} {
		checkRewrite(t, rw, s, c)
	}

	// Elsewhere on the path, the unqualified names mean something else.
	other := NewState(Session{Catalog: NewCatalog(leakyCatalogData()), SearchPath: []string{"tools"}})
	// A name of a view or function reading a TTL table that the rewriter
	// cannot bind to a schema is refused: a search_path changed inside a
	// function could make the server resolve it to that view or function
	// (qualify.go).
	checkReject(t, rw, other, rejCase{"view not on the path", `SELECT * FROM v_sess`, "0A000", []string{"v_sess", "cannot tell which schema"}})
	checkReject(t, rw, s, rejCase{"function not on the path", `SELECT f_sess_cnt()`, "0A000", []string{"unqualified call", "tools.f_sess_cnt"}})
	checkReject(t, rw, other, rejCase{"function on the path", `SELECT f_sess_cnt()`, "0A000", []string{"tools.f_sess_cnt"}})

	// Trusted functions are called as written; the others still fail.
	trusting, err := New(testRules, Options{TrustedFunctions: []string{"public.f_sess", "f_sess_cnt"}})
	if err != nil {
		t.Fatal(err)
	}
	checkRewrite(t, trusting, s, rwCase{"trusted function", `SELECT f_sess()`, ""})
	checkRewrite(t, trusting, s, rwCase{"trusted by bare name", `SELECT tools.f_sess_cnt()`, ""})
	checkReject(t, trusting, s, rejCase{"untrusted function", `SELECT f_calls()`, "0A000", []string{"public.f_calls"}})

	// Without the catalog's paths, the same texts pass: the cache keys on them.
	plain := NewState(Session{Catalog: sessionsCatalog()})
	checkRewrite(t, rw, plain, rwCase{"no known view", `SELECT count(*) FROM v_sess`, ""})
	checkRewrite(t, rw, plain, rwCase{"no known function", `SELECT f_sess()`, ""})
	if plain.Fingerprint() == s.Fingerprint() {
		t.Error("a catalog with leak paths shares the fingerprint of one without")
	}
}
