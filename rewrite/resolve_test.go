package rewrite

import (
	"strings"
	"testing"
	"time"

	pg "github.com/pganalyze/pg_query_go/v6"

	"github.com/ttlproxy/ttlproxy/ttl"
)

func TestRewriteNameResolution(t *testing.T) {
	rw, err := New([]ttl.Rule{
		{Table: "sessions"},
		{Schema: "app", Table: "sessions"},
		{Schema: "app", Table: "tokens"},
	}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	const in = `SELECT * FROM sessions`
	// The schema the name resolves to is written into the text
	// (qualify.go).
	filtered := func(sch string) string { return `SELECT * FROM ` + join(`"`+sch+`".sessions`, `"sessions"`, 0) }
	cases := []struct {
		name string
		s    *State
		out  string
	}{
		{"default path is public", nil, filtered("public")},
		{"first TTL schema on the path", NewState(Session{SearchPath: []string{"other", "app"}}), filtered("app")},
		{"catalog: an earlier schema holds the name", NewState(Session{
			SearchPath: []string{"other", "public"},
			Catalog:    NewCatalog(CatalogData{Schemas: map[string][]string{"sessions": {"other", "public"}}}),
		}), `SELECT * FROM "other".sessions`},
		{"catalog: the TTL schema comes first", NewState(Session{
			SearchPath: []string{"public", "other"},
			Catalog:    NewCatalog(CatalogData{Schemas: map[string][]string{"sessions": {"other", "public"}}}),
		}), filtered("public")},
		{"catalog without the name falls back to the rules", NewState(Session{
			SearchPath: []string{"other", "app"},
			Catalog:    NewCatalog(CatalogData{Schemas: map[string][]string{}}),
		}), filtered("app")},
	}
	checkReject(t, rw, NewState(Session{SearchPath: []string{"other"}}), rejCase{"path without a TTL schema", in, "0A000",
		[]string{`"sessions"`, "cannot tell which schema"}})
	for _, c := range cases {
		checkRewrite(t, rw, c.s, rwCase{c.name, in, func() string {
			if c.out == in {
				return ""
			}
			return c.out
		}()})
	}
	checkRewrite(t, rw, NewState(Session{SearchPath: []string{"public"}}), rwCase{"qualified name ignores the path",
		`SELECT * FROM app.tokens t`, `SELECT * FROM (app.tokens t JOIN (SELECT) AS _ttl_0 ON ("t"."expires_at" IS NULL OR "t"."expires_at" OPERATOR(pg_catalog.>=) pg_catalog.now()))`})
	checkRewrite(t, rw, nil, rwCase{"database-qualified name",
		`SELECT * FROM db.app.tokens`, `SELECT * FROM (db.app.tokens JOIN (SELECT) AS _ttl_0 ON ("tokens"."expires_at" IS NULL OR "tokens"."expires_at" OPERATOR(pg_catalog.>=) pg_catalog.now()))`})
}

func TestRewriteQuotedTableName(t *testing.T) {
	rw := newTestRewriter(t)
	live := `("m"."Exp" IS NULL OR "m"."Exp" OPERATOR(pg_catalog.>=) pg_catalog.now())`
	checkRewrite(t, rw, nil, rwCase{"quoted mixed case", `SELECT * FROM "Mixed Case" m`,
		`SELECT * FROM ("public"."Mixed Case" m JOIN (SELECT) AS _ttl_0 ON ` + live + `)`})
	checkRewrite(t, rw, nil, rwCase{"folded spelling is another table", `SELECT * FROM mixed_case`, ``})
}

func TestRewriteColumnAliasList(t *testing.T) {
	rw := newTestRewriter(t)
	s := NewState(Session{Catalog: sessionsCatalog()})
	checkRewrite(t, rw, s, rwCase{"renamed expiry column", `SELECT * FROM sessions AS s(a, b, c, e)`,
		`SELECT * FROM ("public".sessions AS s(a, b, c, e) JOIN (SELECT) AS _ttl_0 ON ("s"."e" IS NULL OR "s"."e" OPERATOR(pg_catalog.>=) pg_catalog.now()))`})
	checkRewrite(t, rw, s, rwCase{"short list keeps the expiry name", `SELECT * FROM sessions s(a)`,
		`SELECT * FROM ("public".sessions s(a) JOIN (SELECT) AS _ttl_0 ON ("s"."expires_at" IS NULL OR "s"."expires_at" OPERATOR(pg_catalog.>=) pg_catalog.now()))`})
}

func TestRewriteSystemColumns(t *testing.T) {
	rw := newTestRewriter(t)
	cases := []rwCase{
		{"ctid is qualified", `SELECT ctid, xmin FROM sessions WHERE ctid = '(0,1)' ORDER BY ctid`,
			`SELECT "sessions".ctid, "sessions".xmin FROM ` + join(`"public".sessions`, `"sessions"`, 0) + ` WHERE "sessions".ctid = '(0,1)' ORDER BY "sessions".ctid`},
		{"batch delete by ctid", `DELETE FROM sessions WHERE ctid IN (SELECT ctid FROM sessions s LIMIT 100)`,
			`DELETE FROM "public".sessions WHERE (ctid IN (SELECT "s".ctid FROM ` + join(`"public".sessions s`, `"s"`, 0) + ` LIMIT 100)) AND ` + live(`"sessions"`)},
		{"qualified ctid stays", `SELECT s.ctid FROM sessions s`,
			`SELECT s.ctid FROM ` + join(`"public".sessions s`, `"s"`, 0)},
	}
	for _, c := range cases {
		checkRewrite(t, rw, nil, c)
	}
}

// TestLiveConditionsParse checks every rule kind's filter, expired condition
// and stamp value in the positions the rewriter and the sweeper use them.
func TestLiveConditionsParse(t *testing.T) {
	rules := append([]ttl.Rule{}, testRules...)
	rules = append(rules,
		ttl.Rule{Table: "u_s", Column: "e", ColumnType: ttl.TypeUnixSeconds, DefaultTTL: time.Second},
		ttl.Rule{Table: "u_us", Column: "e", ColumnType: ttl.TypeUnixMicroseconds, DefaultTTL: 1500 * time.Millisecond},
		ttl.Rule{Table: "u_ns", Column: "e", ColumnType: ttl.TypeUnixNanoseconds, DefaultTTL: time.Hour},
		ttl.Rule{Table: "ivl", Kind: ttl.KindDerived, BaseColumn: "c", IntervalColumn: "i", DefaultTTL: time.Hour},
		ttl.Rule{Table: "side2", Kind: ttl.KindSidecar, SidecarSchema: "reg", SidecarTable: "side2_ttl", KeyColumns: []string{"a", "b"}},
	)
	rw, err := New(rules, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range rules {
		r := &rules[i]
		for _, sql := range []string{
			"SELECT 1 FROM t AS x WHERE " + r.LiveCondition(`"x"`, ttl.Now),
			"DELETE FROM t WHERE " + r.ExpiredCondition(r.QuotedName(), "$1::timestamptz"),
		} {
			if _, err := pg.Parse(sql); err != nil {
				t.Errorf("%s: %v\n%s", r.QualifiedName(), err, sql)
			}
		}
		if r.StampColumn() != "" {
			if _, err := pg.Parse("SELECT " + r.StampValue(time.Hour)); err != nil {
				t.Errorf("%s stamp: %v", r.QualifiedName(), err)
			}
		}
		name := r.QuotedName()
		for _, in := range []string{
			"SELECT * FROM " + name + " x",
			"UPDATE " + name + " SET a = 1",
			"DELETE FROM " + name,
			"INSERT INTO " + name + " (a) VALUES (1)",
		} {
			res, err := rw.Rewrite(in, nil)
			if err != nil {
				t.Errorf("%s: %v", in, err)
				continue
			}
			if !res.Rewritten && !strings.HasPrefix(in, "INSERT") {
				t.Errorf("%s: not rewritten", in)
			}
			if _, err := pg.Parse(res.SQL); err != nil {
				t.Errorf("%s: output does not parse: %v\n%s", in, err, res.SQL)
			}
		}
	}
}

func TestRewriteColumnAliasListSidecar(t *testing.T) {
	rw := newTestRewriter(t)
	s := NewState(Session{Catalog: NewCatalog(CatalogData{Tables: map[string]*TableInfo{
		"public.docs": {Columns: []Column{{Name: "id"}, {Name: "body"}}},
	}})})
	checkRewrite(t, rw, s, rwCase{"registry keeps its key names", `SELECT * FROM docs AS d(doc_id, b)`,
		`SELECT * FROM ("public".docs AS d(doc_id, b) JOIN (SELECT) AS _ttl_0 ON (NOT EXISTS (SELECT 1 FROM "public"."docs_ttl" AS _ttl_reg WHERE _ttl_reg."id" OPERATOR(pg_catalog.=) "d"."doc_id" AND _ttl_reg.expires_at OPERATOR(pg_catalog.<) pg_catalog.now())))`})
}
