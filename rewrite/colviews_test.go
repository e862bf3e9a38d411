package rewrite

import (
	"slices"
	"strings"
	"testing"

	pg "github.com/pganalyze/pg_query_go/v6"

	"github.com/ttlproxy/ttlproxy/internal/sqlstate"
)

// colViewCatalog knows orders (columnCatalog) and views over it as the
// proxy's catalog query reads them: pg_get_viewdef's text under
// search_path pg_catalog.
func colViewCatalog() *Catalog {
	d := columnCatalog().Data()
	d.Tables["public.users"] = &TableInfo{Columns: []Column{{Name: "id", Type: "integer"}}}
	ipLive := `((o.client_ip_expires_at IS NULL) OR (o.client_ip_expires_at >= now()))`
	noteLive := `((o.created_at IS NULL) OR (o.created_at >= (now() - '8760:00:00'::interval)))`
	filter := `(public.orders o
     JOIN ( SELECT) _ttl_0 ON (((o.expires_at IS NULL) OR (o.expires_at >= now()))))`
	proxyIP := `CASE
            WHEN ` + ipLive + ` THEN o.client_ip
            ELSE NULL::inet
        END AS client_ip`
	v := func(def string, cols ...string) View {
		return View{Reads: []string{"public.orders"}, Definition: def, Columns: cols}
	}
	d.Views = map[string]View{
		// Created directly.
		"public.order_ids":   v(` SELECT o.id FROM public.orders o;`, "id"),
		"public.order_ips":   v(` SELECT o.id, o.client_ip FROM public.orders o;`, "id", "client_ip"),
		"public.order_ips_2": {Reads: []string{"public.order_ips"}, Definition: ` SELECT order_ips.client_ip FROM public.order_ips;`, Columns: []string{"client_ip"}},
		"public.order_rows":  v(` SELECT row_to_json(o.*) AS j FROM public.orders o;`, "j"),
		"public.order_join":  {Reads: []string{"public.orders", "public.users"}, Definition: ` SELECT o.client_ip FROM (public.orders o JOIN public.users u ON ((u.id = o.id)));`, Columns: []string{"client_ip"}},
		"public.order_using": {Reads: []string{"public.orders"}, Definition: ` SELECT o.id FROM (public.orders o JOIN public.orders p USING (client_ip));`, Columns: []string{"id"}},
		"public.order_mat":   {Materialized: true, Reads: []string{"public.orders"}, Columns: []string{"client_ip"}},
		// Created through the proxy.
		"public.order_proxy": v(` SELECT o.id,
        `+proxyIP+`
   FROM `+filter+`
  WHERE ((`+noteLive+` AND (o.note > (1)::numeric)) OR (o.client_ip IS NULL) OR (NOT `+ipLive+`));`, "id", "client_ip"),
		"public.order_proxy_2": {Reads: []string{"public.order_proxy"}, Definition: ` SELECT order_proxy.client_ip FROM public.order_proxy;`, Columns: []string{"client_ip"}},
		// Created through the proxy over order_ips, which it expanded.
		"public.order_proxy_of_direct": v(` SELECT order_ips.client_ip FROM ( SELECT o.id, CASE WHEN `+ipLive+` THEN o.client_ip ELSE NULL::inet END AS client_ip FROM `+filter+`) order_ips(id, client_ip);`, "client_ip"),
		// Created through the proxy under rule: none (no filter join).
		"public.order_none": v(` SELECT o.id,
        `+proxyIP+`
   FROM public.orders o;`, "id", "client_ip"),
		// Created through the proxy under another lifetime of note.
		"public.order_old_rule": v(` SELECT o.id,
        CASE WHEN ((o.created_at IS NULL) OR (o.created_at >= (now() - '720:00:00'::interval))) THEN o.note ELSE NULL::character varying(200) END AS note
   FROM `+filter+`;`, "id", "note"),
	}
	return NewCatalog(d)
}

