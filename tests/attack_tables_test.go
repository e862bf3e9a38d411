package tests

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// Attacks through tables the rules do not name but that hold or reveal TTL
// rows (inheritance parents, the sidecar registry, renames) and through
// writes that would bring an expired column value back. Each runs as an
// ordinary login: DML grants on the application's tables, a schema of its
// own, no bypass role, no superuser.

const attackPassword = "atk-pw"

// attackStack starts a stack over setup (run directly, as the owner) and
// the login role, made before the proxy starts so that a transaction-mode
// proxy's auth_file holds it, with DML grants on every table of public and
// a schema of its own (its name). It returns the stack, the owner's direct
// connection and the role's connection through the proxy.
func attackStack(t *testing.T, role string, rules []ttl.Rule, setup ...string) (*stack, *pgx.Conn, *pgx.Conn) {
	t.Helper()
	all := append([]string{
		`SET password_encryption = 'scram-sha-256'`,
		`DO $$ BEGIN IF EXISTS (SELECT FROM pg_roles WHERE rolname = '` + role + `') THEN EXECUTE 'DROP OWNED BY ` + role + `'; EXECUTE 'DROP ROLE ` + role + `'; END IF; END $$`,
		`CREATE ROLE ` + role + ` LOGIN PASSWORD '` + attackPassword + `'`,
	}, setup...)
	all = append(all,
		`GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON ALL TABLES IN SCHEMA public TO `+role,
		`CREATE SCHEMA `+role+` AUTHORIZATION `+role,
		`ALTER ROLE `+role+` SET search_path = public, `+role)
	s := newStack(t, stackOptions{rules: rules, setup: all})
	t.Cleanup(func() {
		c := s.connect(s.direct)
		_, _ = c.Exec(context.Background(), `DROP OWNED BY `+role)
		_, _ = c.Exec(context.Background(), `DROP ROLE `+role)
	})
	cfg, err := pgx.ParseConfig(s.proxied)
	if err != nil {
		t.Fatal(err)
	}
	cfg.User, cfg.Password = role, attackPassword
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect as %s through the proxy: %v", role, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return s, s.connect(s.direct), conn
}

// attack is one statement an attacker sends: refused with code, or
// answered with want (ids' rendering of the first column).
type attack struct {
	name string
	sql  string
	code string // SQLSTATE expected; "" for success
	want string // with code "": the rows' first column, joined by ","
}

// runAttacks runs each case in a transaction rolled back after it, so that
// one case's writes do not reach the next.
func runAttacks(t *testing.T, conn *pgx.Conn, cases []attack) {
	t.Helper()
	ctx := context.Background()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
					t.Fatal(err)
				}
			}()
			var got []string
			var err error
			for _, q := range strings.Split(c.sql, ";\n") {
				rows, qerr := conn.Query(ctx, q)
				if qerr != nil {
					err = qerr
					break
				}
				got = got[:0]
				for rows.Next() {
					vals, verr := rows.Values()
					if verr != nil || len(vals) == 0 {
						got = append(got, "?")
						continue
					}
					if vals[0] == nil {
						got = append(got, "NULL")
					} else {
						got = append(got, strings.TrimSpace(strings.ReplaceAll(toString(vals[0]), "\n", " ")))
					}
				}
				rows.Close()
				if err = rows.Err(); err != nil {
					break
				}
			}
			switch {
			case c.code != "" && sqlstate(err) != c.code:
				t.Errorf("%s: got %v (rows %q), want SQLSTATE %s", c.sql, err, got, c.code)
			case c.code == "" && err != nil:
				t.Errorf("%s: %v", c.sql, err)
			case c.code == "" && strings.Join(got, ",") != c.want:
				t.Errorf("%s: rows %q, want %q", c.sql, strings.Join(got, ","), c.want)
			}
		})
	}
}

func toString(v any) string {
	if b, ok := v.([]byte); ok {
		return string(b)
	}
	return fmt.Sprint(v)
}

