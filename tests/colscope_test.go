package tests

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// scopeCase is a statement through the proxy and the reference read
// directly from ref, a copy of the table's live rows with the expired
// values NULL: the two give the same rows, and the statement gives the
// RowDescription (names, type OIDs and modifiers) it gives run directly.
type scopeCase struct {
	q, ref string
}

// TestExpiringColumnScope: through the proxy, `*`, RETURNING, ORDER BY,
// GROUP BY, DISTINCT ON and COPY TO of a table with expiring columns read
// an expired value as NULL and a live one as it is, with the names and
// types of a direct read; statements of one shape with other literals
// share the rewrite; forms still outside the rewrite are refused. Both
// query protocols.
func TestExpiringColumnScope(t *testing.T) {
	s := scopeStack(t)
	ctx := context.Background()
	direct := s.connect(s.direct)

	cases := []scopeCase{
		{`SELECT * FROM orders ORDER BY id`, `SELECT * FROM ref ORDER BY id`},
		{`SELECT o.*, o.id + 1 FROM orders o WHERE o.id < 4 ORDER BY id`, `SELECT o.*, o.id + 1 FROM ref o WHERE o.id < 4 ORDER BY id`},
		{`SELECT id FROM orders WHERE EXISTS (SELECT * FROM orders WHERE client_ip = '10.0.0.2') ORDER BY 1`,
			`SELECT id FROM ref WHERE EXISTS (SELECT * FROM ref WHERE client_ip = '10.0.0.2') ORDER BY 1`},
		// RETURNING: the row written, the one deleted.
		{`UPDATE orders SET id = id WHERE id IN (1, 2, 3, 4, 5) RETURNING *`, `SELECT * FROM ref WHERE id IN (1, 2, 3, 4, 5)`},
		{`DELETE FROM orders o WHERE id < 6 RETURNING id, o.client_ip, note AS n, note::text`, `SELECT id, client_ip, note AS n, note::text FROM ref WHERE id < 6`},
		{`UPDATE orders SET client_ip = '10.9.9.9' WHERE id = 2 RETURNING client_ip`, `SELECT NULL::varchar(20) AS client_ip`},
		{`UPDATE orders SET client_ip = '10.9.9.9', ip_expires_at = '2100-01-01' WHERE id = 2 RETURNING client_ip`, `SELECT '10.9.9.9'::varchar(20)`},
		{`INSERT INTO orders (id, client_ip, ip_expires_at, note, created_at) VALUES (8, '10.0.0.8', '2000-01-01', 8.5, '2100-01-01') RETURNING *`,
			`SELECT 8, NULL::varchar(20), '2000-01-01'::timestamptz, 8.50::numeric(10,2), '2100-01-01'::timestamptz, NULL::timestamptz`},
		{`WITH d AS (DELETE FROM orders WHERE id = 7 RETURNING note, client_ip) SELECT * FROM d`, `SELECT note, client_ip FROM ref WHERE id = 7`},
		// ORDER BY, GROUP BY, DISTINCT ON, aggregates, windows.
		{`SELECT id, client_ip FROM orders ORDER BY client_ip NULLS FIRST, id`, `SELECT id, client_ip FROM ref ORDER BY client_ip NULLS FIRST, id`},
		{`SELECT * FROM orders o ORDER BY note DESC, o.id`, `SELECT * FROM ref o ORDER BY note DESC, o.id`},
		{`SELECT note, count(*) FROM orders GROUP BY note ORDER BY note NULLS LAST`, `SELECT note, count(*) FROM ref GROUP BY note ORDER BY note NULLS LAST`},
		{`SELECT client_ip IS NULL AS gone, count(*) FROM orders GROUP BY client_ip HAVING client_ip IS NULL OR client_ip = '10.0.0.1' ORDER BY 2, 1`,
			`SELECT client_ip IS NULL AS gone, count(*) FROM ref GROUP BY client_ip HAVING client_ip IS NULL OR client_ip = '10.0.0.1' ORDER BY 2, 1`},
		{`SELECT id, client_ip FROM orders GROUP BY id ORDER BY id`, `SELECT id, client_ip FROM ref GROUP BY id ORDER BY id`},
		{`SELECT * FROM orders GROUP BY id ORDER BY id`, `SELECT * FROM ref GROUP BY id ORDER BY id`},
		{`SELECT DISTINCT ON (note) note, id FROM orders ORDER BY note, id`, `SELECT DISTINCT ON (note) note, id FROM ref ORDER BY note, id`},
		{`SELECT DISTINCT client_ip FROM orders ORDER BY client_ip`, `SELECT DISTINCT client_ip FROM ref ORDER BY client_ip`},
		{`SELECT count(DISTINCT client_ip), max(note), string_agg(client_ip, ',' ORDER BY client_ip) FROM orders`,
			`SELECT count(DISTINCT client_ip), max(note), string_agg(client_ip, ',' ORDER BY client_ip) FROM ref`},
		{`SELECT id, rank() OVER (PARTITION BY client_ip ORDER BY note), sum(note) OVER w FROM orders WINDOW w AS (ORDER BY note, id) ORDER BY id`,
			`SELECT id, rank() OVER (PARTITION BY client_ip ORDER BY note), sum(note) OVER w FROM ref WINDOW w AS (ORDER BY note, id) ORDER BY id`},
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		conn := s.connectMode(mode)
		for _, c := range cases {
			checkScope(t, mode, conn, direct, c)
		}
		// Other literals: the shape's rewrite with this statement's own.
		for _, lit := range []string{"1", "2", "3", "4"} {
			checkScope(t, mode, conn, direct, scopeCase{`SELECT * FROM orders WHERE id = ` + lit, `SELECT * FROM ref WHERE id = ` + lit})
			checkScope(t, mode, conn, direct, scopeCase{`DELETE FROM orders WHERE id = ` + lit + ` RETURNING note`, `SELECT note FROM ref WHERE id = ` + lit})
			checkScope(t, mode, conn, direct, scopeCase{`SELECT note, count(*) FROM orders WHERE id <> ` + lit + ` GROUP BY note ORDER BY note`,
				`SELECT note, count(*) FROM ref WHERE id <> ` + lit + ` GROUP BY note ORDER BY note`})
		}
		// COPY TO: the table's live rows, expired values NULL.
		for _, c := range []scopeCase{
			{`COPY orders TO STDOUT`, `COPY ref TO STDOUT`},
			{`COPY orders (id, note, client_ip) TO STDOUT WITH (FORMAT csv, HEADER)`, `COPY ref (id, note, client_ip) TO STDOUT WITH (FORMAT csv, HEADER)`},
			{`COPY orders (id, ip_expires_at) TO STDOUT`, `COPY ref (id, ip_expires_at) TO STDOUT`},
			{`COPY (SELECT * FROM orders WHERE note > 2 ORDER BY client_ip, id) TO STDOUT`, `COPY (SELECT * FROM ref WHERE note > 2 ORDER BY client_ip, id) TO STDOUT`},
		} {
			got, want := copyLines(t, conn, c.q), copyLines(t, direct, c.ref)
			if got != want {
				t.Errorf("mode %v: %s:\n got  %s\n want %s", mode, c.q, got, want)
			}
		}
		for _, refused := range []string{
			`SELECT row_to_json(o) FROM orders o, generate_series(1, 2) g`,
			`UPDATE orders SET note = 1 FROM orders p WHERE p.id = orders.id RETURNING orders.client_ip`,
			`DELETE FROM orders o USING generate_series(1, 2) g WHERE g = o.id RETURNING o`,
			`COPY orders (id, note) FROM STDIN`,
		} {
			_, err := conn.Exec(ctx, refused)
			if got := sqlstate(err); got != "0A000" {
				t.Errorf("mode %v: %s: SQLSTATE %q (%v), want 0A000", mode, refused, got, err)
			}
		}
	}
}

