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
// one case's writes do not reach the next: in the simple protocol, and a
// refused one in the extended protocol too.
func runAttacks(t *testing.T, conn *pgx.Conn, cases []attack) {
	t.Helper()
	for _, c := range cases {
		runAttack(t, conn, c, pgx.QueryExecModeSimpleProtocol)
		if c.code != "" {
			runAttack(t, conn, c, pgx.QueryExecModeDescribeExec)
		}
	}
}

func runAttack(t *testing.T, conn *pgx.Conn, c attack, mode pgx.QueryExecMode) {
	t.Helper()
	ctx := context.Background()
	name := c.name
	if mode != pgx.QueryExecModeSimpleProtocol {
		name += " (extended)"
	}
	t.Run(name, func(t *testing.T) {
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
			rows, qerr := conn.Query(ctx, q, mode)
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
		{name: "copy parent", sql: `COPY p TO STDOUT`, code: refused},
		{name: "join through USING", sql: `DELETE FROM sessions_child s USING p WHERE p.id = s.id RETURNING p.secret`, code: refused},
		{name: "create table as", sql: `CREATE TABLE atk_inherit.snap AS SELECT * FROM p`, code: refused},
		{name: "explain analyze", sql: `EXPLAIN ANALYZE SELECT * FROM p`, code: refused},
		{name: "function over parent", sql: `CREATE FUNCTION atk_inherit.f() RETURNS SETOF text LANGUAGE sql AS 'SELECT secret FROM public.p';
SELECT atk_inherit.f()`, code: refused},
		{name: "DO block over parent", sql: `DO $$ BEGIN IF (SELECT count(*) FROM p) > 2 THEN RAISE EXCEPTION 'leak'; END IF; END $$`, code: refused},
		{name: "CTE named like the parent", sql: `WITH p AS (SELECT 7 AS id) SELECT id FROM p`, want: "7"},
		{name: "lock parent", sql: `LOCK TABLE p IN SHARE MODE;
SELECT 1`, want: "1"},
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
		{name: "data-modifying CTE", sql: `WITH u AS (UPDATE customers SET phone_exp = 'infinity' WHERE id = 2 RETURNING phone) SELECT phone FROM u`, want: "NULL"},
		{name: "expiry from a subquery", sql: `UPDATE customers SET phone_exp = (SELECT max(email_exp) + interval '10 years' FROM customers) WHERE id = 2;
SELECT phone FROM customers WHERE id = 2`, want: "NULL"},
		{name: "copied out before the clock moves", sql: `UPDATE customers SET other = phone, phone_exp = 'infinity' WHERE id = 2 RETURNING other`, want: "NULL"},
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

// TestAttackSidecarRegistry: the registry of a sidecar rule is an ordinary
// table to the server. Read, it lists expired keys; emptied or changed, it
// brings expired rows back. Every client statement that names it is
// refused (42501), while the proxy's own lookups and registrations work.
func TestAttackSidecarRegistry(t *testing.T) {
	rules := []ttl.Rule{{Table: "carts", Kind: ttl.KindSidecar, SidecarTable: "carts_ttl", KeyColumns: []string{"id"},
		DefaultTTL: time.Hour, RefreshOnUpdate: true}}
	_, direct, conn := attackStack(t, "atk_sidecar", rules,
		`CREATE TABLE carts (id int PRIMARY KEY, secret text)`,
		`CREATE TABLE carts_ttl (id int PRIMARY KEY, expires_at timestamptz NOT NULL)`,
		`INSERT INTO carts VALUES (1, 'live'), (2, 'expired')`,
		`INSERT INTO carts_ttl VALUES (1, now() + interval '1 day'), (2, now() - interval '1 day')`,
	)
	const refused = "42501"
	runAttacks(t, conn, []attack{
		{name: "read registry", sql: `SELECT id FROM carts_ttl`, code: refused},
		{name: "read registry qualified", sql: `SELECT id FROM public.carts_ttl WHERE expires_at < now()`, code: refused},
		{name: "delete registry then read", sql: `DELETE FROM carts_ttl WHERE id = 2;
SELECT secret FROM carts ORDER BY id`, code: refused},
		{name: "update registry", sql: `UPDATE carts_ttl SET expires_at = 'infinity' RETURNING id`, code: refused},
		{name: "truncate registry", sql: `TRUNCATE carts_ttl`, code: refused},
		{name: "copy registry", sql: `COPY carts_ttl TO STDOUT`, code: refused},
		{name: "copy query of registry", sql: `COPY (SELECT id FROM carts_ttl) TO STDOUT`, code: refused},
		{name: "registry in a subquery", sql: `SELECT count(*) FROM carts WHERE id NOT IN (SELECT id FROM carts_ttl)`, code: refused},
		{name: "view over registry", sql: `CREATE VIEW atk_sidecar.v AS SELECT id FROM carts_ttl`, code: refused},
		{name: "function over registry", sql: `CREATE FUNCTION atk_sidecar.f() RETURNS SETOF int LANGUAGE sql AS 'SELECT id FROM carts_ttl'`, code: refused},
		{name: "registration shape by hand", sql: `WITH _ttl_ins AS (INSERT INTO carts VALUES (9, 'x') RETURNING id)
	INSERT INTO carts_ttl (id, expires_at) SELECT 2, 'infinity' FROM _ttl_ins ON CONFLICT (id) DO UPDATE SET expires_at = EXCLUDED.expires_at`, code: refused},
		// The proxy's own use of the registry.
		{name: "read", sql: `SELECT secret FROM carts ORDER BY id`, want: "live"},
		{name: "insert registers", sql: `INSERT INTO carts VALUES (3, 'new');
SELECT secret FROM carts ORDER BY id`, want: "live,new"},
		{name: "update", sql: `UPDATE carts SET secret = 'u' RETURNING id`, want: "1"},
		{name: "delete", sql: `DELETE FROM carts RETURNING id`, want: "1"},
	})
	var n int
	if err := direct.QueryRow(context.Background(), `SELECT count(*) FROM carts_ttl WHERE expires_at < now()`).Scan(&n); err != nil || n != 1 {
		t.Errorf("expired registry rows after the attacks: %d, %v; want 1", n, err)
	}
}

// TestAttackRenameTTLTable: DDL through the proxy that renames or moves a
// TTL table, or renames, drops or retypes its expiry column, or changes
// its inheritance or partitions, would leave it read unfiltered under a
// name the session's catalog does not know. The proxy refuses it (42501);
// the table's owner logs in as an ordinary role that owns it.
func TestAttackRenameTTLTable(t *testing.T) {
	rules := []ttl.Rule{
		{Table: "sessions", Kind: ttl.KindColumn, Column: "expires_at"},
		{Table: "ptab", Kind: ttl.KindColumn, Column: "expires_at"},
	}
	_, direct, conn := attackStack(t, "atk_rename", rules,
		`CREATE SCHEMA other`,
		`CREATE TABLE base (id int)`,
		`CREATE TABLE sessions (id int PRIMARY KEY, secret text, expires_at timestamptz, note text) INHERITS (base)`,
		`INSERT INTO sessions VALUES (1, 'live', now() + interval '1 day'), (2, 'expired', now() - interval '1 day')`,
		`CREATE TABLE ptab (id int, secret text, expires_at timestamptz) PARTITION BY RANGE (id)`,
		`CREATE TABLE ptab_1 PARTITION OF ptab FOR VALUES FROM (0) TO (100)`,
		`INSERT INTO ptab VALUES (1, 'live', now() + interval '1 day'), (2, 'expired', now() - interval '1 day')`,
		`CREATE TABLE other.loose (id int, secret text, expires_at timestamptz)`,
		`CREATE TABLE pview_src (id int, secret text)`,
	)
	// The login owns the tables: whether it may change them is the
	// server's to decide; what the proxy then serves is the proxy's.
	for _, q := range []string{`ALTER TABLE base OWNER TO atk_rename`, `ALTER TABLE sessions OWNER TO atk_rename`,
		`ALTER TABLE ptab OWNER TO atk_rename`, `ALTER TABLE ptab_1 OWNER TO atk_rename`, `ALTER TABLE other.loose OWNER TO atk_rename`, `ALTER TABLE pview_src OWNER TO atk_rename`,
		`GRANT CREATE, USAGE ON SCHEMA other TO atk_rename`, `GRANT CREATE ON SCHEMA public TO atk_rename`} {
		if _, err := direct.Exec(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	const refused = "42501"
	runAttacks(t, conn, []attack{
		{name: "rename then read", sql: `ALTER TABLE sessions RENAME TO s2;
SELECT secret FROM s2 ORDER BY id`, code: refused},
		{name: "rename if exists", sql: `ALTER TABLE IF EXISTS public.sessions RENAME TO s2`, code: refused},
		{name: "set schema then read", sql: `ALTER TABLE sessions SET SCHEMA other;
SELECT secret FROM other.sessions ORDER BY id`, code: refused},
		{name: "rename expiry column", sql: `ALTER TABLE sessions RENAME COLUMN expires_at TO e;
SELECT secret FROM sessions ORDER BY id`, code: refused},
		{name: "rename expiry column, TABLE form", sql: `ALTER TABLE sessions RENAME expires_at TO e`, code: refused},
		{name: "drop expiry column", sql: `ALTER TABLE sessions DROP COLUMN expires_at`, code: refused},
		{name: "retype expiry column", sql: `ALTER TABLE sessions ALTER COLUMN expires_at TYPE text`, code: refused},
		{name: "no inherit", sql: `ALTER TABLE sessions NO INHERIT base`, code: refused},
		{name: "inherit a plain table", sql: `ALTER TABLE sessions INHERIT pview_src`, code: refused},
		{name: "inherit into a TTL table", sql: `ALTER TABLE other.loose INHERIT sessions`, code: refused},
		{name: "detach partition then read", sql: `ALTER TABLE ptab DETACH PARTITION ptab_1;
SELECT secret FROM ptab_1 ORDER BY id`, code: refused},
		{name: "rename partition then read", sql: `ALTER TABLE ptab_1 RENAME TO p1;
SELECT secret FROM p1 ORDER BY id`, code: refused},
		{name: "rename the ancestor", sql: `ALTER TABLE base RENAME TO b2`, code: refused},
		// What leaves the rule's names alone passes.
		{name: "rename another column", sql: `ALTER TABLE sessions RENAME COLUMN note TO remark;
SELECT secret FROM sessions ORDER BY id`, want: "live"},
		{name: "add a column", sql: `ALTER TABLE sessions ADD COLUMN extra int;
SELECT secret FROM sessions ORDER BY id`, want: "live"},
		{name: "rename a plain table", sql: `ALTER TABLE other.loose RENAME TO loose2`, want: ""},
	})
}

// TestAttackRowRevival: a write of an expired row's clock (its expiry
// column, a derived rule's base or interval column) reaches no expired
// row: UPDATE, DELETE, ON CONFLICT DO UPDATE and MERGE carry the live
// condition, so the row stays expired and nothing of it is returned.
func TestAttackRowRevival(t *testing.T) {
	rules := []ttl.Rule{
		{Table: "sessions", Kind: ttl.KindColumn, Column: "expires_at"},
		{Table: "jobs", Kind: ttl.KindDerived, BaseColumn: "created_at", IntervalColumn: "ttl_seconds", IntervalSeconds: true},
	}
	_, direct, conn := attackStack(t, "atk_rowrev", rules,
		`CREATE TABLE sessions (id int PRIMARY KEY, secret text, expires_at timestamptz)`,
		`INSERT INTO sessions VALUES (1, 'live', now() + interval '1 day'), (2, 'expired', now() - interval '1 day')`,
		`CREATE TABLE jobs (id int PRIMARY KEY, secret text, created_at timestamptz, ttl_seconds int)`,
		`INSERT INTO jobs VALUES (1, 'live', now(), 3600), (2, 'expired', now() - interval '2 hours', 3600)`,
	)
	runAttacks(t, conn, []attack{
		{name: "expiry to infinity", sql: `UPDATE sessions SET expires_at = 'infinity' WHERE id = 2 RETURNING secret`, want: ""},
		{name: "expiry to NULL", sql: `UPDATE sessions SET expires_at = NULL RETURNING secret`, want: "live"},
		{name: "upsert expiry", sql: `INSERT INTO sessions VALUES (2, 'x', 'infinity') ON CONFLICT (id) DO UPDATE SET expires_at = EXCLUDED.expires_at RETURNING secret`, want: ""},
		{name: "merge expiry", sql: `MERGE INTO sessions s USING (SELECT 2 AS id) v ON s.id = v.id WHEN MATCHED THEN UPDATE SET expires_at = NULL;
SELECT secret FROM sessions ORDER BY id`, want: "live"},
		{name: "derived base moved", sql: `UPDATE jobs SET created_at = now() WHERE id = 2 RETURNING secret`, want: ""},
		{name: "derived interval moved", sql: `UPDATE jobs SET ttl_seconds = 1000000 RETURNING secret`, want: "live"},
		{name: "derived upsert", sql: `INSERT INTO jobs VALUES (2, 'x', now(), 1) ON CONFLICT (id) DO UPDATE SET created_at = now() RETURNING secret`, want: ""},
	})
	var n int
	if err := direct.QueryRow(context.Background(), `SELECT count(*) FROM sessions WHERE id = 2 AND expires_at < now()`).Scan(&n); err != nil || n != 1 {
		t.Errorf("expired session after the attacks: %d, %v", n, err)
	}
}
