package install

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ttlproxy/ttlproxy/internal/pgtest"
	"github.com/ttlproxy/ttlproxy/ttl"
)

// env is one test's database and a superuser connection to it.
type env struct {
	t    *testing.T
	ctx  context.Context
	db   string
	conn *pgx.Conn
}

func setup(t *testing.T) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	db := pgtest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, pgtest.Server(t).ConnString(db))
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return &env{t: t, ctx: ctx, db: db, conn: conn}
}

func (e *env) exec(sqls ...string) {
	e.t.Helper()
	for _, s := range sqls {
		if _, err := e.conn.Exec(e.ctx, s); err != nil {
			e.t.Fatalf("%s: %v", s, err)
		}
	}
}

// strings returns the first column of every row of query as text.
func (e *env) strings(query string) string {
	e.t.Helper()
	rows, err := e.conn.Query(e.ctx, query)
	if err != nil {
		e.t.Fatalf("%s: %v", query, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		e.t.Fatalf("%s: %v", query, err)
	}
	return strings.Join(out, ",")
}

func (e *env) apply(rules []ttl.Rule, uninstall bool) []string {
	e.t.Helper()
	out, err := Apply(e.ctx, e.conn, rules, uninstall)
	if err != nil {
		e.t.Fatalf("Apply(uninstall=%v): %v", uninstall, err)
	}
	return out
}

// sqlState returns err's SQLSTATE, or "" for nil.
func sqlState(t *testing.T, err error) string {
	t.Helper()
	if err == nil {
		return ""
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		t.Fatalf("not a server error: %v", err)
	}
	return pgErr.Code
}

// kind is one rule kind under test: table public.items (id PRIMARY KEY,
// email UNIQUE, v, and the rule's columns), and how to write a row that is
// expired or live. Rows inserted without the rule's columns are live.
type kind struct {
	name string
	rule ttl.Rule
	ddl  []string
	row  func(id int, email string, expired bool) []string
}

// columnRow writes rows giving cols the values expired or live.
func columnRow(cols, expired, live string) func(int, string, bool) []string {
	return func(id int, email string, isExpired bool) []string {
		v, vals := "live", live
		if isExpired {
			v, vals = "old", expired
		}
		return []string{fmt.Sprintf("INSERT INTO items (id, email, v, %s) VALUES (%d, '%s', '%s', %s)", cols, id, email, v, vals)}
	}
}

var kinds = []kind{
	{
		name: "column_timestamptz",
		rule: ttl.Rule{Table: "items"},
		ddl:  []string{"CREATE TABLE items (id int PRIMARY KEY, email text UNIQUE, v text, expires_at timestamptz)"},
		row:  columnRow("expires_at", "now() - interval '1 hour'", "now() + interval '1 hour'"),
	},
	{
		name: "column_unix_s",
		rule: ttl.Rule{Table: "items", Column: "exp", ColumnType: ttl.TypeUnixSeconds},
		ddl:  []string{"CREATE TABLE items (id int PRIMARY KEY, email text UNIQUE, v text, exp bigint)"},
		row:  columnRow("exp", "extract(epoch from now())::bigint - 3600", "extract(epoch from now())::bigint + 3600"),
	},
	{
		name: "derived_fixed",
		rule: ttl.Rule{Table: "items", Kind: ttl.KindDerived, BaseColumn: "created_at", ExpireAfter: time.Hour},
		ddl:  []string{"CREATE TABLE items (id int PRIMARY KEY, email text UNIQUE, v text, created_at timestamptz NOT NULL DEFAULT now())"},
		row:  columnRow("created_at", "now() - interval '2 hours'", "now() - interval '30 minutes'"),
	},
	{
		name: "derived_interval_seconds",
		rule: ttl.Rule{Table: "items", Kind: ttl.KindDerived, BaseColumn: "created_at", IntervalColumn: "ttl", IntervalSeconds: true},
		ddl: []string{"CREATE TABLE items (id int PRIMARY KEY, email text UNIQUE, v text, " +
			"created_at timestamptz NOT NULL DEFAULT now(), ttl int DEFAULT 3600)"},
		row: columnRow("created_at, ttl", "now() - interval '2 hours', 60", "now() - interval '2 hours', 86400"),
	},
	{
		name: "sidecar",
		rule: ttl.Rule{Table: "items", Kind: ttl.KindSidecar, SidecarTable: "items_ttl", KeyColumns: []string{"id"}},
		ddl: []string{
			"CREATE TABLE items (id int PRIMARY KEY, email text UNIQUE, v text)",
			"CREATE TABLE items_ttl (id int PRIMARY KEY, expires_at timestamptz NOT NULL)",
		},
		row: func(id int, email string, expired bool) []string {
			v, at := "live", "now() + interval '1 hour'"
			if expired {
				v, at = "old", "now() - interval '1 hour'"
			}
			return []string{
				fmt.Sprintf("INSERT INTO items (id, email, v) VALUES (%d, '%s', '%s')", id, email, v),
				fmt.Sprintf("INSERT INTO items_ttl (id, expires_at) VALUES (%d, %s)", id, at),
			}
		},
	},
}

// collision is one write against the seed rows: expired (1, a) and (3, c),
// live (2, b) and (4, d).
type collision struct {
	name string
	sql  string
	// run replaces sql for writes that are not one statement (COPY).
	run func(ctx context.Context, conn *pgx.Conn) error
	// state is the wanted SQLSTATE, "" for success.
	state string
	// visible lists the live rows after the write as id:email:v; expired the
	// expired rows still present. Both unchanged when state is set.
	visible, expired string
}

const seedVisible, seedExpired = "2:b:live,4:d:live", "1,3"

var collisions = []collision{
	// Keys of expired rows are free.
	{name: "insert", sql: "INSERT INTO items (id, email, v) VALUES (1, 'x', 'new')",
		visible: "1:x:new,2:b:live,4:d:live", expired: "3"},
	{name: "insert second key", sql: "INSERT INTO items (id, email, v) VALUES (5, 'a', 'new')",
		visible: "2:b:live,4:d:live,5:a:new", expired: "3"},
	{name: "insert both keys of two expired rows", sql: "INSERT INTO items (id, email, v) VALUES (1, 'c', 'new')",
		visible: "1:c:new,2:b:live,4:d:live", expired: ""},
	{name: "multi-row insert", sql: "INSERT INTO items (id, email, v) VALUES (1, 'x', 'n1'), (5, 'c', 'n2')",
		visible: "1:x:n1,2:b:live,4:d:live,5:c:n2", expired: ""},
	{name: "insert select", sql: "INSERT INTO items (id, email, v) SELECT g, 'e' || g, 'sel' FROM generate_series(1, 3) g WHERE g <> 2",
		visible: "1:e1:sel,2:b:live,3:e3:sel,4:d:live", expired: ""},
	{name: "do nothing without target", sql: "INSERT INTO items (id, email, v) VALUES (1, 'x', 'new') ON CONFLICT DO NOTHING",
		visible: "1:x:new,2:b:live,4:d:live", expired: "3"},
	{name: "do nothing on id", sql: "INSERT INTO items (id, email, v) VALUES (1, 'x', 'new') ON CONFLICT (id) DO NOTHING",
		visible: "1:x:new,2:b:live,4:d:live", expired: "3"},
	{name: "do nothing on the other key", sql: "INSERT INTO items (id, email, v) VALUES (1, 'x', 'new') ON CONFLICT (email) DO NOTHING",
		visible: "1:x:new,2:b:live,4:d:live", expired: "3"},
	{name: "do update on id", sql: "INSERT INTO items (id, email, v) VALUES (1, 'x', 'new') ON CONFLICT (id) DO UPDATE SET v = 'upd'",
		visible: "1:x:new,2:b:live,4:d:live", expired: "3"},
	{name: "do update on constraint", sql: "INSERT INTO items (id, email, v) VALUES (5, 'a', 'new') ON CONFLICT ON CONSTRAINT items_email_key DO UPDATE SET v = 'upd'",
		visible: "2:b:live,4:d:live,5:a:new", expired: "3"},
	{name: "update key", sql: "UPDATE items SET id = 1 WHERE id = 2",
		visible: "1:b:live,4:d:live", expired: "3"},
	{name: "update second key", sql: "UPDATE items SET email = 'c' WHERE id = 2",
		visible: "2:c:live,4:d:live", expired: "1"},
	{name: "upsert whose update takes an expired key", sql: "INSERT INTO items (id, email, v) VALUES (2, 'x', 'new') ON CONFLICT (id) DO UPDATE SET email = 'a'",
		visible: "2:a:live,4:d:live", expired: "3"},
	{name: "merge", sql: "MERGE INTO items AS t USING (VALUES (1, 'x', 'new')) AS s(id, email, v) ON t.id = s.id AND t.v <> 'old' " +
		"WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT (id, email, v) VALUES (s.id, s.email, s.v)",
		visible: "1:x:new,2:b:live,4:d:live", expired: "3"},
	{name: "copy binary", run: func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.CopyFrom(ctx, pgx.Identifier{"items"}, []string{"id", "email", "v"},
			pgx.CopyFromRows([][]any{{int32(1), "x", "new"}, {int32(5), "c", "n2"}}))
		return err
	}, visible: "1:x:new,2:b:live,4:d:live,5:c:n2", expired: ""},
	{name: "copy text", run: func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.PgConn().CopyFrom(ctx, strings.NewReader("1\tx\tnew\n5\tc\tn2\n"), "COPY items (id, email, v) FROM STDIN")
		return err
	}, visible: "1:x:new,2:b:live,4:d:live,5:c:n2", expired: ""},
	// Updates that leave keys alone, also of an expired row (bypassing the
	// proxy): the trigger never deletes the row being updated.
	{name: "update without key change", sql: "UPDATE items SET v = 'upd' WHERE id = 2",
		visible: "2:b:upd,4:d:live", expired: seedExpired},
	{name: "update key to itself", sql: "UPDATE items SET id = id, email = email, v = 'upd' WHERE id IN (1, 2)",
		visible: "2:b:upd,4:d:live", expired: seedExpired},

	// Live rows still collide.
	{name: "live insert", sql: "INSERT INTO items (id, email, v) VALUES (2, 'x', 'new')", state: "23505"},
	{name: "live insert second key", sql: "INSERT INTO items (id, email, v) VALUES (5, 'b', 'new')", state: "23505"},
	{name: "live multi-row insert", sql: "INSERT INTO items (id, email, v) VALUES (1, 'x', 'new'), (2, 'y', 'new')", state: "23505"},
	{name: "live do nothing", sql: "INSERT INTO items (id, email, v) VALUES (2, 'x', 'new') ON CONFLICT DO NOTHING",
		visible: seedVisible, expired: seedExpired},
	{name: "live do update", sql: "INSERT INTO items (id, email, v) VALUES (2, 'x', 'new') ON CONFLICT (id) DO UPDATE SET v = 'upd'",
		visible: "2:b:upd,4:d:live", expired: seedExpired},
	{name: "live update key", sql: "UPDATE items SET id = 2 WHERE id = 4", state: "23505"},
	{name: "live update second key", sql: "UPDATE items SET email = 'b' WHERE id = 4", state: "23505"},
	{name: "live copy", run: func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.CopyFrom(ctx, pgx.Identifier{"items"}, []string{"id", "email", "v"},
			pgx.CopyFromRows([][]any{{int32(2), "x", "new"}}))
		return err
	}, state: "23505"},
	{name: "live merge", sql: "MERGE INTO items AS t USING (VALUES (5, 'b', 'new')) AS s(id, email, v) ON t.id = s.id " +
		"WHEN NOT MATCHED THEN INSERT (id, email, v) VALUES (s.id, s.email, s.v)", state: "23505"},
}

