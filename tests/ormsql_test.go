package tests

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// ORMs' SQL through the proxy: what Prisma, Knex, pgjdbc and the others
// send for every row, served with the TTL semantics.

// TestSchemaQualifiedColumns: references `"schema"."table"."column"` and
// `"schema"."table".*`, which Prisma writes for every column, read an
// expired value as NULL in SELECT, ORDER BY, WHERE and the RETURNING of
// INSERT, UPDATE and DELETE, with the names and types of a direct read;
// such a reference to another schema's table of the same name is not
// read as the TTL table's. Both query protocols.
func TestSchemaQualifiedColumns(t *testing.T) {
	s := scopeStack(t)
	direct := s.connect(s.direct)
	if _, err := direct.Exec(t.Context(), `CREATE SCHEMA other; CREATE TABLE other.orders (id int, client_ip text, note text);
		INSERT INTO other.orders VALUES (1, 'other', 'other note')`); err != nil {
		t.Fatal(err)
	}
	cases := []scopeCase{
		{`SELECT "public"."orders"."id", "public"."orders"."client_ip", "public"."orders"."note" FROM "public"."orders" WHERE ("public"."orders"."id" > 0 AND 1=1) ORDER BY "public"."orders"."id" ASC LIMIT 10 OFFSET 0`,
			`SELECT id, client_ip, note FROM ref ORDER BY id`},
		{`SELECT "public"."orders".* FROM "public"."orders" ORDER BY "public"."orders"."note" DESC NULLS LAST, 1`,
			`SELECT * FROM ref ORDER BY note DESC NULLS LAST, 1`},
		{`SELECT "public"."orders"."id" FROM "public"."orders" WHERE "public"."orders"."client_ip" = '10.0.0.2' OR "public"."orders"."note" IS NULL ORDER BY 1`,
			`SELECT id FROM ref WHERE client_ip = '10.0.0.2' OR note IS NULL ORDER BY 1`},
		{`SELECT count(*), max(public.orders.client_ip) FROM orders`, `SELECT count(*), max(client_ip) FROM ref`},
		{`INSERT INTO "public"."orders" ("id","client_ip","ip_expires_at","note","created_at") VALUES (9, '10.0.0.9', now() - interval '1 hour', 9.5, now()) RETURNING "public"."orders"."id", "public"."orders"."client_ip", "public"."orders"."note"`,
			`SELECT 9, NULL::varchar(20), 9.50::numeric(10,2)`},
		{`UPDATE "public"."orders" SET "created_at" = "public"."orders"."created_at" WHERE ("public"."orders"."id" IN (1, 2, 3, 5) AND 1=1) RETURNING "public"."orders"."id", "public"."orders"."client_ip", "public"."orders"."note"`,
			`SELECT id, client_ip, note FROM ref WHERE id IN (1, 2, 3, 5)`},
		{`DELETE FROM "public"."orders" WHERE "public"."orders"."id" IN (2, 4, 5) RETURNING "public"."orders".*`,
			`SELECT * FROM ref WHERE id IN (2, 4, 5)`},
		// Another schema's table of the same name is its own.
		{`SELECT other.orders.client_ip, other.orders.note FROM other.orders`, `SELECT 'other'::text, 'other note'::text`},
		{`SELECT o.id, other.orders.client_ip FROM public.orders o, other.orders ORDER BY 1`,
			`SELECT id, 'other'::text FROM ref ORDER BY 1`},
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		conn := s.connectMode(mode)
		for _, c := range cases {
			checkScope(t, mode, conn, direct, c)
		}
		// The attacker's: a qualified name the item's own name would not
		// reach, or that names another schema's table beside the TTL one.
		for _, q := range []string{
			`SELECT (SELECT public.orders.client_ip FROM other.orders LIMIT 1) FROM public.orders`,
			`SELECT public.orders.client_ip FROM public.orders, other.orders`,
			`SELECT other.orders.client_ip FROM public.orders, other.orders`,
		} {
			checkRefused(t, conn, q, "0A000")
		}
	}
}

// checkRefused runs q through conn and wants the proxy's refusal code.
func checkRefused(t *testing.T, conn *pgx.Conn, q, code string) {
	t.Helper()
	_, err := conn.Exec(t.Context(), q)
	if got := sqlstate(err); got != code || !strings.HasPrefix(errMessage(err), "ttlproxy") {
		t.Errorf("%s: SQLSTATE %q (%v), want the proxy's %s", q, got, err, code)
	}
}