// TestColumnViewsRead: a view created through the proxy, whose definition
// reads the expiring columns as the proxy's reads do, is read as it is
// (and so is a view of it); a view created directly, or through the proxy
// under another rule, is expanded into its rewritten definition, which
// reads the value as V; views of views too.
func TestColumnViewsRead(t *testing.T) {
	rw := newColumnRewriter(t)
	s := NewState(Session{Catalog: colViewCatalog()})
	r := &columnRules()[len(columnRules())-1]
	ip := r.ExpiringColumn("client_ip").ValueExpr(r, `"o"`, "inet")
	note := r.ExpiringColumn("note").ValueExpr(r, `"o"`, "character varying(200)")
	from := join("public.orders o", `"o"`, 0)
	for _, c := range []rwCase{
		{"view without the column, created directly", `SELECT id FROM order_ids`,
			`SELECT id FROM (SELECT o.id FROM ` + from + `) AS "order_ids"("id")`},
		{"view created directly", `SELECT client_ip FROM order_ips WHERE id = 1`,
			`SELECT client_ip FROM (SELECT o.id, ` + ip + ` AS "client_ip" FROM ` + from + `) AS "order_ips"("id", "client_ip") WHERE id = 1`},
		{"view of a view created directly", `SELECT * FROM order_ips_2`,
			`SELECT * FROM (SELECT order_ips.client_ip FROM (SELECT o.id, ` + ip + ` AS "client_ip" FROM ` + from +
				`) AS "order_ips"("id", "client_ip")) AS "order_ips_2"("client_ip")`},
		{"view created through the proxy", `SELECT * FROM order_proxy`, `SELECT * FROM "public".order_proxy`},
		{"view of a view created through the proxy", `SELECT client_ip FROM public.order_proxy_2`, ``},
		{"view created through the proxy over an expanded one", `SELECT * FROM order_proxy_of_direct`, `SELECT * FROM "public".order_proxy_of_direct`},
		{"create view over a view created directly", `CREATE VIEW w AS SELECT client_ip FROM order_ips`,
			`CREATE VIEW w AS SELECT client_ip FROM (SELECT o.id, ` + ip + ` AS "client_ip" FROM ` + from + `) AS "order_ips"("id", "client_ip")`},
	} {
		if c.out == "" {
			checkRewrite(t, rw, s, c)
			continue
		}
		// Not rewritten again: the column check does not follow a
		// subquery's output columns (step 4), so the expanded text is
		// refused if sent again.
		res, err := rw.Rewrite(c.in, s)
		if err != nil || res.SQL != c.out {
			t.Errorf("%s:\n in:   %s\n got:  %s %v\n want: %s", c.name, c.in, res.SQL, err, c.out)
			continue
		}
		if _, err := pg.Parse(res.SQL); err != nil {
			t.Errorf("%s: output does not parse: %v", c.name, err)
		}
	}
	// Created through the proxy when note lived 30 days: its V is not
	// the rule's, so the value is read again under the rule's.
	res, err := rw.Rewrite(`SELECT note FROM order_old_rule`, s)
	if err != nil || !strings.Contains(res.SQL, `THEN `+note+` ELSE`) {
		t.Errorf("view over an older rule: %q, %v; want note read as %s inside", res.SQL, err, note)
	}
}

// TestColumnViewsNoRowRule: over a table with expiring columns only, a
// view that reads the values as V needs no filter join to be read as it
// is; one that reads them raw is expanded without a row filter.
func TestColumnViewsNoRowRule(t *testing.T) {
	rw := noneRewriter(t)
	s := NewState(Session{Catalog: colViewCatalog()})
	r := &columnRules()[len(columnRules())-1]
	ip := r.ExpiringColumn("client_ip").ValueExpr(r, `"o"`, "inet")
	checkRewrite(t, rw, s, rwCase{"view created through the proxy", `SELECT client_ip FROM order_none`, `SELECT client_ip FROM "public".order_none`})
	checkRewrite(t, rw, s, rwCase{"view without the column", `SELECT id FROM order_ids`, `SELECT id FROM "public".order_ids`})
	res, err := rw.Rewrite(`SELECT client_ip FROM order_ips`, s)
	if want := `SELECT client_ip FROM (SELECT o.id, ` + ip + ` AS "client_ip" FROM public.orders o) AS "order_ips"("id", "client_ip")`; err != nil || res.SQL != want {
		t.Errorf("view created directly: %q, %v; want %q", res.SQL, err, want)
	}
	// Under a row rule the same view lacks the filter: expanded.
	res, err = newColumnRewriter(t).Rewrite(`SELECT client_ip FROM order_none`, s)
	if err != nil || !strings.Contains(res.SQL, "_ttl_") {
		t.Errorf("under a row rule: %q, %v; want the view expanded with the row filter", res.SQL, err)
	}
}

