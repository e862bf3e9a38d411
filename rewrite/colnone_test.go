package rewrite

import (
	"testing"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// noneRewriter has orders as a table with expiring columns only (rule
// none): the same columns as columnRules, no row rule.
func noneRewriter(t *testing.T) *Rewriter {
	t.Helper()
	rules := columnRules()
	rules[len(rules)-1].Kind = ttl.KindNone
	rw, err := New(rules, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return rw
}

// TestColumnsOnlyTable: a table with no row rule gets no row filter, no
// live condition in a write's WHERE or ON CONFLICT, and no row stamp; its
// expiring columns are read as V and stamped as under a row rule; a
// statement that names none of them, or is refused for naming one where
// the row rule's tables are, is as under a row rule.
func TestColumnsOnlyTable(t *testing.T) {
	rw := noneRewriter(t)
	s := NewState(Session{Catalog: columnCatalog()})
	o := colText{`"orders"`}
	a := colText{`"o"`}
	orders := &columnRules()[len(columnRules())-1]
	ip := orders.ExpiringColumn("client_ip")
	e := ip.Expiry(orders)
	cstamp := e.ExpiryValue(ip.DefaultTTL)
	cases := []rwCase{
		{"select of other columns", `SELECT id, status FROM orders WHERE id = 1`, `SELECT id, status FROM "public".orders WHERE id = 1`},
		{"select of a value", `SELECT id, client_ip FROM orders o WHERE o.note = 'x'`,
			`SELECT id, ` + a.ipV() + ` AS "client_ip" FROM "public".orders o WHERE ` + a.noteLive() + ` AND o.note = 'x'`},
		{"star", `SELECT * FROM orders`, `SELECT ` + starCols(`"orders"`) + ` FROM "public".orders`},
		{"join", `SELECT u.id FROM users u JOIN orders o ON o.id = u.id`, `SELECT u.id FROM users u JOIN "public".orders o ON o.id = u.id`},
		{"update of other columns", `UPDATE orders SET status = 'x' WHERE id = 1`, `UPDATE "public".orders SET status = 'x' WHERE id = 1`},
		{"update of a value", `UPDATE orders SET client_ip = '10.0.0.1' WHERE id = 1`,
			`UPDATE "public".orders SET client_ip = '10.0.0.1', "client_ip_expires_at" = ` + cstamp + ` WHERE id = 1`},
		{"update reading a value", `UPDATE orders SET status = 'x' WHERE client_ip IS NULL RETURNING note`,
			`UPDATE "public".orders SET status = 'x' WHERE (client_ip IS NULL OR ` + o.ipExpired() + `) RETURNING ` + o.noteV() + ` AS "note"`},
		{"delete", `DELETE FROM orders WHERE id = 1`, `DELETE FROM "public".orders WHERE id = 1`},
		{"delete by a value", `DELETE FROM orders WHERE client_ip << '10.0.0.0/8'`,
			`DELETE FROM "public".orders WHERE ` + o.ipLive() + ` AND client_ip << '10.0.0.0/8'`},
		{"insert", `INSERT INTO orders (id, status) VALUES (1, 'new')`, `INSERT INTO "public".orders (id, status) VALUES (1, 'new')`},
		{"insert of a value", `INSERT INTO orders (id, client_ip) VALUES (1, '10.0.0.1')`,
			`INSERT INTO "public".orders (id, client_ip, "client_ip_expires_at") VALUES (1, '10.0.0.1', ` + cstamp + `)`},
		{"on conflict", `INSERT INTO orders (id, client_ip) VALUES (1, '10.0.0.1') ON CONFLICT (id) DO UPDATE SET client_ip = EXCLUDED.client_ip`,
			`INSERT INTO "public".orders (id, client_ip, "client_ip_expires_at") VALUES (1, '10.0.0.1', ` + cstamp +
				`) ON CONFLICT (id) DO UPDATE SET client_ip = EXCLUDED.client_ip, "client_ip_expires_at" = ` + cstamp},
		{"on conflict do nothing", `INSERT INTO orders (id) VALUES (1) ON CONFLICT DO NOTHING`, `INSERT INTO "public".orders (id) VALUES (1) ON CONFLICT DO NOTHING`},
		{"copy to", `COPY orders TO STDOUT`, `COPY (SELECT ` + starCols(`"orders"`) + ` FROM "public".orders) TO STDOUT`},
		{"copy of other columns", `COPY orders (id, status) TO STDOUT`, ``},
		{"copy from", `COPY orders (id, status) FROM STDIN`, `COPY "public".orders (id, status) FROM STDIN`},
		{"a partition", `SELECT id FROM orders_2026 WHERE status = 'x'`, `SELECT id FROM "public".orders_2026 WHERE status = 'x'`},
		{"a partition's value", `DELETE FROM orders_2026 WHERE client_ip IS NULL`,
			`DELETE FROM "public".orders_2026 WHERE (client_ip IS NULL OR ` + colText{`"orders_2026"`}.ipExpired() + `)`},
		// No row filter to miss, no value named: read as it is.
		{"a view over it without a value", `SELECT id FROM order_ids`, `SELECT id FROM "public".order_ids`},
		{"a row rule's table beside it", `SELECT s.id FROM sessions s JOIN orders o ON o.id = s.id`,
			`SELECT s.id FROM ` + join(`"public".sessions s`, `"s"`, 0) + ` JOIN "public".orders o ON o.id = s.id`},
	}
	for _, c := range cases {
		checkRewrite(t, rw, s, c)
	}
	for _, c := range []rejCase{
		{"a value in a function body", `CREATE FUNCTION f() RETURNS inet LANGUAGE sql AS 'SELECT client_ip FROM orders'`, "0A000", []string{"orders"}},
		{"star over a join merging columns", `SELECT * FROM orders o JOIN users u USING (id)`, "0A000", []string{"client_ip"}},
	} {
		checkReject(t, rw, s, c)
	}
}