// TestCollisions runs every write of collisions against every rule kind.
func TestCollisions(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			e := setup(t)
			e.exec(k.ddl...)
			rules := []ttl.Rule{k.rule}
			e.apply(rules, false)
			live := k.rule.LiveCondition("t", ttl.Now)
			visibleQ := "SELECT id || ':' || email || ':' || v FROM items AS t WHERE " + live + " ORDER BY id"
			expiredQ := "SELECT id::text FROM items AS t WHERE " + k.rule.ExpiredCondition("t", ttl.Now) + " ORDER BY id"
			reset := "TRUNCATE items"
			if k.rule.RuleKind() == ttl.KindSidecar {
				reset = "TRUNCATE items, items_ttl"
			}
			for _, c := range collisions {
				t.Run(c.name, func(t *testing.T) {
					e.t = t
					e.exec(reset)
					e.exec(k.row(1, "a", true)...)
					e.exec(k.row(2, "b", false)...)
					e.exec(k.row(3, "c", true)...)
					e.exec(k.row(4, "d", false)...)
					if got := e.strings(visibleQ); got != seedVisible {
						t.Fatalf("seed: visible %s, want %s", got, seedVisible)
					}
					var err error
					if c.run != nil {
						err = c.run(e.ctx, e.conn)
					} else {
						_, err = e.conn.Exec(e.ctx, c.sql)
					}
					if got := sqlState(t, err); got != c.state {
						t.Fatalf("SQLSTATE %q (%v), want %q", got, err, c.state)
					}
					wantVisible, wantExpired := c.visible, c.expired
					if c.state != "" {
						wantVisible, wantExpired = seedVisible, seedExpired
					}
					if got := e.strings(visibleQ); got != wantVisible {
						t.Errorf("visible rows %s, want %s", got, wantVisible)
					}
					if got := e.strings(expiredQ); got != wantExpired {
						t.Errorf("expired rows left %q, want %q", got, wantExpired)
					}
					if k.rule.RuleKind() == ttl.KindSidecar {
						// A deleted base row takes its expired registry row
						// along; live registry rows stay.
						got := e.strings("SELECT r.id::text FROM items_ttl r WHERE r.expires_at < now() " +
							"AND NOT EXISTS (SELECT 1 FROM items i WHERE i.id = r.id) ORDER BY 1")
						if got != "" {
							t.Errorf("expired registry rows without a base row: %s", got)
						}
					}
				})
			}
		})
	}
}

