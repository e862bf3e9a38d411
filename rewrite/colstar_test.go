package rewrite

import (
	"testing"
	"time"

	"github.com/ttlproxy/ttlproxy/internal/sqlstate"
	"github.com/ttlproxy/ttlproxy/ttl"
)

// TestExpiringColumnStarOutputs: a derived table or CTE built with `*`,
// `t.*` or `TABLE t` over FROM items whose columns are known has known
// columns in turn, at any depth and under a column alias list, so that an
// unqualified name over it resolves (to it: its values were read at its
// own level). Over an item of unknown columns, or a join merging columns,
// it stays unknown and the name refused.
func TestExpiringColumnStarOutputs(t *testing.T) {
	rw := newColumnRewriter(t)
	s := NewState(Session{Catalog: columnCatalog()})
	sel := func(q string) string {
		return `SELECT ` + starCols(q) + ` FROM ` + join(`"public".orders`, q, 0)
	}
	cases := []rwCase{
		{"derived table", `SELECT note, id FROM (SELECT * FROM orders WHERE id > 1) s`,
			`SELECT note, id FROM (` + sel(`"orders"`) + ` WHERE id > 1) s`},
		{"cte", `WITH t AS (SELECT * FROM orders) SELECT client_ip, count(*) FROM t GROUP BY client_ip`,
			`WITH t AS (` + sel(`"orders"`) + `) SELECT client_ip, count(*) FROM t GROUP BY client_ip`},
		{"qualified star", `SELECT note FROM (SELECT o.* FROM orders o) s WHERE note IS NULL`,
			`SELECT note FROM (SELECT ` + starCols(`"o"`) + ` FROM ` + join(`"public".orders o`, `"o"`, 0) + `) s WHERE note IS NULL`},
		{"TABLE under a column alias list", `SELECT a, client_ip FROM (TABLE orders) AS s (a, b)`,
			`SELECT a, client_ip FROM (` + sel(`"orders"`) + `) AS s (a, b)`},
		{"depth", `SELECT note FROM (SELECT * FROM (SELECT * FROM orders) a) b`,
			`SELECT note FROM (SELECT * FROM (` + sel(`"orders"`) + `) a) b`},
		{"cte over a cte", `WITH a AS (SELECT * FROM orders), b AS (SELECT * FROM a) SELECT note FROM b`,
			`WITH a AS (` + sel(`"orders"`) + `), b AS (SELECT * FROM a) SELECT note FROM b`},
		{"star beside a column", `SELECT note, x FROM (SELECT *, 1 AS x FROM orders) s`,
			`SELECT note, x FROM (` + sel(`"orders"`)[:len(`SELECT `+starCols(`"orders"`))] + `, 1 AS x FROM ` + join(`"public".orders`, `"orders"`, 0) + `) s`},
	}
	for _, c := range cases {
		checkRewrite(t, rw, s, c)
		checkStable(t, rw, s, c)
	}
	for _, c := range []rejCase{
		{"over a table of unknown columns", `SELECT note FROM (SELECT * FROM users) s, orders`, "", []string{"note"}},
		{"over a join merging columns", `SELECT note FROM (SELECT * FROM orders JOIN users USING (id)) s`, "", []string{"public.orders"}},
		{"two of the name", `SELECT client_ip FROM (SELECT * FROM orders) s, orders o`, "", []string{"client_ip"}},
	} {
		c.code = sqlstate.FeatureNotSupported
		checkReject(t, rw, s, c)
	}
}