// TestExpiringColumnJoins: through the proxy, query levels of several FROM
// items and nested levels read each expiring column as NULL once expired,
// by the FROM item a qualified name names and the one relation an
// unqualified name can be: joins of every kind, LATERAL, derived tables,
// CTEs, correlated and uncorrelated subqueries and set operations, with
// the names and types of a direct read. An unqualified name beside a
// table whose columns the proxy does not know, and joins merging columns,
// stay refused. Both query protocols.
func TestExpiringColumnJoins(t *testing.T) {
	s := scopeStack(t)
	direct := s.connect(s.direct)
	cases := []scopeCase{
		// Joins: targets, ON and WHERE over both sides.
		{`SELECT o.id, p.id, o.client_ip, p.note FROM orders o JOIN orders p ON p.id = o.id + 1`,
			`SELECT o.id, p.id, o.client_ip, p.note FROM ref o JOIN ref p ON p.id = o.id + 1`},
		{`SELECT o.id, p.id FROM orders o JOIN orders p ON p.client_ip = o.client_ip AND p.id <> o.id`,
			`SELECT o.id, p.id FROM ref o JOIN ref p ON p.client_ip = o.client_ip AND p.id <> o.id`},
		{`SELECT o.id, p.id, p.note FROM orders o LEFT JOIN orders p ON p.note = o.note AND p.id > o.id ORDER BY 1, 2`,
			`SELECT o.id, p.id, p.note FROM ref o LEFT JOIN ref p ON p.note = o.note AND p.id > o.id ORDER BY 1, 2`},
		{`SELECT o.id, p.id FROM orders o RIGHT JOIN orders p ON o.client_ip IS NULL AND p.id = o.id ORDER BY 2, 1`,
			`SELECT o.id, p.id FROM ref o RIGHT JOIN ref p ON o.client_ip IS NULL AND p.id = o.id ORDER BY 2, 1`},
		{`SELECT o.id, p.id FROM orders o FULL JOIN orders p ON p.id = o.id + 4 AND p.note = o.note ORDER BY 1, 2`,
			`SELECT o.id, p.id FROM ref o FULL JOIN ref p ON p.id = o.id + 4 AND p.note = o.note ORDER BY 1, 2`},
		{`SELECT o.id, p.id FROM orders o, orders p WHERE p.id = o.id AND (o.note > 2 OR p.client_ip IS NOT NULL)`,
			`SELECT o.id, p.id FROM ref o, ref p WHERE p.id = o.id AND (o.note > 2 OR p.client_ip IS NOT NULL)`},
		{`SELECT * FROM orders o JOIN orders p ON p.id = o.id ORDER BY o.id`, `SELECT * FROM ref o JOIN ref p ON p.id = o.id ORDER BY o.id`},
		{`SELECT p.*, c.* FROM orders p JOIN customers c ON c.id = p.id ORDER BY c.id`, `SELECT p.*, c.* FROM ref p JOIN customers c ON c.id = p.id ORDER BY c.id`},
		{`SELECT c.name, o.client_ip FROM customers c LEFT JOIN orders o ON o.id = c.id AND o.note IS NOT NULL ORDER BY 1`,
			`SELECT c.name, o.client_ip FROM customers c LEFT JOIN ref o ON o.id = c.id AND o.note IS NOT NULL ORDER BY 1`},
		{`SELECT client_ip, note, o.id FROM orders o JOIN (SELECT 1 AS one) s ON true ORDER BY 3`,
			`SELECT client_ip, note, o.id FROM ref o JOIN (SELECT 1 AS one) s ON true ORDER BY 3`},
		{`SELECT o.id, l.ip FROM orders o, LATERAL (SELECT o.client_ip AS ip) l`, `SELECT o.id, l.ip FROM ref o, LATERAL (SELECT o.client_ip AS ip) l`},
		{`SELECT id, o.client_ip, c.name FROM orders o NATURAL JOIN (SELECT id, name FROM customers) c`,
			`SELECT id, o.client_ip, c.name FROM ref o NATURAL JOIN (SELECT id, name FROM customers) c`},
		// Subqueries, each level in its own scope.
		{`SELECT s.id, s.note FROM (SELECT id, note FROM orders WHERE note IS NOT NULL) s`,
			`SELECT s.id, s.note FROM (SELECT id, note FROM ref WHERE note IS NOT NULL) s`},
		{`WITH w AS (SELECT id, client_ip FROM orders) SELECT * FROM w WHERE client_ip IS NULL`,
			`WITH w AS (SELECT id, client_ip FROM ref) SELECT * FROM w WHERE client_ip IS NULL`},
		{`SELECT id FROM orders o WHERE EXISTS (SELECT 1 FROM orders p WHERE p.client_ip = o.client_ip AND p.id <> o.id)`,
			`SELECT id FROM ref o WHERE EXISTS (SELECT 1 FROM ref p WHERE p.client_ip = o.client_ip AND p.id <> o.id)`},
		{`SELECT c.id, (SELECT o.note FROM orders o WHERE o.id = c.id) FROM customers c`,
			`SELECT c.id, (SELECT o.note FROM ref o WHERE o.id = c.id) FROM customers c`},
		{`SELECT o.id, (SELECT o.client_ip) AS ip FROM orders o`, `SELECT o.id, (SELECT o.client_ip) AS ip FROM ref o`},
		{`SELECT id FROM orders WHERE note IN (SELECT note FROM orders WHERE id > 5)`, `SELECT id FROM ref WHERE note IN (SELECT note FROM ref WHERE id > 5)`},
		{`SELECT client_ip FROM orders UNION SELECT client_ip FROM orders ORDER BY client_ip`,
			`SELECT client_ip FROM ref UNION SELECT client_ip FROM ref ORDER BY client_ip`},
		{`UPDATE orders SET id = id WHERE EXISTS (SELECT 1 FROM customers c WHERE c.id = orders.id AND orders.note > 2) RETURNING id`,
			`SELECT id FROM ref WHERE id <= 6 AND note > 2`},
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		conn := s.connectMode(mode)
		for _, c := range cases {
			checkScope(t, mode, conn, direct, c)
		}
		for _, refused := range []string{
			`SELECT client_ip FROM orders o JOIN customers c ON c.id = o.id`,
			`SELECT o.id FROM orders o JOIN customers c ON c.id = o.id WHERE note IS NULL`,
			`SELECT * FROM orders JOIN customers USING (id)`,
			`SELECT id FROM orders NATURAL JOIN customers`,
			`SELECT j.note FROM (orders o JOIN customers c ON c.id = o.id) AS j`,
		} {
			_, err := conn.Exec(context.Background(), refused)
			if got := sqlstate(err); got != "0A000" {
				t.Errorf("mode %v: %s: SQLSTATE %q (%v), want 0A000", mode, refused, got, err)
			}
		}
	}
}

