package tests

import (
	"context"
	"fmt"
	"strings"

	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/rewrite"
	"github.com/ttlproxy/ttlproxy/ttl"
)

// colViewSetup makes orders (1: live values; 2: expired values; 3: values
// that never expire; 4: an expired row) and, created directly, views of
// every kind over it.
var colViewSetup = []string{
	`CREATE TABLE orders (id int PRIMARY KEY, client_ip text, ip_expires_at timestamptz, note text,
		created_at timestamptz, expires_at timestamptz)`,
	`INSERT INTO orders VALUES
		(1, 'a', now() + interval '1 day', 'n1', now(), NULL),
		(2, 'b', now() - interval '1 second', 'n2', now() - interval '2 hours', NULL),
		(3, 'c', NULL, 'n3', NULL, NULL),
		(4, 'd', NULL, 'n4', now(), now() - interval '1 second')`,
	`CREATE VIEW v_direct AS SELECT * FROM orders`,
	`CREATE VIEW v_ids AS SELECT id FROM orders`,
	`CREATE VIEW v_direct_2 AS SELECT id, client_ip, note FROM v_direct WHERE id > 0`,
	`CREATE VIEW v_barrier WITH (security_barrier) AS SELECT id, client_ip, note FROM orders WHERE id < 10`,
	`CREATE VIEW v_alias (a, b, c) AS SELECT id, client_ip, note FROM orders`,
	`CREATE VIEW v_grouped AS SELECT id, max(client_ip) AS client_ip, max(note) AS note FROM orders GROUP BY id`,
	`CREATE VIEW v_where AS SELECT id FROM orders WHERE client_ip = 'b' OR note = 'n2'`,
	`CREATE VIEW v_where_null AS SELECT id FROM orders WHERE client_ip IS NULL`,
	// What the proxy stored for a view created through it before the
	// column rule was configured: the row filter, no value expression.
	`CREATE VIEW v_old AS SELECT o.id, o.client_ip, o.note FROM orders o
		JOIN (SELECT) AS _ttl_0 ON (o.expires_at IS NULL OR o.expires_at >= now())`,
	`CREATE VIEW v_old_2 AS SELECT * FROM v_old`,
	// A join and a whole row, read at the view's level once expanded.
	`CREATE VIEW v_join AS SELECT o.id, o.client_ip, o.note FROM orders o JOIN orders p ON p.id = o.id`,
	`CREATE VIEW v_rows AS SELECT o.id, row_to_json(o)::text AS client_ip, NULL::text AS note FROM orders o`,
	// A shape no read rewrites: the column merged by USING.
	`CREATE VIEW v_using AS SELECT o.id FROM orders o JOIN orders p USING (client_ip)`,
	`CREATE MATERIALIZED VIEW m_orders AS SELECT * FROM orders`,
}