func TestCompositeKeys(t *testing.T) {
	e := setup(t)
	e.exec(
		"CREATE TABLE pairs (tenant int, code text, slug text, v text, expires_at timestamptz, "+
			"PRIMARY KEY (tenant, code), UNIQUE (tenant, slug))",
		"INSERT INTO pairs VALUES (1, 'a', 's1', 'old', now() - interval '1 hour'), (1, 'b', 's2', 'live', NULL), "+
			"(2, 'a', NULL, 'old', now() - interval '1 hour')",
	)
	rules := []ttl.Rule{{Table: "pairs"}}
	out := e.apply(rules, false)
	if all := strings.Join(out, "\n"); !strings.Contains(all, `t."tenant" = NEW."tenant" AND t."code" = NEW."code"`) ||
		!strings.Contains(all, `t."tenant" = NEW."tenant" AND t."slug" = NEW."slug"`) {
		t.Fatalf("composite keys not planned:\n%s", all)
	}
	visible := "SELECT tenant || code || ':' || coalesce(slug, '-') || ':' || v FROM pairs t WHERE (t.expires_at IS NULL OR t.expires_at >= now()) ORDER BY 1"
	steps := []struct {
		sql, state, visible string
	}{
		// Half a key in common with an expired row is no collision.
		{"INSERT INTO pairs VALUES (1, 'c', 's9', 'new', NULL)", "", "1b:s2:live,1c:s9:new"},
		// Same whole key as the expired (1, a).
		{"INSERT INTO pairs VALUES (1, 'a', 'x', 'new', NULL)", "", "1a:x:new,1b:s2:live,1c:s9:new"},
		// Same (tenant, slug) as a live row.
		{"INSERT INTO pairs VALUES (1, 'z', 's2', 'new', NULL)", "23505", ""},
		{"INSERT INTO pairs VALUES (1, 'b', 'zz', 'new', NULL)", "23505", ""},
		// The expired (2, a) has a NULL slug: an UPDATE that changes only
		// code must find it by the primary key.
		{"UPDATE pairs SET tenant = 2 WHERE tenant = 1 AND code = 'a'", "", "1b:s2:live,1c:s9:new,2a:x:new"},
	}
	for _, s := range steps {
		_, err := e.conn.Exec(e.ctx, s.sql)
		if got := sqlState(t, err); got != s.state {
			t.Fatalf("%s: SQLSTATE %q (%v), want %q", s.sql, got, err, s.state)
		}
		if s.state == "" {
			if got := e.strings(visible); got != s.visible {
				t.Errorf("after %s: visible %s, want %s", s.sql, got, s.visible)
			}
		}
	}
	if n := e.strings("SELECT count(*)::text FROM pairs"); n != "3" {
		t.Errorf("%s rows left, want 3 (both expired rows deleted)", n)
	}
}

