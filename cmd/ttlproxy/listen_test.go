package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/internal/pgcluster"
)

// TestRollingRestart: two instances share the client port (listen_reuseport);
// while clients connect, run a statement and disconnect in a loop (as
// pgbench -C does), the first instance is stopped. Its sessions end at their
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
	defer cluster.Stop()
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

	u := cluster.ConnString("postgres")
	ccfg, err := pgx.ParseConfig(u)
	if err != nil {
		t.Fatal(err)
	}
	ccfg.Host, ccfg.Port = "127.0.0.1", uint16(port)
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				conn, err := pgx.ConnectConfig(ctx, ccfg)
				if err == nil {
					_, err = conn.Exec(ctx, "SELECT 1")
					conn.Close(ctx)
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				ok.Add(1)
			}
		})
	}
	time.Sleep(500 * time.Millisecond)
	stopA()
	select {
	case code := <-doneA:
		if code != 0 {
			t.Errorf("the first instance exited %d", code)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the first instance did not stop")
	}
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	stopB()
	<-doneB
	t.Logf("%d transactions, %d failed", ok.Load(), failed.Load())
	if ok.Load() < 10 {
		t.Fatalf("only %d transactions ran", ok.Load())
	}
	if failed.Load() > 0 {
		t.Errorf("%d of %d transactions failed during the restart (first: %v)", failed.Load(), ok.Load()+failed.Load(), firstErr.Load())
	}
}

// migrateQueued sets net.ipv4.tcp_migrate_req to 1 for the test when it
// can (as the README recommends for rolling restarts): Linux then moves
// connections queued on a closing SO_REUSEPORT listener to another listener
// of the port, instead of resetting them in the instant between the
// drained instance's last accept and its close.
func migrateQueued(t *testing.T) {
	const path = "/proc/sys/net/ipv4/tcp_migrate_req"
	old, err := os.ReadFile(path)
	if err != nil || os.WriteFile(path, []byte("1"), 0o644) != nil {
		t.Log("net.ipv4.tcp_migrate_req cannot be set: a connection queued at the instant of the switch may be reset")
		return
	}
	t.Cleanup(func() { _ = os.WriteFile(path, old, 0o644) })
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
