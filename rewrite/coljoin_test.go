package rewrite

import (
	"testing"

	"github.com/ttlproxy/ttlproxy/internal/sqlstate"
)

// TestExpiringColumnJoins: at a query level of several FROM items a
// qualified name reads the item it names and an unqualified one the one
// item whose columns hold it; predicates keep `live AND atom` in WHERE and
// JOIN ON (V in a FULL JOIN's ON); `*` is each item's columns in turn;
// nested levels resolve their own names first and an outer level's after,
// a derived table's or CTE's output as it is. Unqualified names beside an
// item of unknown columns, aliased joins and joins merging columns stay
// refused.
func TestExpiringColumnJoins(t *testing.T) {
	rw := newColumnRewriter(t)
	s := NewState(Session{Catalog: columnCatalog()})
	o, p := colText{`"o"`}, colText{`"p"`}
	O := colText{`"orders"`}
	jo, jp := join(`"public".orders o`, `"o"`, 0), join(`"public".orders p`, `"p"`, 1)
	cases := []rwCase{
		{"join targets and where", `SELECT o.id, p.note FROM orders o JOIN orders p ON p.id = o.id WHERE o.client_ip = '10.0.0.1'`,
			`SELECT o.id, ` + p.noteV() + ` AS "note" FROM ` + jo + ` JOIN ` + jp + ` ON p.id = o.id WHERE ` + o.ipLive() + ` AND o.client_ip = '10.0.0.1'`},
		{"left join on", `SELECT o.id FROM orders o LEFT JOIN orders p ON p.note = o.note`,
			`SELECT o.id FROM ` + jo + ` LEFT JOIN ` + jp + ` ON ` + p.noteLive() + ` AND ` + o.noteLive() + ` AND p.note = o.note`},
		{"full join on reads V", `SELECT o.id FROM orders o FULL JOIN orders p ON p.note = o.note`,
			`SELECT o.id FROM ` + jo + ` FULL JOIN ` + jp + ` ON ` + p.noteV() + ` = ` + o.noteV()},
		{"unqualified beside a known table", `SELECT client_ip FROM orders o, sessions s WHERE s.id = o.id`,
			`SELECT ` + o.ipV() + ` AS "client_ip" FROM ` + jo + `, ` + join(`"public".sessions s`, `"s"`, 1) + ` WHERE s.id = o.id`},
		{"star over a join", `SELECT * FROM orders o JOIN users u ON u.id = o.id`,
			`SELECT ` + starCols(`"o"`) + `, "u".* FROM ` + jo + ` JOIN users u ON u.id = o.id`},
		{"another item's column of the same name", `SELECT u.client_ip FROM orders o JOIN users u ON u.id = o.id`,
			`SELECT u.client_ip FROM ` + jo + ` JOIN users u ON u.id = o.id`},
		{"correlated", `SELECT id FROM orders o WHERE EXISTS (SELECT 1 FROM users u WHERE u.name = o.note)`,
			`SELECT id FROM ` + jo + ` WHERE EXISTS (SELECT 1 FROM users u WHERE ` + o.noteLive() + ` AND u.name = o.note)`},
		{"correlated value", `SELECT (SELECT o.client_ip FROM users u LIMIT 1) FROM orders o`,
			`SELECT (SELECT ` + o.ipV() + ` AS "client_ip" FROM users u LIMIT 1) FROM ` + jo},
		{"unqualified of an outer level", `SELECT id FROM orders WHERE id IN (SELECT 1 WHERE note = 'x')`,
			`SELECT id FROM ` + join(`"public".orders`, `"orders"`, 0) + ` WHERE id IN (SELECT 1 WHERE ` + O.noteLive() + ` AND note = 'x')`},
		{"derived table output", `SELECT s.note FROM (SELECT note FROM orders) s WHERE s.note = 'x'`,
			`SELECT s.note FROM (SELECT ` + O.noteV() + ` AS "note" FROM ` + join(`"public".orders`, `"orders"`, 0) + `) s WHERE s.note = 'x'`},
		{"cte output", `WITH w AS (SELECT note FROM orders) SELECT note FROM w`,
			`WITH w AS (SELECT ` + O.noteV() + ` AS "note" FROM ` + join(`"public".orders`, `"orders"`, 0) + `) SELECT note FROM w`},
		{"a cte named like the table", `WITH orders AS (SELECT 1 AS note) SELECT note FROM orders`, ``},
		{"lateral", `SELECT x.n FROM orders o, LATERAL (SELECT o.note AS n) x`,
			`SELECT x.n FROM ` + jo + `, LATERAL (SELECT ` + o.noteV() + ` AS n) x`},
		{"set operation order by an output name", `SELECT note FROM orders o UNION SELECT note FROM orders o ORDER BY note`,
			`SELECT ` + o.noteV() + ` AS "note" FROM ` + jo + ` UNION SELECT ` + o.noteV() + ` AS "note" FROM ` + join(`"public".orders o`, `"o"`, 1) + ` ORDER BY note`},
		{"update's subquery", `UPDATE orders SET status = 'x' WHERE EXISTS (SELECT 1 FROM users u WHERE u.name = orders.note)`,
			`UPDATE "public".orders SET status = 'x' WHERE (EXISTS (SELECT 1 FROM users u WHERE ` + O.noteLive() + ` AND u.name = orders.note)) AND ` + live(`"orders"`)},
	}
	for _, c := range cases {
		checkRewrite(t, rw, s, c)
		if c.out != "" {
			checkStable(t, rw, s, c)
		}
	}
	for _, c := range []rejCase{
		{"unqualified beside unknown columns", `SELECT note FROM orders o JOIN users u ON u.id = o.id`, "", []string{"note", "without a qualifier"}},
		{"unqualified in a level of unknown columns", `SELECT id FROM orders o WHERE EXISTS (SELECT 1 FROM users u WHERE u.name = note)`, "", []string{"note", "without a qualifier"}},
		{"ambiguous", `SELECT note FROM orders o, orders p`, "", []string{"note"}},
		{"a known table's column of the same name", `SELECT note FROM orders o, sessions s`, "", []string{"note"}},
		{"an aliased join", `SELECT j.note FROM (orders o JOIN users u ON true) AS j`, "", []string{"note"}},
		{"star over an aliased join", `SELECT * FROM (orders o JOIN users u ON true) AS j`, "", []string{"client_ip"}},
		{"star over a join merging columns", `SELECT * FROM orders o JOIN users u USING (id)`, "", []string{"client_ip"}},
		{"using an expiring column", `SELECT o.id FROM orders o JOIN orders p USING (note)`, "", []string{"note", "USING"}},
		{"natural join", `SELECT o.id FROM orders o NATURAL JOIN users`, "", []string{"NATURAL JOIN"}},
		{"a correlated reference to a grouped level", `SELECT (SELECT o.note) FROM orders o GROUP BY o.note`, "", []string{"note"}},
		{"set operation order by another name beside unknown output names", `SELECT (SELECT 1), id FROM orders UNION SELECT 1, id FROM orders ORDER BY note`, "", []string{"note"}},
	} {
		c.code = sqlstate.FeatureNotSupported
		checkReject(t, rw, s, c)
	}
}