// TestNullsNotDistinct checks what the package documents for a PostgreSQL
// 15 NULLS NOT DISTINCT index: non-NULL keys are covered, a NULL key is not.
func TestNullsNotDistinct(t *testing.T) {
	e := setup(t)
	var version int
	if err := e.conn.QueryRow(e.ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version < 150000 {
		t.Skip("NULLS NOT DISTINCT needs PostgreSQL 15")
	}
	e.exec(
		"CREATE TABLE nnd (id int PRIMARY KEY, code text, expires_at timestamptz, CONSTRAINT nnd_code UNIQUE NULLS NOT DISTINCT (code))",
		"INSERT INTO nnd VALUES (1, 'a', now() - interval '1 hour'), (2, NULL, now() - interval '1 hour')",
	)
	out := e.apply([]ttl.Rule{{Table: "nnd"}}, false)
	if !strings.Contains(out[0], "-- table public.nnd: unique index nnd_code: NULLS NOT DISTINCT, covered for non-NULL key values only") {
		t.Errorf("no note for the NULLS NOT DISTINCT index: %q", out[0])
	}
	if _, err := e.conn.Exec(e.ctx, "INSERT INTO nnd VALUES (3, 'a', NULL)"); err != nil {
		t.Errorf("non-NULL key of an expired row: %v", err)
	}
	_, err := e.conn.Exec(e.ctx, "INSERT INTO nnd VALUES (4, NULL, NULL)")
	if got := sqlState(t, err); got != "23505" {
		t.Errorf("NULL key of an expired row: SQLSTATE %q (%v), want 23505 as documented", got, err)
	}
}

func TestUniqueKeys(t *testing.T) {
	e := setup(t)
	e.exec(
		"CREATE EXTENSION citext",
		"CREATE SCHEMA s",
		`CREATE TABLE s."Mixed" (id int, "Code" text, a int, b int, c int, d text, e citext, f int, expires_at timestamptz, `+
			`CONSTRAINT mixed_pk PRIMARY KEY (id), CONSTRAINT mixed_ab UNIQUE (b, a))`,
		`CREATE UNIQUE INDEX mixed_code ON s."Mixed" ("Code") INCLUDE (c)`,
		`CREATE UNIQUE INDEX mixed_partial ON s."Mixed" (c) WHERE expires_at IS NULL`,
		`CREATE UNIQUE INDEX mixed_expr ON s."Mixed" (lower(d))`,
		`CREATE UNIQUE INDEX mixed_citext ON s."Mixed" (e)`,
		`CREATE UNIQUE INDEX mixed_dup ON s."Mixed" (id)`,
		`CREATE INDEX mixed_plain ON s."Mixed" (f)`,
		"CREATE TABLE nokeys (x int, expires_at timestamptz)",
		"CREATE VIEW v AS SELECT 1 AS x",
	)
	rules := []ttl.Rule{{Schema: "s", Table: "Mixed"}, {Table: "nokeys"}}
	keys, skipped, err := UniqueKeysSkipped(e.ctx, e.conn, rules)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(keys["s.Mixed"]), "[[id] [b a] [Code] [id]]"; got != want {
		t.Errorf("keys of s.Mixed = %s, want %s", got, want)
	}
	if k, ok := keys["public.nokeys"]; !ok || len(k) != 0 {
		t.Errorf("keys of public.nokeys = %v (present %v), want an empty entry", k, ok)
	}
	var notes []string
	for _, s := range skipped {
		notes = append(notes, s.Index+": "+s.Reason)
	}
	want := "mixed_citext: not covered, equality operator outside pg_catalog for citext (public.=)|" +
		"mixed_expr: expression index, not covered|mixed_partial: partial index, not covered"
	if got := strings.Join(notes, "|"); got != want {
		t.Errorf("skipped:\n got %s\nwant %s", got, want)
	}
	k2, err := UniqueKeys(e.ctx, e.conn, rules)
	if err != nil || fmt.Sprint(k2) != fmt.Sprint(keys) {
		t.Errorf("UniqueKeys = %v, %v; want %v", k2, err, keys)
	}

	for _, tc := range []struct {
		rule ttl.Rule
		want string
	}{
		{ttl.Rule{Table: "missing"}, "table public.missing: does not exist"},
		{ttl.Rule{Schema: "nope", Table: "x"}, "table nope.x: does not exist"},
		{ttl.Rule{Table: "v"}, `table public.v: not a table (relkind "v")`},
	} {
		_, err := UniqueKeys(e.ctx, e.conn, []ttl.Rule{tc.rule})
		if err == nil || err.Error() != tc.want {
			t.Errorf("UniqueKeys(%s) error = %v, want %q", tc.rule.QualifiedName(), err, tc.want)
		}
		_, err = Apply(e.ctx, e.conn, []ttl.Rule{tc.rule}, false)
		if err == nil || err.Error() != tc.want {
			t.Errorf("Apply(%s) error = %v, want %q", tc.rule.QualifiedName(), err, tc.want)
		}
	}
}

// installed lists the ttlproxy triggers (table.trigger) and functions.
func (e *env) installed() (triggers, functions, schema string) {
	e.t.Helper()
	triggers = e.strings("SELECT tgrelid::regclass::text || '.' || tgname FROM pg_trigger WHERE tgname LIKE 'zz\\_ttlproxy%' ORDER BY 1")
	functions = e.strings("SELECT p.proname::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'ttlproxy' ORDER BY 1")
	schema = e.strings("SELECT nspname::text FROM pg_namespace WHERE nspname = 'ttlproxy'")
	return
}

func TestReinstallAndUninstall(t *testing.T) {
	e := setup(t)
	e.exec(
		"CREATE TABLE a (id int PRIMARY KEY, email text, expires_at timestamptz)",
		"CREATE TABLE b (id int PRIMARY KEY, expires_at timestamptz)",
		"INSERT INTO a VALUES (1, 'x', now() - interval '1 hour')",
	)
	rules := []ttl.Rule{{Table: "a"}, {Table: "b"}}
	first := e.apply(rules, false)
	trig, fns, schema := e.installed()
	wantTrig := "a.zz_ttlproxy_purge_expired_insert,a.zz_ttlproxy_purge_expired_update," +
		"b.zz_ttlproxy_purge_expired_insert,b.zz_ttlproxy_purge_expired_update"
	wantFns := "purge_expired__public__a,purge_expired__public__b"
	if trig != wantTrig || fns != wantFns || schema != "ttlproxy" {
		t.Fatalf("after install: triggers %s, functions %s, schema %q", trig, fns, schema)
	}

	// Idempotent: the same statements again, nothing doubled.
	second := e.apply(rules, false)
	if strings.Join(first, "\n") != strings.Join(second, "\n") {
		t.Errorf("reinstall ran other statements:\n%s\n---\n%s", first, second)
	}
	if trig, fns, _ := e.installed(); trig != wantTrig || fns != wantFns {
		t.Errorf("after reinstall: triggers %s, functions %s", trig, fns)
	}

	// A unique key added later is covered after the next install.
	e.exec("ALTER TABLE a ADD CONSTRAINT a_email UNIQUE (email)")
	_, err := e.conn.Exec(e.ctx, "INSERT INTO a VALUES (2, 'x', NULL)")
	if got := sqlState(t, err); got != "23505" {
		t.Fatalf("new key before reinstall: SQLSTATE %q, want 23505", got)
	}
	e.apply(rules, false)
	e.exec("INSERT INTO a VALUES (2, 'x', NULL)")
	// ...and the update trigger now watches it.
	if got := e.strings("SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgname = 'zz_ttlproxy_purge_expired_update' AND tgrelid = 'a'::regclass"); !strings.Contains(got, "UPDATE OF id, email") {
		t.Errorf("update trigger after reinstall: %s", got)
	}

	// A table that lost its keys loses its trigger.
	e.exec("ALTER TABLE b DROP CONSTRAINT b_pkey")
	e.apply(rules, false)
	if trig, fns, _ := e.installed(); trig != "a.zz_ttlproxy_purge_expired_insert,a.zz_ttlproxy_purge_expired_update" || fns != "purge_expired__public__a" {
		t.Errorf("after b lost its key: triggers %s, functions %s", trig, fns)
	}
	e.exec("ALTER TABLE b ADD PRIMARY KEY (id)")
	e.apply(rules, false)

	// A table removed from the configuration loses its trigger at the next
	// install: its rows are ordinary data now, expiry column or not.
	out := strings.Join(e.apply(rules[:1], false), "\n")
	for _, want := range []string{
		`DROP TRIGGER IF EXISTS "zz_ttlproxy_purge_expired_insert" ON "public"."b"`,
		`DROP TRIGGER IF EXISTS "zz_ttlproxy_purge_expired_update" ON "public"."b"`,
		`DROP FUNCTION IF EXISTS "ttlproxy"."purge_expired__public__b"()`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("install without b does not run %s", want)
		}
	}
	if trig, fns, _ := e.installed(); trig != "a.zz_ttlproxy_purge_expired_insert,a.zz_ttlproxy_purge_expired_update" || fns != "purge_expired__public__a" {
		t.Errorf("after b left the configuration: triggers %s, functions %s", trig, fns)
	}
	e.exec("INSERT INTO b VALUES (1, now() - interval '1 hour')")
	_, err = e.conn.Exec(e.ctx, "INSERT INTO b VALUES (1, NULL)")
	if got := sqlState(t, err); got != "23505" {
		t.Errorf("b after it left the configuration: SQLSTATE %q, want 23505", got)
	}
	e.exec("DELETE FROM b")
	e.apply(rules, false)

	// Uninstall with only a configured: b's trigger, left from a table no
	// longer configured, goes too, and so does the empty schema.
	e.apply(rules[:1], true)
	if trig, fns, schema := e.installed(); trig != "" || fns != "" || schema != "" {
		t.Errorf("after uninstall: triggers %q, functions %q, schema %q", trig, fns, schema)
	}
	e.exec("INSERT INTO a VALUES (3, 'y', now() - interval '1 hour')")
	_, err = e.conn.Exec(e.ctx, "INSERT INTO a VALUES (3, 'z', NULL)")
	if got := sqlState(t, err); got != "23505" {
		t.Errorf("after uninstall: SQLSTATE %q, want 23505", got)
	}
	// Uninstall again is harmless, also for a table that is gone.
	e.exec("DROP TABLE b")
	e.apply(rules, true)

	// The schema stays when something else lives in it.
	e.apply(rules[:1], false)
	e.exec("CREATE TABLE ttlproxy.lease (id int)")
	e.apply(rules[:1], true)
	if trig, fns, schema := e.installed(); trig != "" || fns != "" || schema != "ttlproxy" {
		t.Errorf("after uninstall with a foreign object: triggers %q, functions %q, schema %q", trig, fns, schema)
	}
}

