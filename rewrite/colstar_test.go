package rewrite

import (
	"testing"

	"github.com/ttlproxy/ttlproxy/internal/sqlstate"
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
		{"over a join merging columns", `SELECT note FROM (SELECT * FROM orders JOIN users USING (id)) s`, "", []string{"note"}},
		{"two of the name", `SELECT client_ip FROM (SELECT * FROM orders) s, orders o`, "", []string{"client_ip"}},
	} {
		c.code = sqlstate.FeatureNotSupported
		checkReject(t, rw, s, c)
	}
}