// TestAttackInheritanceParent: a plain table whose inheritance child (or
// grandchild, or one of two children) is a TTL table returns the child's
// rows when read without ONLY, and UPDATE or DELETE through it reach them.
// The proxy refuses it (0A000) in every position; ONLY reads its own rows.
func TestAttackInheritanceParent(t *testing.T) {
	rules := []ttl.Rule{
		{Table: "sessions_child", Kind: ttl.KindColumn, Column: "expires_at"},
		{Table: "pcols", Kind: ttl.KindNone, Columns: []ttl.ColumnRule{{Column: "secret", ExpiresAtColumn: "secret_exp"}}},
		{Table: "parts_ttl", Kind: ttl.KindColumn, Column: "expires_at"},
		{Table: "ptab", Kind: ttl.KindColumn, Column: "expires_at"},
	}
	_, direct, conn := attackStack(t, "atk_inherit", rules,
		`CREATE TABLE g (id int, secret text)`,
		`CREATE TABLE p (id int, secret text) INHERITS (g)`,
		`CREATE TABLE q (id int, secret text)`,
		`CREATE TABLE sessions_child (expires_at timestamptz) INHERITS (p, q)`,
		`INSERT INTO p VALUES (3, 'parent own')`,
		`INSERT INTO sessions_child VALUES (1, 'live', now() + interval '1 day'), (2, 'expired', now() - interval '1 day')`,
		// A child whose rule is column TTL.
		`CREATE TABLE cparent (id int, secret text)`,
		`CREATE TABLE pcols (secret_exp timestamptz) INHERITS (cparent)`,
		`INSERT INTO pcols VALUES (1, 'live', now() + interval '1 day'), (2, 'expired', now() - interval '1 day')`,
		// A plain partitioned table with a TTL partition.
		`CREATE TABLE proot (id int, secret text, expires_at timestamptz) PARTITION BY RANGE (id)`,
		`CREATE TABLE parts_ttl PARTITION OF proot FOR VALUES FROM (0) TO (100)`,
		`INSERT INTO proot VALUES (1, 'live', now() + interval '1 day'), (2, 'expired', now() - interval '1 day')`,
		// A partitioned TTL table keeps working through its root and its
		// partitions.
		`CREATE TABLE ptab (id int, secret text, expires_at timestamptz) PARTITION BY RANGE (id)`,
		`CREATE TABLE ptab_1 PARTITION OF ptab FOR VALUES FROM (0) TO (100)`,
		`INSERT INTO ptab VALUES (1, 'live', now() + interval '1 day'), (2, 'expired', now() - interval '1 day')`,
		// A view over the parent the owner made directly.
		`CREATE VIEW pview AS SELECT id, secret FROM p`,
		`CREATE VIEW ponly AS SELECT id, secret FROM ONLY p`,
	)
	if _, err := direct.Exec(context.Background(), `GRANT SELECT ON ALL TABLES IN SCHEMA public TO atk_inherit`); err != nil {
		t.Fatal(err)
	}
	const refused = "0A000"
	runAttacks(t, conn, []attack{
		{name: "select parent", sql: `SELECT secret FROM p ORDER BY id`, code: refused},
		{name: "select grandparent", sql: `SELECT secret FROM g ORDER BY id`, code: refused},
		{name: "select second parent", sql: `SELECT secret FROM public.q ORDER BY id`, code: refused},
		{name: "star syntax", sql: `SELECT secret FROM p* ORDER BY id`, code: refused},
		{name: "TABLE", sql: `TABLE p`, code: refused},
		{name: "subquery", sql: `SELECT (SELECT max(secret) FROM p WHERE id = 2)`, code: refused},
		{name: "copy query", sql: `COPY (SELECT secret FROM p) TO STDOUT`, code: refused},
		{name: "update returning", sql: `UPDATE p SET secret = secret WHERE id = 2 RETURNING secret`, code: refused},
		{name: "delete returning", sql: `DELETE FROM g WHERE id = 2 RETURNING secret`, code: refused},
		{name: "cursor", sql: `DECLARE c CURSOR FOR SELECT secret FROM p FOR UPDATE`, code: refused},
		{name: "merge", sql: `MERGE INTO p USING (SELECT 2 AS id) s ON p.id = s.id WHEN MATCHED THEN UPDATE SET secret = 'x'`, code: refused},
		{name: "view over parent", sql: `SELECT secret FROM pview`, code: refused},
		{name: "attacker's view over parent", sql: `CREATE VIEW atk_inherit.v AS SELECT secret FROM p`, code: refused},
		{name: "column TTL child's parent", sql: `SELECT secret FROM cparent ORDER BY id`, code: refused},
		{name: "partitioned root of a TTL partition", sql: `SELECT secret FROM proot ORDER BY id`, code: refused},
		{name: "insert into partitioned root", sql: `INSERT INTO proot VALUES (2, 'x', now()) RETURNING secret`, code: refused},
		{name: "only parent", sql: `SELECT secret FROM ONLY p ORDER BY id`, want: "parent own"},
		{name: "only parent update", sql: `UPDATE ONLY p SET secret = 'x' RETURNING id`, want: "3"},
		{name: "view over only parent", sql: `SELECT secret FROM ponly`, want: "parent own"},
		{name: "child", sql: `SELECT secret FROM sessions_child ORDER BY id`, want: "live"},
		{name: "partition", sql: `SELECT secret FROM parts_ttl ORDER BY id`, want: "live"},
		{name: "partitioned TTL root", sql: `SELECT secret FROM ptab ORDER BY id`, want: "live"},
		{name: "partition of TTL root", sql: `SELECT secret FROM ptab_1 ORDER BY id`, want: "live"},
		{name: "cursor over child", sql: `DECLARE c CURSOR FOR SELECT id FROM sessions_child ORDER BY id FOR UPDATE;
FETCH 1 FROM c;
UPDATE sessions_child SET secret = 'c' WHERE CURRENT OF c RETURNING secret`, want: "c"},
	})
}

