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
	"github.com/jackc/pgx/v5/pgconn"

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
	// attackerRole is a role the attacker is a member of.
	attackerRole = "ttl_attacker_r"
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
		for _, r := range []string{attacker, attackerRole} {
			_, _ = c.Exec(context.Background(), `DROP OWNED BY `+r)
			_, _ = c.Exec(context.Background(), `DROP ROLE IF EXISTS `+r)
		}
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

// queryAll runs sql as one simple Query and returns the values of its
// rows, or the error.
func queryAll(conn *pgx.Conn, sql string) ([]string, error) {
	res, err := conn.PgConn().Exec(context.Background(), sql).ReadAll()
	if err != nil {
		return nil, err
	}
	var got []string
	for _, r := range res {
		for _, row := range r.Rows {
			for _, v := range row {
				got = append(got, string(v))
			}
		}
	}
	return got, nil
}

// expiredNote is the note of sessions' expired row: an attack that reads it
// has read an expired row.
const expiredNote = "expired"

// checkNoExpiredNote fails when sql returned the expired row's note, and
// unless it was refused with want (a SQLSTATE; "" accepts an answer
// without it).
func checkNoExpiredNote(t *testing.T, conn *pgx.Conn, how, sql, want string) {
	t.Helper()
	got, err := queryAll(conn, sql)
	if slices.Contains(got, expiredNote) {
		t.Errorf("%s: %q read the expired row: %q", how, sql, got)
	}
	if want != "" && sqlstate(err) != want {
		t.Errorf("%s: %q: err %v, want SQLSTATE %s", how, sql, err, want)
	}
}

// TestAttackStandardConformingStrings: with standard_conforming_strings off
// a backslash escapes a quote in an ordinary literal, so the server reads
// `SELECT '\', ', note FROM sessions --'` as a read of sessions the proxy
// sees inside a literal. Turned off by SET, by the startup packet and by a
// function of the attacker's; a statement with a backslash is refused
// while it is off, one without is served, and SET … = on ends it.
func TestAttackStandardConformingStrings(t *testing.T) {
	s := newStack(t, stackOptions{rules: namesRules, setup: namesSetup(
		`SET ROLE `+attacker,
		`CREATE FUNCTION evil.scs_off() RETURNS int LANGUAGE sql AS $$SELECT 1 FROM pg_catalog.set_config('standard_conforming_strings', 'off', false)$$`,
		`RESET ROLE`)})
	s.dropAttacker()
	const attack = `SELECT '\', ', note FROM sessions --'`
	ctx := context.Background()
	conn, err := s.connectConfig(s.attackerConfig(pgx.QueryExecModeSimpleProtocol))
	if err != nil {
		t.Fatal(err)
	}
	checkNoExpiredNote(t, conn, "on", attack, "")
	if _, err := conn.Exec(ctx, `SET standard_conforming_strings = off`); err != nil {
		t.Fatal(err)
	}
	checkNoExpiredNote(t, conn, "SET off", attack, "0A000")
	// A backslash in an E'' string reads alike either way: served.
	checkNoExpiredNote(t, conn, "SET off", `SELECT E'\\', note FROM sessions`, "")
	checkNoExpiredNote(t, conn, "SET off", `SELECT N'\', ', note FROM sessions --'`, "0A000")
	// A text that names no TTL table is the server's alone.
	if _, err := queryAll(conn, `SELECT '\', ', 1 --'`); err != nil {
		t.Errorf("SET off: a backslash in a text naming no TTL table: %v", err)
	}
	if got, err := queryAll(conn, `SELECT note FROM sessions ORDER BY id`); strings.Join(got, ",") != "live,forever" {
		t.Errorf("SET off: a statement without a backslash: %q, %v", got, err)
	}
	// Turned off and used in one text: the server reads the whole text
	// before it runs the SET.
	checkNoExpiredNote(t, conn, "SET on; SET off; attack", `SET standard_conforming_strings = on; SET standard_conforming_strings = off; `+attack, "0A000")
	if _, err := conn.Exec(ctx, `SET standard_conforming_strings = on`); err != nil {
		t.Fatal(err)
	}
	checkNoExpiredNote(t, conn, "SET on again", attack, "")
	checkNoExpiredNote(t, conn, "SET on; SET off in one text", `SET standard_conforming_strings = off; `+attack, "")
	if _, err := conn.Exec(ctx, `RESET standard_conforming_strings`); err != nil {
		t.Fatal(err)
	}

	// By a function, then the attack in the same pipeline.
	rows, perr := runPipeline(t, conn.PgConn(), `SELECT evil.scs_off()`, attack)
	for _, row := range rows {
		if len(row) > 1 && string(row[1]) == expiredNote {
			t.Errorf("function, pipeline: read the expired row")
		}
	}
	if sqlstate(perr) != "0A000" {
		t.Errorf("function then the attack in one pipeline: err %v, want 0A000", perr)
	}
	// The refusal failed the pipeline's implicit transaction, the
	// function's change with it; a function on its own keeps it.
	checkNoExpiredNote(t, conn, "after the failed pipeline", attack, "")
	if _, err := queryAll(conn, `SELECT evil.scs_off()`); err != nil {
		t.Fatal(err)
	}
	checkNoExpiredNote(t, conn, "after the function", attack, "0A000")
	if _, err := conn.Exec(ctx, `SET standard_conforming_strings = on`); err != nil {
		t.Fatal(err)
	}

	// By the startup packet.
	for _, param := range []string{"standard_conforming_strings", "options"} {
		cfg := s.attackerConfig(pgx.QueryExecModeSimpleProtocol)
		if param == "options" {
			cfg.RuntimeParams["options"] = "-c standard_conforming_strings=off"
		} else {
			cfg.RuntimeParams[param] = "off"
		}
		c, err := s.connectConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		checkNoExpiredNote(t, c, "startup "+param, attack, "0A000")
	}
}

