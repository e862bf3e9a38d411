package rewrite

import (
	"strings"
	"testing"
	"time"

	"github.com/ttlproxy/ttlproxy/internal/sqlstate"
	"github.com/ttlproxy/ttlproxy/ttl"
)

// columnRules are testRules plus orders, a row TTL table with two expiring
// columns: client_ip with an expiry column of its own, note derived from
// created_at.
func columnRules() []ttl.Rule {
	rules := append([]ttl.Rule(nil), testRules...)
	return append(rules, ttl.Rule{Table: "orders", Columns: []ttl.ColumnRule{
		{Column: "client_ip", ExpiresAtColumn: "client_ip_expires_at", DefaultTTL: 30 * 24 * time.Hour},
		{Column: "note", BaseColumn: "created_at", ExpireAfter: 365 * 24 * time.Hour},
	}})
}

func newColumnRewriter(t *testing.T) *Rewriter {
	t.Helper()
	rw, err := New(columnRules(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	return rw
}

// columnCatalog knows orders, a partition of it, views over it (one
// through another) and a view of sessions only.
func columnCatalog() *Catalog {
	d := sessionsCatalogData()
	d.Tables["public.orders"] = &TableInfo{Columns: []Column{
		{Name: "id", Type: "integer"}, {Name: "status", Type: "text"}, {Name: "client_ip", Type: "inet"},
		{Name: "client_ip_expires_at", Type: "timestamp with time zone"}, {Name: "note", Type: "character varying(200)"},
		{Name: "created_at", Type: "timestamp with time zone"}, {Name: "expires_at", Type: "timestamp with time zone"},
	}}
	d.Schemas["orders"] = []string{"public"}
	d.Schemas["orders_2026"] = []string{"public"}
	d.Children = map[string]string{"public.orders_2026": "public.orders"}
	d.Views = map[string]View{
		"public.order_ids":   {Reads: []string{"public.orders"}, Definition: ` SELECT orders.id FROM orders;`, Columns: []string{"id"}},
		"public.order_ids_2": {Reads: []string{"public.order_ids"}, Definition: ` SELECT order_ids.id FROM order_ids;`, Columns: []string{"id"}},
		// Created through the proxy: filtered rows, no column filter.
		"public.order_filtered": {Reads: []string{"public.orders"}, Definition: ` SELECT o.id
   FROM (orders o
     JOIN ( SELECT) _ttl_0 ON (((o.expires_at IS NULL) OR (o.expires_at >= now()))));`, Columns: []string{"id"}},
		"public.session_owners": {Reads: []string{"public.sessions"}, Definition: ` SELECT sessions.owner FROM sessions;`, Columns: []string{"owner"}},
	}
	return NewCatalog(d)
}

// TestExpiringColumnsRefused: every way a statement can name an expiring
// column is refused with 0A000, naming the table and the column, whether
// or not the session knows the catalog.
func TestExpiringColumnsRefused(t *testing.T) {
	rw := newColumnRewriter(t)
	ip := []string{"public.orders", "client_ip"}
	note := []string{"public.orders", `note`}
	cases := []rejCase{
		// Reads: the column by name, in every clause.
		{"target list", `SELECT client_ip FROM orders`, "", ip},
		{"qualified", `SELECT o.client_ip FROM orders o`, "", ip},
		{"schema qualified", `SELECT public.orders.client_ip FROM public.orders`, "", ip},
		{"quoted", `SELECT "client_ip" FROM orders`, "", ip},
		{"upper case folds", `SELECT CLIENT_IP FROM ORDERS`, "", ip},
		{"in an expression", `SELECT host(client_ip)::text AS h FROM orders`, "", ip},
		{"where", `SELECT id FROM orders WHERE client_ip = '10.0.0.1'`, "", ip},
		{"where with a parameter", `SELECT id FROM orders WHERE note = $1`, "", note},
		{"is null", `SELECT id FROM orders WHERE note IS NULL`, "", note},
		{"join on", `SELECT o.id FROM orders o JOIN users u ON u.ip = o.client_ip`, "", ip},
		{"group by", `SELECT count(*) FROM orders GROUP BY note`, "", note},
		{"having", `SELECT status FROM orders GROUP BY status HAVING max(note) > ''`, "", note},
		{"order by", `SELECT id FROM orders ORDER BY note`, "", note},
		{"aggregate", `SELECT count(DISTINCT client_ip) FROM orders`, "", ip},
		{"window", `SELECT id, row_number() OVER (PARTITION BY client_ip) FROM orders`, "", ip},
		{"subquery", `SELECT name FROM users u WHERE EXISTS (SELECT 1 FROM orders o WHERE o.client_ip = u.ip)`, "", ip},
		{"cte", `WITH x AS (SELECT note FROM orders) SELECT * FROM x`, "", note},
		{"functional notation", `SELECT client_ip(o) FROM orders o`, "", ip},
		{"second statement of a text", `SELECT 1; SELECT note FROM orders`, "", note},
		{"partition", `SELECT client_ip FROM orders_2026`, "", []string{"public.orders_2026", "client_ip"}},

		// `*`, `t.*` and whole-row references carry every column.
		{"star", `SELECT * FROM orders`, "", ip},
		{"star with where", `SELECT * FROM orders WHERE id = 1`, "", ip},
		{"TABLE", `TABLE orders`, "", ip},
		{"star over a join", `SELECT * FROM users u JOIN orders o ON o.user_id = u.id`, "", ip},
		{"star in a cte", `WITH x AS (SELECT * FROM orders) SELECT id FROM x`, "", ip},
		{"star in a subquery", `SELECT s.id FROM (SELECT * FROM orders) s`, "", ip},
		{"qualified star", `SELECT o.* FROM orders o`, "", []string{"public.orders", `"o".*`}},
		{"table star", `SELECT orders.* FROM orders`, "", ip},
		{"join alias star", `SELECT j.* FROM (orders JOIN users u ON true) AS j`, "", ip},
		{"whole row", `SELECT orders FROM orders`, "", []string{"public.orders", "whole-row"}},
		{"whole row in a function", `SELECT row_to_json(o) FROM orders o`, "", ip},
		{"whole row field", `SELECT (o).id FROM orders o`, "", ip},
		{"whole row test", `SELECT id FROM orders WHERE orders IS NOT NULL`, "", ip},
		{"row of star", `SELECT ROW(o.*) FROM orders o`, "", ip},
		{"column alias list", `SELECT x FROM orders AS o(x, y)`, "", []string{"public.orders", "column alias list"}},
		{"natural join", `SELECT id FROM orders NATURAL JOIN users`, "", []string{"public.orders", "NATURAL JOIN"}},
		{"join using", `SELECT id FROM orders JOIN users USING (client_ip)`, "", ip},

		// RETURNING.
		{"returning column", `UPDATE orders SET status = 'x' WHERE id = 1 RETURNING client_ip`, "", ip},
		{"returning star of delete", `DELETE FROM orders WHERE id = 1 RETURNING *`, "", ip},
		{"returning star of insert", `INSERT INTO orders (id) VALUES (1) RETURNING *`, "", ip},
		{"returning star of update from", `UPDATE users u SET name = 'x' FROM orders o WHERE o.user_id = u.id RETURNING *`, "", ip},

		// Writes.
		{"update set with from", `UPDATE orders SET client_ip = u.ip FROM users u WHERE u.id = orders.id`, "", ip},
		{"insert without column list", `INSERT INTO orders VALUES (1, 'new')`, "", []string{"public.orders", "INSERT without a column list"}},
		{"insert select without column list", `INSERT INTO orders SELECT * FROM staging`, "", ip},
		{"on conflict set from another table", `INSERT INTO orders (id) VALUES (1) ON CONFLICT (id) DO UPDATE SET status = (SELECT u.ip FROM users u WHERE u.id = orders.client_ip)`, "", ip},
		{"on conflict inference", `INSERT INTO orders (id) VALUES (1) ON CONFLICT (client_ip) DO NOTHING`, "", ip},
		{"merge update", `MERGE INTO orders o USING staging s ON o.id = s.id WHEN MATCHED THEN UPDATE SET note = s.note`, "", note},
		{"merge insert without column list", `MERGE INTO orders o USING staging s ON o.id = s.id WHEN NOT MATCHED THEN INSERT VALUES (s.id)`, "", ip},

		// COPY.
		{"copy to", `COPY orders TO STDOUT`, "", []string{"public.orders", "client_ip", "COPY"}},
		{"copy to with the column", `COPY orders (id, client_ip) TO STDOUT`, "", ip},
		{"copy from", `COPY orders FROM STDIN`, "", ip},
		{"copy from with the column", `COPY orders (id, note) FROM STDIN`, "", note},
		{"copy query", `COPY (SELECT client_ip FROM orders) TO STDOUT`, "", ip},

		// Statements that hold a query.
		{"prepare", `PREPARE p AS SELECT client_ip FROM orders WHERE id = $1`, "", ip},
		{"explain analyze", `EXPLAIN ANALYZE SELECT * FROM orders`, "", ip},
		{"declare cursor", `DECLARE c CURSOR FOR SELECT note FROM orders`, "", note},
		{"create view", `CREATE VIEW v AS SELECT * FROM orders`, "", ip},
		{"create table as", `CREATE TABLE t2 AS SELECT client_ip FROM orders`, "", ip},
	}
	// Predicates of a SELECT of the table are read without the catalog
	// (TestExpiringColumnPredicates); with it, values too
	// (TestExpiringColumnsRead).
	predicates := map[string]bool{"where": true, "where with a parameter": true, "is null": true, "subquery": true}
	// Writes are stamped (TestExpiringColumnWrites); without a column
	// list, with the catalog's.
	predicates["insert without column list"] = true
	// Joins and correlated references resolve their scope (coljoin_test.go).
	predicates["join on"] = true
	predicates["on conflict set from another table"] = true
	values := map[string]bool{"target list": true, "qualified": true, "schema qualified": true, "TABLE": true, "quoted": true, "upper case folds": true, "cte": true,
		"second statement of a text": true, "copy query": true, "prepare": true, "declare cursor": true, "create table as": true,
		"in an expression": true, "having": true, "aggregate": true, "window": true,
		"star": true, "star with where": true, "star in a cte": true, "star in a subquery": true, "qualified star": true,
		"table star": true, "explain analyze": true, "star over a join": true,
		"functional notation": true, "whole row": true, "whole row in a function": true, "whole row field": true,
		"whole row test": true, "row of star": true, "column alias list": true, "returning star of update from": true, "create view": true,
		"group by": true, "order by": true, "returning column": true, "copy to": true, "copy to with the column": true, "returning star of delete": true, "returning star of insert": true}
	for _, s := range []*State{nil, NewState(Session{Catalog: columnCatalog()})} {
		for _, c := range cases {
			if (c.name == "partition" && s == nil) || predicates[c.name] || (values[c.name] && s != nil) {
				continue // only the catalog knows the partition
			}
			c.code = sqlstate.FeatureNotSupported
			checkReject(t, rw, s, c)
		}
	}
}

// TestExpiringColumnsRead: with the catalog's column types, a bare
// reference to an expiring column in the target list of a SELECT of the
// table reads the value's expression, named as the column and typed with
// its modifier; every other reference in the same statements is still
// refused.
func TestExpiringColumnsRead(t *testing.T) {
	rw := newColumnRewriter(t)
	s := NewState(Session{Catalog: columnCatalog()})
	r := &columnRules()[len(columnRules())-1]
	ip := func(q string) string { return r.ExpiringColumn("client_ip").ValueExpr(r, q, "inet") }
	note := func(q string) string { return r.ExpiringColumn("note").ValueExpr(r, q, "character varying(200)") }
	O := `"orders"`
	if want := `CASE WHEN ("o"."client_ip_expires_at" IS NULL OR "o"."client_ip_expires_at" OPERATOR(pg_catalog.>=) pg_catalog.now()) THEN "o"."client_ip" ELSE NULL::inet END`; ip(`"o"`) != want {
		t.Fatalf("value expression %s, want %s", ip(`"o"`), want)
	}
	for _, c := range []rwCase{
		{"bare", `SELECT client_ip FROM orders`,
			`SELECT ` + ip(O) + ` AS "client_ip" FROM ` + join(`"public".orders`, O, 0)},
		{"with other columns", `SELECT id, client_ip, status, note FROM orders WHERE id = $1`,
			`SELECT id, ` + ip(O) + ` AS "client_ip", status, ` + note(O) + ` AS "note" FROM ` + join(`"public".orders`, O, 0) + ` WHERE id = $1`},
		{"alias qualified", `SELECT o.client_ip FROM orders AS o`,
			`SELECT ` + ip(`"o"`) + ` AS "client_ip" FROM ` + join(`"public".orders AS o`, `"o"`, 0)},
		{"schema qualified table", `SELECT orders.note FROM public.orders`,
			`SELECT ` + note(O) + ` AS "note" FROM ` + join("public.orders", O, 0)},
		{"schema qualified column", `SELECT public.orders.client_ip FROM public.orders`,
			`SELECT ` + ip(O) + ` AS "client_ip" FROM ` + join("public.orders", O, 0)},
		{"own name kept", `SELECT client_ip AS ip, note n FROM orders`,
			`SELECT ` + ip(O) + ` AS ip, ` + note(O) + ` n FROM ` + join(`"public".orders`, O, 0)},
		{"quoted and upper case", `SELECT "client_ip", NOTE FROM ORDERS`,
			`SELECT ` + ip(O) + ` AS "client_ip", ` + note(O) + ` AS "note" FROM ` + join(`"public".ORDERS`, O, 0)},
		{"positional order by", `SELECT note FROM orders ORDER BY 1 LIMIT 10`,
			`SELECT ` + note(O) + ` AS "note" FROM ` + join(`"public".orders`, O, 0) + ` ORDER BY 1 LIMIT 10`},
		{"subquery of its own", `SELECT s.id FROM (SELECT id, note FROM orders) s`,
			`SELECT s.id FROM (SELECT id, ` + note(O) + ` AS "note" FROM ` + join(`"public".orders`, O, 0) + `) s`},
		{"union arm", `SELECT client_ip FROM orders UNION ALL SELECT ip FROM users`,
			`SELECT ` + ip(O) + ` AS "client_ip" FROM ` + join(`"public".orders`, O, 0) + ` UNION ALL SELECT ip FROM users`},
		{"cast", `SELECT client_ip::text FROM orders`,
			`SELECT ` + ip(O) + `::text AS "client_ip" FROM ` + join(`"public".orders`, O, 0)},
		{"in an expression", `SELECT host(client_ip) FROM orders`,
			`SELECT host(` + ip(O) + `) FROM ` + join(`"public".orders`, O, 0)},
		{"and in where", `SELECT client_ip FROM orders WHERE client_ip IS NOT NULL`,
			`SELECT ` + ip(O) + ` AS "client_ip" FROM ` + join(`"public".orders`, O, 0) + ` WHERE (client_ip IS NOT NULL AND ` +
				colText{O}.ipLive() + `)`},
		{"a value expression of another column is a value of its own",
			strings.Replace(`SELECT `+ip(O)+` FROM orders`, `THEN "orders"."client_ip"`, `THEN "orders"."note"`, 1),
			strings.Replace(`SELECT `+ip(O)+` FROM `+join(`"public".orders`, O, 0), `THEN "orders"."client_ip"`, `THEN `+note(O), 1)},
	} {
		checkRewrite(t, rw, s, c)
	}
	for _, c := range []rejCase{
		{"unqualified beside a table of unknown columns", `SELECT client_ip FROM orders o, users u`, "", []string{"client_ip", "qualifier"}},
		{"through an aliased join", `SELECT j.client_ip FROM (orders o JOIN users u ON u.id = o.id) AS j`, "", []string{"client_ip"}},
		{"partition without column types", `SELECT client_ip FROM orders_2026`, "", []string{"public.orders_2026"}},
	} {
		c.code = sqlstate.FeatureNotSupported
		checkReject(t, rw, s, c)
	}
}

// TestExpiringColumnsViews: a view over the table that does not name an
// expiring column is read as a view of a table without them (expanded when
// created directly, as it is when it holds the filter); a view of another
// TTL table is not affected. colviews_test.go tests views that name one.
func TestExpiringColumnsViews(t *testing.T) {
	rw := newColumnRewriter(t)
	s := NewState(Session{Catalog: columnCatalog()})
	ids := `(SELECT orders.id FROM ` + join(`"public".orders`, `"orders"`, 0) + `) AS "order_ids"("id")`
	for _, c := range []rwCase{
		{"view created through the proxy", `SELECT * FROM order_filtered`, `SELECT * FROM "public".order_filtered`},
		{"view in a subquery", `SELECT 1 WHERE EXISTS (SELECT 1 FROM order_ids)`, `SELECT 1 WHERE EXISTS (SELECT 1 FROM ` + ids + `)`},
		{"view of a view", `SELECT id FROM order_ids_2`, `SELECT id FROM (SELECT order_ids.id FROM ` + ids + `) AS "order_ids_2"("id")`},
		{"view of sessions only is expanded as before", `SELECT owner FROM session_owners`,
			`SELECT owner FROM (SELECT sessions.owner FROM ` + join(`"public".sessions`, `"sessions"`, 0) + `) AS "session_owners"("owner")`},
		{"the view a statement creates is not read", `CREATE OR REPLACE VIEW order_ids AS SELECT id FROM orders`,
			`CREATE OR REPLACE VIEW order_ids AS SELECT id FROM ` + join(`"public".orders`, `"orders"`, 0)},
	} {
		checkRewrite(t, rw, s, c)
	}
}

// TestExpiringColumnsPass: statements that do not name an expiring column
// are rewritten as before: the row filter on reads, UPDATE and DELETE.
func TestExpiringColumnsPass(t *testing.T) {
	rw := newColumnRewriter(t)
	O := `"orders"`
	cases := []rwCase{
		{"other columns", `SELECT id FROM orders`,
			`SELECT id FROM ` + join(`"public".orders`, O, 0)},
		{"qualified other columns", `SELECT o.id, o.status FROM orders o WHERE o.id = $1`,
			`SELECT o.id, o.status FROM ` + join(`"public".orders o`, `"o"`, 0) + ` WHERE o.id = $1`},
		{"expiry columns are not expiring", `SELECT client_ip_expires_at, created_at FROM orders`,
			`SELECT client_ip_expires_at, created_at FROM ` + join(`"public".orders`, O, 0)},
		{"count star", `SELECT count(*) FROM orders`,
			`SELECT count(*) FROM ` + join(`"public".orders`, O, 0)},
		{"star of another table", `SELECT u.* FROM users u JOIN orders o ON o.user_id = u.id`,
			`SELECT u.* FROM users u JOIN ` + join(`"public".orders o`, `"o"`, 0) + ` ON o.user_id = u.id`},
		{"star over a level without the table", `SELECT * FROM users WHERE id IN (SELECT user_id FROM orders)`,
			`SELECT * FROM users WHERE id IN (SELECT user_id FROM ` + join(`"public".orders`, O, 0) + `)`},
		{"insert of other columns", `INSERT INTO orders (id, status) VALUES (1, 'new')`, `INSERT INTO "public".orders (id, status) VALUES (1, 'new')`},
		{"insert default values", `INSERT INTO orders DEFAULT VALUES`, `INSERT INTO "public".orders DEFAULT VALUES`},
		{"update of other columns", `UPDATE orders SET status = 'x' WHERE id = 1`,
			`UPDATE "public".orders SET status = 'x' WHERE (id = 1) AND ` + live(O)},
		{"delete returning other columns", `DELETE FROM orders WHERE id = 1 RETURNING id`,
			`DELETE FROM "public".orders WHERE (id = 1) AND ` + live(O) + ` RETURNING id`},
		{"copy of other columns", `COPY orders (id, status) TO STDOUT`,
			`COPY (SELECT id, status FROM "public".orders WHERE ` + live(O) + `) TO STDOUT`},
		{"copy from other columns", `COPY orders (id) FROM STDIN`, `COPY "public".orders (id) FROM STDIN`},
		{"the name on another table", `SELECT client_ip FROM users`, ``},
		{"ddl names the column", `CREATE INDEX ON orders (client_ip)`, ``},
		{"ddl expression", `ALTER TABLE orders ADD CHECK (note <> '')`, ``},
	}
	for _, s := range []*State{nil, NewState(Session{Catalog: columnCatalog()})} {
		for _, c := range cases {
			checkRewrite(t, rw, s, c)
		}
	}
}

// TestExpiringColumnsShapes: the refusal does not depend on literals, so a
// shape hit answers a second statement of the same shape the same way.
func TestExpiringColumnsShapes(t *testing.T) {
	rw := newColumnRewriter(t)
	for _, lit := range []string{"'10.0.0.1'", "'10.0.0.2'", "'10.0.0.3'"} {
		checkReject(t, rw, nil, rejCase{"refused shape " + lit, `SELECT id FROM orders WHERE id = 1 ORDER BY client_ip = ` + lit,
			sqlstate.FeatureNotSupported, []string{"public.orders", "client_ip"}})
		checkRewrite(t, rw, nil, rwCase{"passing shape " + lit, `SELECT id FROM orders WHERE status = ` + lit,
			`SELECT id FROM ` + join(`"public".orders`, `"orders"`, 0) + ` WHERE status = ` + lit})
	}
	// The read of a value is a shape template too.
	s := NewState(Session{Catalog: columnCatalog()})
	r := &columnRules()[len(columnRules())-1]
	ip := r.ExpiringColumn("client_ip").ValueExpr(r, `"orders"`, "inet")
	before := rw.Stats()
	for _, lit := range []string{"'new'", "'paid'", "'gone'"} {
		checkRewrite(t, rw, s, rwCase{"read shape " + lit, `SELECT client_ip FROM orders WHERE status = ` + lit,
			`SELECT ` + ip + ` AS "client_ip" FROM ` + join(`"public".orders`, `"orders"`, 0) + ` WHERE status = ` + lit})
	}
	after := rw.Stats()
	if after.ShapeHits <= before.ShapeHits || after.ShapeMismatches != 0 {
		t.Errorf("shape hits %d → %d, mismatches %d: want hits and no mismatch", before.ShapeHits, after.ShapeHits, after.ShapeMismatches)
	}
}