// TestExpiringColumnClosedScope: a name at a level where no FROM item it
// can reach reads a table with expiring columns is another relation's
// column (or none) even beside relations of unknown columns; a level
// nested in one that reads such a table, or one whose enclosing scopes the
// check does not model (a subquery in a write's RETURNING or SET), is not.
func TestExpiringColumnClosedScope(t *testing.T) {
	rw := newColumnRewriter(t)
	s := NewState(Session{Catalog: columnCatalog()})
	from := join(`"public".orders`, `"orders"`, 0)
	for _, c := range []rwCase{
		{"union arm over another table", `SELECT note FROM orders UNION ALL SELECT note FROM users`,
			`SELECT ` + colText{`"orders"`}.noteV() + ` AS "note" FROM ` + from + ` UNION ALL SELECT note FROM users`},
		{"beside a derived table", `SELECT * FROM users JOIN (SELECT note FROM orders LIMIT 1) ss ON id = note`,
			`SELECT * FROM users JOIN (SELECT ` + colText{`"orders"`}.noteV() + ` AS "note" FROM ` + from + ` LIMIT 1) ss ON id = note`},
		{"returning of a plain table's write", `UPDATE users SET name = 'x' WHERE note > '' RETURNING note, (SELECT max(id) FROM orders) AS m`,
			`UPDATE users SET name = 'x' WHERE note > '' RETURNING note, (SELECT max(id) FROM ` + from + `) AS m`},
		{"joined write over a derived table", `UPDATE users SET name = note FROM (SELECT * FROM orders WHERE note = name) ss`,
			`UPDATE users SET name = note FROM (SELECT ` + starCols(`"orders"`) + ` FROM ` + from + ` WHERE ` + colText{`"orders"`}.noteLive() + ` AND note = name) ss`},
		// PostgreSQL refuses ORDER BY of a name that is no output column
		// of a set operation: it reads nothing.
		{"set operation order by another name", `SELECT id FROM orders UNION SELECT id FROM orders ORDER BY note`,
			`SELECT id FROM ` + from + ` UNION SELECT id FROM ` + join(`"public".orders`, `"orders"`, 1) + ` ORDER BY note`},
		{"values of an outer level", `SELECT (WITH c(v) AS (VALUES (note)) SELECT (SELECT v FROM c)) FROM orders`,
			`SELECT (WITH c(v) AS (VALUES (` + colText{`"orders"`}.noteV() + `)) SELECT (SELECT v FROM c)) FROM ` + from},
		{"a function's arguments in FROM", `SELECT g FROM orders o, generate_series(1, length(o.note)) g`,
			`SELECT g FROM ` + join(`"public".orders o`, `"o"`, 0) + `, generate_series(1, length(` + colText{`"o"`}.noteV() + `)) g`},
		{"a function's unqualified argument", `SELECT g FROM orders, generate_series(1, length(note)) g`,
			`SELECT g FROM ` + from + `, generate_series(1, length(` + colText{`"orders"`}.noteV() + `)) g`},
		{"a qualifier of no item in reach", `SELECT g FROM generate_series(1, 2) a, (SELECT a.note AS g) ss WHERE EXISTS (SELECT FROM orders)`,
			`SELECT g FROM generate_series(1, 2) a, (SELECT a.note AS g) ss WHERE EXISTS (SELECT FROM ` + from + `)`},
		{"a subquery of no FROM item in FROM", `SELECT g FROM generate_series(1, 2) a, (SELECT note AS g) ss WHERE EXISTS (SELECT FROM orders)`,
			`SELECT g FROM generate_series(1, 2) a, (SELECT note AS g) ss WHERE EXISTS (SELECT FROM ` + from + `)`},
	} {
		checkRewrite(t, rw, s, c)
	}
	for _, c := range []rejCase{
		{"correlated beside a function", `SELECT (SELECT client_ip FROM generate_series(1, 2) g LIMIT 1) FROM orders`, "", []string{"client_ip"}},
		{"in a write's RETURNING", `UPDATE orders SET status = 'x' RETURNING (SELECT client_ip FROM generate_series(1, 2) g LIMIT 1) AS c`, "", []string{"client_ip"}},
		{"in a DO UPDATE SET", `INSERT INTO orders (id) VALUES (1) ON CONFLICT (id) DO UPDATE SET status = (SELECT client_ip FROM generate_series(1, 2) g LIMIT 1)`, "", []string{"client_ip"}},
		{"in a DELETE's WHERE", `DELETE FROM orders WHERE EXISTS (SELECT FROM generate_series(1, 2) g WHERE note = 'x')`, "", []string{"note"}},
		{"a plain table's write reading the table", `UPDATE users SET name = (SELECT note FROM generate_series(1, 2) g, orders LIMIT 1)`, "", []string{"note"}},
		{"functional notation as a FROM item", `SELECT x FROM orders o, note(o) AS x`, "", []string{"note", "functional notation"}},
		{"functional notation as a lateral FROM item", `SELECT x FROM orders o, LATERAL note(o) x`, "", []string{"note", "functional notation"}},
		{"in an INSERT's source", `INSERT INTO users (name) SELECT note FROM generate_series(1, 2) g, orders`, "", []string{"note"}},
	} {
		c.code = sqlstate.FeatureNotSupported
		checkReject(t, rw, s, c)
	}
}