// TestAttackClientEncoding: in SJIS (and BIG5, GBK, UHC, GB18030, JOHAB) a
// character's second byte may be 0x5C, a backslash to a reader of bytes:
// E'<0x95>\' … --' is one literal to the proxy and a read of sessions to
// the server. Asked for at startup (a parameter, options, ALTER ROLE …
// SET) the session is refused with FATAL 0A000; set during a session,
// statements with non-ASCII bytes are refused until it is set back.
func TestAttackClientEncoding(t *testing.T) {
	s := newStack(t, stackOptions{rules: namesRules, setup: namesSetup()})
	s.dropAttacker()
	ctx := context.Background()
	attack := "SELECT E'\x95\\' , note FROM sessions --'"
	for _, enc := range []string{"SJIS", "BIG5", "GBK", "UHC", "GB18030", "JOHAB"} {
		for _, param := range []string{"client_encoding", "options"} {
			cfg := s.attackerConfig(pgx.QueryExecModeSimpleProtocol)
			if param == "options" {
				cfg.RuntimeParams["options"] = "-c client_encoding=" + enc
			} else {
				cfg.RuntimeParams[param] = enc
			}
			pc, err := pgconn.ConnectConfig(ctx, &cfg.Config)
			if err == nil {
				got, _ := pc.Exec(ctx, attack).ReadAll()
				if len(got) > 0 && len(got[0].Rows) > 0 {
					t.Errorf("startup %s=%s: the attack answered %d rows", param, enc, len(got[0].Rows))
				}
				pc.Close(ctx)
			}
			if sqlstate(err) != "0A000" {
				t.Errorf("startup %s=%s: err %v, want FATAL 0A000", param, enc, err)
			}
		}
	}
	// ALTER ROLE … SET.
	direct := s.connect(s.direct)
	if _, err := direct.Exec(ctx, `ALTER ROLE `+attacker+` SET client_encoding = 'SJIS'`); err != nil {
		t.Fatal(err)
	}
	cfg := s.attackerConfig(pgx.QueryExecModeSimpleProtocol)
	if pc, err := pgconn.ConnectConfig(ctx, &cfg.Config); sqlstate(err) != "0A000" {
		t.Errorf("ALTER ROLE SET client_encoding: err %v, want FATAL 0A000", err)
		if err == nil {
			pc.Close(ctx)
		}
	}
	if _, err := direct.Exec(ctx, `ALTER ROLE `+attacker+` RESET client_encoding`); err != nil {
		t.Fatal(err)
	}

	// SET during the session (asking for UTF8: a pooled server logged in
	// under the role's old setting keeps it).
	cfg.RuntimeParams["client_encoding"] = "UTF8"
	pc, err := pgconn.ConnectConfig(ctx, &cfg.Config)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close(ctx)
	run := func(sql string) ([]*pgconn.Result, error) { return pc.Exec(ctx, sql).ReadAll() }
	if _, err := run(`SET client_encoding = 'SJIS'`); err != nil {
		t.Fatal(err)
	}
	res, err := run(attack)
	if len(res) > 0 && len(res[0].Rows) > 0 {
		t.Errorf("SET client_encoding SJIS: the attack answered %d rows", len(res[0].Rows))
	}
	if sqlstate(err) != "0A000" {
		t.Errorf("SET client_encoding SJIS: the attack: err %v, want 0A000", err)
	}
	if res, err := run(`SELECT note FROM sessions ORDER BY id`); err != nil || len(res[0].Rows) != 2 {
		t.Errorf("SJIS, an ASCII statement: %v", err)
	}
	// A text whose bytes name no TTL table reads none however its
	// characters convert: served (0x82 0xA0 is SJIS for U+3042).
	if res, err := run("SELECT '\x82\xa0' AS a"); err != nil || len(res[0].Rows) != 1 {
		t.Errorf("SJIS, a non-ASCII statement naming no TTL table: %v", err)
	}
	if _, err := run(`SET client_encoding = 'UTF8'`); err != nil {
		t.Fatal(err)
	}
	if _, err := run(`SELECT 'café'`); err != nil {
		t.Errorf("back to UTF8, a non-ASCII statement: %v", err)
	}
	// In a pipeline after an Execute, whose change of the encoding would
	// only be reported at the ReadyForQuery: a non-ASCII text naming no
	// TTL table is served, one naming a TTL table is refused.
	for _, c := range []struct {
		sql, code string
	}{{`SELECT 'café' AS a`, ""}, {`SELECT note FROM sessions WHERE note <> 'café'`, "0A000"}} {
		if _, perr := runPipeline(t, pc, `SELECT 1`, c.sql); sqlstate(perr) != c.code {
			t.Errorf("pipeline, %s after an Execute: err %v, want %q", c.sql, perr, c.code)
		}
	}
}

