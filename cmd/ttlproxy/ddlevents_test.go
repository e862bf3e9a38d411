package main

import (
	"bytes"
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestServeDDLEvents: with the event triggers installed and
// ddl_events_dsn set, `ttlproxy serve` reads a view created directly
// filtered 100 ms after its COMMIT (catalog_ttl is an hour), `ttlproxy
// status` shows the events flowing, and `ttlproxy check` counts the proxy
// listening.
func TestServeDDLEvents(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cluster, conn := ownCluster(t, ctx)
	dsn := cluster.ConnString("postgres")
	for _, sql := range []string{
		"CREATE TABLE sessions (id int PRIMARY KEY, expires_at timestamptz)",
		"INSERT INTO sessions VALUES (1, NULL), (2, now() + interval '1 hour'), (3, now() - interval '1 hour')",
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	listen, admin := freeAddr(t), freeAddr(t)
	p := writeFile(t, "ttlproxy.yaml", "upstream: "+cluster.Addr()+"\nlisten: "+listen+"\ncatalog_ttl: 1h\nadmin: {enable_status: true}\n"+
		"ddl_events_dsn: '"+dsn+"'\ntables:\n  - table: sessions\n")
	if code, out, errOut := runCmd(t, ctx, "install", "--config", p, "--dsn", dsn, "--ddl-events"); code != 0 {
		t.Fatalf("install --ddl-events: %d\n%s%s", code, out, errOut)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan int, 1)
	var out bytes.Buffer
	var errOut lockedBuffer
	go func() { done <- run(sctx, []string{"serve", "--config", p, "--admin-listen", admin}, &out, &errOut) }()
	defer func() {
		stop()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("serve exited %d:\n%s", code, errOut.String())
			}
		case <-time.After(30 * time.Second):
			t.Error("serve did not stop")
		}
	}()
	base := "http://" + admin
	waitHTTP(t, base+"/healthz")

	u, _ := url.Parse(dsn)
	u.Host = listen
	client, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(context.Background())
	count := func(rel string) string {
		t.Helper()
		var n string
		if err := client.QueryRow(ctx, "SELECT count(*)::text FROM "+rel).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count("sessions"); n != "2" {
		t.Fatalf("sessions through the proxy: %s rows, want 2", n)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, body := get(t, base+"/status")
		if strings.Contains(body, `"flowing": true`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("DDL events not flowing: %s\n%s", body, errOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := conn.Exec(ctx, "CREATE VIEW v_sessions AS SELECT id FROM sessions"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if n := count("v_sessions"); n != "2" {
		t.Errorf("a view created directly, 100 ms after its COMMIT: %s rows, want the 2 live ones", n)
	}

	var stOut, stErr bytes.Buffer
	code := run(ctx, []string{"status", "--admin", base}, &stOut, &stErr)
	flowing := false
	for _, line := range strings.Split(stOut.String(), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "postgres" && f[1] == "true" {
			flowing = true
		}
	}
	if code != 0 || !strings.Contains(stOut.String(), "DDL EVENTS") || !flowing {
		t.Errorf("ttlproxy status: %d\n%s%s", code, stOut.String(), stErr.String())
	}
	_, metrics := get(t, base+"/metrics")
	if !strings.Contains(metrics, `ttlproxy_proxy_ddl_events_flowing{database="postgres"} 1`) {
		t.Errorf("metrics lack the flowing gauge:\n%s", metrics)
	}
	code, checkOut, _ := runCmd(t, ctx, "check", "--config", p, "--dsn", dsn)
	if !strings.Contains(checkOut, "proxies listening") || !strings.Contains(checkOut, "1 now") ||
		!strings.Contains(checkOut, "a probe DDL's notification arrived") {
		t.Errorf("check: code %d\n%s", code, checkOut)
	}
	t.Logf("check output:\n%s", checkOut)
}