// TestExpiringColumnJoinedWrites: UPDATE … FROM, DELETE … USING and MERGE
// read the expiring columns of the written table and of the other items
// as one query level: WHERE, ON and WHEN conditions as filters, SET and
// action values and RETURNING as values; writing an expiring column there
// stays refused.
func TestExpiringColumnJoinedWrites(t *testing.T) {
	rw := newColumnRewriter(t)
	s := NewState(Session{Catalog: columnCatalog()})
	o, O := colText{`"o"`}, colText{`"orders"`}
	cases := []rwCase{
		{"update from", `UPDATE users u SET name = o.note FROM orders o WHERE o.id = u.id AND o.client_ip IS NULL`,
			`UPDATE users u SET name = ` + o.noteV() + ` FROM ` + join(`"public".orders o`, `"o"`, 0) + ` WHERE o.id = u.id AND (o.client_ip IS NULL OR ` + o.ipExpired() + `)`},
		{"update from returning", `UPDATE orders SET status = 'x' FROM users u WHERE u.id = orders.id RETURNING orders.note, u.name`,
			`UPDATE "public".orders SET status = 'x' FROM users u WHERE (u.id = orders.id) AND ` + live(`"orders"`) + ` RETURNING ` + O.noteV() + ` AS "note", u.name`},
		{"delete using", `DELETE FROM orders USING users u WHERE u.id = orders.id AND orders.note = u.name RETURNING orders.client_ip`,
			`DELETE FROM "public".orders USING users u WHERE (u.id = orders.id AND ` + O.noteLive() + ` AND orders.note = u.name) AND ` + live(`"orders"`) +
				` RETURNING ` + O.ipV() + ` AS "client_ip"`},
		{"merge reads", `MERGE INTO users u USING orders o ON o.id = u.id AND o.note = u.name WHEN MATCHED AND o.client_ip IS NULL THEN UPDATE SET name = o.note WHEN NOT MATCHED THEN INSERT (id, name) VALUES (o.id, o.note)`,
			`MERGE INTO users u USING ` + join(`"public".orders o`, `"o"`, 0) + ` ON o.id = u.id AND ` + o.noteLive() + ` AND o.note = u.name WHEN MATCHED AND (o.client_ip IS NULL OR ` +
				o.ipExpired() + `) THEN UPDATE SET name = ` + o.noteV() + ` WHEN NOT MATCHED THEN INSERT (id, name) VALUES (o.id, ` + o.noteV() + `)`},
	}
	for _, c := range cases {
		checkRewrite(t, rw, s, c)
		checkStable(t, rw, s, c)
	}
	for _, c := range []rejCase{
		{"update from writing the column", `UPDATE orders SET note = u.name FROM users u WHERE u.id = orders.id`, "", []string{"note", "FROM"}},
		{"merge writing the column", `MERGE INTO orders o USING users u ON o.id = u.id WHEN MATCHED THEN UPDATE SET note = u.name`, "", []string{"note", "MERGE"}},
		{"merge unqualified beside unknown columns", `MERGE INTO users u USING orders o ON o.id = u.id WHEN MATCHED THEN UPDATE SET name = note`, "", []string{"note"}},
	} {
		c.code = sqlstate.FeatureNotSupported
		checkReject(t, rw, s, c)
	}
}