// TestAttackLongIdentifiers: the server truncates an identifier longer
// than 63 bytes at the last character boundary at or before the 63rd byte,
// quoted or not, schema names too: `<63-byte TTL name>_junk` reads the TTL
// table, and so does a 62-byte name followed by a two-byte character.
func TestAttackLongIdentifiers(t *testing.T) {
	long63 := "l" + strings.Repeat("o", 60) + "ng" // 63 bytes
	long62 := "m" + strings.Repeat("u", 59) + "lt" // 62 bytes
	sch63 := "s" + strings.Repeat("c", 61) + "h"   // 63 bytes
	rules := []ttl.Rule{{Table: long63, DefaultTTL: time.Hour}, {Table: long62, DefaultTTL: time.Hour},
		{Schema: sch63, Table: "sessions", DefaultTTL: time.Hour}}
	var setup []string
	for _, q := range []string{long63, long62, sch63 + ".sessions"} {
		if strings.HasPrefix(q, sch63) {
			setup = append(setup, `CREATE SCHEMA `+sch63, `GRANT USAGE ON SCHEMA `+sch63+` TO `+attacker)
		}
		setup = append(setup,
			`CREATE TABLE `+q+` (id int PRIMARY KEY, note text, expires_at timestamptz)`,
			`INSERT INTO `+q+` VALUES (1, 'live', now() + interval '1 hour'), (2, 'expired', now() - interval '1 hour')`,
			`GRANT SELECT, UPDATE, DELETE ON `+q+` TO `+attacker)
	}
	s := newStack(t, stackOptions{rules: rules, setup: namesSetup(setup...)})
	s.dropAttacker()
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		conn, err := s.connectConfig(s.attackerConfig(mode))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{
			long63 + "_junk", `"` + long63 + `_junk"`, strings.ToUpper(long63) + "xyz", long63 + "é",
			long62 + "é", `"` + long62 + `éé"`, long62 + "ü_more",
			sch63 + "_junk.sessions", `"` + sch63 + `xx".sessions`, `"` + sch63 + `xx"."sessions"`,
		} {
			for _, q := range []string{
				`SELECT note FROM ` + name + ` ORDER BY id`,
				`SELECT t.note FROM ` + name + ` AS t WHERE t.id > 0`,
				`UPDATE ` + name + ` SET note = note RETURNING note`,
			} {
				rows, err := conn.Query(context.Background(), q)
				if err != nil {
					t.Errorf("%v: %s: %v", mode, q, err)
					continue
				}
				notes, err := pgx.CollectRows(rows, pgx.RowTo[string])
				if err != nil {
					t.Errorf("%v: %s: %v", mode, q, err)
					continue
				}
				if slices.Contains(notes, expiredNote) || len(notes) != 1 {
					t.Errorf("%v: %s: %q, want the live row alone", mode, q, notes)
				}
			}
		}
	}
}