func TestPreview(t *testing.T) {
	e := setup(t)
	e.exec("CREATE TABLE a (id int PRIMARY KEY, c int, expires_at timestamptz)",
		"CREATE UNIQUE INDEX a_c ON a (c) WHERE c > 0")
	rules := []ttl.Rule{{Table: "a"}}
	out, err := Preview(e.ctx, e.conn, rules, false)
	if err != nil {
		t.Fatal(err)
	}
	if trig, fns, schema := e.installed(); trig != "" || fns != "" || schema != "" {
		t.Errorf("Preview installed something: %q %q %q", trig, fns, schema)
	}
	keys, _ := UniqueKeys(e.ctx, e.conn, rules)
	plan, _ := Plan(rules, keys, false)
	want := append([]string{"-- table public.a: unique index a_c: partial index, not covered; a collision with an expired row there still raises 23505"}, plan...)
	if strings.Join(out, "\n") != strings.Join(want, "\n") {
		t.Errorf("Preview:\n%s\nwant\n%s", strings.Join(out, "\n"), strings.Join(want, "\n"))
	}
	if applied := e.apply(rules, false); strings.Join(applied, "\n") != strings.Join(out, "\n") {
		t.Errorf("Apply did something else than Preview showed")
	}
	// The session is usable and outside a transaction afterwards.
	if got := e.strings("SELECT current_setting('lock_timeout')"); got != "0" {
		t.Errorf("lock_timeout leaked out of Apply: %s", got)
	}
}

