package rewrite

import (
	"testing"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// childCatalog knows a partition of sessions in public, one in schema part,
// and an inheritance child of the sidecar table docs.
func childCatalog() *Catalog { return NewCatalog(childCatalogData()) }

func childCatalogData() CatalogData {
	cat := sessionsCatalogData()
	cat.Tables["public.sessions_2024"] = &TableInfo{Columns: []Column{
		{Name: "expires_at"}, {Name: "id"}, {Name: "owner"}, {Name: "note"},
	}}
	cat.Schemas["sessions_2024"] = []string{"public"}
	cat.Schemas["sessions_p1"] = []string{"part"}
	cat.Schemas["docs_child"] = []string{"public"}
	cat.Children = map[string]string{
		"public.sessions_2024": "public.sessions",
		"part.sessions_p1":     "public.sessions",
		"public.docs_child":    "public.docs",
	}
	return cat
}

func TestRewriteChildren(t *testing.T) {
	rw := newTestRewriter(t)
	s := NewState(Session{Catalog: childCatalog()})
	C := `"sessions_2024"`
	set := `, "expires_at" = ` + stamp
	cases := []rwCase{
		{"child read", `SELECT * FROM sessions_2024 WHERE id = 1`,
			`SELECT * FROM ` + join(`"public".sessions_2024`, C, 0) + ` WHERE id = 1`},
		{"qualified partition with alias", `SELECT p.id FROM part.sessions_p1 AS p`,
			`SELECT p.id FROM ` + join("part.sessions_p1 AS p", `"p"`, 0)},
		{"ONLY parent", `SELECT * FROM ONLY sessions`,
			`SELECT * FROM ` + join(`ONLY "public".sessions`, `"sessions"`, 0)},
		{"ONLY child", `SELECT * FROM ONLY public.sessions_2024`,
			`SELECT * FROM ` + join("ONLY public.sessions_2024", C, 0)},
		{"partition UPDATE", `UPDATE sessions_2024 SET note = 'x' WHERE id = 1`,
			`UPDATE "public".sessions_2024 SET note = 'x'` + set + ` WHERE (id = 1) AND ` + live(C)},
		{"partition DELETE", `DELETE FROM part.sessions_p1 WHERE id = 1`,
			`DELETE FROM part.sessions_p1 WHERE (id = 1) AND ` + live(`"sessions_p1"`)},
		{"partition INSERT stamping", `INSERT INTO sessions_2024 (id, note) VALUES (1, 'a')`,
			`INSERT INTO "public".sessions_2024 (id, note, "expires_at") VALUES (1, 'a', ` + stamp + `)`},
		{"partition INSERT without a column list uses its own columns", `INSERT INTO sessions_2024 VALUES (NULL, 1)`,
			`INSERT INTO "public".sessions_2024 VALUES (NULL, 1)`},
		{"partition upsert", `INSERT INTO sessions_2024 AS c (id) VALUES (1) ON CONFLICT (id) DO UPDATE SET note = 'y'`,
			`INSERT INTO "public".sessions_2024 AS c (id, "expires_at") VALUES (1, ` + stamp + `) ON CONFLICT (id) DO UPDATE SET note = 'y'` + set + ` WHERE ` + live(`"c"`)},
		{"MERGE into a partition", `MERGE INTO sessions_2024 c USING src ON c.id = src.id WHEN MATCHED THEN DELETE`,
			`MERGE INTO "public".sessions_2024 c USING src ON (c.id = src.id) AND ` + live(`"c"`) + ` WHEN MATCHED THEN DELETE`},
		{"sidecar child keeps the ancestor's registry", `SELECT * FROM docs_child`,
			`SELECT * FROM ("public".docs_child JOIN (SELECT) AS _ttl_0 ON (NOT EXISTS (SELECT 1 FROM "public"."docs_ttl" AS _ttl_reg WHERE _ttl_reg."id" OPERATOR(pg_catalog.=) "docs_child"."id" AND _ttl_reg.expires_at OPERATOR(pg_catalog.<) pg_catalog.now())))`},
		{"child name in a CTE is the CTE", `WITH sessions_2024 AS (SELECT 1) SELECT * FROM sessions_2024`, ``},
	}
	for _, c := range cases {
		checkRewrite(t, rw, s, c)
	}
	checkReject(t, rw, s, rejCase{"partition not on the search path", `SELECT * FROM sessions_p1`, "0A000",
		[]string{"sessions_p1", "cannot tell which schema"}})
	checkRewrite(t, rw, s, rwCase{"child TABLESAMPLE", `SELECT * FROM sessions_2024 TABLESAMPLE SYSTEM (1)`,
		`SELECT * FROM ("public".sessions_2024 TABLESAMPLE SYSTEM (1) JOIN (SELECT) AS _ttl_0 ON ` + (&ttl.Rule{Table: "sessions"}).LiveCondition(`"sessions_2024"`, ttl.Now) + `)`})

	// Without the catalog a child is an ordinary table, never parsed.
	res, err := rw.Rewrite(`SELECT * FROM sessions_2024`, nil)
	if err != nil || res.Parsed || res.Rewritten {
		t.Errorf("no catalog: %+v, %v", res, err)
	}
	// The catalog's child names reach the cheap check, which stays free of
	// allocations once the Children map is indexed.
	for _, in := range []string{`SELECT * FROM SESSIONS_2024`, `SELECT 1 FROM x."sessions_p1"`} {
		if res, err := rw.Rewrite(in, s); err != nil || !res.Parsed {
			t.Errorf("%s: %+v, %v", in, res, err)
		}
	}
	const other = `SELECT a, b FROM users WHERE id = $1`
	if res, _ := rw.Rewrite(other, s); res.Parsed {
		t.Errorf("%s was parsed", other)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = rw.Rewrite(other, s) }); n != 0 {
		t.Errorf("fast path with children allocates %v times per call", n)
	}
}