// TestExpiringColumnXMLNames: xmlforest and xmlattributes name an element
// after a column reference without AS; the value's expression keeps the
// column's name with AS.
func TestExpiringColumnXMLNames(t *testing.T) {
	rw := newColumnRewriter(t)
	s := NewState(Session{Catalog: columnCatalog()})
	o := colText{`"orders"`}
	from := join(`"public".orders`, `"orders"`, 0)
	for _, c := range []rwCase{
		{"xmlforest", `SELECT xmlforest(id, note, client_ip AS ip) FROM orders`,
			`SELECT xmlforest(id, ` + o.noteV() + ` AS "note", ` + o.ipV() + ` AS ip) FROM ` + from},
		{"xmlattributes", `SELECT xmlelement(name o, xmlattributes(note), client_ip) FROM orders`,
			`SELECT xmlelement(name o, xmlattributes(` + o.noteV() + ` AS "note"), ` + o.ipV() + `) FROM ` + from},
	} {
		checkRewrite(t, rw, s, c)
		checkStable(t, rw, s, c)
	}
}

// TestExpiringColumnSampleNone: TABLESAMPLE of a table with no row rule
// (rule: none) is served: the sample is the table's, its expiring
// columns read as anywhere else.
func TestExpiringColumnSampleNone(t *testing.T) {
	rules := []ttl.Rule{{Table: "customers", Kind: ttl.KindNone, Columns: []ttl.ColumnRule{{Column: "phone", ExpiresAtColumn: "phone_exp", DefaultTTL: time.Hour}}}}
	rw, err := New(rules, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := NewState(Session{Catalog: NewCatalog(CatalogData{
		Tables:  map[string]*TableInfo{"public.customers": {Columns: []Column{{Name: "id", Type: "integer"}, {Name: "phone", Type: "text"}, {Name: "phone_exp", Type: "timestamp with time zone"}}}},
		Schemas: map[string][]string{"customers": {"public"}},
	})})
	v := rules[0].Columns[0].ValueExpr(&rules[0], `"customers"`, "text")
	for _, st := range []*State{nil, s} {
		checkRewrite(t, rw, st, rwCase{"no expiring column", `SELECT id FROM customers TABLESAMPLE SYSTEM (100)`, `SELECT id FROM "public".customers TABLESAMPLE SYSTEM (100)`})
	}
	checkRewrite(t, rw, s, rwCase{"the expiring column", `SELECT id, phone FROM customers TABLESAMPLE BERNOULLI ((SELECT 50)) REPEATABLE (1)`,
		`SELECT id, ` + v + ` AS "phone" FROM "public".customers TABLESAMPLE BERNOULLI ((SELECT 50)) REPEATABLE (1)`})
}

// TestExpiringColumnStarOverView: `*` over a view created directly that
// reads an expiring column, in a derived table or CTE whose names are then
// served unqualified, reads the view's expansion with the value's
// expression: never the stored value.
func TestExpiringColumnStarOverView(t *testing.T) {
	rw := newColumnRewriter(t)
	d := columnCatalog().d
	d.Views["public.order_notes"] = View{Reads: []string{"public.orders"}, Definition: ` SELECT orders.id, orders.note FROM orders;`, Columns: []string{"id", "note"}}
	d.Schemas["order_notes"] = []string{"public"}
	s := NewState(Session{Catalog: NewCatalog(d)})
	view := `(SELECT orders.id, ` + colText{`"orders"`}.noteV() + ` AS "note" FROM ` + join(`"public".orders`, `"orders"`, 0) + `) AS "order_notes"("id", "note")`
	for _, c := range []rwCase{
		{"derived table", `SELECT note FROM (SELECT * FROM order_notes) s`, `SELECT note FROM (SELECT * FROM ` + view + `) s`},
		{"cte beside a function", `WITH w AS (SELECT * FROM order_notes) SELECT note FROM w, generate_series(1, 2) g`,
			`WITH w AS (SELECT * FROM ` + view + `) SELECT note FROM w, generate_series(1, 2) g`},
	} {
		checkRewrite(t, rw, s, c)
	}
}
