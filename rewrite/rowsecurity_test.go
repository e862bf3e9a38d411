package rewrite

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	pg "github.com/pganalyze/pg_query_go/v6"

	"github.com/ttlproxy/ttlproxy/internal/sqlstate"
	"github.com/ttlproxy/ttlproxy/ttl"
)

// protectedCatalog is a catalog in which sessions, its child sessions_old
// and events carry row security as rules' install leaves it, except what
// drop names.
func protectedCatalog(rules []ttl.Rule, drop string) *Catalog {
	d := CatalogData{Tables: map[string]*TableInfo{}, Children: map[string]string{"public.sessions_old": "public.sessions"}}
	fp := map[string]string{}
	for i := range rules {
		fp[rules[i].QualifiedName()] = rules[i].PolicyFingerprint()
	}
	fp["public.sessions_old"] = fp["public.sessions"]
	for name, f := range fp {
		rs := RowSecurity{Enabled: true, Forced: true, Policy: true, Condition: f}
		if name == drop {
			rs.Forced = false
		}
		d.Tables[name] = &TableInfo{RowSecurity: rs}
	}
	d.Tables["public.contacts"] = &TableInfo{Columns: []Column{{"id", "integer"}, {"phone", "text"}, {"phone_exp", "timestamp with time zone"}}}
	return NewCatalog(d)
}