// TestNoDeletePrivilege checks SECURITY DEFINER: a role that may insert but
// not delete still takes an expired row's key.
func TestNoDeletePrivilege(t *testing.T) {
	e := setup(t)
	role := "ttl_app_" + e.db
	e.exec(
		"CREATE TABLE a (id int PRIMARY KEY, v text, expires_at timestamptz)",
		"INSERT INTO a VALUES (1, 'old', now() - interval '1 hour'), (2, 'old', now() - interval '1 hour')",
		"CREATE ROLE "+role+" LOGIN PASSWORD 'app-secret'",
		"GRANT SELECT, INSERT, UPDATE ON a TO "+role,
	)
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = e.conn.Exec(ctx, "DROP OWNED BY "+role)
		_, _ = e.conn.Exec(ctx, "DROP ROLE "+role)
	})
	e.apply([]ttl.Rule{{Table: "a"}}, false)

	u, err := url.Parse(pgtest.Server(t).ConnString(e.db))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, "app-secret")
	app, err := pgx.Connect(e.ctx, u.String())
	if err != nil {
		t.Fatalf("connecting as %s: %v", role, err)
	}
	defer app.Close(e.ctx)

	_, err = app.Exec(e.ctx, "DELETE FROM a WHERE id = 1")
	if got := sqlState(t, err); got != "42501" {
		t.Fatalf("DELETE as %s: SQLSTATE %q, want 42501 (the test needs a role without DELETE)", role, got)
	}
	if _, err := app.Exec(e.ctx, "INSERT INTO a VALUES (1, 'new', NULL)"); err != nil {
		t.Errorf("INSERT over an expired row as %s: %v", role, err)
	}
	if _, err := app.Exec(e.ctx, "UPDATE a SET id = 2 WHERE id = 1"); err != nil {
		t.Errorf("UPDATE onto an expired row's key as %s: %v", role, err)
	}
	if got := e.strings("SELECT id || ':' || v FROM a ORDER BY id"); got != "2:new" {
		t.Errorf("rows %s, want 2:new", got)
	}
}