// TestAttackSchemaUsage: the server skips a schema of the search path the
// role has no USAGE on; a table named like a TTL table there must not make
// the proxy take `sessions` for it while the server reads public.sessions.
// Put on the path by SET, in the same text, by the startup packet, and
// reached by SET ROLE to a role without the USAGE the login has.
func TestAttackSchemaUsage(t *testing.T) {
	shadowSetup := []string{
		`CREATE SCHEMA shadow`,
		`CREATE TABLE shadow.sessions (id int, owner int, note text, expires_at timestamptz)`,
		`CREATE SCHEMA shadow2`,
		`CREATE TABLE shadow2.sessions (id int, owner int, note text, expires_at timestamptz)`,
		`GRANT USAGE ON SCHEMA shadow2 TO ` + attacker,
		`GRANT SELECT ON shadow2.sessions TO ` + attacker,
		`DROP ROLE IF EXISTS ` + attackerRole,
		`CREATE ROLE ` + attackerRole + ` NOLOGIN`,
		`GRANT ` + attackerRole + ` TO ` + attacker,
		`GRANT SELECT ON sessions TO ` + attackerRole,
	}
	s := newStack(t, stackOptions{rules: namesRules, setup: namesSetup(shadowSetup...)})
	s.dropAttacker()
	ctx := context.Background()
	read := `SELECT note FROM sessions ORDER BY id`
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		conn, err := s.connectConfig(s.attackerConfig(mode))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, `SET search_path = shadow, public`); err != nil {
			t.Fatal(err)
		}
		if got := ids(t, conn, read); got != "live,forever" {
			t.Errorf("%v: SET search_path = shadow, public: %q", mode, got)
		}
		cfg := s.attackerConfig(mode)
		cfg.RuntimeParams["search_path"] = "shadow, public"
		if conn, err = s.connectConfig(cfg); err != nil {
			t.Fatal(err)
		}
		if got := ids(t, conn, read); got != "live,forever" {
			t.Errorf("%v: startup search_path = shadow, public: %q", mode, got)
		}
	}
	conn, err := s.connectConfig(s.attackerConfig(pgx.QueryExecModeSimpleProtocol))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`SET search_path = shadow, public; ` + read,
		`SET search_path = shadow2, public; SET ROLE ` + attackerRole + `; ` + read,
	} {
		got, err := queryAll(conn, q)
		if err != nil {
			t.Errorf("%s: %v", q, err)
		} else if strings.Join(got, ",") != "live,forever" {
			t.Errorf("%s: %q", q, got)
		}
		if _, err := conn.Exec(ctx, `RESET ROLE; RESET search_path`); err != nil {
			t.Fatal(err)
		}
	}
	// The login itself may use shadow2: its own table is read.
	if got, err := queryAll(conn, `SET search_path = shadow2, public; `+read); err != nil || len(got) != 0 {
		t.Errorf("shadow2.sessions, usable: %q, %v", got, err)
	}
}

