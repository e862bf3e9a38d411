package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestImportPgBouncerServes: the file import-pgbouncer writes from a
// PgBouncer configuration, with a TTL table added, runs a proxy that pools
// by transaction on the PgBouncer port and hides an expired row.
func TestImportPgBouncerServes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cluster, direct := ownCluster(t, ctx)
	if _, err := direct.Exec(ctx, "CREATE TABLE sessions (id int PRIMARY KEY, expires_at timestamptz NOT NULL);"+
		"INSERT INTO sessions VALUES (1, now() + interval '1 hour'), (2, now() - interval '1 hour')"); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	userlist := writeFile(t, "userlist.txt", `"`+cluster.User+`" "`+cluster.Password+`"`+"\n")
	ini := writeFile(t, "pgbouncer.ini", "[databases]\n* = host=127.0.0.1 port="+strconv.Itoa(cluster.Port)+"\n\n"+
		"[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = "+strconv.Itoa(port)+"\npool_mode = transaction\n"+
		"auth_type = scram-sha-256\ndefault_pool_size = 2\nserver_tls_sslmode = disable\nlogfile = /var/log/pgbouncer.log\n")
	out := filepath.Join(t.TempDir(), "ttlproxy.yaml")

	code, stdout, stderr := runCmd(t, ctx, "import-pgbouncer", "-o", out, ini, userlist)
	if code != 0 || stdout != "" || !strings.Contains(stderr, "1 settings not carried over") || !strings.Contains(stderr, "logfile") {
		t.Fatalf("import-pgbouncer exited %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	if code, _, stderr := runCmd(t, ctx, "import-pgbouncer", "-o", out, ini, userlist); code != 1 || !strings.Contains(stderr, "exists") {
		t.Errorf("an existing file was not refused: %d %s", code, stderr)
	}
	data, err := os.ReadFile(out) //nolint:gosec // the test's own file
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(string(data), "tables: []", "tables:\n  - table: sessions", 1)
	if err := os.WriteFile(out, []byte(cfg), 0o600); err != nil { //nolint:gosec // the test's own file
		t.Fatal(err)
	}

	sctx, stop := context.WithCancel(ctx)
	done := make(chan int, 1)
	admin := freeAddr(t)
	var logs bytes.Buffer
	go func() { done <- run(sctx, []string{"serve", "--config", out, "--admin-listen", admin}, &logs, &logs) }()
	defer func() {
		stop()
		<-done
	}()
	waitHTTP(t, "http://"+admin+"/healthz")

	conn, err := pgx.Connect(ctx, "postgres://"+cluster.User+":"+cluster.Password+"@127.0.0.1:"+strconv.Itoa(port)+"/postgres?sslmode=disable")
	if err != nil {
		t.Fatalf("%v\n%s", err, logs.String())
	}
	defer conn.Close(ctx)
	var ids []int32
	rows, err := conn.Query(ctx, "SELECT id FROM sessions ORDER BY id")
	if err == nil {
		ids, err = pgx.CollectRows(rows, pgx.RowTo[int32])
	}
	if err != nil || len(ids) != 1 || ids[0] != 1 {
		t.Fatalf("rows through the imported configuration: %v, %v", ids, err)
	}
}