// TestRequireRowSecurity: at row_security required a statement on a TTL
// table (or child) the catalog shows without its live policy is refused
// with 55000, one on a protected table is rewritten as without the level,
// and a bypass session is not refused.
func TestRequireRowSecurity(t *testing.T) {
	rules := []ttl.Rule{
		{Table: "sessions", DefaultTTL: time.Hour},
		{Table: "events", Kind: ttl.KindDerived, BaseColumn: "created_at", ExpireAfter: 24 * time.Hour},
		{Table: "contacts", Kind: ttl.KindNone, Columns: []ttl.ColumnRule{{Column: "phone", ExpiresAtColumn: "phone_exp"}}},
	}
	req, err := New(rules, Options{RequireRowSecurity: true})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := New(rules, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, drop, sql string
		refused         bool
	}{
		{"protected", "", "SELECT * FROM sessions WHERE id = 1", false},
		{"protected child", "", "SELECT * FROM sessions_old", false},
		{"not forced", "public.sessions", "SELECT * FROM sessions WHERE id = 1", true},
		{"other table served", "public.sessions", "SELECT * FROM events", false},
		{"child not forced", "public.sessions_old", "DELETE FROM sessions_old WHERE id = 1", true},
		{"parent of an unforced child", "public.sessions_old", "SELECT * FROM sessions", false},
		{"write", "public.events", "UPDATE events SET created_at = now()", true},
		{"qualified", "public.sessions", "SELECT * FROM public.sessions", true},
		{"column TTL has no policy", "", "SELECT phone FROM contacts", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := NewState(Session{Catalog: protectedCatalog(rules, c.drop)})
			got, err := req.Rewrite(c.sql, st)
			var e *Error
			switch {
			case c.refused && (!errors.As(err, &e) || e.Code != sqlstate.ObjectNotInPrerequisiteState || !strings.Contains(e.Hint, "install --row-security")):
				t.Fatalf("%s: %v, want 55000 with the install hint", c.sql, err)
			case c.refused:
				return
			case err != nil:
				t.Fatalf("%s: %v", c.sql, err)
			}
			want, err := plain.Rewrite(c.sql, st)
			if err != nil || want.SQL != got.SQL {
				t.Errorf("%s: %q, without the level %q (%v)", c.sql, got.SQL, want.SQL, err)
			}
		})
	}
	if _, err := req.Rewrite("SELECT * FROM sessions", NewState(Session{})); err == nil {
		t.Error("an unknown catalog: served, want refused")
	}
	st := NewState(Session{Bypass: true, Catalog: protectedCatalog(rules, "public.sessions")})
	if _, err := req.Rewrite("SELECT * FROM sessions", st); err != nil {
		t.Errorf("a bypass session: %v", err)
	}
	// A changed rule makes the installed policy stale.
	changed := slices.Clone(rules)
	changed[1].ExpireAfter = time.Hour
	stale, err := New(changed, Options{RequireRowSecurity: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stale.Rewrite("SELECT * FROM events", NewState(Session{Catalog: protectedCatalog(rules, "")})); err == nil {
		t.Error("a policy of the rule before its change: served, want refused")
	}
	missing := stale.Unprotected(protectedCatalog(rules, "public.sessions_old"))
	if len(missing) != 2 || missing["public.events"] == "" || missing["public.sessions_old"] == "" {
		t.Errorf("Unprotected: %v, want public.events and public.sessions_old", missing)
	}
}

// TestStatsViews: reads of pg_stats, pg_stats_ext and pg_stats_ext_exprs
// lose the rows of TTL tables and their children wherever they are read,
// keep the client's reference and alias, and re-parse; a CTE of the name
// is left alone; an unknown catalog refuses.
func TestStatsViews(t *testing.T) {
	rules := []ttl.Rule{{Table: "sessions", DefaultTTL: time.Hour}, {Schema: "app", Table: "tokens"}}
	rw, err := New(rules, Options{})
	if err != nil {
		t.Fatal(err)
	}
	st := NewState(Session{Catalog: NewCatalog(CatalogData{Children: map[string]string{"public.sessions_old": "public.sessions"}})})
	cond := `(schemaname OPERATOR(pg_catalog.=) E'app'::pg_catalog.name AND tablename OPERATOR(pg_catalog.=) E'tokens'::pg_catalog.name) OR ` +
		`(schemaname OPERATOR(pg_catalog.=) E'public'::pg_catalog.name AND tablename OPERATOR(pg_catalog.=) E'sessions'::pg_catalog.name) OR ` +
		`(schemaname OPERATOR(pg_catalog.=) E'public'::pg_catalog.name AND tablename OPERATOR(pg_catalog.=) E'sessions_old'::pg_catalog.name)`
	f := func(ref, alias string) string { return "(SELECT * FROM " + ref + " WHERE NOT (" + cond + "))" + alias }
	for _, c := range []struct{ in, out string }{
		{"SELECT most_common_vals FROM pg_stats WHERE tablename = 'sessions'",
			"SELECT most_common_vals FROM " + f("pg_stats", ` AS "pg_stats"`) + " WHERE tablename = 'sessions'"},
		{"SELECT s.histogram_bounds FROM pg_catalog.pg_stats s",
			"SELECT s.histogram_bounds FROM " + f("pg_catalog.pg_stats", " s")},
		{"SELECT pg_catalog.pg_stats_ext.most_common_vals FROM pg_catalog.pg_stats_ext",
			"SELECT pg_stats_ext.most_common_vals FROM " + f("pg_catalog.pg_stats_ext", ` AS "pg_stats_ext"`)},
		{"SELECT (SELECT count(*) FROM PG_STATS_EXT_EXPRS AS x(a, b))",
			"SELECT (SELECT count(*) FROM " + f("PG_STATS_EXT_EXPRS", " AS x(a, b)") + ")"},
		{"TABLE pg_stats", "SELECT * FROM " + f("pg_stats", ` AS "pg_stats"`)},
		{"WITH pg_stats AS (SELECT 1) SELECT * FROM pg_stats", "WITH pg_stats AS (SELECT 1) SELECT * FROM pg_stats"},
		{"SELECT * FROM other.pg_stats", "SELECT * FROM other.pg_stats"},
	} {
		got, err := rw.Rewrite(c.in, st)
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if got.SQL != c.out {
			t.Errorf("%s:\n got %s\nwant %s", c.in, got.SQL, c.out)
		}
		if _, err := pg.Parse(got.SQL); err != nil {
			t.Errorf("%s: output does not parse: %v", c.in, err)
		}
	}
	if _, err := rw.Rewrite("SELECT * FROM pg_stats", NewState(Session{})); err == nil {
		t.Error("an unknown catalog: served, want refused")
	}
	// Inside the server the proxy cannot filter them: refused.
	for _, q := range []string{
		`SELECT query_to_xml('SELECT histogram_bounds FROM pg_stats', true, false, '')`,
		`SELECT query_to_xml('TABLE pg_catalog.pg_stats_ext', true, false, '')`,
	} {
		var e *Error
		if _, err := rw.Rewrite(q, st); !errors.As(err, &e) || e.Code != sqlstate.FeatureNotSupported {
			t.Errorf("%s: %v, want 0A000", q, err)
		}
	}
}
