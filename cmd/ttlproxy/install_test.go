package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestInstallCommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cluster, conn := ownCluster(t, ctx)
	dsn := cluster.ConnString("postgres")
	if _, err := conn.Exec(ctx, `CREATE TABLE sessions (id int PRIMARY KEY, expires_at timestamptz)`); err != nil {
		t.Fatal(err)
	}
	triggers := func() int {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_trigger WHERE tgrelid = 'sessions'::regclass AND NOT tgisinternal`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	p := writeFile(t, "ttlproxy.yaml", "upstream: "+cluster.Addr()+"\ntables:\n  - table: sessions\n")

	code, out, errOut := runCmd(t, ctx, "install", "--config", p, "--dsn", dsn, "--dry-run")
	if code != 0 || !strings.Contains(out, "CREATE TRIGGER") || !strings.Contains(out, "-- dry run: nothing was changed") {
		t.Fatalf("--dry-run: code %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if n := triggers(); n != 0 {
		t.Fatalf("--dry-run created %d triggers", n)
	}

	code, out, errOut = runCmd(t, ctx, "install", "--config", p, "--dsn", dsn)
	if code != 0 || !strings.Contains(out, "CREATE TRIGGER") {
		t.Fatalf("install: code %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if n := triggers(); n == 0 {
		t.Fatal("install created no trigger")
	}
	// The trigger makes the key of an expired row free again.
	if _, err := conn.Exec(ctx, `INSERT INTO sessions VALUES (1, now() - interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO sessions VALUES (1, now() + interval '1 hour')`); err != nil {
		t.Fatalf("insert over an expired key: %v", err)
	}

	code, out, errOut = runCmd(t, ctx, "install", "--config", p, "--dsn", dsn, "--uninstall")
	if code != 0 || !strings.Contains(out, "DROP") {
		t.Fatalf("--uninstall: code %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if n := triggers(); n != 0 {
		t.Fatalf("--uninstall left %d triggers", n)
	}

	// --row-security: the sweeper's login and bypass_roles are exempt.
	rls := writeFile(t, "rls.yaml", "upstream: "+cluster.Addr()+"\nbypass_roles: [migrator]\n"+
		"sweeper: {dsn: 'postgres://ttl_sweeper@"+cluster.Addr()+"/postgres'}\ntables:\n  - table: sessions\n")
	code, out, errOut = runCmd(t, ctx, "install", "--config", rls, "--dsn", dsn, "--row-security")
	if code != 0 || !strings.Contains(out, "CREATE POLICY ttlproxy_live") || !strings.Contains(out, "E'migrator'") ||
		!strings.Contains(out, "E'ttl_sweeper'") || !strings.Contains(out, "FORCE ROW LEVEL SECURITY") {
		t.Fatalf("--row-security: code %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	var policies int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_policy WHERE polrelid = 'sessions'::regclass`).Scan(&policies); err != nil || policies != 2 {
		t.Fatalf("policies after --row-security: %d, %v", policies, err)
	}
	code, out, errOut = runCmd(t, ctx, "install", "--config", rls, "--dsn", dsn, "--row-security", "--uninstall")
	if code != 0 || !strings.Contains(out, "DROP POLICY ttlproxy_live") {
		t.Fatalf("--row-security --uninstall: code %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_policy WHERE polrelid = 'sessions'::regclass`).Scan(&policies); err != nil || policies != 0 {
		t.Fatalf("policies after --uninstall: %d, %v", policies, err)
	}

	// --ddl-events: the event triggers; --dry-run prints them only,
	// --uninstall removes them; with --row-security, a usage error.
	events := func() int {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_event_trigger WHERE evtname LIKE 'ttlproxy%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	code, out, errOut = runCmd(t, ctx, "install", "--config", p, "--dsn", dsn, "--ddl-events", "--dry-run")
	if code != 0 || !strings.Contains(out, "CREATE EVENT TRIGGER ttlproxy_ddl_command_end ON ddl_command_end") || events() != 0 {
		t.Fatalf("--ddl-events --dry-run: code %d, %d event triggers\nstdout:\n%s\nstderr:\n%s", code, events(), out, errOut)
	}
	code, out, errOut = runCmd(t, ctx, "install", "--config", p, "--dsn", dsn, "--ddl-events")
	if code != 0 || events() != 2 {
		t.Fatalf("--ddl-events: code %d, %d event triggers\nstdout:\n%s\nstderr:\n%s", code, events(), out, errOut)
	}
	code, out, errOut = runCmd(t, ctx, "install", "--config", p, "--dsn", dsn, "--ddl-events", "--uninstall")
	if code != 0 || !strings.Contains(out, "DROP EVENT TRIGGER") || events() != 0 {
		t.Fatalf("--ddl-events --uninstall: code %d, %d event triggers\nstdout:\n%s\nstderr:\n%s", code, events(), out, errOut)
	}
	if code, _, errOut = runCmd(t, ctx, "install", "--config", p, "--dsn", dsn, "--ddl-events", "--row-security"); code != 2 ||
		!strings.Contains(errOut, "--row-security and --ddl-events") {
		t.Errorf("--ddl-events --row-security: code %d stderr %q", code, errOut)
	}

	// --auth-query: the function, for the --auth-user login; --config is
	// not needed; --dry-run prints only, --uninstall removes it.
	lookup := func() int {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_proc WHERE oid = to_regprocedure('ttlproxy.user_lookup(text, text)')`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if _, err := conn.Exec(ctx, "CREATE ROLE ttl_auth LOGIN"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--auth-query"}, "--auth-query needs --auth-user"},
		{[]string{"--auth-user", "ttl_auth"}, "--auth-user goes with --auth-query"},
		{[]string{"--auth-query", "--auth-user", "ttl_auth", "--ddl-events"}, "run the command once for each"},
	} {
		if code, _, errOut := runCmd(t, ctx, append([]string{"install", "--dsn", dsn}, c.args...)...); code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: code %d stderr %q", c.args, code, errOut)
		}
	}
	code, out, errOut = runCmd(t, ctx, "install", "--dsn", dsn, "--auth-query", "--auth-user", "ttl_auth", "--dry-run")
	if code != 0 || !strings.Contains(out, "SECURITY DEFINER") || !strings.Contains(out, `GRANT EXECUTE ON FUNCTION ttlproxy.user_lookup(text, text) TO "ttl_auth";`) || lookup() != 0 {
		t.Fatalf("--auth-query --dry-run: code %d, %d functions\nstdout:\n%s\nstderr:\n%s", code, lookup(), out, errOut)
	}
	for range 2 {
		code, out, errOut = runCmd(t, ctx, "install", "--dsn", dsn, "--auth-query", "--auth-user", "ttl_auth")
		if code != 0 || lookup() != 1 {
			t.Fatalf("--auth-query: code %d, %d functions\nstdout:\n%s\nstderr:\n%s", code, lookup(), out, errOut)
		}
	}
	code, _, errOut = runCmd(t, ctx, "install", "--dsn", dsn, "--auth-query", "--auth-user", "no_such_login")
	if code != 1 || !strings.Contains(errOut, `role "no_such_login" does not exist`) {
		t.Errorf("--auth-user of a missing role: code %d stderr %q", code, errOut)
	}
	for range 2 {
		code, out, errOut = runCmd(t, ctx, "install", "--dsn", dsn, "--auth-query", "--uninstall")
		if code != 0 || !strings.Contains(out, "DROP FUNCTION IF EXISTS ttlproxy.user_lookup(text, text);") || lookup() != 0 {
			t.Fatalf("--auth-query --uninstall: code %d, %d functions\nstdout:\n%s\nstderr:\n%s", code, lookup(), out, errOut)
		}
	}

	badDSN := strings.Replace(dsn, ":postgres@", ":wrong-secret@", 1)
	code, _, errOut = runCmd(t, ctx, "install", "--config", p, "--dsn", badDSN)
	if code != 1 || !strings.Contains(errOut, "connecting") || strings.Contains(errOut, "wrong-secret") {
		t.Errorf("bad password: code %d stderr %q", code, errOut)
	}
}