func TestCacheKeyHoldsChildren(t *testing.T) {
	rw := newTestRewriter(t)
	const in = `INSERT INTO sessions_2024 VALUES (1)`
	with := NewState(Session{Catalog: childCatalog()})
	// The child's first column is the expiry: the value reaches it; the
	// name gets its schema.
	first, err := rw.Rewrite(in, with)
	if err != nil || first.SQL != `INSERT INTO "public".sessions_2024 VALUES (1)` || !first.Parsed {
		t.Fatalf("with children: %+v, %v", first, err)
	}
	// Same Schemas and Tables, no Children: not a TTL table.
	without := childCatalogData()
	without.Children = nil
	if res, err := rw.Rewrite(`DELETE FROM sessions_2024`, with); err != nil || !res.Rewritten {
		t.Errorf("with children: %+v, %v", res, err)
	}
	if res, err := rw.Rewrite(`DELETE FROM sessions_2024`, NewState(Session{Catalog: NewCatalog(without)})); err != nil || res.CacheHit || res.Rewritten {
		t.Errorf("without children: %+v, %v", res, err)
	}
	// A new map naming another parent for the child misses the cache.
	other := childCatalogData()
	other.Children = map[string]string{"public.sessions_2024": "public.cache", "part.sessions_p1": "public.sessions", "public.docs_child": "public.docs"}
	if res, err := rw.Rewrite(`SELECT * FROM sessions_2024`, NewState(Session{Catalog: NewCatalog(other)})); err != nil || res.CacheHit {
		t.Errorf("other parent: %+v, %v", res, err)
	} else if want := `SELECT * FROM ("public".sessions_2024 JOIN (SELECT) AS _ttl_0 ON ` + ruleLive(t, "public.cache", `"sessions_2024"`) + `)`; res.SQL != want {
		t.Errorf("other parent:\n got:  %s\n want: %s", res.SQL, want)
	}
	// The child's own columns are in the key.
	cols := childCatalogData()
	cols.Tables["public.sessions_2024"].Columns = cols.Tables["public.sessions"].Columns
	if res, err := rw.Rewrite(in, NewState(Session{Catalog: NewCatalog(cols)})); err != nil || res.CacheHit || res.SQL != `INSERT INTO "public".sessions_2024 ("id", "expires_at") VALUES (1, `+stamp+`)` {
		t.Errorf("other child columns: %+v, %v", res, err)
	}
	if res, _ := rw.Rewrite(in, NewState(Session{Catalog: childCatalog()})); !res.CacheHit {
		t.Errorf("an equal catalog missed the cache")
	}
}