// sidecarStack serves carts, a sidecar table (its registry carts_ttl,
// lifetime 2h, refresh_on_update), and shop.carts, another schema's table
// of the same name without a rule.
func sidecarStack(t *testing.T) *stack {
	t.Helper()
	return newStack(t, stackOptions{
		rules: []ttl.Rule{{Table: "carts", Kind: ttl.KindSidecar, SidecarTable: "carts_ttl", KeyColumns: []string{"id"},
			DefaultTTL: 2 * time.Hour, RefreshOnUpdate: true}},
		setup: []string{
			`CREATE TABLE carts (id bigserial PRIMARY KEY, user_id int, status varchar(10) DEFAULT 'new', total numeric(8,2))`,
			`CREATE TABLE carts_ttl (id bigint PRIMARY KEY, expires_at timestamptz NOT NULL)`,
			// 1000: live, expiring in a minute; 1001: expired; 1002: never expires.
			`INSERT INTO carts (id, user_id, status) VALUES (1000, 1, 'live'), (1001, 1, 'expired'), (1002, 1, 'forever')`,
			`INSERT INTO carts_ttl VALUES (1000, now() + interval '1 minute'), (1001, now() - interval '1 minute')`,
			`CREATE SCHEMA shop`,
			`CREATE TABLE shop.carts (id int, status text)`,
		},
	})
}

// ormQuery runs q with args and returns its RowDescription, rows and
// command tag.
func ormQuery(conn *pgx.Conn, q string, args ...any) ([]pgconn.FieldDescription, [][]any, string, error) {
	rows, err := conn.Query(context.Background(), q, args...)
	if err != nil {
		return nil, nil, "", err
	}
	defer rows.Close()
	fields := append([]pgconn.FieldDescription(nil), rows.FieldDescriptions()...)
	var out [][]any
	for rows.Next() {
		v, err := rows.Values()
		if err != nil {
			return nil, nil, "", err
		}
		out = append(out, v)
	}
	rows.Close()
	return fields, out, rows.CommandTag().String(), rows.Err()
}

// registered returns the seconds from now to the registry's expiry of
// cart id, or -1 without a registry row.
func registered(t *testing.T, direct *pgx.Conn, id int64) float64 {
	t.Helper()
	var secs *float64
	err := direct.QueryRow(context.Background(), `SELECT extract(epoch FROM expires_at - now())::float8 FROM carts_ttl WHERE id = $1`, id).Scan(&secs)
	if errors.Is(err, pgx.ErrNoRows) {
		return -1
	}
	if err != nil {
		t.Fatal(err)
	}
	return *secs
}

