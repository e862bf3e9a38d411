package rewrite

import (
	"testing"

	"github.com/ttlproxy/ttlproxy/internal/sqlstate"
)

// starCols is what `*` over orders (qualified q) expands to.
func starCols(q string) string {
	c := colText{q}
	return q + `."id", ` + q + `."status", ` + c.ipV() + ` AS "client_ip", ` + q + `."client_ip_expires_at", ` +
		c.noteV() + ` AS "note", ` + q + `."created_at", ` + q + `."expires_at"`
}

// TestExpiringColumnStar: `*` and `t.*` in the target list of a SELECT of
// the table alone expand to the catalog's columns, the expiring ones read
// V under their own name; without the catalog they stay refused; the
// output rewritten again is kept; shapes share the expansion.
func TestExpiringColumnStar(t *testing.T) {
	rw := newColumnRewriter(t)
	s := NewState(Session{Catalog: columnCatalog()})
	o := colText{`"orders"`}
	from := `FROM ` + join("orders", `"orders"`, 0)
	fromO := `FROM ` + join("orders o", `"o"`, 0)
	cases := []rwCase{
		{"star", `SELECT * FROM orders`, `SELECT ` + starCols(`"orders"`) + ` ` + from},
		{"qualified star and more", `SELECT o.*, o.id AS k FROM orders o WHERE o.id = 1`,
			`SELECT ` + starCols(`"o"`) + `, o.id AS k ` + fromO + ` WHERE o.id = 1`},
		{"star with a predicate", `SELECT * FROM orders WHERE note = 'x'`,
			`SELECT ` + starCols(`"orders"`) + ` ` + from + ` WHERE ` + o.noteLive() + ` AND note = 'x'`},
		{"star in a subquery", `SELECT count(*) FROM (SELECT * FROM orders) s`,
			`SELECT count(*) FROM (SELECT ` + starCols(`"orders"`) + ` ` + from + `) s`},
		{"star beside a column", `SELECT client_ip, * FROM orders`,
			`SELECT ` + o.ipV() + ` AS "client_ip", ` + starCols(`"orders"`) + ` ` + from},
		{"exists", `SELECT 1 WHERE EXISTS (SELECT * FROM orders WHERE id = 2)`,
			`SELECT 1 WHERE EXISTS (SELECT ` + starCols(`"orders"`) + ` ` + from + ` WHERE id = 2)`},
	}
	for _, c := range cases {
		checkRewrite(t, rw, s, c)
		checkStable(t, rw, s, c)
	}
	for _, c := range []rejCase{
		{"without the catalog", `SELECT * FROM orders`, "", []string{"client_ip"}},
		{"qualified without the catalog", `SELECT o.* FROM orders o`, "", []string{"client_ip"}},
	} {
		c.code = sqlstate.FeatureNotSupported
		checkReject(t, rw, nil, c)
	}
	for _, c := range []rejCase{
		{"a join", `SELECT * FROM orders o JOIN users u ON u.id = o.id`, "", []string{"client_ip"}},
		{"star as a value", `SELECT row_to_json(o.*) FROM orders o`, "", []string{"client_ip"}},
		{"TABLE", `TABLE orders`, "", []string{"client_ip"}},
		{"schema-qualified star", `SELECT public.orders.* FROM public.orders`, "", []string{"client_ip"}},
	} {
		c.code = sqlstate.FeatureNotSupported
		checkReject(t, rw, s, c)
	}
	before := rw.Stats()
	for _, lit := range []string{"1", "22", "333", "4444"} {
		checkRewrite(t, rw, s, rwCase{"shape " + lit, `SELECT * FROM orders WHERE id = ` + lit,
			`SELECT ` + starCols(`"orders"`) + ` ` + from + ` WHERE id = ` + lit})
	}
	if after := rw.Stats(); after.ShapeHits < before.ShapeHits+2 || after.ShapeMismatches != 0 {
		t.Errorf("shape hits %d → %d, mismatches %d: want hits and no mismatch", before.ShapeHits, after.ShapeHits, after.ShapeMismatches)
	}
}