// TestColumnViews: the view tests of row TTL with an expiring column.
// Through the proxy, in both protocols, every view over the table serves
// the live rows with expired values as NULL: a view created through the
// proxy (read as it is: read directly, it shows NULL too), views of views,
// a view created directly (expanded), one created before the column rule,
// one that does not show the column, a security_barrier view, one whose
// column list renames the columns, a grouped one, a join, a whole row, and
// a view created directly while the session runs. A view whose definition
// reads the column where the proxy cannot rewrite it (a join USING it), a
// materialized view, and writes through a view that is expanded are
// refused with 0A000, and return nothing.
func TestColumnViews(t *testing.T) {
	rules := []ttl.Rule{{Table: "orders", Column: "expires_at", Columns: []ttl.ColumnRule{
		{Column: "client_ip", ExpiresAtColumn: "ip_expires_at"},
		{Column: "note", BaseColumn: "created_at", ExpireAfter: time.Hour},
	}}}
	s := newStack(t, stackOptions{rules: rules, setup: colViewSetup})
	ctx := context.Background()
	setup := s.connect(s.proxied)
	for _, q := range []string{
		`CREATE VIEW v_proxy AS SELECT id, client_ip, note FROM orders`,
		`CREATE VIEW v_proxy_where AS SELECT o.id, o.client_ip, o.note FROM orders o WHERE o.client_ip IS NULL OR o.note LIKE 'n%'`,
		`CREATE VIEW v_proxy_2 AS SELECT * FROM v_proxy`,
		`CREATE VIEW v_proxy_of_direct AS SELECT id, client_ip, note FROM v_direct`,
	} {
		if _, err := setup.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	want := []string{"1,a,n1", "2,-,-", "3,c,n3"}
	read := func(view string) string {
		return `SELECT concat_ws(',', id, coalesce(client_ip, '-'), coalesce(note, '-')) FROM ` + view + ` ORDER BY 1`
	}
	direct := s.connect(s.direct)
	if got := textRows(t, direct, read("v_direct")); slices.Equal(got, want) {
		t.Fatalf("read directly, v_direct = %v: the setup no longer has expired values to hide", got)
	}
	// Created through the proxy, the definitions hold the values'
	// expressions: read directly, they show NULL too.
	for _, v := range []string{"v_proxy", "v_proxy_where", "v_proxy_2", "v_proxy_of_direct"} {
		if got := textRows(t, direct, read(v)); !slices.Equal(got, want) {
			t.Errorf("read directly, %s = %v, want %v", v, got, want)
		}
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		conn := s.connectMode(mode)
		for _, v := range []string{"v_proxy", "v_proxy_where", "v_proxy_2", "v_proxy_of_direct", "v_direct",
			"v_direct_2", "v_barrier", "v_grouped", "v_old", "v_old_2", "public.v_direct", "v_join"} {
			if got := textRows(t, conn, read(v)); !slices.Equal(got, want) {
				t.Errorf("mode %v: %s = %v, want %v", mode, v, got, want)
			}
		}
		if got := textRows(t, conn, `SELECT concat_ws(',', a, coalesce(b, '-'), coalesce(c, '-')) FROM v_alias ORDER BY 1`); !slices.Equal(got, want) {
			t.Errorf("mode %v: v_alias = %v, want %v", mode, got, want)
		}
		if got := textRows(t, conn, `SELECT id::text FROM v_ids ORDER BY 1`); !slices.Equal(got, []string{"1", "2", "3"}) {
			t.Errorf("mode %v: v_ids = %v, want the live rows", mode, got)
		}
		// Row 2's expired values match nothing but IS NULL (read
		// directly, the other way round).
		if got := textRows(t, conn, `SELECT id::text FROM v_where`); len(got) != 0 {
			t.Errorf("mode %v: v_where = %v, want no row", mode, got)
		}
		if got := textRows(t, conn, `SELECT id::text FROM v_where_null`); !slices.Equal(got, []string{"2"}) {
			t.Errorf("mode %v: v_where_null = %v, want [2]", mode, got)
		}
		if got := textRows(t, conn, `SELECT count(*)::text FROM v_direct WHERE client_ip = 'b' OR note = 'n2'`); !slices.Equal(got, []string{"0"}) {
			t.Errorf("mode %v: expired values matched through v_direct: %v", mode, got)
		}
		// The whole row of row 2 holds its expired values as null.
		rowsJSON := textRows(t, conn, `SELECT client_ip FROM v_rows ORDER BY id`)
		if len(rowsJSON) != 3 || !strings.Contains(rowsJSON[1], `"client_ip":null`) || !strings.Contains(rowsJSON[1], `"note":null`) ||
			!strings.Contains(rowsJSON[0], `"client_ip":"a"`) {
			t.Errorf("mode %v: v_rows = %v, want row 2's client_ip and note null, row 1's shown", mode, rowsJSON)
		}
		if got := textRows(t, conn, `SELECT count(*)::text FROM v_ids i JOIN v_rows r ON r.id = i.id`); !slices.Equal(got, []string{"3"}) {
			t.Errorf("mode %v: v_ids joined with v_rows = %v, want [3]", mode, got)
		}
		for _, refused := range []string{
			`SELECT id FROM v_using`,
			read("m_orders"),
			`UPDATE v_direct SET note = note`,
			`UPDATE v_ids SET id = id`,
			`DELETE FROM v_direct WHERE client_ip = 'b'`,
			`INSERT INTO v_direct (id) VALUES (9)`,
		} {
			rows, err := conn.Query(ctx, refused)
			n := 0
			if err == nil {
				for rows.Next() {
					n++
				}
				rows.Close()
				err = rows.Err()
			}
			if got := sqlstate(err); got != "0A000" || n != 0 {
				t.Errorf("mode %v: %s: %d rows, SQLSTATE %q (%v), want 0A000", mode, refused, n, got, err)
			}
		}
	}
	// A view created directly while a session runs is expanded once the
	// session has read the catalog again (here after DDL through it).
	conn := s.connectMode(pgx.QueryExecModeSimpleProtocol)
	textRows(t, conn, read("v_proxy"))
	if _, err := direct.Exec(ctx, `CREATE VIEW v_late AS SELECT id, client_ip, note FROM orders`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE ddl_mark (a int)`); err != nil {
		t.Fatal(err)
	}
	if got := textRows(t, conn, read("v_late")); !slices.Equal(got, want) {
		t.Errorf("a view made directly meanwhile: %v, want %v", got, want)
	}
}

// textRows runs q, whose rows are one text each.
func textRows(t *testing.T, conn *pgx.Conn, q string) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), q)
	if err != nil {
		t.Errorf("%s: %v", q, err)
		return nil
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Errorf("%s: %v", q, err)
	}
	return out
}

// TestColumnViewsNoRowRule: over a table with expiring columns only (rule
// none), a view created through the proxy is read as it is, one created
// directly is expanded; both serve every row, expired values as NULL.
func TestColumnViewsNoRowRule(t *testing.T) {
	rules := []ttl.Rule{{Table: "contacts", Kind: ttl.KindNone, Columns: []ttl.ColumnRule{
		{Column: "phone", ExpiresAtColumn: "phone_exp"},
	}}}
	s := newStack(t, stackOptions{rules: rules, setup: []string{
		`CREATE TABLE contacts (id int PRIMARY KEY, phone text, phone_exp timestamptz)`,
		`INSERT INTO contacts VALUES (1, 'p1', now() + interval '1 day'), (2, 'p2', now() - interval '1 second'), (3, 'p3', NULL)`,
		`CREATE VIEW c_direct AS SELECT id, phone FROM contacts`,
		// A view made directly that is shaped like the proxy's own.
		`CREATE VIEW c_proxy_shape AS SELECT id, CASE WHEN (phone_exp IS NULL OR phone_exp >= now()) THEN phone ELSE NULL::text END AS phone FROM contacts`,
	}})
	ctx := context.Background()
	conn := s.connect(s.proxied)
	if _, err := conn.Exec(ctx, `CREATE VIEW c_proxy AS SELECT id, phone FROM contacts`); err != nil {
		t.Fatal(err)
	}
	want := []string{"1,p1", "2,-", "3,p3"}
	read := func(view string) string {
		return `SELECT concat_ws(',', id, coalesce(phone, '-')) FROM ` + view + ` ORDER BY 1`
	}
	direct := s.connect(s.direct)
	for v, w := range map[string][]string{"c_direct": {"1,p1", "2,p2", "3,p3"}, "c_proxy": want, "c_proxy_shape": want} {
		if got := textRows(t, direct, read(v)); !slices.Equal(got, w) {
			t.Errorf("read directly, %s = %v, want %v", v, got, w)
		}
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		conn := s.connectMode(mode)
		for _, v := range []string{"c_direct", "c_proxy", "c_proxy_shape"} {
			if got := textRows(t, conn, read(v)); !slices.Equal(got, want) {
				t.Errorf("mode %v: %s = %v, want %v", mode, v, got, want)
			}
		}
		// A view read as it is can be written through as PostgreSQL allows.
		if _, err := conn.Exec(ctx, `UPDATE c_proxy SET id = id WHERE phone IS NULL`); err != nil {
			t.Errorf("mode %v: update through c_proxy: %v", mode, err)
		}
		if _, err := conn.Exec(ctx, `UPDATE c_direct SET id = id`); sqlstate(err) != "0A000" {
			t.Errorf("mode %v: update through c_direct: %v, want 0A000", mode, err)
		}
	}
}

// TestColumnViewsRowSecurity: a view created directly over a table with
// row security is refused unless it is security_invoker (its definition
// would run under the reader's policies instead of the owner's); a view
// created through the proxy needs no expansion and is read as it is.
func TestColumnViewsRowSecurity(t *testing.T) {
	rules := []ttl.Rule{{Table: "orders", Column: "expires_at", Columns: []ttl.ColumnRule{
		{Column: "client_ip", ExpiresAtColumn: "ip_expires_at"},
		{Column: "note", BaseColumn: "created_at", ExpireAfter: time.Hour},
	}}}
	s := newStack(t, stackOptions{rules: rules, setup: append(slices.Clone(colViewSetup[:2]),
		`ALTER TABLE orders ENABLE ROW LEVEL SECURITY`,
		`CREATE VIEW v_owner AS SELECT id, client_ip, note FROM orders`,
		`CREATE VIEW v_invoker WITH (security_invoker) AS SELECT id, client_ip, note FROM orders`)})
	ctx := context.Background()
	conn := s.connect(s.proxied)
	if _, err := conn.Exec(ctx, `CREATE VIEW v_proxy AS SELECT id, client_ip, note FROM orders`); err != nil {
		t.Fatal(err)
	}
	want := []string{"1,a,n1", "2,-,-", "3,c,n3"}
	read := func(view string) string {
		return `SELECT concat_ws(',', id, coalesce(client_ip, '-'), coalesce(note, '-')) FROM ` + view + ` ORDER BY 1`
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		conn := s.connectMode(mode)
		for _, v := range []string{"v_invoker", "v_proxy"} {
			if got := textRows(t, conn, read(v)); !slices.Equal(got, want) {
				t.Errorf("mode %v: %s = %v, want %v", mode, v, got, want)
			}
		}
		if _, err := conn.Exec(ctx, read("v_owner")); sqlstate(err) != "0A000" {
			t.Errorf("mode %v: v_owner: %v, want 0A000", mode, err)
		}
	}
}

// TestColumnViewPreparedBeforeKnown: a statement prepared while the
// session did not know of a view made directly over the table is checked
// again once it does (the client's statement cache keeps it).
func TestColumnViewPreparedBeforeKnown(t *testing.T) {
	rules := []ttl.Rule{{Table: "orders", Column: "expires_at", Columns: []ttl.ColumnRule{
		{Column: "client_ip", ExpiresAtColumn: "ip_expires_at"},
		{Column: "note", BaseColumn: "created_at", ExpireAfter: time.Hour},
	}}}
	s := newStack(t, stackOptions{rules: rules, setup: slices.Clone(colViewSetup[:2])})
	ctx := context.Background()
	direct := s.connect(s.direct)
	conn := s.connectMode(pgx.QueryExecModeCacheStatement)
	if got := textRows(t, conn, `SELECT id::text FROM orders ORDER BY 1`); !slices.Equal(got, []string{"1", "2", "3"}) {
		t.Fatalf("orders: %v", got)
	}
	if _, err := direct.Exec(ctx, `CREATE VIEW v_before AS SELECT id, client_ip, note FROM orders WHERE expires_at IS NULL`); err != nil {
		t.Fatal(err)
	}
	read := `SELECT concat_ws(',', id, coalesce(client_ip, '-'), coalesce(note, '-')) FROM v_before ORDER BY 1`
	// The session's catalog predates the view: the window.
	if got := textRows(t, conn, read); !slices.Contains(got, "2,b,n2") {
		t.Fatalf("the setup no longer opens the window: %v before the catalog is read again", got)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE ddl_mark (a int)`); err != nil {
		t.Fatal(err)
	}
	want := []string{"1,a,n1", "2,-,-", "3,c,n3"}
	if got := textRows(t, conn, read); !slices.Equal(got, want) {
		t.Errorf("the same statement once the session knows the view: %v, want %v", got, want)
	}
}

// TestColumnViewsRecognised: the definitions PostgreSQL stores for views
// created through the proxy, as pg_get_viewdef prints them, are recognised
// for every expiry type and for the predicate forms, so those views are
// read as they are; a view created directly is not.
func TestColumnViewsRecognised(t *testing.T) {
	cols := []ttl.ColumnRule{
		{Column: "c_tz", ExpiresAtColumn: "e_tz"},
		{Column: "c_ts", ExpiresAtColumn: "e_ts", ColumnType: ttl.TypeTimestamp},
		{Column: "c_d", ExpiresAtColumn: "e_d", ColumnType: ttl.TypeDate},
		{Column: "c_s", ExpiresAtColumn: "e_s", ColumnType: ttl.TypeUnixSeconds},
		{Column: "c_ms", ExpiresAtColumn: "e_ms", ColumnType: ttl.TypeUnixMilliseconds},
		{Column: "c_us", ExpiresAtColumn: "e_us", ColumnType: ttl.TypeUnixMicroseconds},
		{Column: "c_ns", ExpiresAtColumn: "e_ns", ColumnType: ttl.TypeUnixNanoseconds},
		{Column: "c_der", BaseColumn: "created_at", ExpireAfter: 30 * 24 * time.Hour},
		{Column: "c_frac", BaseColumn: "created_at", ExpireAfter: 1500 * time.Millisecond},
	}
	rules := []ttl.Rule{{Table: "items", Column: "expires_at", Columns: cols}}
	s := newStack(t, stackOptions{rules: rules, setup: []string{
		`CREATE TABLE items (id int PRIMARY KEY, expires_at timestamptz, created_at timestamptz,
			c_tz varchar(20), e_tz timestamptz, c_ts numeric(10,2), e_ts timestamp, c_d text, e_d date,
			c_s text, e_s integer, c_ms text, e_ms bigint, c_us text, e_us bigint, c_ns text, e_ns numeric,
			c_der text, c_frac int)`,
		`CREATE VIEW v_direct AS SELECT id, c_tz FROM items`,
	}})
	ctx := context.Background()
	conn := s.connect(s.proxied)
	var names []string
	for i, c := range cols {
		name := fmt.Sprintf("v_%d", i)
		names = append(names, name)
		q := fmt.Sprintf(`CREATE VIEW %s AS SELECT i.id, i.%s FROM items i
			WHERE i.%[2]s::text = 'x' OR i.%[2]s IS NULL OR i.%[2]s IS NOT NULL OR lower(i.%[2]s::text) LIKE 'p%%'
			   OR i.%[2]s IN (i.%[2]s) OR i.%[2]s::text BETWEEN 'a' AND 'b'
			ORDER BY i.%[2]s`, name, c.Column)
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := conn.Exec(ctx, `CREATE VIEW v_all AS SELECT * FROM items WHERE c_der = 'x' GROUP BY id HAVING max(c_s) > ''`); err != nil {
		t.Fatal(err)
	}
	names = append(names, "v_all")
	// The catalog as the proxy reads it: definitions under search_path
	// pg_catalog.
	direct := s.connect(s.direct)
	if _, err := direct.Exec(ctx, `SET search_path = pg_catalog`); err != nil {
		t.Fatal(err)
	}
	views := map[string]rewrite.View{}
	for _, name := range append(names, "v_direct") {
		var def string
		if err := direct.QueryRow(ctx, `SELECT pg_get_viewdef($1::regclass)`, "public."+name).Scan(&def); err != nil {
			t.Fatal(err)
		}
		views["public."+name] = rewrite.View{Reads: []string{"public.items"}, Definition: def, Columns: []string{"id"}}
	}
	rw, err := rewrite.New(rules, rewrite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	leaky := rw.ColumnLeakyViews(rewrite.NewCatalog(rewrite.CatalogData{Views: views}))
	for _, name := range names {
		if r, ok := leaky["public."+name]; ok {
			t.Errorf("view %s, created through the proxy, is not recognised (it reads %s):\n%s", name, r, views["public."+name].Definition)
		}
	}
	if _, ok := leaky["public.v_direct"]; !ok {
		t.Errorf("v_direct, created directly, is recognised as reading the values as NULL")
	}
}
