package rewrite

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// sidecarRules register expiries in registry tables.
var sidecarRules = []ttl.Rule{
	{Table: "docs", Kind: ttl.KindSidecar, SidecarTable: "docs_ttl", KeyColumns: []string{"id"}, DefaultTTL: time.Hour},
	{Table: "pairs", Kind: ttl.KindSidecar, SidecarSchema: "reg", SidecarTable: "pairs_ttl", KeyColumns: []string{"a", "b"}, DefaultTTL: time.Minute, RefreshOnUpdate: true},
	{Table: "plain", Kind: ttl.KindSidecar, SidecarTable: "plain_ttl", KeyColumns: []string{"id"}},
	{Table: "sessions", DefaultTTL: time.Hour},
}

// register is what follows an INSERT into docs.
const registerDocs = ` RETURNING "id") INSERT INTO "public"."docs_ttl" ("id", expires_at) SELECT "id", (pg_catalog.now() OPERATOR(pg_catalog.+) interval '3600 seconds') FROM _ttl_ins ON CONFLICT ("id") DO UPDATE SET expires_at = EXCLUDED.expires_at`

func TestRewriteSidecarInsert(t *testing.T) {
	rw, err := New(sidecarRules, Options{})
	if err != nil {
		t.Fatal(err)
	}
	docsLive := func(q string) string { return sidecarRules[0].LiveCondition(q, ttl.Now) }
	pairsLive := sidecarRules[1].LiveCondition(`"p"`, ttl.Now)
	cases := []rwCase{
		{"values", `INSERT INTO docs (id, body) VALUES (1, 'a'), (2, 'b')`,
			`WITH _ttl_ins AS (INSERT INTO "public".docs (id, body) VALUES (1, 'a'), (2, 'b')` + registerDocs},
		{"no column list needs no catalog", `INSERT INTO docs VALUES (1, 'a')`,
			`WITH _ttl_ins AS (INSERT INTO "public".docs VALUES (1, 'a')` + registerDocs},
		{"default values, semicolon and comment", "INSERT INTO public.docs DEFAULT VALUES; -- one",
			"WITH _ttl_ins AS (INSERT INTO public.docs DEFAULT VALUES" + registerDocs + "; -- one"},
		{"insert select reading the table", `INSERT INTO docs (id, body) SELECT id + 100, body FROM docs`,
			`WITH _ttl_ins AS (INSERT INTO "public".docs (id, body) SELECT id + 100, body FROM ("public".docs JOIN (SELECT) AS _ttl_0 ON ` + docsLive(`"docs"`) + `)` + registerDocs},
		{"the INSERT's WITH is kept", `WITH src AS (SELECT 1 AS id) INSERT INTO docs (id) SELECT id FROM src`,
			`WITH src AS (SELECT 1 AS id) , _ttl_ins AS (INSERT INTO "public".docs (id) SELECT id FROM src` + registerDocs},
		{"on conflict do nothing", `INSERT INTO docs (id) VALUES (1) ON CONFLICT DO NOTHING`,
			`WITH _ttl_ins AS (INSERT INTO "public".docs (id) VALUES (1) ON CONFLICT DO NOTHING` + registerDocs},
		{"composite key, registry elsewhere, upsert with refresh", `INSERT INTO pairs AS p (a, b, v) VALUES (1, 2, 'x') ON CONFLICT (a, b) DO UPDATE SET v = excluded.v`,
			`WITH _ttl_ins AS (INSERT INTO "public".pairs AS p (a, b, v) VALUES (1, 2, 'x') ON CONFLICT (a, b) DO UPDATE SET v = excluded.v WHERE ` + pairsLive +
				` RETURNING "a", "b") INSERT INTO "reg"."pairs_ttl" ("a", "b", expires_at) SELECT "a", "b", (pg_catalog.now() OPERATOR(pg_catalog.+) interval '60 seconds') FROM _ttl_ins ON CONFLICT ("a", "b") DO UPDATE SET expires_at = EXCLUDED.expires_at`},
		{"PREPARE", `PREPARE ins(int) AS INSERT INTO docs (id) VALUES ($1)`,
			`PREPARE ins(int) AS WITH _ttl_ins AS (INSERT INTO "public".docs (id) VALUES ($1)` + registerDocs},
		{"EXPLAIN", `EXPLAIN INSERT INTO docs (id) VALUES (1)`,
			`EXPLAIN WITH _ttl_ins AS (INSERT INTO "public".docs (id) VALUES (1)` + registerDocs},
		{"no lifetime, no registration", `INSERT INTO plain (id) VALUES (1)`, `INSERT INTO "public".plain (id) VALUES (1)`},
		{"multi-statement", `INSERT INTO docs (id) VALUES (1); INSERT INTO docs (id) VALUES (2)`,
			`WITH _ttl_ins AS (INSERT INTO "public".docs (id) VALUES (1)` + registerDocs + `; WITH _ttl_ins AS (INSERT INTO "public".docs (id) VALUES (2)` + registerDocs},
	}
	for _, c := range cases {
		checkRewrite(t, rw, nil, c)
		// Rewriting the output leaves the registration alone.
		if c.out != "" {
			again, err := rw.Rewrite(c.out, nil)
			if err != nil || strings.Count(again.SQL, "_ttl_ins AS (") != strings.Count(c.out, "_ttl_ins AS (") {
				t.Errorf("%s: second rewrite %q, %v", c.name, again.SQL, err)
			}
		}
	}
	ten := 10 * time.Minute
	checkRewrite(t, rw, NewState(Session{TTL: &ten}), rwCase{"session lifetime enables registration", `INSERT INTO plain (id) VALUES (1)`,
		`WITH _ttl_ins AS (INSERT INTO "public".plain (id) VALUES (1) RETURNING "id") INSERT INTO "public"."plain_ttl" ("id", expires_at) SELECT "id", (pg_catalog.now() OPERATOR(pg_catalog.+) interval '600 seconds') FROM _ttl_ins ON CONFLICT ("id") DO UPDATE SET expires_at = EXCLUDED.expires_at`})
	zero := time.Duration(0)
	checkRewrite(t, rw, NewState(Session{TTL: &zero}), rwCase{"session lifetime 0 disables it", `INSERT INTO docs (id) VALUES (1)`, `INSERT INTO "public".docs (id) VALUES (1)`})

	for _, c := range []rejCase{
		{"in a CTE", `WITH i AS (INSERT INTO docs (id) VALUES (1)) SELECT 1`, "0A000", []string{"public.docs", "WITH", "cannot be registered"}},
		{"own CTE name on another statement", `WITH _ttl_ins AS (INSERT INTO docs (id) VALUES (1) RETURNING id) SELECT * FROM _ttl_ins`, "0A000", []string{"public.docs", "cannot be registered"}},
		{"upsert without refresh", `INSERT INTO docs (id) VALUES (1) ON CONFLICT (id) DO UPDATE SET body = 'x'`, "0A000", []string{"public.docs", "ON CONFLICT DO UPDATE", "cannot be registered"}},
		{"MERGE INSERT", `MERGE INTO docs d USING src ON d.id = src.id WHEN NOT MATCHED THEN INSERT (id) VALUES (src.id)`, "0A000", []string{"public.docs", "MERGE", "cannot be registered"}},
		// The registry is the proxy's: a client's text that names it is
		// refused, but for the proxy's own conditions in its own places.
		{"read registry", `SELECT id FROM docs_ttl`, "42501", []string{"docs_ttl", "registry", "public.docs"}},
		{"delete registry", `DELETE FROM public.docs_ttl WHERE id = 1`, "42501", []string{"registry"}},
		{"truncate registry", `TRUNCATE docs_ttl`, "42501", []string{"registry"}},
		{"update registry", `UPDATE docs_ttl SET expires_at = 'infinity'`, "42501", []string{"registry"}},
		{"copy registry", `COPY docs_ttl TO STDOUT`, "42501", []string{"registry"}},
		{"registry in a subquery", `SELECT * FROM docs d WHERE d.id IN (SELECT id FROM docs_ttl)`, "42501", []string{"registry"}},
		{"own lookup under a shadowing alias", `SELECT * FROM docs d WHERE EXISTS (SELECT FROM generate_series(1, 9) AS d(id) WHERE NOT ` + docsLive(`"d"`) + `)`, "42501", []string{"registry"}},
		{"own lookup in a plain join", `SELECT * FROM generate_series(1, 9) AS d(id) JOIN (SELECT) AS _ttl_0 ON ` + docsLive(`"d"`), "42501", []string{"registry"}},
	} {
		checkReject(t, rw, nil, c)
	}
	checkRewrite(t, rw, nil, rwCase{"MERGE without INSERT", `MERGE INTO docs d USING src ON d.id = src.id WHEN MATCHED THEN DELETE`,
		`MERGE INTO "public".docs d USING src ON (d.id = src.id) AND ` + docsLive(`"d"`) + ` WHEN MATCHED THEN DELETE`})
}