// TestSidecarInsertReturning: an INSERT … RETURNING into a sidecar table
// (Knex's `returning "id"`, pgjdbc's `RETURNING *`, multi-row VALUES,
// INSERT … SELECT, an upsert) registers each row it inserts for the rule's
// lifetime in the same statement, and answers as the INSERT does directly:
// the same RowDescription (names, types, modifiers), rows and command tag.
// An upsert refreshes a live row it updates and leaves an expired one, which
// it does not return. Both query protocols.
func TestSidecarInsertReturning(t *testing.T) {
	s := sidecarStack(t)
	ctx := context.Background()
	direct := s.connect(s.direct)
	// The RowDescription a direct INSERT gives, rolled back.
	directFields := func(q string, args ...any) []pgconn.FieldDescription {
		tx, err := direct.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		f, _, _, err := ormQuery(tx.Conn(), q, args...)
		if err != nil {
			t.Fatalf("%s directly: %v", q, err)
		}
		return f
	}
	const lifetime = 2 * 3600
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		conn := s.connectMode(mode)
		for _, c := range []struct {
			q    string
			args []any
			n    int
		}{
			{`insert into "carts" ("user_id") values ($1) returning "id"`, []any{7}, 1},
			{`INSERT INTO carts (user_id, status) VALUES ($1, $2) RETURNING *`, []any{8, "x"}, 1},
			{`INSERT INTO "public"."carts" ("user_id","total") VALUES ($1,$2) RETURNING "public"."carts"."id", "public"."carts"."total"`, []any{9, 1.5}, 1},
			{`INSERT INTO carts AS c (user_id) VALUES (1), (2), (3) RETURNING c.id, status AS s, total::text, 7`, nil, 3},
			{`INSERT INTO carts (user_id) SELECT g FROM generate_series(1, 4) g RETURNING id, user_id`, nil, 4},
		} {
			fields, rows, tag, err := ormQuery(conn, c.q, c.args...)
			if err != nil {
				t.Errorf("mode %v: %s: %v", mode, c.q, err)
				continue
			}
			if want := fmt.Sprintf("INSERT 0 %d", c.n); tag != want || len(rows) != c.n {
				t.Errorf("mode %v: %s: tag %q, %d rows, want %q", mode, c.q, tag, len(rows), want)
			}
			want := directFields(c.q, c.args...)
			if len(fields) != len(want) {
				t.Errorf("mode %v: %s: %d fields, direct %d", mode, c.q, len(fields), len(want))
				continue
			}
			for i, f := range fields {
				d := want[i]
				if f.Name != d.Name || f.DataTypeOID != d.DataTypeOID || f.TypeModifier != d.TypeModifier {
					t.Errorf("mode %v: %s: field %d = %s oid %d typmod %d, direct %s oid %d typmod %d",
						mode, c.q, i, f.Name, f.DataTypeOID, f.TypeModifier, d.Name, d.DataTypeOID, d.TypeModifier)
				}
			}
			// Each returned key is registered for the lifetime.
			for _, row := range rows {
				id, ok := row[0].(int64)
				if !ok {
					t.Fatalf("mode %v: %s: first column %T", mode, c.q, row[0])
				}
				if secs := registered(t, direct, id); secs < lifetime-60 || secs > lifetime+1 {
					t.Errorf("mode %v: %s: cart %d expires in %.0fs, want about %ds", mode, c.q, id, secs, lifetime)
				}
			}
		}
		// An upsert of the live cart refreshes its expiry; of the expired
		// one it neither updates nor returns nor registers it.
		q := `INSERT INTO carts (id, user_id) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET user_id = excluded.user_id RETURNING id, user_id`
		if _, err := direct.Exec(ctx, `UPDATE carts_ttl SET expires_at = now() + interval '1 minute' WHERE id = 1000`); err != nil {
			t.Fatal(err)
		}
		_, rows, tag, err := ormQuery(conn, q, int64(1000), 50)
		if err != nil || tag != "INSERT 0 1" || len(rows) != 1 || rows[0][1] != int32(50) {
			t.Errorf("mode %v: upsert of the live cart: %v %q %v", mode, rows, tag, err)
		}
		if secs := registered(t, direct, 1000); secs < lifetime-60 {
			t.Errorf("mode %v: upsert of the live cart: expires in %.0fs, want it refreshed", mode, secs)
		}
		_, rows, tag, err = ormQuery(conn, q, int64(1001), 51)
		if err != nil || tag != "INSERT 0 0" || len(rows) != 0 {
			t.Errorf("mode %v: upsert of the expired cart: %v %q %v", mode, rows, tag, err)
		}
		if secs := registered(t, direct, 1001); secs > 0 {
			t.Errorf("mode %v: upsert of the expired cart brought it back (expires in %.0fs)", mode, secs)
		}
		// The attacker's: a RETURNING that reads the table sees its live
		// rows only; one that reads the registry is refused.
		var live int64
		if err := direct.QueryRow(ctx, `SELECT count(*) FROM carts c WHERE NOT EXISTS (SELECT FROM carts_ttl r WHERE r.id = c.id AND r.expires_at < now())`).Scan(&live); err != nil {
			t.Fatal(err)
		}
		_, rows, _, err = ormQuery(conn, `INSERT INTO carts (user_id) VALUES (60) RETURNING (SELECT count(*) FROM carts) AS n, (SELECT max(status) FROM carts WHERE id = 1001) AS gone`)
		if err != nil || len(rows) != 1 || rows[0][0] != live || rows[0][1] != nil {
			t.Errorf("mode %v: RETURNING reading the table: %v %v, want %d live rows and no expired status", mode, rows, err, live)
		}
		checkRefused(t, conn, `INSERT INTO carts (user_id) VALUES (61) RETURNING (SELECT max(expires_at) FROM carts_ttl) AS e`, "42501")
		checkRefused(t, conn, `WITH i AS (INSERT INTO carts (user_id) VALUES (62) RETURNING id) SELECT * FROM i`, "0A000")
		// UPDATE … RETURNING refreshes and answers as written.
		if _, err := direct.Exec(ctx, `UPDATE carts_ttl SET expires_at = now() + interval '1 minute' WHERE id = 1000`); err != nil {
			t.Fatal(err)
		}
		uq := `UPDATE "public"."carts" SET "status" = $1 WHERE ("public"."carts"."id" = $2 AND 1=1) RETURNING *, "public"."carts"."status" AS s`
		var fields []pgconn.FieldDescription
		fields, rows, tag, err = ormQuery(conn, uq, "paid", int64(1000))
		if err != nil || len(rows) != 1 || tag != "INSERT 0 1" {
			t.Errorf("mode %v: %s: %v %q %v", mode, uq, rows, tag, err)
		} else if want := directFields(uq, "paid", int64(1000)); len(fields) != len(want) {
			t.Errorf("mode %v: %s: %d fields, direct %d", mode, uq, len(fields), len(want))
		} else {
			for i, f := range fields {
				if d := want[i]; f.Name != d.Name || f.DataTypeOID != d.DataTypeOID || f.TypeModifier != d.TypeModifier {
					t.Errorf("mode %v: %s: field %d = %s oid %d typmod %d, direct %s oid %d typmod %d",
						mode, uq, i, f.Name, f.DataTypeOID, f.TypeModifier, d.Name, d.DataTypeOID, d.TypeModifier)
				}
			}
		}
		if secs := registered(t, direct, 1000); secs < lifetime-60 {
			t.Errorf("mode %v: %s: expires in %.0fs, want it refreshed", mode, uq, secs)
		}
		if _, rows, _, err := ormQuery(conn, uq, "paid", int64(1001)); err != nil || len(rows) != 0 {
			t.Errorf("mode %v: %s of the expired cart: %v %v", mode, uq, rows, err)
		}
		// Another schema's table of the name is no sidecar table.
		if _, rows, tag, err := ormQuery(conn, `INSERT INTO shop.carts VALUES (1, 'x') RETURNING *`); err != nil || tag != "INSERT 0 1" || len(rows) != 1 {
			t.Errorf("mode %v: shop.carts: %v %q %v", mode, rows, tag, err)
		}
	}
}

