package install

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	pg "github.com/pganalyze/pg_query_go/v6"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// planRules covers every rule kind and names that need quoting.
var planRules = []ttl.Rule{
	{Table: "sessions"},
	{Schema: "app", Table: "events", Column: "exp", ColumnType: ttl.TypeUnixSeconds},
	{Table: "logs", Kind: ttl.KindDerived, BaseColumn: "created_at", ExpireAfter: time.Hour},
	{Table: "jobs", Kind: ttl.KindDerived, BaseColumn: "created_at", IntervalColumn: "ttl", IntervalSeconds: true},
	{Table: "docs", Kind: ttl.KindSidecar, SidecarSchema: "meta", SidecarTable: "docs_ttl", KeyColumns: []string{"tenant", "id"}},
	{Schema: `My "Schema"`, Table: `we$ttl$ird`, Column: "Expires"},
}

var planKeys = map[string][][]string{
	"public.sessions":        {{"id"}, {"token"}},
	"app.events":             {{"id"}, {"id"}, {"source", "seq"}},
	"public.logs":            {{"id"}},
	"public.jobs":            {},
	"public.docs":            {{"tenant", "id"}, {"slug"}},
	`My "Schema".we$ttl$ird`: {{`Key "1"`}},
}

// TestPlanReparses checks that every planned statement parses, and that the
// plpgsql body of every function does too.
func TestPlanReparses(t *testing.T) {
	for _, uninstall := range []bool{false, true} {
		stmts, err := Plan(planRules, planKeys, uninstall)
		if err != nil {
			t.Fatalf("Plan(uninstall=%v): %v", uninstall, err)
		}
		for _, s := range stmts {
			res, err := pg.Parse(s)
			if err != nil {
				t.Errorf("Plan(uninstall=%v) statement does not parse: %v\n%s", uninstall, err, s)
				continue
			}
			if n := len(res.Stmts); n != 1 {
				t.Errorf("statement holds %d statements, want 1:\n%s", n, s)
			}
			if strings.HasPrefix(s, "CREATE OR REPLACE FUNCTION") || strings.HasPrefix(s, "DO ") {
				if _, err := pg.ParsePlPgSqlToJSON(s); err != nil {
					t.Errorf("plpgsql body does not parse: %v\n%s", err, s)
				}
			}
		}
	}
}

