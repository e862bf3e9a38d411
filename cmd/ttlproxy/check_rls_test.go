package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestCheckRowSecurity: ttlproxy check reports the row_security level and,
// per TTL table, whether it and its children carry the live policy: a
// failure at required, where the proxy refuses such a table; ok at off.
func TestCheckRowSecurity(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cluster, conn := ownCluster(t, ctx)
	dsn := cluster.ConnString("postgres")
	for _, sql := range []string{
		"CREATE TABLE sessions (id int, expires_at timestamptz) PARTITION BY RANGE (id)",
		"CREATE TABLE sessions_1 PARTITION OF sessions FOR VALUES FROM (0) TO (100)",
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	base := "upstream: " + cluster.Addr() + "\nsweeper: {dsn: '" + dsn + "'}\ntables:\n  - table: sessions\n"
	required := writeFile(t, "required.yaml", base+"row_security: required\n")
	off := writeFile(t, "off.yaml", base)
	rowSecurity := func(cfg string) checkResult {
		t.Helper()
		_, out, errOut := runCmd(t, ctx, "check", "--config", cfg, "--dsn", dsn, "--format", "json")
		var reports []tableReport
		if err := json.Unmarshal([]byte(out), &reports); err != nil {
			t.Fatalf("check: %v\n%s%s", err, out, errOut)
		}
		for _, r := range reports {
			for _, c := range r.Checks {
				if r.Table == "public.sessions" && c.Check == "row security" {
					return c
				}
			}
		}
		t.Fatalf("no row security check:\n%s", out)
		return checkResult{}
	}
	if c := rowSecurity(required); c.Status != checkFail || !strings.Contains(c.Detail, "row_security required") ||
		!strings.Contains(c.Detail, "public.sessions: row security is not enabled") || !strings.Contains(c.Detail, "public.sessions_1") {
		t.Errorf("required, no policy: %+v", c)
	}
	if c := rowSecurity(off); c.Status != checkOK || !strings.Contains(c.Detail, "row_security off: the second layer is not installed") {
		t.Errorf("off, no policy: %+v", c)
	}
	if code, out, errOut := runCmd(t, ctx, "install", "--config", off, "--dsn", dsn, "--row-security"); code != 0 {
		t.Fatalf("install --row-security: code %d\n%s%s", code, out, errOut)
	}
	if c := rowSecurity(required); c.Status != checkOK || !strings.Contains(c.Detail, "protects the table and its 1 children") {
		t.Errorf("required, installed: %+v", c)
	}
	if _, err := conn.Exec(ctx, "ALTER TABLE sessions_1 NO FORCE ROW LEVEL SECURITY"); err != nil {
		t.Fatal(err)
	}
	if c := rowSecurity(required); c.Status != checkFail || !strings.Contains(c.Detail, "public.sessions_1: row security is not forced") {
		t.Errorf("required, a child not forced: %+v", c)
	}
}