// TestExpiringColumnWholeRows: through the proxy, whole-row references,
// `t.*` as a value and inside ROW(…), functional notation and column
// alias lists read an expired value as NULL, with the names and types of
// a direct read. Both query protocols.
func TestExpiringColumnWholeRows(t *testing.T) {
	s := scopeStack(t)
	direct := s.connect(s.direct)
	cases := []scopeCase{
		{`SELECT id, row_to_json(o) FROM orders o ORDER BY id`, `SELECT id, row_to_json(o) FROM ref o ORDER BY id`},
		{`SELECT o::text FROM orders o`, `SELECT o::text FROM ref o`},
		{`SELECT orders.*::text FROM orders`, `SELECT ref.*::text FROM ref`},
		{`SELECT (o).note, (o).client_ip, (o).id FROM orders o`, `SELECT (o).note, (o).client_ip, (o).id FROM ref o`},
		{`SELECT ROW(o.*)::text, ROW(o.id, o.note)::text FROM orders o`, `SELECT ROW(o.*)::text, ROW(o.id, o.note)::text FROM ref o`},
		{`SELECT client_ip(o), note(o)::text, id(o) FROM orders o`, `SELECT client_ip(o), note(o)::text, id(o) FROM ref o`},
		{`SELECT id FROM orders o WHERE o IS NOT NULL`, `SELECT id FROM ref o WHERE o IS NOT NULL`},
		{`SELECT x.a, x.b, x.d FROM orders AS x(a, b, c, d) WHERE x.b IS NOT NULL OR d > 2`,
			`SELECT x.a, x.b, x.d FROM ref AS x(a, b, c, d) WHERE x.b IS NOT NULL OR d > 2`},
		{`SELECT * FROM orders AS x(a, b) ORDER BY a`, `SELECT * FROM ref AS x(a, b) ORDER BY a`},
		// Beside a table of unknown columns `o` could be its column: `o.*`
		// is not.
		{`SELECT c.id, row_to_json(o.*) FROM orders o JOIN customers c ON c.id = o.id`, `SELECT c.id, row_to_json(o.*) FROM ref o JOIN customers c ON c.id = o.id`},
		{`SELECT c.id, (SELECT o.*::text FROM orders o WHERE o.id = c.id) FROM customers c`, `SELECT c.id, (SELECT o.*::text FROM ref o WHERE o.id = c.id) FROM customers c`},
		{`DELETE FROM orders o WHERE id < 4 RETURNING o::text`, `SELECT o::text FROM ref o WHERE id < 4`},
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		conn := s.connectMode(mode)
		for _, c := range cases {
			checkScope(t, mode, conn, direct, c)
		}
		for _, refused := range []string{
			`SELECT row_to_json(o) FROM orders o JOIN customers c ON c.id = o.id`,
			`SELECT o.id FROM orders o JOIN orders p USING (client_ip)`,
			`SELECT * FROM orders AS x(a, b, c, d, e, f, g)`,
		} {
			_, err := conn.Exec(context.Background(), refused)
			if got := sqlstate(err); got != "0A000" {
				t.Errorf("mode %v: %s: SQLSTATE %q (%v), want 0A000", mode, refused, got, err)
			}
		}
	}
}