func TestPlanInstall(t *testing.T) {
	stmts, err := Plan(planRules, planKeys, false)
	if err != nil {
		t.Fatal(err)
	}
	if stmts[0] != `CREATE SCHEMA IF NOT EXISTS "ttlproxy"` {
		t.Errorf("first statement = %q", stmts[0])
	}
	// 1 + 7 per table with keys + 3 for the table without.
	if want := 1 + 7*5 + 3; len(stmts) != want {
		t.Fatalf("got %d statements, want %d:\n%s", len(stmts), want, strings.Join(stmts, ";\n"))
	}
	want := []string{
		`CREATE OR REPLACE FUNCTION "ttlproxy"."purge_expired__public__sessions"() RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $ttl$
#variable_conflict use_column
BEGIN
  -- unique key (id)
  IF TG_OP = 'INSERT' OR ROW(NEW."id") IS DISTINCT FROM ROW(OLD."id") THEN
    DELETE FROM "public"."sessions" AS t WHERE t."id" = NEW."id" AND (NOT (t."expires_at" IS NULL OR t."expires_at" OPERATOR(pg_catalog.>=) pg_catalog.now()));
  END IF;
  -- unique key (token)
  IF TG_OP = 'INSERT' OR ROW(NEW."token") IS DISTINCT FROM ROW(OLD."token") THEN
    DELETE FROM "public"."sessions" AS t WHERE t."token" = NEW."token" AND (NOT (t."expires_at" IS NULL OR t."expires_at" OPERATOR(pg_catalog.>=) pg_catalog.now()));
  END IF;
  RETURN NEW;
END
$ttl$`,
		`REVOKE ALL ON FUNCTION "ttlproxy"."purge_expired__public__sessions"() FROM PUBLIC`,
		`COMMENT ON FUNCTION "ttlproxy"."purge_expired__public__sessions"() IS E'ttlproxy: deletes the expired rows of public.sessions that hold a unique key value an inserted or updated row is about to take; created by ttlproxy install'`,
		`DROP TRIGGER IF EXISTS "zz_ttlproxy_purge_expired_insert" ON "public"."sessions"`,
		`CREATE TRIGGER "zz_ttlproxy_purge_expired_insert" BEFORE INSERT ON "public"."sessions" FOR EACH ROW EXECUTE FUNCTION "ttlproxy"."purge_expired__public__sessions"()`,
		`DROP TRIGGER IF EXISTS "zz_ttlproxy_purge_expired_update" ON "public"."sessions"`,
		`CREATE TRIGGER "zz_ttlproxy_purge_expired_update" BEFORE UPDATE OF "id", "token" ON "public"."sessions" FOR EACH ROW ` +
			`WHEN (ROW(OLD."id") IS DISTINCT FROM ROW(NEW."id") OR ROW(OLD."token") IS DISTINCT FROM ROW(NEW."token")) ` +
			`EXECUTE FUNCTION "ttlproxy"."purge_expired__public__sessions"()`,
	}
	for i, w := range want {
		if got := stmts[1+i]; got != w {
			t.Errorf("statement %d:\ngot  %s\nwant %s", 1+i, got, w)
		}
	}

	all := strings.Join(stmts, ";\n")
	for _, r := range planRules {
		if len(planKeys[r.QualifiedName()]) == 0 {
			continue
		}
		// The expiry test is the shared definition, never a copy.
		if cond := r.ExpiredCondition("t", ttl.Now); !strings.Contains(all, cond) {
			t.Errorf("table %s: plan does not use ExpiredCondition %s", r.QualifiedName(), cond)
		}
	}
	for _, frag := range []string{
		// A repeated key is probed once.
		`BEFORE UPDATE OF "id", "source", "seq" ON "app"."events"`,
		// The sidecar's expired registry rows go with the base row.
		`WITH d AS (DELETE FROM "public"."docs" AS t WHERE t."slug" = NEW."slug" AND `,
		`RETURNING t."tenant", t."id") DELETE FROM "meta"."docs_ttl" AS r USING d WHERE r."tenant" = d."tenant" AND r."id" = d."id" AND (NOT (r."expires_at" IS NULL OR r."expires_at" OPERATOR(pg_catalog.>=) pg_catalog.now()))`,
		// A table without keys loses any trigger left from before.
		`DROP FUNCTION IF EXISTS "ttlproxy"."purge_expired__public__jobs"()`,
		// Quoted names; the body's dollar quote avoids the identifier.
		`DELETE FROM "My ""Schema"""."we$ttl$ird" AS t WHERE t."Key ""1""" = NEW."Key ""1""" AND (NOT (t."Expires" IS NULL`,
		"AS $ttl1$\n",
	} {
		if !strings.Contains(all, frag) {
			t.Errorf("plan lacks %s", frag)
		}
	}
	if strings.Contains(all, `"app"."events" AS t WHERE t."id" = NEW."id" AND (NOT (t."exp" IS NULL OR t."exp" >= ceil(extract(epoch from now()))::bigint));
  END IF;
  -- unique key (id)`) {
		t.Error("repeated key (id) of app.events planned twice")
	}
}