// TestRefreshOnUpdateEveryKind: refresh_on_update moves a live row's
// expiry to now() + default_ttl on UPDATE (as ORMs write it, by key, with
// parameters) and on ON CONFLICT DO UPDATE, for every rule kind: an expiry
// column, a derived rule's per-row lifetime in seconds and as an interval
// (counted from the base column, so the lifetime grows by the row's age),
// a sidecar registry (a row without a registry row gets one), and an
// expiring column's own expiry. Expired rows are neither updated nor
// brought back. The row count is the UPDATE's. Both query protocols.
func TestRefreshOnUpdateEveryKind(t *testing.T) {
	hour := time.Hour
	rules := []ttl.Rule{
		{Table: "sess", DefaultTTL: hour, RefreshOnUpdate: true},
		{Table: "jobs", Kind: ttl.KindDerived, BaseColumn: "created_at", IntervalColumn: "ttl_seconds", IntervalSeconds: true, DefaultTTL: hour, RefreshOnUpdate: true},
		{Table: "tasks", Kind: ttl.KindDerived, BaseColumn: "created_at", IntervalColumn: "lifetime", DefaultTTL: hour, RefreshOnUpdate: true},
		{Table: "carts", Kind: ttl.KindSidecar, SidecarTable: "carts_ttl", KeyColumns: []string{"id"}, DefaultTTL: hour, RefreshOnUpdate: true},
		{Table: "customers", Kind: ttl.KindNone, Columns: []ttl.ColumnRule{{Column: "phone", ExpiresAtColumn: "phone_expires_at", DefaultTTL: hour, RefreshOnUpdate: true}}},
	}
	s := newStack(t, stackOptions{rules: rules, setup: []string{
		`CREATE TABLE sess (id int PRIMARY KEY, note text, expires_at timestamptz)`,
		`CREATE TABLE jobs (id int PRIMARY KEY, note text, created_at timestamptz, ttl_seconds int)`,
		`CREATE TABLE tasks (id int PRIMARY KEY, note text, created_at timestamptz, lifetime interval)`,
		`CREATE TABLE carts (id int PRIMARY KEY, note text)`,
		`CREATE TABLE carts_ttl (id int PRIMARY KEY, expires_at timestamptz NOT NULL)`,
		`CREATE TABLE customers (id int PRIMARY KEY, note text, phone text, phone_expires_at timestamptz)`,
	}})
	ctx := context.Background()
	direct := s.connect(s.direct)
	// Row 1 is live and expires in ten minutes (its row, or its phone), 2
	// has expired, 3 never expires.
	reset := `TRUNCATE sess, jobs, tasks, carts, carts_ttl, customers;
		INSERT INTO sess VALUES (1, 'a', now() + interval '10 minutes'), (2, 'b', now() - interval '1 minute'), (3, 'c', NULL);
		INSERT INTO jobs VALUES (1, 'a', now() - interval '3 hours', 3 * 3600 + 600), (2, 'b', now() - interval '3 hours', 3600), (3, 'c', NULL, NULL);
		INSERT INTO tasks VALUES (1, 'a', now() - interval '3 hours', interval '3 hours 10 minutes'), (2, 'b', now() - interval '3 hours', interval '1 hour'), (3, 'c', now(), NULL);
		INSERT INTO carts VALUES (1, 'a'), (2, 'b'), (3, 'c');
		INSERT INTO carts_ttl VALUES (1, now() + interval '10 minutes'), (2, now() - interval '1 minute');
		INSERT INTO customers VALUES (1, 'a', '555-1', now() + interval '10 minutes'), (2, 'b', '555-2', now() - interval '1 minute'), (3, 'c', '555-3', NULL)`
	// The seconds from now to each row's expiry (NULL: never).
	expiry := map[string]string{
		"sess":      `SELECT id, extract(epoch FROM expires_at - now())::int FROM sess ORDER BY id`,
		"jobs":      `SELECT id, extract(epoch FROM created_at + ttl_seconds * interval '1 second' - now())::int FROM jobs ORDER BY id`,
		"tasks":     `SELECT id, extract(epoch FROM created_at + lifetime - now())::int FROM tasks ORDER BY id`,
		"carts":     `SELECT c.id, extract(epoch FROM r.expires_at - now())::int FROM carts c LEFT JOIN carts_ttl r ON r.id = c.id ORDER BY c.id`,
		"customers": `SELECT id, extract(epoch FROM phone_expires_at - now())::int FROM customers ORDER BY id`,
	}
	read := func(table string) map[int32]*int32 {
		rows, err := direct.Query(ctx, expiry[table])
		if err != nil {
			t.Fatal(err)
		}
		out := map[int32]*int32{}
		for rows.Next() {
			var id int32
			var secs *int32
			if err := rows.Scan(&id, &secs); err != nil {
				t.Fatal(err)
			}
			out[id] = secs
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	near := func(p *int32, want int32) bool { return p != nil && *p > want-60 && *p <= want+1 }
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		conn := s.connectMode(mode)
		for _, table := range []string{"sess", "jobs", "tasks", "carts", "customers"} {
			for _, upsert := range []bool{false, true} {
				if _, err := direct.Exec(ctx, reset); err != nil {
					t.Fatal(err)
				}
				before := read(table)
				for _, id := range []int32{1, 2, 3} {
					q := fmt.Sprintf(`UPDATE %[1]s SET note = $1 WHERE %[1]s.id = $2`, table)
					args := []any{"touched", id}
					if upsert {
						q = fmt.Sprintf(`INSERT INTO %s (id, note) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET note = excluded.note`, table)
						args = []any{id, "touched"}
					}
					tag, err := conn.Exec(ctx, q, args...)
					if err != nil {
						t.Errorf("mode %v: %s (%d): %v", mode, q, id, err)
						continue
					}
					// An expired row is not updated; by ON CONFLICT it is
					// neither updated nor inserted.
					want := int64(1)
					if id == 2 && table != "customers" {
						want = 0
					}
					if tag.RowsAffected() != want {
						t.Errorf("mode %v: %s (%d): %d rows, want %d (%s)", mode, q, id, tag.RowsAffected(), want, tag)
					}
				}
				after := read(table)
				what := table
				if upsert {
					what += " upserted"
				}
				// The live row's expiry moves to an hour from now.
				if !near(after[1], 3600) {
					t.Errorf("mode %v: %s: live row expires in %s s, want 3600 (before %s)", mode, what, str(after[1]), str(before[1]))
				}
				// The expired row stays expired (its phone too).
				if after[2] == nil || *after[2] > 0 {
					t.Errorf("mode %v: %s: expired row expires in %s s, want still expired", mode, what, str(after[2]))
				}
				// A row that never expired: an expiry column or a
				// registry gets one; a derived row without a base keeps
				// none; a NULL phone expiry gets one (the value is not
				// NULL).
				switch table {
				case "jobs", "tasks":
					if table == "jobs" && after[3] != nil {
						t.Errorf("mode %v: %s: row without a base expires in %s s", mode, what, str(after[3]))
					}
				default:
					if !near(after[3], 3600) {
						t.Errorf("mode %v: %s: row that never expired expires in %s s, want 3600", mode, what, str(after[3]))
					}
				}
			}
		}
	}
}

// TestExpiringColumnDerivedStar: through the proxy, derived tables and CTEs
// built with `*`, `t.*` or `TABLE t` over a table with expiring columns
// have known columns at any depth, so unqualified names over them are
// served with the expired values NULL; xmlforest keeps an element's name;
// TABLESAMPLE of a table with no row rule is served. Both protocols.
func TestExpiringColumnDerivedStar(t *testing.T) {
	s := scopeStack(t)
	direct := s.connect(s.direct)
	cases := []scopeCase{
		{`SELECT note, id FROM (SELECT * FROM orders WHERE id > 1) s ORDER BY id`, `SELECT note, id FROM (SELECT * FROM ref WHERE id > 1) s ORDER BY id`},
		{`WITH t AS (SELECT * FROM orders) SELECT client_ip, count(*) FROM t GROUP BY client_ip ORDER BY 1`,
			`WITH t AS (SELECT * FROM ref) SELECT client_ip, count(*) FROM t GROUP BY client_ip ORDER BY 1`},
		{`SELECT a, b, note FROM (TABLE orders) AS s (a, b) ORDER BY a`, `SELECT a, b, note FROM (TABLE ref) AS s (a, b) ORDER BY a`},
		{`SELECT note FROM (SELECT * FROM (SELECT o.* FROM orders o) a) b WHERE note IS NULL`, `SELECT note FROM (SELECT * FROM (SELECT o.* FROM ref o) a) b WHERE note IS NULL`},
		{`TABLE orders ORDER BY id`, `TABLE ref ORDER BY id`},
		{`SELECT c.name, note FROM customers c JOIN (SELECT * FROM orders) s ON s.id = c.id ORDER BY 1`,
			`SELECT c.name, note FROM customers c JOIN (SELECT * FROM ref) s ON s.id = c.id ORDER BY 1`},
		{`SELECT note::text FROM orders UNION ALL SELECT name FROM customers ORDER BY 1`, `SELECT note::text FROM ref UNION ALL SELECT name FROM customers ORDER BY 1`},
		{`SELECT xmlforest(id, note, client_ip AS ip)::text FROM orders ORDER BY id`, `SELECT xmlforest(id, note, client_ip AS ip)::text FROM ref ORDER BY id`},
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		conn := s.connectMode(mode)
		for _, c := range cases {
			checkScope(t, mode, conn, direct, c)
		}
		// The attacker's: a derived table over a plain table beside the
		// TTL table, and a correlated name beside a function, stay refused.
		for _, q := range []string{
			`SELECT note FROM (SELECT * FROM customers) s, orders`,
			`SELECT (SELECT client_ip FROM generate_series(1, 2) g LIMIT 1) FROM orders`,
			`UPDATE orders SET id = id RETURNING (SELECT client_ip FROM generate_series(1, 2) g LIMIT 1) AS c`,
		} {
			checkRefused(t, conn, q, "0A000")
		}
	}
	// TABLESAMPLE of a table of expiring columns only.
	n := newStack(t, stackOptions{
		rules: []ttl.Rule{{Table: "contacts", Kind: ttl.KindNone, Columns: []ttl.ColumnRule{{Column: "phone", ExpiresAtColumn: "phone_expires_at"}}}},
		setup: []string{`CREATE TABLE contacts (id int, phone text, phone_expires_at timestamptz)`,
			`INSERT INTO contacts VALUES (1, 'live', now() + interval '1 day'), (2, 'gone', now() - interval '1 day')`},
	})
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		conn := n.connectMode(mode)
		for q, want := range map[string]string{
			`SELECT count(*) FROM contacts TABLESAMPLE SYSTEM (100)`:                                             "2",
			`SELECT string_agg(coalesce(phone, '-'), ',' ORDER BY id) FROM contacts TABLESAMPLE BERNOULLI (100)`: "live,-",
		} {
			var got string
			if err := conn.QueryRow(t.Context(), q).Scan(&got); err != nil || got != want {
				t.Errorf("mode %v: %s: %q %v, want %q", mode, q, got, err, want)
			}
		}
	}
}