// TestExpiringColumnJoinedWrites: through the proxy, UPDATE … FROM and
// DELETE … USING read the expiring columns of both sides, in WHERE and
// RETURNING, and MERGE in its ON, WHEN conditions and action values, as a
// direct read of the copy does. Both query protocols.
func TestExpiringColumnJoinedWrites(t *testing.T) {
	s := scopeStack(t)
	ctx := context.Background()
	direct := s.connect(s.direct)
	cases := []scopeCase{
		{`UPDATE orders SET id = orders.id FROM customers c WHERE c.id = orders.id RETURNING orders.id, orders.note, orders.client_ip, c.name`,
			`SELECT ref.id, ref.note, ref.client_ip, c.name FROM ref JOIN customers c ON c.id = ref.id`},
		{`UPDATE customers c SET name = o.client_ip FROM orders o WHERE o.id = c.id AND o.note IS NOT NULL RETURNING c.id, c.name`,
			`SELECT c.id, o.client_ip FROM customers c JOIN ref o ON o.id = c.id WHERE o.note IS NOT NULL`},
		{`DELETE FROM orders o USING customers c WHERE c.id = o.id AND (o.client_ip IS NULL OR o.note > 2) RETURNING o.*`,
			`SELECT o.* FROM ref o JOIN customers c ON c.id = o.id WHERE o.client_ip IS NULL OR o.note > 2`},
	}
	// MERGE returns no rows (before PostgreSQL 17): the command tags and
	// what the tables hold after it, in the same transaction, are
	// compared.
	type mergeCase struct{ q, ref, after, afterRef string }
	merges := []mergeCase{
		{`MERGE INTO customers c USING orders o ON o.id = c.id AND o.note IS NOT NULL
			WHEN MATCHED AND o.client_ip IS NULL THEN UPDATE SET name = 'gone'
			WHEN MATCHED THEN UPDATE SET name = o.client_ip
			WHEN NOT MATCHED THEN INSERT (id, name) VALUES (o.id + 100, o.client_ip)`,
			`MERGE INTO customers c USING ref o ON o.id = c.id AND o.note IS NOT NULL
			WHEN MATCHED AND o.client_ip IS NULL THEN UPDATE SET name = 'gone'
			WHEN MATCHED THEN UPDATE SET name = o.client_ip
			WHEN NOT MATCHED THEN INSERT (id, name) VALUES (o.id + 100, o.client_ip)`,
			`SELECT string_agg(id || '=' || coalesce(name, '-'), ' ' ORDER BY id) FROM customers`,
			`SELECT string_agg(id || '=' || coalesce(name, '-'), ' ' ORDER BY id) FROM customers`},
		{`MERGE INTO orders o USING customers c ON c.id = o.id WHEN MATCHED AND o.client_ip IS NOT NULL THEN DELETE`,
			`MERGE INTO ref o USING customers c ON c.id = o.id WHEN MATCHED AND o.client_ip IS NOT NULL THEN DELETE`,
			`SELECT string_agg(id::text, ' ' ORDER BY id) FROM orders`,
			`SELECT string_agg(id::text, ' ' ORDER BY id) FROM ref`},
	}
	afterMerge := func(mode pgx.QueryExecMode, conn *pgx.Conn, merge, after string) string {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		tag, err := tx.Exec(ctx, merge)
		if err != nil {
			t.Fatalf("mode %v: %s: %v", mode, merge, err)
		}
		var out string
		if err := tx.QueryRow(ctx, after).Scan(&out); err != nil {
			t.Fatal(err)
		}
		return tag.String() + ": " + out
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		conn := s.connectMode(mode)
		for _, c := range cases {
			checkScope(t, mode, conn, direct, c)
		}
		for _, m := range merges {
			if got, want := afterMerge(mode, conn, m.q, m.after), afterMerge(mode, direct, m.ref, m.afterRef); got != want {
				t.Errorf("mode %v: %s:\n got  %s\n want %s", mode, m.q, got, want)
			}
		}
	}
}

