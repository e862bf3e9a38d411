package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ttlproxy/ttlproxy/internal/pgcluster"
)

// TestRollingRestart: two instances share the client port (listen_reuseport);
// while pgbench -C (connect, run a statement, disconnect, in a loop) runs
// through the port, the first instance is stopped. Its sessions end at their
// transaction boundary and new connections reach the second instance.
func TestRollingRestart(t *testing.T) {
	needPostgres(t)
	migrateQueued(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cluster.Stop() }()
	port := freePort(t)
	cfg := "upstream: " + cluster.Addr() + "\nlisten: 127.0.0.1:" + strconv.Itoa(port) + "\nlisten_reuseport: true\n" +
		"shutdown_timeout: 5s\ntables:\n  - table: sessions\n"
	p := writeFile(t, "rolling.yaml", cfg)
	start := func() (context.CancelFunc, chan int) {
		ictx, icancel := context.WithCancel(ctx)
		done := make(chan int, 1)
		adminAddr := freeAddr(t)
		go func() {
			var out, errOut bytes.Buffer
			done <- run(ictx, []string{"serve", "--config", p, "--admin-listen", adminAddr}, &out, &errOut)
		}()
		waitHTTP(t, "http://"+adminAddr+"/healthz")
		return icancel, done
	}
	stopA, doneA := start()
	stopB, doneB := start()
	defer stopB()

	// pgbench -C: a new connection per transaction, as a client behind a
	// load balancer meets the restart; every failed connection or statement
	// would abort a client and show in its exit status.
	script := writeFile(t, "select.sql", "SELECT 1;\n")
	pgbench := filepath.Join(cluster.BinDir, "pgbench")
	cmd := exec.CommandContext(ctx, pgbench, "-n", "-C", "-c", "4", "-j", "2", "-T", "3", "-f", script, //nolint:gosec // pgbench found on PATH by the test
		"-h", "127.0.0.1", "-p", strconv.Itoa(port), "-U", cluster.User, "postgres")
	cmd.Env = append(os.Environ(), "PGPASSWORD="+cluster.Password, "PGSSLMODE=disable")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	stopA()
	select {
	case code := <-doneA:
		if code != 0 {
			t.Errorf("the first instance exited %d", code)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the first instance did not stop")
	}
	err = cmd.Wait()
	stopB()
	<-doneB
	t.Logf("pgbench through the restart:\n%s", out.String())
	if err != nil || strings.Contains(out.String(), "aborted") {
		t.Fatalf("pgbench failed during the restart: %v", err)
	}
	m := regexp.MustCompile(`number of transactions actually processed: (\d+)`).FindStringSubmatch(out.String())
	if m == nil || m[1] == "0" {
		t.Fatalf("pgbench processed no transaction")
	}
	if f := regexp.MustCompile(`number of failed transactions: (\d+)`).FindStringSubmatch(out.String()); f != nil && f[1] != "0" {
		t.Errorf("%s failed transactions during the restart", f[1])
	}
}

// migrateQueued sets net.ipv4.tcp_migrate_req to 1 for the test when it
// can (as docs/operations.md recommends for rolling restarts): Linux then moves
// connections queued on a closing SO_REUSEPORT listener to another listener
// of the port, instead of resetting them in the instant between the
// drained instance's last accept and its close.
func migrateQueued(t *testing.T) {
	const path = "/proc/sys/net/ipv4/tcp_migrate_req"
	old, err := os.ReadFile(path)
	if err != nil || os.WriteFile(path, []byte("1"), 0o600) != nil {
		t.Log("net.ipv4.tcp_migrate_req cannot be set: a connection queued at the instant of the switch may be reset")
		return
	}
	t.Cleanup(func() { _ = os.WriteFile(path, old, 0o600) }) //nolint:gosec // a fixed /proc/sys path, restored as it was
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestListenKeepalive: a connection accepted on the client listener has
// TCP keepalive on with the listener's idle time, interval and count
// (inherited from the listening socket), and TCP_NODELAY.
func TestListenKeepalive(t *testing.T) {
	for _, reusePort := range []bool{false, true} {
		ln, err := listen(context.Background(), "127.0.0.1:0", reusePort)
		if err != nil {
			t.Fatal(err)
		}
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		a, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		rc, err := a.(*net.TCPConn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		want := []struct {
			name       string
			level, opt int
			value      int
		}{
			{"SO_KEEPALIVE", unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
			{"TCP_KEEPIDLE", unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, clientKeepaliveIdleSecs},
			{"TCP_KEEPINTVL", unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, clientKeepaliveIntervalSecs},
			{"TCP_KEEPCNT", unix.IPPROTO_TCP, unix.TCP_KEEPCNT, clientKeepaliveCount},
			{"TCP_NODELAY", unix.IPPROTO_TCP, unix.TCP_NODELAY, 1},
		}
		if err := rc.Control(func(fd uintptr) {
			for _, w := range want {
				got, err := unix.GetsockoptInt(int(fd), w.level, w.opt)
				if err != nil || got != w.value {
					t.Errorf("reusePort %v: %s = %d (%v), want %d", reusePort, w.name, got, err, w.value)
				}
			}
		}); err != nil {
			t.Fatal(err)
		}
		_ = a.Close()
		_ = c.Close()
		_ = ln.Close()
	}
}
