package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/internal/pgcluster"
)

// ownCluster starts a throw-away cluster for one test (needPostgres) and
// connects to its database postgres; both are closed when the test ends.
func ownCluster(t *testing.T, ctx context.Context) (*pgcluster.Cluster, *pgx.Conn) {
	t.Helper()
	needPostgres(t)
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Stop() })
	conn, err := pgx.Connect(ctx, cluster.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return cluster, conn
}

// needPostgres skips when no PostgreSQL server binaries are installed, except
// in CI where that is a failure.
func needPostgres(t *testing.T) {
	t.Helper()
	if _, err := pgcluster.BinDir(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but %v", err)
		}
		t.Skip(err)
	}
}

// TestDemoCheck runs `ttlproxy demo --check` in-process: its own cluster,
// proxy, sweeper and admin server, and the self-check through them.
func TestDemoCheck(t *testing.T) {
	needPostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code, out, errOut := runCmd(t, ctx, "demo", "--check", "--port", "0")
	t.Logf("stdout:\n%s", out)
	if code != 0 {
		t.Fatalf("demo --check exited %d; stderr:\n%s", code, errOut)
	}
	for _, want := range []string{
		"ttlproxy demo is running.",
		"psql \"postgres://postgres:postgres@127.0.0.1:",
		"bob stamped by the proxy",
		"(visible)",
		"hidden",
		"alice (expires_at NULL) still visible",
		`ttlproxy_sweeper_rows_deleted_total{table="public.sessions"}`,
		"Self-check passed.",
		"Stopped PostgreSQL and removed its data directory.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// TestDemoDuration runs the interactive demo for a moment and checks that it
// prints how to connect and exits cleanly.
func TestDemoDuration(t *testing.T) {
	needPostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code, out, errOut := runCmd(t, ctx, "demo", "--duration", "1s", "--port", "0")
	if code != 0 {
		t.Fatalf("demo --duration exited %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{
		"psql \"postgres://postgres:postgres@127.0.0.1:",
		"now() + interval '5 seconds'",
		"/metrics",
		"1s elapsed: shutting down.",
		"Stopped PostgreSQL and removed its data directory.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q\n%s", want, out)
		}
	}
}

// TestDemoInterrupted cancels the running demo as Ctrl-C does, once it has
// printed its banner.
func TestDemoInterrupted(t *testing.T) {
	needPostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out := &cancelOnWrite{marker: "Press Ctrl-C", cancel: cancel}
	var errOut bytes.Buffer
	code := run(ctx, []string{"demo", "--port", "0"}, out, &errOut)
	if code != 0 || !strings.Contains(out.String(), "Interrupted: shutting down.") {
		t.Fatalf("demo exited %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
}

// TestDemoInterruptedDuringStart cancels before the cluster is up.
func TestDemoInterruptedDuringStart(t *testing.T) {
	needPostgres(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	code, out, errOut := runCmd(t, ctx, "demo", "--port", "0")
	if code != 1 || !strings.Contains(errOut, "ttlproxy demo: interrupted") {
		t.Fatalf("demo exited %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

// cancelOnWrite is a buffer that calls cancel once marker has been written.
type cancelOnWrite struct {
	bytes.Buffer
	marker string
	cancel context.CancelFunc
}

func (w *cancelOnWrite) Write(p []byte) (int, error) {
	n, err := w.Buffer.Write(p)
	if strings.Contains(w.String(), w.marker) {
		w.cancel()
	}
	return n, err
}
