package rewrite

import (
	"testing"

	"github.com/ttlproxy/ttlproxy/ttl"
)

func TestRewritePreparePinsSchema(t *testing.T) {
	rw := newTestRewriter(t)
	S := `"sessions"`
	P := `"public".sessions`
	set := `, "expires_at" = ` + stamp
	cases := []rwCase{
		{"read", `PREPARE p AS SELECT * FROM sessions`,
			`PREPARE p AS SELECT * FROM ` + join(P, S, 0)},
		{"alias", `PREPARE p(int) AS SELECT s.id FROM sessions AS s WHERE s.id = $1`,
			`PREPARE p(int) AS SELECT s.id FROM ` + join(P+` AS s`, `"s"`, 0) + ` WHERE s.id = $1`},
		{"the name stays the reference name", `PREPARE p AS SELECT sessions.id FROM sessions WHERE sessions.note = 'x'`,
			`PREPARE p AS SELECT sessions.id FROM ` + join(P, S, 0) + ` WHERE sessions.note = 'x'`},
		{"ONLY", `PREPARE p AS SELECT * FROM ONLY sessions`,
			`PREPARE p AS SELECT * FROM ` + join(`ONLY `+P, S, 0)},
		{"TABLE", `PREPARE p AS TABLE sessions`,
			`PREPARE p AS SELECT * FROM ` + join(P, S, 0)},
		{"qualified name stays", `PREPARE p AS SELECT * FROM public.sessions`,
			`PREPARE p AS SELECT * FROM ` + join(`public.sessions`, S, 0)},
		{"other tables stay", `PREPARE p AS SELECT * FROM users u JOIN sessions s ON s.owner = u.id`,
			`PREPARE p AS SELECT * FROM users u JOIN ` + join(P+` s`, `"s"`, 0) + ` ON s.owner = u.id`},
		{"subquery", `PREPARE p AS SELECT 1 WHERE EXISTS (SELECT 1 FROM sessions s WHERE s.id = 1)`,
			`PREPARE p AS SELECT 1 WHERE EXISTS (SELECT 1 FROM ` + join(P+` s`, `"s"`, 0) + ` WHERE s.id = 1)`},
		{"CTE name is not a table", `PREPARE p AS WITH sessions AS (SELECT 1 AS id) SELECT * FROM sessions`, ``},
		{"CTE body", `PREPARE p AS WITH c AS (SELECT id FROM sessions) SELECT * FROM c`,
			`PREPARE p AS WITH c AS (SELECT id FROM ` + join(P, S, 0) + `) SELECT * FROM c`},
		{"DELETE", `PREPARE d(int) AS DELETE FROM sessions WHERE id = $1`,
			`PREPARE d(int) AS DELETE FROM ` + P + ` WHERE (id = $1) AND ` + live(S)},
		{"UPDATE … FROM", `PREPARE u AS UPDATE users SET n = 1 FROM sessions s WHERE s.owner = users.id`,
			`PREPARE u AS UPDATE users SET n = 1 FROM ` + join(P+` s`, `"s"`, 0) + ` WHERE s.owner = users.id`},
		{"INSERT", `PREPARE i(int) AS INSERT INTO sessions (id) VALUES ($1)`,
			`PREPARE i(int) AS INSERT INTO ` + P + ` (id, "expires_at") VALUES ($1, ` + stamp + `)`},
		{"upsert", `PREPARE i(int) AS INSERT INTO sessions AS c (id) VALUES ($1) ON CONFLICT (id) DO UPDATE SET note = 'y'`,
			`PREPARE i(int) AS INSERT INTO ` + P + ` AS c (id, "expires_at") VALUES ($1, ` + stamp + `) ON CONFLICT (id) DO UPDATE SET note = 'y'` + set + ` WHERE ` + live(`"c"`)},
		{"INSERT … SELECT", `PREPARE i AS INSERT INTO archive SELECT * FROM sessions`,
			`PREPARE i AS INSERT INTO archive SELECT * FROM ` + join(P, S, 0)},
		{"MERGE", `PREPARE m AS MERGE INTO sessions c USING src ON c.id = src.id WHEN MATCHED THEN DELETE`,
			`PREPARE m AS MERGE INTO ` + P + ` c USING src ON (c.id = src.id) AND ` + live(`"c"`) + ` WHEN MATCHED THEN DELETE`},
		{"Unicode escape spelling", `PREPARE p AS SELECT * FROM U&"\0073essions"`,
			`PREPARE p AS SELECT * FROM ` + join(`"public".U&"\0073essions"`, S, 0)},
		{"only the PREPARE is pinned", `PREPARE p AS SELECT * FROM sessions; SELECT * FROM sessions`,
			`PREPARE p AS SELECT * FROM ` + join(P, S, 0) + `; SELECT * FROM ` + join(`"public".sessions`, S, 1)},
		{"EXECUTE passes", `EXECUTE p`, ``},
		{"DECLARE is not pinned", `DECLARE c CURSOR FOR SELECT * FROM sessions`,
			`DECLARE c CURSOR FOR SELECT * FROM ` + join(`"public".sessions`, S, 0)},
		{"CREATE VIEW is not pinned", `CREATE VIEW v AS SELECT * FROM sessions`,
			`CREATE VIEW v AS SELECT * FROM ` + join(`"public".sessions`, S, 0)},
	}
	for _, c := range cases {
		checkRewrite(t, rw, nil, c)
	}
}