// TestRewriteSidecarInsertReturning: an INSERT … RETURNING into a sidecar
// table registers the rows it inserts and answers the client's RETURNING
// list as written, from the registration's own RETURNING, so that the
// command tag and the rows are the INSERT's; `*` needs the catalog's
// columns.
func TestRewriteSidecarInsertReturning(t *testing.T) {
	rw, err := New(sidecarRules, Options{})
	if err != nil {
		t.Fatal(err)
	}
	cat := NewCatalog(CatalogData{
		Tables:  map[string]*TableInfo{"public.docs": {Columns: []Column{{Name: "id", Type: "bigint"}, {Name: "body", Type: "text"}}}},
		Schemas: map[string][]string{"docs": {"public"}, "pairs": {"public"}},
	})
	s := NewState(Session{Catalog: cat})
	reg := func(keys string) string {
		return `INSERT INTO "public"."docs_ttl" ("id", expires_at) SELECT "id", (pg_catalog.now() OPERATOR(pg_catalog.+) interval '3600 seconds') FROM _ttl_ins ON CONFLICT ("id") DO UPDATE SET expires_at = EXCLUDED.expires_at`
	}
	col := func(i int, name string) string {
		return fmt.Sprintf(`(SELECT _ttl_ins._ttl_%d FROM _ttl_ins WHERE _ttl_ins."id" OPERATOR(pg_catalog.=) "docs_ttl"."id") AS "%s"`, i, name)
	}
	pairsLive := sidecarRules[1].LiveCondition(`"pairs"`, ttl.Now)
	cases := []rwCase{
		{"knex", `insert into "docs" ("body") values ($1) returning "id"`,
			`WITH _ttl_ins (_ttl_1, "id") AS (insert into "public"."docs" ("body") values ($1) returning "id", "id") ` + reg("") + ` RETURNING ` + col(1, "id")},
		{"pgjdbc, star", `INSERT INTO docs (body) VALUES ($1) RETURNING *`,
			`WITH _ttl_ins (_ttl_1, _ttl_2, "id") AS (INSERT INTO "public".docs (body) VALUES ($1) RETURNING *, "id") ` + reg("") + ` RETURNING ` + col(1, "id") + `, ` + col(2, "body")},
		{"multi-row, names and expressions", `INSERT INTO docs AS d (id, body) VALUES (1, 'a'), (2, 'b') RETURNING d.id AS k, upper(body), body::varchar(3), 7`,
			`WITH _ttl_ins (_ttl_1, _ttl_2, _ttl_3, _ttl_4, "id") AS (INSERT INTO "public".docs AS d (id, body) VALUES (1, 'a'), (2, 'b') RETURNING d.id AS k, upper(body), body::varchar(3), 7, "id") ` + reg("") +
				` RETURNING ` + col(1, "k") + `, ` + col(2, "upper") + `, ` + col(3, "body") + `, ` + col(4, "?column?")},
		{"insert select", `INSERT INTO docs (id, body) SELECT g, 'x' FROM generate_series(1, 3) g RETURNING id`,
			`WITH _ttl_ins (_ttl_1, "id") AS (INSERT INTO "public".docs (id, body) SELECT g, 'x' FROM generate_series(1, 3) g RETURNING id, "id") ` + reg("") + ` RETURNING ` + col(1, "id")},
		{"upsert with refresh", `INSERT INTO pairs (a, b, v) VALUES (1, 2, 'x') ON CONFLICT (a, b) DO UPDATE SET v = excluded.v RETURNING v`,
			`WITH _ttl_ins (_ttl_1, "a", "b") AS (INSERT INTO "public".pairs (a, b, v) VALUES (1, 2, 'x') ON CONFLICT (a, b) DO UPDATE SET v = excluded.v WHERE ` + pairsLive +
				` RETURNING v, "a", "b") INSERT INTO "reg"."pairs_ttl" ("a", "b", expires_at) SELECT "a", "b", (pg_catalog.now() OPERATOR(pg_catalog.+) interval '60 seconds') FROM _ttl_ins ON CONFLICT ("a", "b") DO UPDATE SET expires_at = EXCLUDED.expires_at` +
				` RETURNING (SELECT _ttl_ins._ttl_1 FROM _ttl_ins WHERE _ttl_ins."a" OPERATOR(pg_catalog.=) "pairs_ttl"."a" AND _ttl_ins."b" OPERATOR(pg_catalog.=) "pairs_ttl"."b") AS "v"`},
		{"COPY of an INSERT", `COPY (INSERT INTO docs (id) VALUES (1) RETURNING id) TO STDOUT`,
			`COPY (WITH _ttl_ins (_ttl_1, "id") AS (INSERT INTO "public".docs (id) VALUES (1) RETURNING id, "id") ` + reg("") + ` RETURNING ` + col(1, "id") + `) TO STDOUT`},
	}
	for _, c := range cases {
		checkRewrite(t, rw, s, c)
		// Rewritten again, it registers once and answers once (ON
		// CONFLICT's live condition is added again: the same rows).
		again, err := rw.Rewrite(c.out, s)
		if err != nil || strings.Count(again.SQL, "_ttl_ins (") != 1 || strings.Count(again.SQL, " RETURNING (SELECT _ttl_ins.") != 1 {
			t.Errorf("%s: second rewrite\n %s\n %v", c.name, again.SQL, err)
		}
	}
	for _, c := range []rejCase{
		{"star without the catalog", `INSERT INTO docs (id) VALUES (1) RETURNING *`, "0A000", []string{"public.docs", "RETURNING *", "catalog"}},
		{"an entry of unknown name", `INSERT INTO docs (id) VALUES (1) RETURNING (SELECT 1)`, "0A000", []string{"public.docs", "RETURNING"}},
		{"in a CTE", `WITH i AS (INSERT INTO docs (id) VALUES (1) RETURNING id) SELECT * FROM i`, "0A000", []string{"public.docs", "WITH"}},
		// The registration's own form, written by a client to read the
		// registry through its RETURNING.
		{"reading the registry in the answer", `WITH _ttl_ins (_ttl_1, "id") AS (INSERT INTO docs (id) VALUES (1) RETURNING id, "id") ` + reg("") +
			` RETURNING (SELECT max(expires_at) FROM docs_ttl)`, "42501", []string{"registry"}},
	} {
		if c.name == "star without the catalog" {
			checkReject(t, rw, nil, c)
			continue
		}
		checkReject(t, rw, s, c)
	}
}