func TestPlanUninstall(t *testing.T) {
	stmts, err := Plan(planRules, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if want := 3*len(planRules) + 1; len(stmts) != want {
		t.Fatalf("got %d statements, want %d", len(stmts), want)
	}
	if want := []string{
		`DROP TRIGGER IF EXISTS "zz_ttlproxy_purge_expired_insert" ON "public"."sessions"`,
		`DROP TRIGGER IF EXISTS "zz_ttlproxy_purge_expired_update" ON "public"."sessions"`,
		`DROP FUNCTION IF EXISTS "ttlproxy"."purge_expired__public__sessions"()`,
	}; strings.Join(stmts[:3], "\n") != strings.Join(want, "\n") {
		t.Errorf("first table:\ngot  %q\nwant %q", stmts[:3], want)
	}
	if last := stmts[len(stmts)-1]; !strings.HasPrefix(last, "DO $ttl$") || !strings.Contains(last, "DROP SCHEMA IF EXISTS ttlproxy") {
		t.Errorf("last statement is not the cleanup block:\n%s", last)
	}
	for _, s := range stmts {
		if strings.Contains(s, "CREATE") {
			t.Errorf("uninstall creates something: %s", s)
		}
	}
}

func TestPlanErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rules []ttl.Rule
		keys  map[string][][]string
		want  string
	}{
		{"no keys entry", []ttl.Rule{{Table: "a"}}, map[string][][]string{}, "table public.a: no unique keys given"},
		{"empty key", []ttl.Rule{{Table: "a"}}, map[string][][]string{"public.a": {{}}}, "table public.a: empty unique key"},
		{"empty column", []ttl.Rule{{Table: "a"}}, map[string][][]string{"public.a": {{"x", ""}}}, "table public.a: unique key"},
		{"twice", []ttl.Rule{{Table: "a"}, {Schema: "public", Table: "a"}}, map[string][][]string{"public.a": nil}, "table public.a: listed twice"},
		{"no table", []ttl.Rule{{Schema: "s"}}, nil, "table s.: table name is empty"},
		{"sidecar without keys", []ttl.Rule{{Table: "d", Kind: ttl.KindSidecar, SidecarTable: "r"}}, nil, "table public.d: sidecar rule"},
		{"derived without base", []ttl.Rule{{Table: "d", Kind: ttl.KindDerived}}, nil, "table public.d: derived rule"},
		{"unknown kind", []ttl.Rule{{Table: "d", Kind: "ttl"}}, nil, `table public.d: unknown rule kind "ttl"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Plan(tc.rules, tc.keys, false)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Plan error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestFunctionName(t *testing.T) {
	long := strings.Repeat("x", 60)
	utf := strings.Repeat("é", 40) // 2 bytes each
	names := map[string][2]string{}
	for _, tc := range []struct {
		schema, table string
		want          string // "" when hashed
	}{
		{"public", "sessions", "purge_expired__public__sessions"},
		{"app", "a__b", "purge_expired__app__a__b"},
		{"app__x", "b", ""}, // would read as app + x__b
		{"app", "x__b", "purge_expired__app__x__b"},
		{"app_", "b", ""}, // would read as app + _b
		{"app", "_b", "purge_expired__app___b"},
		{"public", long, ""},
		{"public", long + "y", ""},
		{"public", utf, ""},
		{"s", strings.Repeat("t", 63-len("purge_expired__s__")), "purge_expired__s__" + strings.Repeat("t", 63-len("purge_expired__s__"))},
	} {
		got := FunctionName(tc.schema, tc.table)
		if tc.want != "" && got != tc.want {
			t.Errorf("FunctionName(%q, %q) = %q, want %q", tc.schema, tc.table, got, tc.want)
		}
		if tc.want == "" && (!strings.HasPrefix(got, FunctionPrefix) || got[len(got)-13] != '_') {
			t.Errorf("FunctionName(%q, %q) = %q, want a hashed name", tc.schema, tc.table, got)
		}
		if len(got) > 63 || !utf8.ValidString(got) {
			t.Errorf("FunctionName(%q, %q) = %q: %d bytes or invalid UTF-8", tc.schema, tc.table, got, len(got))
		}
		if got != FunctionName(tc.schema, tc.table) {
			t.Errorf("FunctionName(%q, %q) is not deterministic", tc.schema, tc.table)
		}
		if prev, ok := names[got]; ok {
			t.Errorf("FunctionName(%q, %q) = FunctionName(%q, %q) = %q", tc.schema, tc.table, prev[0], prev[1], got)
		}
		names[got] = [2]string{tc.schema, tc.table}
	}
}

// TestPlanColumnsOnly: a table with no row rule (rule none) gets no
// collision trigger, whatever its keys (none need be given), and loses one
// left from a row rule it had.
func TestPlanColumnsOnly(t *testing.T) {
	rules := []ttl.Rule{{Table: "customers", Kind: ttl.KindNone,
		Columns: []ttl.ColumnRule{{Column: "phone", ExpiresAtColumn: "phone_exp"}}}}
	stmts, err := Plan(rules, map[string][][]string{}, false)
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(stmts, ";\n")
	if strings.Contains(all, "CREATE TRIGGER") || strings.Contains(all, "CREATE OR REPLACE FUNCTION") {
		t.Errorf("plan installs a trigger for a table with no row rule:\n%s", all)
	}
	if !strings.Contains(all, `DROP FUNCTION IF EXISTS "ttlproxy"."purge_expired__public__customers"()`) {
		t.Errorf("plan does not drop a trigger left from before:\n%s", all)
	}
}