// TestAttackColumnRevival: a write that moves an expiring value's clock
// (its expiry column, or a derived value's base column) without writing
// the value itself must not bring an expired value back: the value is
// written as it reads (NULL once expired) in the same statement. Every
// read of the value in SET, WHERE and RETURNING is its live value too.
func TestAttackColumnRevival(t *testing.T) {
	rules := []ttl.Rule{{Table: "customers", Kind: ttl.KindNone, Columns: []ttl.ColumnRule{
		{Column: "phone", ExpiresAtColumn: "phone_exp"},
		{Column: "email", ExpiresAtColumn: "email_exp", DefaultTTL: time.Hour},
		{Column: "note", BaseColumn: "created_at", ExpireAfter: time.Hour},
	}}}
	_, direct, conn := attackStack(t, "atk_colrev", rules,
		`CREATE TABLE customers (id int PRIMARY KEY, phone text, phone_exp timestamptz, email text, email_exp timestamptz,
			note text, created_at timestamptz, other text)`,
		// 1: live values; 2: expired values.
		`INSERT INTO customers VALUES
			(1, 'p1', now() + interval '1 day', 'e1', now() + interval '1 day', 'n1', now(), NULL),
			(2, 'p2', now() - interval '1 day', 'e2', now() - interval '1 day', 'n2', now() - interval '2 hours', NULL)`,
	)
	runAttacks(t, conn, []attack{
		{name: "expiry to infinity", sql: `UPDATE customers SET phone_exp = 'infinity' WHERE id = 2 RETURNING phone`, want: "NULL"},
		{name: "expiry to infinity then read", sql: `UPDATE customers SET phone_exp = 'infinity' WHERE id = 2;
SELECT phone FROM customers WHERE id = 2`, want: "NULL"},
		{name: "expiry to NULL", sql: `UPDATE customers SET phone_exp = NULL WHERE id = 2;
SELECT phone FROM customers WHERE id = 2`, want: "NULL"},
		{name: "expiry with default_ttl", sql: `UPDATE customers SET email_exp = NULL WHERE id = 2;
SELECT email FROM customers WHERE id = 2`, want: "NULL"},
		{name: "base column moved", sql: `UPDATE customers SET created_at = now() WHERE id = 2;
SELECT note FROM customers WHERE id = 2`, want: "NULL"},
		{name: "self assignment", sql: `UPDATE customers SET phone = phone, phone_exp = 'infinity' WHERE id = 2;
SELECT phone FROM customers WHERE id = 2`, want: "NULL"},
		{name: "moved to another column", sql: `UPDATE customers SET other = phone WHERE id = 2 RETURNING other`, want: "NULL"},
		// A value read in a multi-column SET's row is refused (a reading
		// the proxy does not rewrite), the clock written there is guarded.
		{name: "multi-column SET", sql: `UPDATE customers SET (other, phone_exp) = (phone, 'infinity') WHERE id = 2`, code: "0A000"},
		{name: "multi-column swap", sql: `UPDATE customers SET (phone, phone_exp) = (phone, 'infinity') WHERE id = 2`, code: "0A000"},
		{name: "multi-column expiry", sql: `UPDATE customers SET (other, phone_exp) = ('x', 'infinity') WHERE id = 2;
SELECT phone FROM customers WHERE id = 2`, want: "NULL"},
		{name: "multi-column subselect", sql: `UPDATE customers SET (phone_exp, other) = (SELECT 'infinity'::timestamptz, 'x') WHERE id = 2;
SELECT phone FROM customers WHERE id = 2`, want: "NULL"},
		{name: "where reads the value", sql: `UPDATE customers SET other = 'hit' WHERE phone = 'p2' RETURNING id`, want: ""},
		{name: "on conflict excluded expiry", sql: `INSERT INTO customers (id, phone_exp) VALUES (2, 'infinity')
	ON CONFLICT (id) DO UPDATE SET phone_exp = EXCLUDED.phone_exp;
SELECT phone FROM customers WHERE id = 2`, want: "NULL"},
		{name: "on conflict returning", sql: `INSERT INTO customers AS c (id) VALUES (2)
	ON CONFLICT (id) DO UPDATE SET phone_exp = NULL RETURNING c.phone`, want: "NULL"},
		{name: "on conflict base column", sql: `INSERT INTO customers (id) VALUES (2)
	ON CONFLICT (id) DO UPDATE SET created_at = now();
SELECT note FROM customers WHERE id = 2`, want: "NULL"},
		{name: "merge expiry", sql: `MERGE INTO customers c USING (SELECT 2 AS id) s ON c.id = s.id
	WHEN MATCHED THEN UPDATE SET phone_exp = 'infinity';
SELECT phone FROM customers WHERE id = 2`, code: "0A000"},
		{name: "update from expiry", sql: `UPDATE customers c SET phone_exp = 'infinity' FROM (SELECT 2 AS id) s WHERE c.id = s.id;
SELECT phone FROM customers WHERE id = 2`, code: "0A000"},
		// Live values stay live when their clock moves.
		{name: "live expiry moved", sql: `UPDATE customers SET phone_exp = 'infinity' WHERE id = 1 RETURNING phone`, want: "p1"},
		{name: "live base moved", sql: `UPDATE customers SET created_at = now() WHERE id = 1 RETURNING note`, want: "n1"},
		{name: "live on conflict", sql: `INSERT INTO customers (id) VALUES (1)
	ON CONFLICT (id) DO UPDATE SET phone_exp = NULL RETURNING phone`, want: "p1"},
	})
	// An expired value stays unreadable directly too: it was nulled, or
	// its expiry stays past.
	var n int
	if err := direct.QueryRow(context.Background(), `SELECT count(*) FROM customers WHERE id = 2
		AND phone IS NOT NULL AND (phone_exp IS NULL OR phone_exp >= now())`).Scan(&n); err != nil || n != 0 {
		t.Errorf("expired phone live after the attacks: %d, %v", n, err)
	}
}
