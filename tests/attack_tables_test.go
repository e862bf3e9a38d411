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
