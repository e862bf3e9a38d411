package main

import (
	"context"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestReloadKeepsSweeperMetrics: a reload that replaces the sweeper (here,
// a new batch_size) keeps its counters and the time of its last run. Before,
// the new sweeper came with a new registry: rows_deleted_total began again
// at 0 and last_run_timestamp_seconds read 0 until its first run ended, so
// TTLProxySweeperNotRunning could fire on a healthy sweeper after a reload.
func TestReloadKeepsSweeperMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cluster, conn := ownCluster(t, ctx)
	dsn := cluster.ConnString("postgres")
	for _, sql := range []string{
		"CREATE TABLE sessions (id int PRIMARY KEY, expires_at timestamptz)",
		"INSERT INTO sessions SELECT g, CASE WHEN g <= 300 THEN now() - interval '1 hour' END FROM generate_series(1, 500) g",
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	cfg := func(batch int) string {
		return "upstream: " + cluster.Addr() + "\nlisten: 127.0.0.1:0\nadmin: {enable_lifecycle: true}\n" +
			"sweeper: {dsn: '" + dsn + "', interval: 1h, batch_size: " + strconv.Itoa(batch) + "}\ntables:\n  - table: sessions\n"
	}
	p := writeFile(t, "ttlproxy.yaml", cfg(1000))
	adminAddr := freeAddr(t)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan int, 1)
	var out, errOut lockedBuffer
	go func() {
		done <- run(runCtx, []string{"serve", "--config", p, "--admin-listen", adminAddr}, &out, &errOut)
	}()
	defer func() {
		stop()
		<-done
	}()
	base := "http://" + adminAddr
	waitHTTP(t, base+"/healthz")
	metric := func(name string) float64 {
		t.Helper()
		_, body := get(t, base+"/metrics")
		for _, line := range strings.Split(body, "\n") {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatalf("%s: %v", line, err)
				}
				return f
			}
		}
		return -1
	}
	const deleted = `ttlproxy_sweeper_rows_deleted_total{table="public.sessions"}`
	const lastRun = "ttlproxy_sweeper_last_run_timestamp_seconds"
	for deadline := time.Now().Add(time.Minute); metric(lastRun) <= 0; {
		if time.Now().After(deadline) {
			t.Fatalf("the sweeper's first run did not end:\n%s", errOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	firstRun, firstDeleted := metric(lastRun), metric(deleted)
	if firstDeleted != 300 {
		t.Fatalf("rows deleted by the first run: %v, want 300", firstDeleted)
	}

	if err := os.WriteFile(p, []byte(cfg(500)), 0o600); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(base+"/-/reload", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("reload: %d\n%s", resp.StatusCode, errOut.String())
	}
	// The new sweeper may have run already (nothing left to delete): its
	// time then, else the first run's.
	if got := metric(lastRun); got < firstRun {
		t.Errorf("%s after the reload: %v, want at least %v (the last run's time kept)", lastRun, got, firstRun)
	}
	if got := metric(deleted); got != firstDeleted {
		t.Errorf("%s after the reload: %v, want %v (the counter kept)", deleted, got, firstDeleted)
	}
}