// TestNames installs for tables whose names need quoting or are too long to
// append to the function prefix.
func TestNames(t *testing.T) {
	e := setup(t)
	long := strings.Repeat("l", 63)
	e.exec(
		`CREATE SCHEMA "My ""Schema"""`,
		`CREATE TABLE "My ""Schema"""."we$ttl$ird" ("Key ""1""" int PRIMARY KEY, "Expires" timestamptz)`,
		`INSERT INTO "My ""Schema"""."we$ttl$ird" VALUES (1, now() - interval '1 hour')`,
		`CREATE TABLE `+long+` (id int PRIMARY KEY, expires_at timestamptz)`,
		`INSERT INTO `+long+` VALUES (1, now() - interval '1 hour')`,
	)
	e.exec(`CREATE TABLE "back\slash'" (id int PRIMARY KEY, expires_at timestamptz)`,
		`INSERT INTO "back\slash'" VALUES (1, now() - interval '1 hour')`)
	rules := []ttl.Rule{{Schema: `My "Schema"`, Table: `we$ttl$ird`, Column: "Expires"}, {Table: long}, {Table: `back\slash'`}}
	e.apply(rules, false)
	e.apply(rules, false)
	e.exec(`INSERT INTO "My ""Schema"""."we$ttl$ird" VALUES (1, NULL)`, `INSERT INTO `+long+` VALUES (1, NULL)`,
		`INSERT INTO "back\slash'" VALUES (1, NULL)`)
	var want []string
	for _, r := range rules {
		want = append(want, FunctionName(r.SchemaName(), r.Table))
	}
	sort.Strings(want)
	if _, fns, _ := e.installed(); fns != strings.Join(want, ",") {
		t.Errorf("functions %s, want %v", fns, want)
	}
	comment := e.strings(`SELECT obj_description(p.oid, 'pg_proc') FROM pg_proc p WHERE proname = 'purge_expired__public__back\slash'''`)
	if !strings.Contains(comment, `of public.back\slash' that`) {
		t.Errorf("comment %q", comment)
	}
	e.apply(rules, true)
	if trig, fns, schema := e.installed(); trig != "" || fns != "" || schema != "" {
		t.Errorf("after uninstall: triggers %q, functions %q, schema %q", trig, fns, schema)
	}
}