// TestAttackConvertedEncoding: in a client encoding the server converts
// (LATIN1 here), `caf\xe9` is the table café to the server and no name the
// proxy knows; with a rule naming café, a statement with a non-ASCII byte
// is refused in such an encoding, and served again in UTF8.
func TestAttackConvertedEncoding(t *testing.T) {
	rules := []ttl.Rule{{Table: "café", DefaultTTL: time.Hour}}
	s := newStack(t, stackOptions{rules: rules, setup: namesSetup(
		`CREATE TABLE café (id int PRIMARY KEY, note text, expires_at timestamptz)`,
		`INSERT INTO café VALUES (1, 'live', now() + interval '1 hour'), (2, 'expired', now() - interval '1 hour')`,
		`GRANT SELECT ON café TO `+attacker)})
	s.dropAttacker()
	ctx := context.Background()
	cfg := s.attackerConfig(pgx.QueryExecModeSimpleProtocol)
	pc, err := pgconn.ConnectConfig(ctx, &cfg.Config)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close(ctx)
	if _, err := pc.Exec(ctx, `SET client_encoding = 'LATIN1'`).ReadAll(); err != nil {
		t.Fatal(err)
	}
	res, err := pc.Exec(ctx, "SELECT note FROM caf\xe9 ORDER BY id").ReadAll()
	if len(res) > 0 && len(res[0].Rows) != 1 {
		t.Errorf("LATIN1: %d rows of café", len(res[0].Rows))
	}
	if sqlstate(err) != "0A000" {
		t.Errorf("LATIN1, a non-ASCII statement: err %v, want 0A000", err)
	}
	if _, err := pc.Exec(ctx, `SET client_encoding = 'UTF8'`).ReadAll(); err != nil {
		t.Fatal(err)
	}
	res, err = pc.Exec(ctx, "SELECT note FROM café ORDER BY id").ReadAll()
	if err != nil || len(res[0].Rows) != 1 {
		t.Errorf("UTF8: err %v", err)
	}
}

// TestAttackRowOperator: an `=` of the attacker's own on the row type of a
// table with expiring columns, in a schema before pg_catalog, would be
// called with the whole row by `t = …` and `t IS [NOT] DISTINCT FROM …`.
// The client's whole-row references reach it as rows with their expired
// values NULL; the proxy's own `t.* IS NOT DISTINCT FROM NULL` and the
// client's test against a NULL constant are folded by the planner into a
// null test and call no operator.
func TestAttackRowOperator(t *testing.T) {
	s := newStack(t, stackOptions{rules: namesRules, setup: namesSetup(
		`SET ROLE `+attacker,
		`CREATE FUNCTION evil.roweq(contacts, contacts) RETURNS bool LANGUAGE plpgsql AS $$
			BEGIN RAISE NOTICE 'seen %', $1.phone; RETURN false; END $$`,
		`CREATE OPERATOR evil.= (LEFTARG = contacts, RIGHTARG = contacts, FUNCTION = evil.roweq)`,
		`RESET ROLE`)})
	s.dropAttacker()
	var notices []string
	cfg := s.attackerConfig(pgx.QueryExecModeSimpleProtocol)
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { notices = append(notices, n.Message) }
	cfg.RuntimeParams["search_path"] = "evil, pg_catalog, public"
	conn, err := s.connectConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`SELECT c FROM contacts c ORDER BY id`,
		`SELECT pg_catalog.row_to_json(c.*) FROM contacts c ORDER BY id`,
		`SELECT id FROM contacts c WHERE c IS DISTINCT FROM NULL ORDER BY id`,
		`SELECT id FROM contacts c WHERE NULL IS NOT DISTINCT FROM c.* ORDER BY id`,
		`SELECT id FROM contacts c WHERE c = c ORDER BY id`,
		`SELECT id FROM contacts c WHERE c IS DISTINCT FROM ROW(1, 'x', NULL)::contacts ORDER BY id`,
	} {
		notices = notices[:0]
		got, err := queryAll(conn, q)
		if err != nil {
			t.Errorf("%s: %v", q, err)
		}
		for _, v := range append(got, notices...) {
			if strings.Contains(v, expiredNote) {
				t.Errorf("%s: the expired value reached the client: %q, notices %q", q, got, notices)
				break
			}
		}
	}
}