// TestRewriteSidecarUpdateRefresh: with refresh_on_update, an UPDATE of a
// sidecar table registers the new expiry of each (live) row it updates, in
// the same statement; RETURNING is answered as written; without the key,
// or in a WITH query, it is not served. Rewritten again, it refreshes once.
func TestRewriteSidecarUpdateRefresh(t *testing.T) {
	rw, err := New(sidecarRules, Options{})
	if err != nil {
		t.Fatal(err)
	}
	live := func(q string) string { return sidecarRules[1].LiveCondition(q, ttl.Now) }
	reg := ` INSERT INTO "reg"."pairs_ttl" ("a", "b", expires_at) SELECT "a", "b", (pg_catalog.now() OPERATOR(pg_catalog.+) interval '60 seconds') FROM _ttl_upd ON CONFLICT ("a", "b") DO UPDATE SET expires_at = EXCLUDED.expires_at`
	match := `_ttl_upd."a" OPERATOR(pg_catalog.=) "pairs_ttl"."a" AND _ttl_upd."b" OPERATOR(pg_catalog.=) "pairs_ttl"."b"`
	cases := []rwCase{
		{"update", `UPDATE pairs SET v = $1 WHERE pairs.a = $2`,
			`WITH _ttl_upd AS (UPDATE "public".pairs SET v = $1 WHERE (pairs.a = $2) AND ` + live(`"pairs"`) + ` RETURNING "a", "b")` + reg},
		{"only, alias, no where", `UPDATE ONLY pairs p SET v = 'x'`,
			`WITH _ttl_upd AS (UPDATE ONLY "public".pairs p SET v = 'x' WHERE ` + live(`"p"`) + ` RETURNING "a", "b")` + reg},
		{"own WITH, FROM", `WITH s AS (SELECT 1 AS a) UPDATE pairs SET v = 'y' FROM s WHERE s.a = pairs.a`,
			`WITH s AS (SELECT 1 AS a) , _ttl_upd AS (UPDATE "public".pairs SET v = 'y' FROM s WHERE (s.a = pairs.a) AND ` + live(`"pairs"`) + ` RETURNING "a", "b")` + reg},
		{"returning", `UPDATE pairs SET v = 'z' WHERE a = 1 RETURNING v, pairs.a AS k`,
			`WITH _ttl_upd (_ttl_1, _ttl_2, "a", "b") AS (UPDATE "public".pairs SET v = 'z' WHERE (a = 1) AND ` + live(`"pairs"`) + ` RETURNING v, pairs.a AS k, "a", "b")` + reg +
				` RETURNING (SELECT _ttl_upd._ttl_1 FROM _ttl_upd WHERE ` + match + `) AS "v", (SELECT _ttl_upd._ttl_2 FROM _ttl_upd WHERE ` + match + `) AS "k"`},
		{"current of", `UPDATE pairs SET v = 'c' WHERE CURRENT OF cur`,
			`WITH _ttl_upd AS (UPDATE "public".pairs SET v = 'c' WHERE CURRENT OF cur RETURNING "a", "b")` + reg},
		{"no refresh_on_update", `UPDATE docs SET body = 'x' WHERE id = 1`,
			`UPDATE "public".docs SET body = 'x' WHERE (id = 1) AND ` + sidecarRules[0].LiveCondition(`"docs"`, ttl.Now)},
	}
	for _, c := range cases {
		checkRewrite(t, rw, nil, c)
		again, err := rw.Rewrite(c.out, nil)
		if err != nil || strings.Count(again.SQL, "_ttl_upd") != strings.Count(c.out, "_ttl_upd") {
			t.Errorf("%s: second rewrite\n %s\n %v", c.name, again.SQL, err)
		}
	}
	for _, c := range []rejCase{
		{"in a CTE", `WITH u AS (UPDATE pairs SET v = 'x' RETURNING *) SELECT * FROM u`, "0A000", []string{"public.pairs", "WITH", "cannot be registered"}},
		{"star over a join", `UPDATE pairs SET v = 'x' FROM docs d WHERE d.id = pairs.a RETURNING *`, "0A000", []string{"public.pairs", "RETURNING"}},
		{"star of another item", `UPDATE pairs SET v = 'x' FROM docs d WHERE d.id = pairs.a RETURNING d.*`, "0A000", []string{"public.pairs", "RETURNING"}},
		// The refresh's own form, written by a client, cannot reach
		// expired rows or other rows of the registry.
		{"own form reading the registry", `WITH _ttl_upd AS (UPDATE pairs SET v = 'x' RETURNING "a", "b")` + reg + ` RETURNING (SELECT count(*) FROM reg.pairs_ttl)`, "42501", []string{"registry"}},
	} {
		checkReject(t, rw, nil, c)
	}
}