// TestExpiringColumnNaturalJoin: a NATURAL join whose common columns are
// known and none expiring is read as any join (its `*` stays refused: the
// merged columns come first); one that may merge an expiring column, or
// whose columns are not all known, is refused.
func TestExpiringColumnNaturalJoin(t *testing.T) {
	rw := newColumnRewriter(t)
	s := NewState(Session{Catalog: columnCatalog()})
	o := colText{`"o"`}
	checkRewrite(t, rw, s, rwCase{"no expiring column in common", `SELECT o.client_ip FROM orders o NATURAL JOIN (SELECT 1 AS id) x`,
		`SELECT ` + o.ipV() + ` AS "client_ip" FROM ` + join(`"public".orders o`, `"o"`, 0) + ` NATURAL JOIN (SELECT 1 AS id) x`})
	for _, c := range []rejCase{
		{"an expiring column in common", `SELECT o.id FROM orders o NATURAL JOIN (SELECT 1 AS note) x`, "", []string{"NATURAL JOIN"}},
		{"the table twice", `SELECT o.id FROM orders o NATURAL JOIN orders p`, "", []string{"NATURAL JOIN"}},
		{"unknown columns", `SELECT o.id FROM orders o NATURAL JOIN users u`, "", []string{"NATURAL JOIN"}},
		{"star", `SELECT * FROM orders o NATURAL JOIN (SELECT 1 AS id) x`, "", []string{"client_ip"}},
	} {
		c.code = sqlstate.FeatureNotSupported
		checkReject(t, rw, s, c)
	}
}