// TestAttackLexicalForms: spellings of a TTL table's name and of the text
// around it where a reader of bytes could part from the server's scanner:
// Unicode escapes with and without UESCAPE, nested comments, dollar
// quotes and tags, E” strings, quoted names, a NUL byte. None reads an
// expired row.
func TestAttackLexicalForms(t *testing.T) {
	s := newStack(t, stackOptions{rules: namesRules, setup: namesSetup()})
	s.dropAttacker()
	conn, err := s.connectConfig(s.attackerConfig(pgx.QueryExecModeSimpleProtocol))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`SELECT note FROM U&"\0073essions"`,
		`SELECT note FROM U&"!0073essions" UESCAPE '!'`,
		`SELECT note FROM u&"\+000073essions"`,
		`SELECT note FROM public.U&"s\0065ssions"`,
		`SELECT note FROM "sessions"`,
		`SELECT note FROM /* /* */ sessions */ sessions`,
		`SELECT note FROM /* a /* b */ c */ sessions -- */`,
		`SELECT $a$ $a$, note FROM sessions`,
		`SELECT $a$'$a$, note FROM sessions --'`,
		`SELECT $$'$$ AS x, note FROM sessions`,
		`SELECT x$a$, note FROM (SELECT 1 AS x$a$) s, sessions`,
		`SELECT E'\'', note FROM sessions`,
		`SELECT E'\\', note FROM sessions -- '`,
		`SELECT e'\x27', note FROM sessions`,
		`SELECT U&'\0027', note FROM sessions`,
		`SELECT B'1', X'1F', N'x', note FROM sessions`,
		`SELECT 1e1x, note FROM sessions`,
		`SELECT 0x1Fnote, note FROM sessions`,
		`SELECT note FROM sessions"x"`,
		"SELECT note FROM\fsessions",
		"SELECT note FROM\vsessions",
		`TABLE sessions`,
		`SELECT (sessions).note FROM sessions`,
		`SELECT note FROM ONLY sessions`,
		`SELECT note FROM sessions *`,
	} {
		got, err := queryAll(conn, q)
		if slices.Contains(got, expiredNote) {
			t.Errorf("%s: read the expired row: %q", q, got)
		}
		_ = err // refusals and the server's syntax errors are answers too
	}
	// A NUL byte ends a Query's text: the rest is a protocol violation to
	// the proxy as to the server, never a statement.
	pc := conn.PgConn()
	res, err := pc.Exec(context.Background(), "SELECT 1\x00; SELECT note FROM sessions").ReadAll()
	for _, r := range res {
		for _, row := range r.Rows {
			if string(row[0]) == expiredNote {
				t.Errorf("NUL: read the expired row")
			}
		}
	}
	if err == nil {
		t.Errorf("NUL in a Query: no error")
	}
}

// runPipeline sends sqls as one pipeline of extended-protocol statements
// (Parse, Bind, Describe, Execute each, one Sync) and returns the rows of
// every result and the first error.
func runPipeline(t *testing.T, pc *pgconn.PgConn, sqls ...string) (rows [][][]byte, firstErr error) {
	t.Helper()
	p := pc.StartPipeline(context.Background())
	for _, sql := range sqls {
		p.SendQueryParams(sql, nil, nil, nil, nil)
	}
	if err := p.Sync(); err != nil {
		t.Fatal(err)
	}
	for {
		r, err := p.GetResults()
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			break
		}
		if r == nil {
			break
		}
		if rr, ok := r.(*pgconn.ResultReader); ok {
			res := rr.Read()
			rows = append(rows, res.Rows...)
			if res.Err != nil && firstErr == nil {
				firstErr = res.Err
			}
		}
	}
	_ = p.Close()
	return rows, firstErr
}
