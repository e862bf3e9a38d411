package rewrite

import (
	"strings"
	"testing"

	"github.com/ttlproxy/ttlproxy/internal/sqlstate"
)

// rowOf is the whole row of orders under qualifier q, each expiring
// column as V.
func rowOf(q string) string {
	c := colText{q}
	return `ROW(` + q + `."id", ` + q + `."status", ` + c.ipV() + `, ` + q + `."client_ip_expires_at", ` +
		c.noteV() + `, ` + q + `."created_at", ` + q + `."expires_at")`
}

// wholeOf is the whole-row value of orders under qualifier q: NULL for a
// NULL-extended row, else its row with each expiring column as V.
func wholeOf(q string) string {
	return `CASE WHEN ` + q + `.* IS NOT DISTINCT FROM NULL THEN NULL ELSE ` + rowOf(q) + `::"public"."orders" END`
}

// TestExpiringColumnWholeRows: a whole-row reference and `t.*` as a value
// become the row of the catalog's columns cast to the table's row type
// (NULL for a NULL-extended row), named as before; a NULL test of the row
// itself (`IS [NOT] DISTINCT FROM NULL`) is left as it is; `t.*` inside ROW(…) is the columns; functional
// notation is the column; a column alias list renames by position. A
// whole-row name beside a FROM item of unknown columns, and an alias list
// without the catalog's columns, stay refused.
func TestExpiringColumnWholeRows(t *testing.T) {
	rw := newColumnRewriter(t)
	s := NewState(Session{Catalog: columnCatalog()})
	o := colText{`"o"`}
	jo := join(`"public".orders o`, `"o"`, 0)
	cases := []rwCase{
		{"function argument", `SELECT row_to_json(o) FROM orders o`, `SELECT row_to_json(` + wholeOf(`"o"`) + `) FROM ` + jo},
		{"target keeps its name", `SELECT o FROM orders o`, `SELECT ` + wholeOf(`"o"`) + ` AS "o" FROM ` + jo},
		{"star as a value keeps its name", `SELECT o.*::text FROM orders o`, `SELECT ` + wholeOf(`"o"`) + `::text AS "o" FROM ` + jo},
		{"field", `SELECT (o).note AS n FROM orders o`, `SELECT (` + wholeOf(`"o"`) + `).note AS n FROM ` + jo},
		{"row of star", `SELECT ROW(o.*, 1) FROM orders o`, `SELECT ` + rowOf(`"o"`)[:len(rowOf(`"o"`))-1] + `, 1) FROM ` + jo},
		{"functional notation", `SELECT note(o), client_ip(o)::text FROM orders o`,
			`SELECT ` + o.noteV() + ` AS "note", ` + o.ipV() + `::text AS "client_ip" FROM ` + jo},
		// A field of the row, which holds V.
		{"functional notation of another column", `SELECT id(o) FROM orders o`, `SELECT id(` + wholeOf(`"o"`) + `) FROM ` + jo},
		{"alias list", `SELECT x.a, c FROM orders AS x(a, b, c) WHERE c IS NULL`,
			`SELECT x.a, CASE WHEN ` + colText{`"x"`}.ipLive() + ` THEN "x"."c" ELSE NULL::inet END AS "c" FROM ` +
				`("public".orders AS x(a, b, c) JOIN (SELECT) AS _ttl_0 ON ` + live(`"x"`) + `) WHERE (c IS NULL OR ` + colText{`"x"`}.ipExpired() + `)`},
		{"alias list renaming the expiry", `SELECT d FROM orders AS x(a, b, c, d) WHERE c = '10.0.0.1'`,
			`SELECT d FROM ("public".orders AS x(a, b, c, d) JOIN (SELECT) AS _ttl_0 ON ` + live(`"x"`) + `) WHERE ("x"."d" IS NULL OR "x"."d" OPERATOR(pg_catalog.>=) pg_catalog.now()) AND c = '10.0.0.1'`},
		{"null test of the row", `SELECT o.id FROM orders o WHERE o IS DISTINCT FROM NULL AND NULL IS NOT DISTINCT FROM o.*`,
			`SELECT o.id FROM ` + jo + ` WHERE o IS DISTINCT FROM NULL AND NULL IS NOT DISTINCT FROM o.*`},
		{"star over a join beside unknown columns", `SELECT row_to_json(o.*) FROM orders o JOIN users u ON u.id = o.id`,
			`SELECT row_to_json(` + wholeOf(`"o"`) + `) FROM ` + jo + ` JOIN users u ON u.id = o.id`},
	}
	for _, c := range cases {
		checkRewrite(t, rw, s, c)
		if !strings.Contains(c.in, "AS x(") {
			// V under an alias list is read again (design §9 step 4).
			checkStable(t, rw, s, c)
		}
	}
	for _, c := range []rejCase{
		{"beside unknown columns", `SELECT row_to_json(o) FROM orders o JOIN users u ON u.id = o.id`, "", []string{"whole-row"}},
		{"functional notation beside unknown columns", `SELECT note(o) FROM orders o JOIN users u ON u.id = o.id`, "", []string{"note"}},
		{"alias list longer than the columns", `SELECT a FROM orders AS x(a, b, c, d, e, f, g, h)`, "", []string{"column alias list"}},
		{"a subquery reading a grouped level's row", `SELECT (SELECT o) FROM orders o GROUP BY o.id`, "", []string{"whole-row"}},
	} {
		c.code = sqlstate.FeatureNotSupported
		checkReject(t, rw, s, c)
	}
	checkReject(t, rw, nil, rejCase{"alias list without the catalog", `SELECT a FROM orders AS x(a, b)`, sqlstate.FeatureNotSupported,
		[]string{"column alias list"}})
	checkReject(t, rw, nil, rejCase{"whole row without the catalog", `SELECT row_to_json(o) FROM orders o`, sqlstate.FeatureNotSupported,
		[]string{"whole-row"}})
}