func TestRewritePrepareResolution(t *testing.T) {
	rw, err := New([]ttl.Rule{
		{Table: "sessions"},
		{Schema: "app", Table: "sessions"},
	}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	const in = `PREPARE p AS SELECT * FROM sessions`
	filtered := func(schema string) string {
		return `PREPARE p AS SELECT * FROM ` + join(`"`+schema+`".sessions`, `"sessions"`, 0)
	}
	cases := []struct {
		name string
		s    *State
		out  string
	}{
		{"first TTL schema on the path", NewState(Session{SearchPath: []string{"other", "app", "public"}}), filtered("app")},
		{"catalog: a non-TTL schema comes first", NewState(Session{
			SearchPath: []string{"other", "public"},
			Catalog:    NewCatalog(CatalogData{Schemas: map[string][]string{"sessions": {"other", "public"}}}),
		}), `PREPARE p AS SELECT * FROM "other".sessions`},
		{"catalog: the TTL schema comes first", NewState(Session{
			SearchPath: []string{"public", "other"},
			Catalog:    NewCatalog(CatalogData{Schemas: map[string][]string{"sessions": {"other", "public"}}}),
		}), filtered("public")},
		{"temporary table shadows", NewState(Session{
			SearchPath: []string{"pg_temp", "public"},
			Catalog:    NewCatalog(CatalogData{Schemas: map[string][]string{"sessions": {"pg_temp", "public"}}}),
		}), `PREPARE p AS SELECT * FROM "pg_temp".sessions`},
		{"schema name with a quote", NewState(Session{
			SearchPath: []string{`we"ird`, "public"},
			Catalog:    NewCatalog(CatalogData{Schemas: map[string][]string{"sessions": {`we"ird`, "public"}}}),
		}), `PREPARE p AS SELECT * FROM "we""ird".sessions`},
	}
	for _, c := range cases {
		checkRewrite(t, rw, c.s, rwCase{c.name, in, c.out})
	}
	for _, c := range []struct {
		name string
		s    *State
	}{
		{"no TTL schema on the path, no catalog", NewState(Session{SearchPath: []string{"other"}})},
		{"the catalog puts the name nowhere on the path", NewState(Session{
			SearchPath: []string{"other"},
			Catalog:    NewCatalog(CatalogData{Schemas: map[string][]string{"sessions": {"public", "app"}}}),
		})},
	} {
		checkReject(t, rw, c.s, rejCase{c.name, in, "0A000", []string{`"sessions"`, "search path"}})
	}
	// Outside PREPARE too: every statement binds its names (qualify.go).
	checkReject(t, rw, NewState(Session{SearchPath: []string{"other"}}), rejCase{"plain read", `SELECT * FROM sessions`, "0A000", []string{`"sessions"`, "search path"}})
}

func TestRewritePrepareChildren(t *testing.T) {
	rw := newTestRewriter(t)
	s := NewState(Session{Catalog: childCatalog()})
	C := `"sessions_2024"`
	checkRewrite(t, rw, s, rwCase{"child", `PREPARE p AS SELECT * FROM sessions_2024`,
		`PREPARE p AS SELECT * FROM ` + join(`"public".sessions_2024`, C, 0)})
	checkRewrite(t, rw, NewState(Session{SearchPath: []string{"part", "public"}, Catalog: childCatalog()}), rwCase{"partition in another schema",
		`PREPARE p AS DELETE FROM sessions_p1`,
		`PREPARE p AS DELETE FROM "part".sessions_p1 WHERE ` + live(`"sessions_p1"`)})
	checkReject(t, rw, s, rejCase{"partition not on the path", `PREPARE p AS SELECT * FROM sessions_p1`, "0A000", []string{"sessions_p1"}})
}
