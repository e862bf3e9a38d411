package main

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestCheckCommand runs ttlproxy check against a deliberately broken setup,
// then against a sound one.
func TestCheckCommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cluster, conn := ownCluster(t, ctx)
	dsn := cluster.ConnString("postgres")
	for _, sql := range []string{
		"CREATE ROLE ttl_sweeper LOGIN",
		"CREATE TABLE sessions (id int PRIMARY KEY, expires_at timestamptz DEFAULT now() + interval '1 day')",
		"CREATE TABLE events (id int PRIMARY KEY, valid_until text)",
		"CREATE TABLE carts (id int PRIMARY KEY)",
		"CREATE TABLE contacts (id int PRIMARY KEY, expires_at timestamptz, phone text, phone_exp timestamptz)",
		"CREATE INDEX contacts_phone_exp ON contacts (phone_exp)",
		"GRANT SELECT, UPDATE ON contacts TO ttl_sweeper",
		"CREATE TABLE carts_ttl (id int, expires_at timestamptz)",
		"GRANT SELECT, UPDATE ON sessions TO ttl_sweeper",
		"CREATE VIEW v_sessions AS SELECT * FROM sessions",
		"CREATE VIEW v_events AS SELECT id FROM events",
		"CREATE VIEW v_contacts AS SELECT id, phone FROM contacts",
		"CREATE VIEW v_events_join AS SELECT e.valid_until FROM events e JOIN events f USING (id)",
		"CREATE VIEW v_contacts_v AS SELECT id, CASE WHEN (phone_exp IS NULL OR phone_exp >= now()) THEN phone ELSE NULL::text END AS phone FROM contacts",
		"CREATE MATERIALIZED VIEW m_sessions AS SELECT * FROM sessions",
		"CREATE FUNCTION f_sessions() RETURNS bigint LANGUAGE sql AS 'SELECT count(*) FROM sessions'",
		"CREATE FUNCTION f_calls() RETURNS bigint LANGUAGE plpgsql AS $$ BEGIN RETURN f_sessions(); END $$",
		"CREATE TABLE audit (n bigint)",
		"CREATE RULE r_audit AS ON INSERT TO audit DO ALSO SELECT count(*) FROM sessions",
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	u, _ := url.Parse(dsn)
	u.User = url.User("ttl_sweeper")
	cfgText := "upstream: " + cluster.Addr() + "\nsweeper: {dsn: '" + u.String() + "'}\n" +
		"trusted_functions: [f_calls]\ntables:\n" +
		"  - table: sessions\n    default_ttl: 1h\n" +
		"  - table: events\n    column: valid_until\n    columns:\n      - {column: memo, expires_at_column: memo_exp}\n      - {column: id, base_column: valid_until, expire_after: 1h}\n" +
		"  - table: carts\n    rule: sidecar\n    sidecar_table: carts_ttl\n    key_columns: [id]\n" +
		"  - table: contacts\n    rule: none\n    columns:\n      - {column: phone, expires_at_column: phone_exp}\n" +
		"  - table: missing\n"
	p := writeFile(t, "check.yaml", cfgText)
	code, out, errOut := runCmd(t, ctx, "check", "--config", p, "--dsn", dsn)
	if code != 1 {
		t.Fatalf("check of a broken setup: code %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{
		"public.sessions (column expires_at timestamptz)",
		"none: the sweeper and every filtered read scan the table",
		"default_ttl stamping",
		"which stamping replaces",
		"sweeper privileges",
		"ttl_sweeper lacks DELETE",
		"view public.v_sessions",
		"reads are expanded into its filtered definition",
		"materialized view public.m_sessions",
		"function public.f_sessions",
		"calls are refused (0A000) unless listed in trusted_functions",
		"function public.f_calls",
		"trusted (trusted_functions)",
		"rule on public.audit",
		"column valid_until",
		"type text, the rule wants timestamp with time zone",
		"public.events (column valid_until timestamptz; expiring: memo until memo_exp timestamptz, id at valid_until + 1h0m0s)",
		"memo, id read as NULL once expired in every clause",
		"view public.v_events",
		"reads are expanded into its rewritten definition, expired values read as NULL",
		"view public.v_events_join",
		`reads are refused (0A000): cannot serve expiring column "id" of table public.events`,
		"column memo_exp",
		"index on memo_exp",
		"none: each sweep of memo's expired values scans the table",
		"sidecar registry",
		"has no unique key on (id)",
		"public.contacts (no row rule; expiring: phone until phone_exp timestamptz)",
		"public.missing",
		"no such table",
		"database postgres (DDL events)",
		"not installed (ttlproxy_ddl_command_end, ttlproxy_sql_drop)",
		"reaches sessions only within catalog_ttl (30s)",
		"run ttlproxy install --ddl-events",
		"database postgres (auth query)",
		"not installed: needed only by an auth_query that calls it",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}

	// JSON, for automation.
	code, out, _ = runCmd(t, ctx, "check", "--config", p, "--dsn", dsn, "--format", "json")
	var reports []tableReport
	if err := json.Unmarshal([]byte(out), &reports); code != 1 || err != nil || len(reports) != 7 {
		t.Fatalf("--format json: code %d, %v, %d reports", code, err, len(reports))
	}
	// The table with no row rule: its column's index and expiry, no row
	// expiry column or index, no DELETE needed; all sound.
	var contacts []string
	for _, r := range reports {
		if r.Table != "public.contacts" {
			continue
		}
		for _, c := range r.Checks {
			contacts = append(contacts, c.Check+": "+c.Status+" "+c.Detail)
			if c.Status != checkOK {
				t.Errorf("public.contacts: %s is %s (%s)", c.Check, c.Status, c.Detail)
			}
		}
	}
	got := strings.Join(contacts, "\n")
	for _, want := range []string{"index on phone_exp: ok contacts_phone_exp", "column phone_exp: ok", "sweeper privileges: ok ttl_sweeper: SELECT, UPDATE",
		"view public.v_contacts: ok reads are expanded into its rewritten definition",
		"view public.v_contacts_v: ok read as it is: its definition reads the expiring columns as NULL once expired"} {
		if !strings.Contains(got, want) {
			t.Errorf("public.contacts checks lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "expires_at") {
		t.Errorf("public.contacts checks a row expiry:\n%s", got)
	}

	// A sound setup exits 0: with the DDL event triggers, whose
	// notifications flow.
	if code, out, errOut := runCmd(t, ctx, "install", "--config", p, "--dsn", dsn, "--ddl-events"); code != 0 ||
		!strings.Contains(out, "CREATE EVENT TRIGGER ttlproxy_ddl_command_end") {
		t.Fatalf("install --ddl-events: code %d\n%s%s", code, out, errOut)
	}
	for _, sql := range []string{
		"DROP VIEW v_sessions", "DROP MATERIALIZED VIEW m_sessions", "DROP FUNCTION f_calls()", "DROP FUNCTION f_sessions()",
		"DROP RULE r_audit ON audit", "ALTER TABLE sessions ALTER COLUMN expires_at DROP DEFAULT",
		"CREATE INDEX ON sessions (expires_at)", "GRANT DELETE ON sessions TO ttl_sweeper",
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// The auth query function, for a login of its own.
	if _, err := conn.Exec(ctx, "CREATE ROLE ttl_auth LOGIN"); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runCmd(t, ctx, "install", "--dsn", dsn, "--auth-query", "--auth-user", "ttl_auth"); code != 0 {
		t.Fatalf("install --auth-query: code %d\n%s%s", code, out, errOut)
	}
	good := writeFile(t, "good.yaml", "upstream: "+cluster.Addr()+"\nsweeper: {dsn: '"+u.String()+"'}\ntables:\n  - table: sessions\n    default_ttl: 1h\n")
	code, out, errOut = runCmd(t, ctx, "check", "--config", good, "--dsn", dsn)
	if code != 0 {
		t.Errorf("check of a sound setup: code %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"ttlproxy_ddl_command_end, ttlproxy_sql_drop", "a probe DDL's notification arrived in", "proxies listening",
		"ttlproxy.user_lookup(text, text): SECURITY DEFINER, search_path pinned, EXECUTE: ttl_auth"} {
		if !strings.Contains(out, want) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
	// Disabled triggers are a warning.
	if _, err := conn.Exec(ctx, "ALTER EVENT TRIGGER ttlproxy_sql_drop DISABLE"); err != nil {
		t.Fatal(err)
	}
	code, out, _ = runCmd(t, ctx, "check", "--config", good, "--dsn", dsn)
	if code != 1 || !strings.Contains(out, "disabled (ttlproxy_sql_drop)") {
		t.Errorf("check with a disabled event trigger: code %d\n%s", code, out)
	}

	// An auth query function any login may run fails the check.
	if _, err := conn.Exec(ctx, "GRANT EXECUTE ON FUNCTION ttlproxy.user_lookup(text, text) TO PUBLIC"); err != nil {
		t.Fatal(err)
	}
	code, out, _ = runCmd(t, ctx, "check", "--config", good, "--dsn", dsn)
	if code != 1 || !strings.Contains(out, "PUBLIC may execute it; run ttlproxy install --auth-query again") {
		t.Errorf("check with EXECUTE granted to PUBLIC: code %d\n%s", code, out)
	}
}
