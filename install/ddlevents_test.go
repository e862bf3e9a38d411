package install

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/internal/pgtest"
	"github.com/ttlproxy/ttlproxy/ttl"
)

// listener LISTENs on DDLChannel in db and returns the next payload, or ""
// when none arrives within wait.
type listener struct {
	t    *testing.T
	conn *pgx.Conn
}

func listen(e *env) *listener {
	e.t.Helper()
	conn, err := pgx.Connect(e.ctx, pgtest.Server(e.t).ConnString(e.db))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(e.ctx, "LISTEN "+DDLChannel); err != nil {
		e.t.Fatal(err)
	}
	return &listener{t: e.t, conn: conn}
}

// drain reads the notifications already sent.
func (l *listener) drain() {
	l.t.Helper()
	for {
		if l.next(300*time.Millisecond) == "" {
			return
		}
	}
}

func (l *listener) next(wait time.Duration) string {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	n, err := l.conn.WaitForNotification(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return ""
		}
		l.t.Fatal(err)
	}
	return n.Payload
}

// TestDDLEvents: the event triggers notify the proxy's channel for DDL that
// commits, by any role and under session_replication_role = replica, and
// not for temporary objects or rolled-back DDL; install is idempotent and
// uninstall removes everything, schema ttlproxy included unless the
// collision triggers still use it.
func TestDDLEvents(t *testing.T) {
	e := setup(t)
	e.exec("CREATE TABLE items (id int PRIMARY KEY, expires_at timestamptz)")
	preview, err := PreviewDDLEvents(e.ctx, e.conn, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.strings("SELECT evtname::text FROM pg_event_trigger"); got != "" {
		t.Fatalf("the preview installed %s", got)
	}
	for range 2 {
		done, err := ApplyDDLEvents(e.ctx, e.conn, false)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(done, ";") != strings.Join(preview, ";") {
			t.Errorf("ran %q, previewed %q", done, preview)
		}
	}
	if got := e.strings("SELECT evtname::text || ':' || evtevent::text || ':' || evtenabled::text FROM pg_event_trigger ORDER BY 1"); got != "ttlproxy_ddl_command_end:ddl_command_end:A,ttlproxy_sql_drop:sql_drop:A" {
		t.Errorf("event triggers %s", got)
	}

	l := listen(e)
	for _, c := range []struct {
		sqls []string
		want string
	}{
		{[]string{"CREATE VIEW v AS SELECT id FROM items"}, "CREATE VIEW"},
		{[]string{"ALTER TABLE items ADD COLUMN note text"}, "ALTER TABLE"},
		{[]string{"ALTER TABLE items RENAME COLUMN note TO remark"}, "ALTER TABLE"},
		{[]string{"CREATE FUNCTION f() RETURNS bigint LANGUAGE sql AS 'SELECT count(*) FROM items'"}, "CREATE FUNCTION"},
		{[]string{"DROP VIEW v"}, "DROP VIEW"},
		{[]string{"ALTER TABLE items ENABLE ROW LEVEL SECURITY"}, "ALTER TABLE"},
		{[]string{"CREATE TABLE items_child () INHERITS (items)"}, "CREATE TABLE"},
		{[]string{"BEGIN", "CREATE VIEW v_rolled_back AS SELECT 1", "ROLLBACK"}, ""},
		{[]string{"CREATE TEMP TABLE scratch (a int)", "DROP TABLE scratch"}, ""},
		{[]string{"SET session_replication_role = replica", "CREATE VIEW v_replica AS SELECT id FROM items", "RESET session_replication_role"}, "CREATE VIEW"},
		{[]string{"DROP VIEW IF EXISTS no_such_view"}, ""},
		{[]string{"CREATE TEMP TABLE " + ProbeTable + " ()", "DROP TABLE " + ProbeTable}, ProbePayload},
	} {
		e.exec(c.sqls...)
		wait := 5 * time.Second
		if c.want == "" {
			wait = 300 * time.Millisecond
		}
		if got := l.next(wait); got != c.want {
			t.Errorf("%q: notified %q, want %q", c.sqls, got, c.want)
		}
	}

	// Any role's DDL is reported: firing an event trigger does not check
	// EXECUTE, which is revoked from PUBLIC.
	e.exec("DROP ROLE IF EXISTS ttl_ddl_user", "CREATE ROLE ttl_ddl_user", "GRANT CREATE ON SCHEMA public TO ttl_ddl_user",
		"GRANT SELECT ON items TO ttl_ddl_user")
	l.drain()
	e.exec("SET ROLE ttl_ddl_user", "CREATE VIEW v_user AS SELECT id FROM items", "RESET ROLE")
	if got := l.next(5 * time.Second); got != "CREATE VIEW" {
		t.Errorf("a plain role's CREATE VIEW: notified %q", got)
	}
	t.Cleanup(func() {
		_, _ = e.conn.Exec(context.Background(), "DROP OWNED BY ttl_ddl_user; DROP ROLE IF EXISTS ttl_ddl_user")
	})

	// A role that may not create event triggers gets an error that says
	// what it takes.
	e.exec("SET ROLE ttl_ddl_user")
	_, err = ApplyDDLEvents(e.ctx, e.conn, false)
	e.exec("RESET ROLE")
	if err == nil || !strings.Contains(err.Error(), "superuser") {
		t.Errorf("install by a plain role: %v, want an error naming the superuser", err)
	}

	// Uninstall with the collision triggers in place keeps schema
	// ttlproxy; without them it goes.
	if _, err := Apply(e.ctx, e.conn, []ttl.Rule{{Table: "items"}}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := ApplyDDLEvents(e.ctx, e.conn, true); err != nil {
		t.Fatal(err)
	}
	if got := e.strings("SELECT evtname::text FROM pg_event_trigger"); got != "" {
		t.Errorf("left after uninstall: %s", got)
	}
	if got := e.strings("SELECT nspname::text FROM pg_namespace WHERE nspname = 'ttlproxy'"); got != "ttlproxy" {
		t.Error("uninstall dropped schema ttlproxy although the collision triggers use it")
	}
	l.drain()
	e.exec("CREATE VIEW v_after AS SELECT 1")
	if got := l.next(300 * time.Millisecond); got != "" {
		t.Errorf("notified %q after uninstall", got)
	}
	if _, err := ApplyDDLEvents(e.ctx, e.conn, false); err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(e.ctx, e.conn, []ttl.Rule{{Table: "items"}}, true); err != nil {
		t.Fatal(err)
	}
	if _, err := ApplyDDLEvents(e.ctx, e.conn, true); err != nil {
		t.Fatal(err)
	}
	if got := e.strings("SELECT nspname::text FROM pg_namespace WHERE nspname = 'ttlproxy'"); got != "" {
		t.Error("schema ttlproxy left empty after both uninstalls")
	}
}