// TestColumnViewsJoinsAndRows: a view created directly whose definition
// reads the column in a join or a whole row is expanded, the value read as
// V there, at any level of the statement that reads the view.
func TestColumnViewsJoinsAndRows(t *testing.T) {
	rw := newColumnRewriter(t)
	s := NewState(Session{Catalog: colViewCatalog()})
	r := &columnRules()[len(columnRules())-1]
	ip := r.ExpiringColumn("client_ip").ValueExpr(r, `"o"`, "inet")
	for _, q := range []string{
		`SELECT * FROM order_rows`,
		`SELECT client_ip FROM order_join`,
		`SELECT 1 FROM users u WHERE EXISTS (SELECT 1 FROM order_rows)`,
	} {
		res, err := rw.Rewrite(q, s)
		if err != nil || !strings.Contains(res.SQL, ip) || !strings.Contains(res.SQL, "_ttl_") {
			t.Errorf("%s: %q, %v; want the view expanded, client_ip read as %s and the row filter", q, res.SQL, err, ip)
			continue
		}
		if _, err := pg.Parse(res.SQL); err != nil {
			t.Errorf("%s: output does not parse: %v", q, err)
		}
	}
}

// TestColumnViewsRefused: what cannot be expanded is refused, naming the
// view: a definition that reads the column where no read can (a join
// USING it), a materialized view, writes and COPY through a view that is
// expanded for reads.
func TestColumnViewsRefused(t *testing.T) {
	rw := newColumnRewriter(t)
	s := NewState(Session{Catalog: colViewCatalog()})
	for _, c := range []rejCase{
		{"join using the column", `SELECT id FROM order_using`, "", []string{"view public.order_using"}},
		{"materialized", `SELECT * FROM order_mat`, "", []string{"view public.order_mat"}},
		{"update", `UPDATE order_ips SET id = 2`, "", []string{"view public.order_ips"}},
		{"update of a view of a view", `UPDATE order_ips_2 SET client_ip = NULL`, "", []string{"view public.order_ips_2"}},
		{"delete", `DELETE FROM order_ips WHERE id = 1`, "", []string{"view public.order_ips"}},
		{"insert", `INSERT INTO order_ips (id) VALUES (1)`, "", []string{"view public.order_ips"}},
		{"copy", `COPY order_ips TO STDOUT`, "", []string{"view public.order_ips"}},
		{"view in a subquery", `SELECT 1 FROM users u WHERE EXISTS (SELECT 1 FROM order_using)`, "", []string{"view public.order_using"}},
	} {
		c.code = sqlstate.FeatureNotSupported
		checkReject(t, rw, s, c)
	}
}

