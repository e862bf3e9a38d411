package tests

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/proxy"
	"github.com/ttlproxy/ttlproxy/ttl"
)

// Attacks on the names the proxy writes and on the way it reads the names a
// client writes, as an ordinary login would make them: DML grants on the TTL
// tables and a schema of its own, no bypass role, no superuser.

// attacker is the ordinary login the attacks run as.
const (
	attacker         = "ttl_attacker"
	attackerPassword = "att4ck-pw"
)

// namesRules are one TTL table of every rule kind and one with an
// expiring column.
var namesRules = []ttl.Rule{
	sessionsRule,
	{Table: "events", Kind: ttl.KindDerived, BaseColumn: "created_at", ExpireAfter: time.Hour},
	{Table: "tokens", Kind: ttl.KindSidecar, SidecarTable: "token_reg", KeyColumns: []string{"id"}},
	{Table: "contacts", Kind: ttl.KindNone, Columns: []ttl.ColumnRule{
		{Column: "phone", ExpiresAtColumn: "phone_exp"},
	}},
}

// namesSetup makes the tables of namesRules, each with a live row (id 1) and
// an expired row or value (id 2), the attacker's login, its grants and its
// own schema evil.
func namesSetup(extra ...string) []string {
	return slices.Concat(sessionsSetup, []string{
		`CREATE TABLE events (id int PRIMARY KEY, created_at timestamptz, note text)`,
		`INSERT INTO events VALUES (1, now(), 'live'), (2, now() - interval '2 hours', 'expired')`,
		`CREATE TABLE tokens (id int PRIMARY KEY, note text)`,
		`CREATE TABLE token_reg (id int PRIMARY KEY, expires_at timestamptz)`,
		`INSERT INTO tokens VALUES (1, 'live'), (2, 'expired')`,
		`INSERT INTO token_reg VALUES (1, now() + interval '1 hour'), (2, now() - interval '1 hour')`,
		`CREATE TABLE contacts (id int PRIMARY KEY, phone text, phone_exp timestamptz)`,
		`INSERT INTO contacts VALUES (1, 'live', now() + interval '1 hour'), (2, 'expired', now() - interval '1 hour')`,
		`SET password_encryption = 'scram-sha-256'`,
		`DROP ROLE IF EXISTS ` + attacker,
		`CREATE ROLE ` + attacker + ` LOGIN PASSWORD '` + attackerPassword + `'`,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON sessions, events, tokens, token_reg, contacts, users TO ` + attacker,
		`CREATE SCHEMA evil AUTHORIZATION ` + attacker,
	}, extra)
}

// attackerConfig is a connection through the proxy as the attacker.
func (s *stack) attackerConfig(mode pgx.QueryExecMode) *pgx.ConnConfig {
	s.t.Helper()
	cfg, err := pgx.ParseConfig(s.proxied)
	if err != nil {
		s.t.Fatal(err)
	}
	cfg.User, cfg.Password, cfg.DefaultQueryExecMode = attacker, attackerPassword, mode
	return cfg
}

func (s *stack) connectConfig(cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err == nil {
		s.t.Cleanup(func() { conn.Close(context.Background()) })
	}
	return conn, err
}

// dropAttacker removes the attacker's role once the test is done (before
// its database is dropped: cleanups run last first).
func (s *stack) dropAttacker() {
	s.t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), s.direct)
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		_, _ = c.Exec(context.Background(), `DROP OWNED BY `+attacker)
		_, _ = c.Exec(context.Background(), `DROP ROLE IF EXISTS `+attacker)
	})
}

// checkNoExpired runs the reads and writes of every rule kind on conn and
// reports any expired row or value it gets back or touches.
func checkNoExpired(t *testing.T, s *stack, conn *pgx.Conn, how string) {
	t.Helper()
	ctx := context.Background()
	for _, c := range []struct{ sql, want string }{
		{`SELECT id FROM sessions ORDER BY id`, "1,3"},
		{`SELECT id FROM events ORDER BY id`, "1"},
		{`SELECT id FROM tokens ORDER BY id`, "1"},
		{`SELECT coalesce(phone, '-') FROM contacts ORDER BY id`, "live,-"},
		{`SELECT s.id FROM sessions s JOIN users u ON u.id = s.owner ORDER BY 1`, "1,3"},
		{`UPDATE sessions SET note = note RETURNING id`, "1,3"},
		{`UPDATE events SET note = note RETURNING id`, "1"},
		{`UPDATE tokens SET note = note RETURNING id`, "1"},
		{`UPDATE contacts SET id = id RETURNING coalesce(phone, '-')`, "live,-"},
		{`DELETE FROM sessions WHERE id = 2 RETURNING id`, ""},
		{`DELETE FROM events WHERE id = 2 RETURNING id`, ""},
		{`DELETE FROM tokens WHERE id = 2 RETURNING id`, ""},
	} {
		rows, err := conn.Query(ctx, c.sql)
		if err != nil {
			t.Errorf("%s: %s: %v", how, c.sql, err)
			continue
		}
		var got []string
		for rows.Next() {
			var v any
			if err := rows.Scan(&v); err != nil {
				t.Fatalf("%s: %s: %v", how, c.sql, err)
			}
			got = append(got, fmt.Sprint(v))
		}
		if err := rows.Err(); err != nil {
			t.Errorf("%s: %s: %v", how, c.sql, err)
			continue
		}
		if !strings.HasPrefix(c.sql, "SELECT") {
			slices.Sort(got)
			if strings.HasPrefix(c.sql, "UPDATE contacts") {
				slices.Reverse(got)
			}
		}
		if g := strings.Join(got, ","); g != c.want {
			t.Errorf("%s: %s: got %q, want %q", how, c.sql, g, c.want)
		}
	}
	direct := s.connect(s.direct)
	if got := ids(t, direct, `SELECT count(*) FROM sessions WHERE id = 2`) + ids(t, direct, `SELECT count(*) FROM events WHERE id = 2`) +
		ids(t, direct, `SELECT count(*) FROM tokens WHERE id = 2`); got != "111" {
		t.Errorf("%s: an expired row was deleted through the proxy (%s)", how, got)
	}
}

// evilObjects are the attacker's replacements for the names the filter
// writes, made in its own schema evil.
var evilObjects = map[string][]string{
	// now() at the start of time: every expiry is in the future.
	"now": {
		`CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE sql AS $$SELECT '-infinity'::pg_catalog.timestamptz$$`,
	},
	// Comparisons that always hold (>=) or never (<), for every type the
	// filter compares.
	"operators": {
		`CREATE FUNCTION evil.yes(timestamptz, timestamptz) RETURNS bool LANGUAGE sql AS 'SELECT true'`,
		`CREATE FUNCTION evil.no(timestamptz, timestamptz) RETURNS bool LANGUAGE sql AS 'SELECT false'`,
		`CREATE OPERATOR evil.>= (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = evil.yes)`,
		`CREATE OPERATOR evil.< (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = evil.no)`,
		`CREATE FUNCTION evil.minus(timestamptz, interval) RETURNS timestamptz LANGUAGE sql AS $$SELECT '-infinity'::pg_catalog.timestamptz$$`,
		`CREATE OPERATOR evil.- (LEFTARG = timestamptz, RIGHTARG = interval, FUNCTION = evil.minus)`,
	},
	// An equality on names and oids that always holds: the proxy's state
	// query would take every TTL table name for a temporary table
	// shadowing it, and forward reads of it unfiltered.
	"equality": {
		`CREATE FUNCTION evil.eq(name, name) RETURNS bool LANGUAGE sql AS 'SELECT true'`,
		`CREATE OPERATOR evil.= (LEFTARG = name, RIGHTARG = name, FUNCTION = evil.eq)`,
		`CREATE FUNCTION evil.eqo(oid, oid) RETURNS bool LANGUAGE sql AS 'SELECT true'`,
		`CREATE OPERATOR evil.= (LEFTARG = oid, RIGHTARG = oid, FUNCTION = evil.eqo)`,
		`CREATE FUNCTION evil.eqt(text, text) RETURNS bool LANGUAGE sql AS 'SELECT true'`,
		`CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.eqt)`,
		// A relation of the attacker's named like a TTL table, for a
		// catalog that would take evil for a schema holding it.
		`CREATE TABLE evil.sessions_x (id int)`,
	},
}

// TestAttackReplacedNames: the attacker puts a schema of its own before
// pg_catalog in search_path, holding a now(), comparison operators or an
// equality of its own, by SET, by the startup packet (a parameter and
// options), and by ALTER ROLE … SET. No expired row or value comes back or
// is touched, for every rule kind.
func TestAttackReplacedNames(t *testing.T) {
	const path = "evil, pg_catalog, public"
	for _, kind := range []string{"now", "operators", "equality"} {
		t.Run(kind, func(t *testing.T) {
			objs := append([]string{`SET ROLE ` + attacker}, evilObjects[kind]...)
			objs = append(objs, `RESET ROLE`)
			s := newStack(t, stackOptions{setup: namesSetup(objs...), rules: namesRules})
			s.dropAttacker()
			ctx := context.Background()
			for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
				// SET search_path.
				conn, err := s.connectConfig(s.attackerConfig(mode))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := conn.Exec(ctx, `SET search_path = `+path); err != nil {
					t.Fatal(err)
				}
				checkNoExpired(t, s, conn, fmt.Sprintf("SET search_path, %v", mode))
				// SET and the reads in one text.
				for _, q := range []string{
					`SET search_path = ` + path + `; SELECT id FROM sessions WHERE id = 2`,
					`SET search_path = ` + path + `; SELECT id FROM events WHERE id = 2`,
					`SET search_path = ` + path + `; SELECT id FROM tokens WHERE id = 2`,
				} {
					res, err := conn.PgConn().Exec(ctx, q).ReadAll()
					if err != nil {
						t.Errorf("%s: %v", q, err)
						continue
					}
					if n := len(res[len(res)-1].Rows); n != 0 {
						t.Errorf("%s: %d expired rows", q, n)
					}
				}
				// The startup packet: a parameter, and options.
				cfg := s.attackerConfig(mode)
				cfg.RuntimeParams["search_path"] = path
				if conn, err = s.connectConfig(cfg); err != nil {
					t.Fatal(err)
				}
				checkNoExpired(t, s, conn, fmt.Sprintf("startup search_path, %v", mode))
				cfg = s.attackerConfig(mode)
				cfg.RuntimeParams["options"] = `-c search_path=evil,pg_catalog,public`
				if conn, err = s.connectConfig(cfg); err != nil {
					t.Fatal(err)
				}
				checkNoExpired(t, s, conn, fmt.Sprintf("startup options, %v", mode))
			}
			// ALTER ROLE … SET, made by the attacker itself.
			conn, err := s.connectConfig(s.attackerConfig(pgx.QueryExecModeSimpleProtocol))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Exec(ctx, `ALTER ROLE `+attacker+` SET search_path = `+path); err != nil {
				t.Fatal(err)
			}
			for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
				if conn, err = s.connectConfig(s.attackerConfig(mode)); err != nil {
					t.Fatal(err)
				}
				// A pooled server logged in before the ALTER ROLE keeps the
				// role's old defaults.
				if got := ids(t, conn, `SHOW search_path`); got != path && os.Getenv(envPoolMode) != proxy.PoolModeTransaction {
					t.Fatalf("ALTER ROLE … SET: search_path %q", got)
				}
				checkNoExpired(t, s, conn, fmt.Sprintf("ALTER ROLE SET, %v", mode))
			}
		})
	}
}