// TestSidecarOwnFormKeys: a client that writes the registration's own form
// gets it served only while the write's RETURNING gives the registry its
// rows' own keys: other keys (an expired row's) would register an expiry
// for rows the write never touched, bringing them back.
func TestSidecarOwnFormKeys(t *testing.T) {
	rw, err := New(sidecarRules, Options{})
	if err != nil {
		t.Fatal(err)
	}
	regDocs := ` INSERT INTO "public"."docs_ttl" ("id", expires_at) SELECT "id", (pg_catalog.now() OPERATOR(pg_catalog.+) interval '3600 seconds') FROM _ttl_ins ON CONFLICT ("id") DO UPDATE SET expires_at = EXCLUDED.expires_at`
	regPairs := ` INSERT INTO "reg"."pairs_ttl" ("a", "b", expires_at) SELECT "a", "b", (pg_catalog.now() OPERATOR(pg_catalog.+) interval '60 seconds') FROM _ttl_upd ON CONFLICT ("a", "b") DO UPDATE SET expires_at = EXCLUDED.expires_at`
	for _, c := range []rejCase{
		{"insert returning another key", `WITH _ttl_ins AS (INSERT INTO docs (id) VALUES (5) RETURNING id - 4 AS id)` + regDocs, "42501", []string{"registry"}},
		{"insert returning a constant key", `WITH _ttl_ins AS (INSERT INTO docs (id) VALUES (5) RETURNING 1 AS id)` + regDocs, "42501", []string{"registry"}},
		{"insert renaming a column to the key", `WITH _ttl_ins (x, id) AS (INSERT INTO docs (id, body) VALUES (5, 'x') RETURNING id, length(body))` + regDocs, "42501", []string{"registry"}},
		{"update returning another key", `WITH _ttl_upd AS (UPDATE pairs SET v = 'x' WHERE a = 1 RETURNING a + 1 AS a, b)` + regPairs, "42501", []string{"registry"}},
		{"update returning a joined key", `WITH _ttl_upd AS (UPDATE pairs SET v = 'x' FROM pairs2 q WHERE q.a = pairs.a RETURNING q.a, q.b)` + regPairs, "42501", []string{"registry"}},
	} {
		checkReject(t, rw, nil, c)
	}
}