// TestColumnLeakyViews: which definitions read the values as the proxy's
// reads do.
func TestColumnLeakyViews(t *testing.T) {
	rw := newColumnRewriter(t)
	got := slices.Sorted(func(yield func(string) bool) {
		for k := range rw.ColumnLeakyViews(colViewCatalog()) {
			if !yield(k) {
				return
			}
		}
	})
	want := []string{"public.order_ips", "public.order_ips_2", "public.order_join", "public.order_mat", "public.order_old_rule", "public.order_rows", "public.order_using"}
	if !slices.Equal(got, want) {
		t.Errorf("ColumnLeakyViews = %v, want %v", got, want)
	}

	ipLive := `((o.client_ip_expires_at IS NULL) OR (o.client_ip_expires_at >= now()))`
	noteLive := `((o.created_at IS NULL) OR (o.created_at >= (now() - '8760:00:00'::interval)))`
	for _, c := range []struct {
		name, def string
		leaky     bool
	}{
		{"V", `SELECT CASE WHEN ` + ipLive + ` THEN o.client_ip ELSE NULL::inet END AS c FROM public.orders o`, false},
		{"V without ELSE", `SELECT CASE WHEN ` + ipLive + ` THEN o.client_ip END AS c FROM public.orders o`, false},
		{"V inside an expression", `SELECT host(CASE WHEN ` + ipLive + ` THEN o.client_ip ELSE NULL::inet END) AS c FROM public.orders o`, false},
		{"interval spelled in seconds", `SELECT CASE WHEN ((o.created_at IS NULL) OR (o.created_at >= (now() - interval '31536000 seconds'))) THEN o.note END AS c FROM public.orders o`, false},
		{"interval spelled in days", `SELECT CASE WHEN ((o.created_at IS NULL) OR (o.created_at >= (now() - '365 days'::interval))) THEN o.note END AS c FROM public.orders o`, true},
		{"guarded atom", `SELECT o.id FROM public.orders o WHERE (` + noteLive + ` AND ((o.note)::text = 'x'::text))`, false},
		{"guarded atom under upper()", `SELECT o.id FROM public.orders o WHERE (` + ipLive + ` AND (upper((o.client_ip)::text) = 'X'::text))`, false},
		{"is null or expired", `SELECT o.id FROM public.orders o WHERE ((o.client_ip IS NULL) OR (NOT ` + ipLive + `))`, false},
		{"bare column", `SELECT o.client_ip FROM public.orders o`, true},
		{"unguarded atom", `SELECT o.id FROM public.orders o WHERE (o.note)::text = 'x'::text`, true},
		{"guard of another column", `SELECT o.id FROM public.orders o WHERE (` + ipLive + ` AND ((o.note)::text = 'x'::text))`, true},
		{"guard of another qualifier", `SELECT o.id FROM public.orders o, public.orders p WHERE (` + ipLive + ` AND (p.client_ip = o.client_ip))`, true},
		{"aggregate under a guard", `SELECT o.id FROM public.orders o GROUP BY o.id HAVING (` + ipLive + ` AND (max(o.client_ip) > '10.0.0.1'::inet))`, true},
		{"subquery under a guard", `SELECT o.id FROM public.orders o WHERE (` + ipLive + ` AND (EXISTS (SELECT 1 WHERE o.client_ip IS NULL)))`, true},
		{"V of another column's condition", `SELECT CASE WHEN ` + noteLive + ` THEN o.client_ip END AS c FROM public.orders o`, true},
		{"V of another qualifier", `SELECT CASE WHEN ` + ipLive + ` THEN p.client_ip END AS c FROM public.orders o, public.orders p`, true},
		{"V with another ELSE", `SELECT CASE WHEN ` + ipLive + ` THEN o.client_ip ELSE o.client_ip END AS c FROM public.orders o`, true},
		{"V with another condition", `SELECT CASE WHEN (o.client_ip_expires_at >= now()) THEN o.client_ip END AS c FROM public.orders o`, true},
		{"whole row", `SELECT o.* AS o FROM public.orders o`, true},
		{"whole row by name", `SELECT to_json(o) AS j FROM public.orders o`, true},
		{"column alias list", `SELECT o.a FROM public.orders o(a, b, client_ip)`, true},
		{"using join", `SELECT client_ip FROM public.orders JOIN public.orders p USING (client_ip)`, true},
		{"no expiring column", `SELECT o.id, o.status FROM public.orders o`, false},
		{"does not parse", `SELECT FROM WHERE`, true},
	} {
		d := columnCatalog().Data()
		d.Views = map[string]View{"public.v": {Reads: []string{"public.orders"}, Definition: " " + c.def + ";", Columns: []string{"c"}}}
		_, leaky := rw.ColumnLeakyViews(NewCatalog(d))["public.v"]
		if leaky != c.leaky {
			t.Errorf("%s: leaky = %v, want %v\n%s", c.name, leaky, c.leaky, c.def)
		}
	}
}
