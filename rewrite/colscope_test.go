package rewrite

import (
	"testing"

	pg "github.com/pganalyze/pg_query_go/v6"

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
	from := `FROM ` + join(`"public".orders`, `"orders"`, 0)
	fromO := `FROM ` + join(`"public".orders o`, `"o"`, 0)
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
		{"TABLE", `TABLE orders`, `SELECT ` + starCols(`"orders"`) + ` ` + from},
		{"TABLE ONLY in a subquery", `SELECT count(*) FROM (TABLE ONLY orders) s`,
			`SELECT count(*) FROM (SELECT ` + starCols(`"orders"`) + ` FROM ` + join(`ONLY "public".orders`, `"orders"`, 0) + `) s`},
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
		{"a join merging columns", `SELECT * FROM orders o JOIN users u USING (id)`, "", []string{"client_ip"}},
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

// TestExpiringColumnReturning: RETURNING of an INSERT into the table, and
// of an UPDATE or DELETE of it without other FROM items, reads V over the
// row written (the one deleted), `*` expanded; with other FROM items it
// stays refused.
func TestExpiringColumnReturning(t *testing.T) {
	rw := newColumnRewriter(t)
	s := NewState(Session{Catalog: columnCatalog()})
	o := colText{`"orders"`}
	a := colText{`"o"`}
	r := &columnRules()[len(columnRules())-1]
	ip := r.ExpiringColumn("client_ip")
	e := ip.Expiry(r)
	cstamp := e.ExpiryValue(ip.DefaultTTL)
	where := `WHERE (id = 1) AND ` + live(`"orders"`)
	cases := []rwCase{
		{"update", `UPDATE orders SET status = 'x' WHERE id = 1 RETURNING client_ip, note AS n`,
			`UPDATE "public".orders SET status = 'x' ` + where + ` RETURNING ` + o.ipV() + ` AS "client_ip", ` + o.noteV() + ` AS n`},
		{"update of the value, star", `UPDATE orders SET client_ip = '10.0.0.9' WHERE id = 1 RETURNING *`,
			`UPDATE "public".orders SET client_ip = '10.0.0.9', "client_ip_expires_at" = ` + cstamp + ` ` + where + ` RETURNING ` + starCols(`"orders"`)},
		{"delete", `DELETE FROM orders WHERE id = 1 RETURNING id, note::text`,
			`DELETE FROM "public".orders ` + where + ` RETURNING id, ` + o.noteV() + `::text AS "note"`},
		{"insert", `INSERT INTO orders AS o (id, client_ip) VALUES (1, '10.0.0.1') RETURNING o.*`,
			`INSERT INTO "public".orders AS o (id, client_ip, "client_ip_expires_at") VALUES (1, '10.0.0.1', ` + cstamp + `) RETURNING ` + starCols(`"o"`)},
		{"insert, do update", `INSERT INTO orders (id) VALUES (1) ON CONFLICT (id) DO UPDATE SET status = 'y' RETURNING note`,
			`INSERT INTO "public".orders (id) VALUES (1) ON CONFLICT (id) DO UPDATE SET status = 'y' WHERE ` + live(`"orders"`) + ` RETURNING ` + o.noteV() + ` AS "note"`},
		{"in a cte", `WITH d AS (DELETE FROM orders o RETURNING o.client_ip) SELECT * FROM d`,
			`WITH d AS (DELETE FROM "public".orders o WHERE ` + live(`"o"`) + ` RETURNING ` + a.ipV() + ` AS "client_ip") SELECT * FROM d`},
	}
	for _, c := range cases {
		checkRewrite(t, rw, s, c)
		checkStable(t, rw, s, c)
	}
	for _, c := range []rejCase{
		{"update from writing the column", `UPDATE orders SET note = 'x' FROM users u WHERE u.id = orders.id RETURNING orders.note`, "", []string{"note"}},
		{"delete using, unqualified beside unknown columns", `DELETE FROM orders USING users u WHERE u.id = orders.id RETURNING note`, "", []string{"note"}},
	} {
		c.code = sqlstate.FeatureNotSupported
		checkReject(t, rw, s, c)
	}
	before := rw.Stats()
	for _, lit := range []string{"1", "22", "333", "4444"} {
		checkRewrite(t, rw, s, rwCase{"shape " + lit, `DELETE FROM orders WHERE id = ` + lit + ` RETURNING note`,
			`DELETE FROM "public".orders WHERE (id = ` + lit + `) AND ` + live(`"orders"`) + ` RETURNING ` + o.noteV() + ` AS "note"`})
	}
	if after := rw.Stats(); after.ShapeHits < before.ShapeHits+2 || after.ShapeMismatches != 0 {
		t.Errorf("shape hits %d → %d, mismatches %d: want hits and no mismatch", before.ShapeHits, after.ShapeHits, after.ShapeMismatches)
	}
}

// TestExpiringColumnOrderGroup: ORDER BY, GROUP BY, DISTINCT ON, WINDOW
// and aggregate arguments read V; a bare ORDER BY or DISTINCT ON name of
// an output column is that column; after GROUP BY every reference reads
// V (predicates too), the same expression as the GROUP BY item.
func TestExpiringColumnOrderGroup(t *testing.T) {
	rw := newColumnRewriter(t)
	s := NewState(Session{Catalog: columnCatalog()})
	o := colText{`"orders"`}
	a := colText{`"o"`}
	from := `FROM ` + join(`"public".orders`, `"orders"`, 0)
	fromO := `FROM ` + join(`"public".orders o`, `"o"`, 0)
	cases := []rwCase{
		{"order by", `SELECT id FROM orders WHERE note = 'x' ORDER BY note DESC, client_ip || 'x' NULLS FIRST`,
			`SELECT id ` + from + ` WHERE ` + o.noteLive() + ` AND note = 'x' ORDER BY ` + o.noteV() + ` DESC, ` + o.ipV() + ` || 'x' NULLS FIRST`},
		{"order by an output column", `SELECT note, id AS client_ip FROM orders ORDER BY note, client_ip`,
			`SELECT ` + o.noteV() + ` AS "note", id AS client_ip ` + from + ` ORDER BY note, client_ip`},
		{"order by the star's output", `SELECT * FROM orders o ORDER BY note, o.client_ip`,
			`SELECT ` + starCols(`"o"`) + ` ` + fromO + ` ORDER BY note, ` + a.ipV()},
		{"order by an aggregate", `SELECT status FROM orders GROUP BY status ORDER BY max(note)`,
			`SELECT status ` + from + ` GROUP BY status ORDER BY max(` + o.noteV() + `)`},
		{"group by", `SELECT note, count(*) FROM orders WHERE client_ip = '10.0.0.1' GROUP BY note HAVING note IS NOT NULL ORDER BY 1`,
			`SELECT ` + o.noteV() + ` AS "note", count(*) ` + from + ` WHERE ` + o.ipLive() + ` AND client_ip = '10.0.0.1' GROUP BY ` + o.noteV() +
				` HAVING ` + o.noteV() + ` IS NOT NULL ORDER BY 1`},
		{"predicates after group by", `SELECT o.client_ip = '10.0.0.1' AS b, CASE WHEN client_ip IS NULL THEN 0 END AS k FROM orders o GROUP BY o.client_ip, rollup (note)`,
			`SELECT ` + a.ipV() + ` = '10.0.0.1' AS b, CASE WHEN ` + a.ipV() + ` IS NULL THEN 0 END AS k ` + fromO + ` GROUP BY ` + a.ipV() + `, rollup (` + a.noteV() + `)`},
		{"aggregate arguments", `SELECT count(DISTINCT client_ip), string_agg(note::text, ',' ORDER BY note) FROM orders`,
			`SELECT count(DISTINCT ` + o.ipV() + `), string_agg(` + o.noteV() + `::text, ',' ORDER BY ` + o.noteV() + `) ` + from},
		{"distinct on", `SELECT DISTINCT ON (note, client_ip::text) id FROM orders ORDER BY note, client_ip::text, id`,
			`SELECT DISTINCT ON (` + o.noteV() + `, ` + o.ipV() + `::text) id ` + from + ` ORDER BY ` + o.noteV() + `, ` + o.ipV() + `::text, id`},
		{"distinct on an output column", `SELECT DISTINCT ON (note) note, id FROM orders`,
			`SELECT DISTINCT ON (note) ` + o.noteV() + ` AS "note", id ` + from},
		{"named after a field, not the column", `SELECT (note).f[1] FROM orders ORDER BY f`,
			`SELECT (` + o.noteV() + `).f[1] ` + from + ` ORDER BY f`},
		{"window", `SELECT id, rank() OVER w FROM orders WINDOW w AS (PARTITION BY client_ip ORDER BY note)`,
			`SELECT id, rank() OVER w ` + from + ` WINDOW w AS (PARTITION BY ` + o.ipV() + ` ORDER BY ` + o.noteV() + `)`},
	}
	for _, c := range cases {
		checkRewrite(t, rw, s, c)
		checkStable(t, rw, s, c)
	}
	for _, c := range []rejCase{
		{"an output name the proxy cannot figure", `SELECT (SELECT 1) , id FROM orders ORDER BY note`, "", []string{"note"}},
		{"order by of a set operation beside unknown output names", `SELECT (SELECT 1), id FROM orders UNION SELECT 1, id FROM orders ORDER BY note`, "", []string{"note"}},
	} {
		c.code = sqlstate.FeatureNotSupported
		checkReject(t, rw, s, c)
	}
	// Without the catalog, V cannot be written.
	checkReject(t, rw, nil, rejCase{"without the catalog", `SELECT id FROM orders ORDER BY note`, sqlstate.FeatureNotSupported, []string{"note"}})
	before := rw.Stats()
	for _, lit := range []string{"'a'", "'bb'", "'ccc'", "'dddd'"} {
		checkRewrite(t, rw, s, rwCase{"shape " + lit, `SELECT note, count(*) FROM orders WHERE status = ` + lit + ` GROUP BY note ORDER BY note`,
			`SELECT ` + o.noteV() + ` AS "note", count(*) ` + from + ` WHERE status = ` + lit + ` GROUP BY ` + o.noteV() + ` ORDER BY note`})
	}
	if after := rw.Stats(); after.ShapeHits < before.ShapeHits+2 || after.ShapeMismatches != 0 {
		t.Errorf("shape hits %d → %d, mismatches %d: want hits and no mismatch", before.ShapeHits, after.ShapeHits, after.ShapeMismatches)
	}
}

// TestExpiringColumnCopy: COPY t TO and COPY t (cols) TO of the table
// become a query of its live rows whose expiring columns read V under
// their names, from the catalog; COPY (query) TO has its query read as
// any; COPY FROM naming the column, and COPY TO without the catalog, stay
// refused.
func TestExpiringColumnCopy(t *testing.T) {
	rw := newColumnRewriter(t)
	s := NewState(Session{Catalog: columnCatalog()})
	o := colText{`"orders"`}
	from := `FROM ` + join(`"public".orders`, `"orders"`, 0)
	where := ` WHERE ` + live(`"orders"`)
	cases := []rwCase{
		{"copy to", `COPY orders TO STDOUT`, `COPY (SELECT ` + starCols(`"orders"`) + ` FROM "public".orders` + where + `) TO STDOUT`},
		{"copy of columns", `COPY public.orders (id, note) TO STDOUT WITH (FORMAT csv, HEADER)`,
			`COPY (SELECT "orders"."id", ` + o.noteV() + ` AS "note" FROM public.orders` + where + `) TO STDOUT WITH (FORMAT csv, HEADER)`},
		{"copy of other columns", `COPY orders (id, status) TO STDOUT`,
			`COPY (SELECT id, status FROM "public".orders` + where + `) TO STDOUT`},
		{"copy of a query", `COPY (SELECT * FROM orders WHERE note = 'x' ORDER BY client_ip) TO STDOUT`,
			`COPY (SELECT ` + starCols(`"orders"`) + ` ` + from + ` WHERE ` + o.noteLive() + ` AND note = 'x' ORDER BY client_ip) TO STDOUT`},
	}
	for _, c := range cases {
		checkRewrite(t, rw, s, c)
		checkStable(t, rw, s, c)
	}
	// Without the catalog, a list without the column is read as it is.
	checkRewrite(t, rw, nil, cases[2])
	for _, c := range []rejCase{
		{"copy from", `COPY orders (id, note) FROM STDIN`, "", []string{"note"}},
		{"copy from without a list", `COPY orders FROM STDIN`, "", []string{"client_ip"}},
	} {
		c.code = sqlstate.FeatureNotSupported
		checkReject(t, rw, s, c)
	}
	for _, c := range []rejCase{
		{"copy to without the catalog", `COPY orders TO STDOUT`, "", []string{"client_ip"}},
		{"copy of the column without the catalog", `COPY orders (id, note) TO STDOUT`, "", []string{"note"}},
	} {
		c.code = sqlstate.FeatureNotSupported
		checkReject(t, rw, nil, c)
	}
	// COPY is cached by its exact text (literalBlind): each text,
	// rewritten twice, keeps its own literal.
	for i := 0; i < 2; i++ {
		for _, lit := range []string{"'a'", "'bb'", "'ccc'"} {
			checkRewrite(t, rw, s, rwCase{"literal " + lit, `COPY (SELECT note FROM orders WHERE status = ` + lit + `) TO STDOUT`,
				`COPY (SELECT ` + o.noteV() + ` AS "note" ` + from + ` WHERE status = ` + lit + `) TO STDOUT`})
		}
	}
	if m := rw.Stats().ShapeMismatches; m != 0 {
		t.Errorf("shape mismatches %d, want 0", m)
	}
}

// TestFigureName: the output names PostgreSQL gives target entries
// without AS, as ORDER BY resolves them; a scalar subquery's and a
// keyword's are unknown.
func TestFigureName(t *testing.T) {
	for _, c := range []struct {
		expr, name string
		known      bool
	}{
		{`o.note`, "note", true},
		{`note::text`, "note", true},
		{`1::text`, "text", true},
		{`CASE WHEN true THEN 1 END::text`, "text", true},
		{`CASE WHEN true THEN 1 ELSE note END`, "note", true},
		{`CASE WHEN true THEN 1 END`, "case", true},
		{`(o).note[1]`, "note", true},
		{`upper(note)`, "upper", true},
		{`nullif(note, 'x')`, "nullif", true},
		{`coalesce(note, 'x')`, "coalesce", true},
		{`note || 'x'`, "?column?", true},
		{`$1`, "?column?", true},
		{`EXISTS (SELECT 1)`, "exists", true},
		{`note IN (SELECT 1)`, "?column?", true},
		{`(SELECT note FROM t)`, "", false},
		{`CASE WHEN true THEN 1 ELSE (SELECT note FROM t) END`, "", false},
		{`current_date`, "", false},
	} {
		tree, err := pg.Parse(`SELECT ` + c.expr)
		if err != nil {
			t.Fatalf("%s: %v", c.expr, err)
		}
		val := tree.Stmts[0].Stmt.GetSelectStmt().TargetList[0].GetResTarget().Val
		name, known := figureName(val)
		if known != c.known || (known && name != c.name) {
			t.Errorf("%s: %q, %v; want %q, %v", c.expr, name, known, c.name, c.known)
		}
	}
}
