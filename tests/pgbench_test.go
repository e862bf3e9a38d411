package tests

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/ttlproxy/ttlproxy/internal/pgtest"
	"github.com/ttlproxy/ttlproxy/sweeper"
	"github.com/ttlproxy/ttlproxy/ttl"
)

var (
	pgbenchProcessed = regexp.MustCompile(`number of transactions actually processed: (\d+)`)
	pgbenchFailed    = regexp.MustCompile(`number of failed transactions: (\d+)`)
)

// TestPgbenchTPCBWithTTLHistory runs pgbench's built-in TPC-B-like script
// through the proxy with pgbench_history as a TTL table (default_ttl 1s) and
// the sweeper running: every history row is stamped, expired rows disappear
// from reads and are swept while pgbench runs, and no transaction fails.
func TestPgbenchTPCBWithTTLHistory(t *testing.T) {
	pgbench := pgTool(t, "pgbench")
	rules := []ttl.Rule{{Table: "pgbench_history", DefaultTTL: time.Second}}
	s := newStack(t, stackOptions{rules: rules,
		sweep: &sweeper.Config{Interval: 300 * time.Millisecond, BatchSize: 500, BatchPause: time.Millisecond}})
	ctx := withTimeout(t, 3*time.Minute)
	if out, err := runTool(t, ctx, pgbench, pgtest.Server(t).Addr(), "-i", "-q", "-s", "1", s.db); err != nil {
		t.Fatalf("pgbench -i: %v\n%s", err, out)
	}
	direct := s.connect(s.direct)
	if _, err := direct.Exec(ctx, `ALTER TABLE pgbench_history ADD COLUMN expires_at timestamptz`); err != nil {
		t.Fatal(err)
	}
	if err := s.sweeper.Start(ctx); err != nil {
		t.Fatal(err)
	}

	for _, mode := range []struct {
		name    string
		seconds int
	}{{"simple", 8}, {"extended", 3}, {"prepared", 3}} {
		t.Run(mode.name, func(t *testing.T) {
			deletedBefore := s.metric("ttlproxy_sweeper_rows_deleted_total", map[string]string{"table": "public.pgbench_history"})
			host, port := splitAddr(t, s.proxyAdr)
			cmd := exec.CommandContext(ctx, pgbench, "-h", host, "-p", port, "-U", pgtest.Server(t).User, //nolint:gosec // pgbench found on PATH by the test
				"-c", "4", "-j", "2", "-T", strconv.Itoa(mode.seconds), "-M", mode.name, "-n", s.db)
			cmd.Env = append(os.Environ(), "PGPASSWORD="+pgtest.Server(t).Password, "PGSSLMODE=disable")
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// Sample the sweeper while pgbench is still running.
			time.Sleep(time.Duration(mode.seconds)*time.Second - 800*time.Millisecond)
			deletedDuring := s.metric("ttlproxy_sweeper_rows_deleted_total", map[string]string{"table": "public.pgbench_history"})
			err := cmd.Wait()
			if err != nil {
				t.Fatalf("pgbench: %v\n%s", err, out.String())
			}
			processed := pgbenchProcessed.FindStringSubmatch(out.String())
			if processed == nil || processed[1] == "0" {
				t.Fatalf("pgbench processed no transactions:\n%s", out.String())
			}
			if failed := pgbenchFailed.FindStringSubmatch(out.String()); failed != nil && failed[1] != "0" {
				t.Fatalf("pgbench reports %s failed transactions:\n%s", failed[1], out.String())
			}
			t.Logf("pgbench -M %s: %s transactions", mode.name, processed[1])
			if deletedDuring <= deletedBefore {
				t.Errorf("the sweeper deleted nothing while pgbench ran (%v -> %v)", deletedBefore, deletedDuring)
			}
			// Every history row is stamped with mtime (the transaction's now()) + 1s.
			var unstamped, wrong int
			if err := direct.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE expires_at IS NULL),
				count(*) FILTER (WHERE expires_at <> mtime + interval '1 second') FROM pgbench_history`).Scan(&unstamped, &wrong); err != nil {
				t.Fatal(err)
			}
			if unstamped != 0 || wrong != 0 {
				t.Errorf("pgbench_history rows not stamped: %d with NULL expiry, %d with the wrong expiry", unstamped, wrong)
			}
		})
	}

	// Once every row is past its second, none is visible through the proxy,
	// whether or not the sweeper got to it yet.
	time.Sleep(1100 * time.Millisecond)
	proxied := s.connect(s.proxied)
	if got := ids(t, proxied, `SELECT count(*) FROM pgbench_history`); got != "0" {
		t.Errorf("expired pgbench_history rows visible through the proxy: %s", got)
	}
	deadline := time.Now().Add(20 * time.Second)
	for ids(t, direct, `SELECT count(*) FROM pgbench_history`) != "0" {
		if time.Now().After(deadline) {
			t.Fatalf("the sweeper left %s rows in pgbench_history", ids(t, direct, `SELECT count(*) FROM pgbench_history`))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