// checkScope runs c through conn and directly, inside transactions rolled
// back, and compares the RowDescriptions and the rows (sorted unless the
// statement orders them).
func checkScope(t *testing.T, mode pgx.QueryExecMode, conn, direct *pgx.Conn, c scopeCase) {
	t.Helper()
	gotF, got, err := scopeRows(conn, c.q)
	if err != nil {
		t.Errorf("mode %v: %s: %v", mode, c.q, err)
		return
	}
	wantF, _, err := scopeRows(direct, c.q)
	if err != nil {
		t.Fatalf("%s directly: %v", c.q, err)
	}
	_, want, err := scopeRows(direct, c.ref)
	if err != nil {
		t.Fatalf("%s: %v", c.ref, err)
	}
	if len(gotF) != len(wantF) {
		t.Errorf("mode %v: %s: %d fields, direct %d", mode, c.q, len(gotF), len(wantF))
		return
	}
	for i, f := range gotF {
		d := wantF[i]
		if f.Name != d.Name || f.DataTypeOID != d.DataTypeOID || f.TypeModifier != d.TypeModifier {
			t.Errorf("mode %v: %s: field %d = %s oid %d typmod %d, direct %s oid %d typmod %d",
				mode, c.q, i, f.Name, f.DataTypeOID, f.TypeModifier, d.Name, d.DataTypeOID, d.TypeModifier)
		}
	}
	if !strings.Contains(strings.ToUpper(c.q), "ORDER BY") {
		sort.Strings(got)
		sort.Strings(want)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("mode %v: %s:\n got  %v\n want %v", mode, c.q, got, want)
	}
}