// TestConcurrentInsert checks two transactions racing for the key of one
// expired row: the second waits for the first, then sees its live row.
func TestConcurrentInsert(t *testing.T) {
	for _, iso := range []struct {
		level pgx.TxIsoLevel
		state string
	}{{pgx.ReadCommitted, "23505"}, {pgx.RepeatableRead, "40001"}} {
		t.Run(string(iso.level), func(t *testing.T) {
			e := setup(t)
			e.exec("CREATE TABLE a (id int PRIMARY KEY, v text, expires_at timestamptz)",
				"INSERT INTO a VALUES (1, 'old', now() - interval '1 hour')")
			e.apply([]ttl.Rule{{Table: "a"}}, false)
			other, err := pgx.Connect(e.ctx, pgtest.Server(t).ConnString(e.db))
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close(e.ctx)

			tx1, err := e.conn.BeginTx(e.ctx, pgx.TxOptions{IsoLevel: iso.level})
			if err != nil {
				t.Fatal(err)
			}
			tx2, err := other.BeginTx(e.ctx, pgx.TxOptions{IsoLevel: iso.level})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx2.Rollback(e.ctx) }()
			// Take tx2's snapshot now, before tx1 commits.
			if _, err := tx2.Exec(e.ctx, "SELECT count(*) FROM a"); err != nil {
				t.Fatal(err)
			}
			if _, err := tx1.Exec(e.ctx, "INSERT INTO a VALUES (1, 'tx1', NULL)"); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := tx2.Exec(e.ctx, "INSERT INTO a VALUES (1, 'tx2', NULL)")
				done <- err
			}()
			select {
			case err := <-done:
				t.Fatalf("second insert did not wait for the first: %v", err)
			case <-time.After(300 * time.Millisecond):
			}
			if err := tx1.Commit(e.ctx); err != nil {
				t.Fatal(err)
			}
			if got := sqlState(t, <-done); got != iso.state {
				t.Errorf("second insert: SQLSTATE %q, want %q", got, iso.state)
			}
			_ = tx2.Rollback(e.ctx)
			if got := e.strings("SELECT id || ':' || v FROM a"); got != "1:tx1" {
				t.Errorf("rows %s, want 1:tx1", got)
			}
		})
	}
}

// TestDocumentedLimits checks the limits the package documents.
func TestDocumentedLimits(t *testing.T) {
	e := setup(t)
	e.exec(
		"CREATE TABLE a (id int PRIMARY KEY, expires_at timestamptz)",
		"CREATE TABLE child (a_id int REFERENCES a (id))",
		"CREATE TABLE child_cascade (a_id int REFERENCES a (id) ON DELETE CASCADE)",
		"INSERT INTO a VALUES (1, now() - interval '1 hour'), (2, now() - interval '1 hour'), (3, NULL), (13, now() - interval '1 hour')",
		"INSERT INTO child VALUES (1)",
		"INSERT INTO child_cascade VALUES (2)",
	)
	e.apply([]ttl.Rule{{Table: "a"}}, false)

	// A foreign key referencing the expired row blocks its deletion...
	_, err := e.conn.Exec(e.ctx, "INSERT INTO a VALUES (1, NULL)")
	if got := sqlState(t, err); got != "23503" {
		t.Errorf("expired row referenced by child: SQLSTATE %q (%v), want 23503", got, err)
	}
	// ...or cascades.
	e.exec("INSERT INTO a VALUES (2, NULL)")
	if got := e.strings("SELECT count(*)::text FROM child_cascade"); got != "0" {
		t.Errorf("cascade: %s child rows left, want 0", got)
	}
	// An UPDATE that reaches an expired row after the trigger deleted it
	// (only possible bypassing the proxy).
	_, err = e.conn.Exec(e.ctx, "UPDATE a SET id = id + 10 WHERE id IN (3, 13)")
	if got := sqlState(t, err); got != "27000" {
		t.Errorf("UPDATE over an expired row the trigger deleted: SQLSTATE %q (%v), want 27000", got, err)
	}
}

// TestPartitioned installs on a partitioned table: the row triggers are
// cloned onto the partitions, and the delete goes through the parent.
func TestPartitioned(t *testing.T) {
	e := setup(t)
	e.exec(
		"CREATE TABLE p (region text, id int, v text, expires_at timestamptz, PRIMARY KEY (region, id)) PARTITION BY LIST (region)",
		"CREATE TABLE p_eu PARTITION OF p FOR VALUES IN ('eu')",
		"CREATE TABLE p_us PARTITION OF p FOR VALUES IN ('us')",
		"INSERT INTO p VALUES ('eu', 1, 'old', now() - interval '1 hour'), ('us', 1, 'old', now() - interval '1 hour'), ('us', 2, 'live', NULL), "+
			"('eu', 3, 'old', now() - interval '1 hour')",
	)
	e.apply([]ttl.Rule{{Table: "p"}}, false)
	e.exec(
		"INSERT INTO p VALUES ('eu', 1, 'new', NULL)",
		"INSERT INTO p VALUES ('us', 1, 'new', NULL) ON CONFLICT (region, id) DO UPDATE SET v = 'upd'",
	)
	// Moving a row to another partition, onto an expired row's key.
	e.exec("UPDATE p SET region = 'eu', id = 3 WHERE region = 'us' AND id = 2")
	_, err := e.conn.Exec(e.ctx, "INSERT INTO p VALUES ('eu', 3, 'new', NULL)")
	if got := sqlState(t, err); got != "23505" {
		t.Errorf("live collision: SQLSTATE %q, want 23505", got)
	}
	if got := e.strings("SELECT region || id || ':' || v FROM p ORDER BY 1"); got != "eu1:new,eu3:live,us1:new" {
		t.Errorf("rows %s, want eu1:new,eu3:live,us1:new", got)
	}
}
