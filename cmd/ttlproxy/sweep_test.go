package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestSweepCommand: --dry-run reports and deletes nothing; --once deletes
// the expired rows, sets the expired values of an expiring column to NULL
// and exits 0.
func TestSweepCommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cluster, conn := ownCluster(t, ctx)
	dsn := cluster.ConnString("postgres")
	for _, sql := range []string{
		"CREATE TABLE sessions (id int PRIMARY KEY, expires_at timestamptz, ip text, ip_exp timestamptz)",
		`INSERT INTO sessions SELECT g, CASE WHEN g <= 300 THEN now() - interval '1 hour' END, 'ip',
			CASE WHEN g > 400 OR g <= 100 THEN now() - interval '1 hour' END FROM generate_series(1, 500) g`,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	p := writeFile(t, "sweep.yaml", "upstream: "+cluster.Addr()+"\nsweeper: {dsn: '"+dsn+"'}\ntables:\n  - table: sessions\n"+
		"    columns: [{column: ip, expires_at_column: ip_exp}]\n")
	count := func() int {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM sessions").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	code, out, errOut := runCmd(t, ctx, "sweep", "--config", p, "--dry-run")
	if code != 0 || !strings.Contains(out, "expired rows now: 300") || !strings.Contains(out, "DELETE FROM") ||
		!strings.Contains(out, "no index serves the expired condition") || !strings.Contains(out, "nothing was deleted") ||
		!strings.Contains(out, "public.sessions column ip\n  expired values now (in rows the row rule keeps): 100") ||
		!strings.Contains(out, `UPDATE "public"."sessions" AS t SET "ip" = NULL, "ip_exp" = NULL`) {
		t.Fatalf("--dry-run: %d\n%s%s", code, out, errOut)
	}
	if n := count(); n != 500 {
		t.Fatalf("--dry-run deleted rows: %d left", n)
	}
	code, out, errOut = runCmd(t, ctx, "sweep", "--config", p, "--once")
	if code != 0 || !strings.Contains(out, "public.sessions  300") || !strings.Contains(out, "LONGEST BATCH") ||
		!strings.Contains(out, "public.sessions.ip  100") {
		t.Fatalf("--once: %d\n%s%s", code, out, errOut)
	}
	if n := count(); n != 200 {
		t.Fatalf("--once left %d rows, want 200", n)
	}
	var nulled int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM sessions WHERE ip IS NULL AND ip_exp IS NULL AND id > 400").Scan(&nulled); err != nil || nulled != 100 {
		t.Fatalf("--once nulled %d values of rows 401-500 (%v), want 100", nulled, err)
	}
	if code, _, _ := runCmd(t, ctx, "sweep", "--config", p); code != 2 {
		t.Errorf("without --once or --dry-run: code %d, want 2", code)
	}
}