// scopeRows returns the RowDescription and the rows of q, each row its
// values printed, run in a transaction rolled back.
func scopeRows(conn *pgx.Conn, q string) ([]pgconn.FieldDescription, []string, error) {
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	rows, err := tx.Query(ctx, q)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return nil, nil, err
		}
		out = append(out, fmt.Sprint(vals))
	}
	fields := append([]pgconn.FieldDescription(nil), rows.FieldDescriptions()...)
	return fields, out, rows.Err()
}

// copyLines returns the output of the COPY … TO STDOUT q, its lines
// sorted unless q orders them.
func copyLines(t *testing.T, conn *pgx.Conn, q string) string {
	t.Helper()
	var buf bytes.Buffer
	if _, err := conn.PgConn().CopyTo(context.Background(), &buf, q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if !strings.Contains(q, "ORDER BY") {
		sort.Strings(lines)
	}
	return strings.Join(lines, "\n")
}

// scopeStack is a proxy over orders, a table with two expiring columns
// (client_ip with an expiry column, note derived from created_at), ref, a
// copy of its live rows with the expired values NULL, and customers, a
// table without a rule.
func scopeStack(t *testing.T) *stack {
	t.Helper()
	rules := []ttl.Rule{{Table: "orders", Columns: []ttl.ColumnRule{
		{Column: "client_ip", ExpiresAtColumn: "ip_expires_at"},
		{Column: "note", BaseColumn: "created_at", ExpireAfter: time.Hour},
	}}}
	s := newStack(t, stackOptions{rules: rules, setup: []string{
		`CREATE TABLE orders (id int PRIMARY KEY, client_ip varchar(20), ip_expires_at timestamptz,
			dropped int, note numeric(10,2), created_at timestamptz, expires_at timestamptz)`,
		`ALTER TABLE orders DROP COLUMN dropped`,
		// 1: both values live; 2: both expired; 3: values that never
		// expire (NULL expiry); 4: NULL values; 5: an expired row; 6 and 7
		// share 1's and 2's values.
		`INSERT INTO orders VALUES
			(1, '10.0.0.1', now() + interval '1 day', 1.50, now(), NULL),
			(2, '10.0.0.2', now() - interval '1 second', 2.50, now() - interval '2 hours', NULL),
			(3, '10.0.0.3', NULL, 3.50, NULL, NULL),
			(4, NULL, now() + interval '1 day', NULL, now(), NULL),
			(5, '10.0.0.5', NULL, 5.50, now(), now() - interval '1 second'),
			(6, '10.0.0.1', now() + interval '1 day', 1.50, now(), NULL),
			(7, '10.0.0.2', now() - interval '1 second', 2.50, now() - interval '2 hours', NULL)`,
		`CREATE TABLE ref AS SELECT id,
			CASE WHEN ip_expires_at IS NULL OR ip_expires_at >= now() THEN client_ip END AS client_ip, ip_expires_at,
			CASE WHEN created_at IS NULL OR created_at + interval '1 hour' >= now() THEN note END AS note,
			created_at, expires_at
			FROM orders WHERE expires_at IS NULL OR expires_at >= now()`,
		`ALTER TABLE ref ADD PRIMARY KEY (id)`,
		`CREATE TABLE customers (id int PRIMARY KEY, name text)`,
		`INSERT INTO customers SELECT i, 'c' || i FROM generate_series(1, 6) i`,
	}})
	return s
}
