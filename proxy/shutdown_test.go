package proxy

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/ttlproxy/ttlproxy/internal/pgtest"
	"github.com/ttlproxy/ttlproxy/rewrite"
)

// waitActive waits until n statements are running pg_sleep on the server.
func waitActive(t *testing.T, n int) {
	t.Helper()
	conn := connectDirect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
	defer conn.Close(testContext(t))
	for range 500 {
		var got int
		err := conn.QueryRow(testContext(t),
			"SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE 'SELECT pg_sleep%'").Scan(&got)
		if err != nil {
			t.Fatal(err)
		}
		if got >= n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("fewer than %d statements running", n)
}

func TestGracefulShutdown(t *testing.T) {
	p := startProxy(t, Config{ShutdownTimeout: 10 * time.Second})
	db := pgtest.NewDatabase(t)
	idle := p.connect(t, db, pgx.QueryExecModeCacheStatement)
	idleInTx := p.connect(t, db, pgx.QueryExecModeSimpleProtocol)
	busy := p.connect(t, db, pgx.QueryExecModeCacheStatement)
	mustExec(t, idle, "SELECT 1")
	mustExec(t, idleInTx, "BEGIN")

	result := make(chan error, 1)
	go func() {
		_, err := busy.Exec(testContext(t), "SELECT pg_sleep(1)")
		result <- err
	}()
	waitActive(t, 1)

	start := time.Now()
	stopped := make(chan error, 1)
	go func() { stopped <- p.stop() }()

	if err := <-result; err != nil {
		t.Fatalf("in-flight statement: %v", err)
	}
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after the last statement")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("shutdown took %v", d)
	}
	for name, conn := range map[string]*pgx.Conn{"idle": idle, "idle_in_tx": idleInTx, "busy": busy} {
		_, err := conn.Exec(testContext(t), "SELECT 1")
		if err == nil {
			t.Fatalf("%s: connection still open after shutdown", name)
		}
		if code := pgCode(err); code != codeAdminShutdown {
			t.Errorf("%s: got %v, want SQLSTATE %s", name, err, codeAdminShutdown)
		}
	}
	if _, err := pgx.Connect(testContext(t), p.connString(t, db)); err == nil {
		t.Fatal("new connection accepted after shutdown")
	}
}

func TestShutdownTimeout(t *testing.T) {
	p := startProxy(t, Config{ShutdownTimeout: 300 * time.Millisecond})
	busy := p.connect(t, "postgres", pgx.QueryExecModeCacheStatement)
	result := make(chan error, 1)
	go func() {
		_, err := busy.Exec(testContext(t), "SELECT pg_sleep(30)")
		result <- err
	}()
	waitActive(t, 1)
	start := time.Now()
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Serve returned after %v", d)
	}
	select {
	case err := <-result:
		if err == nil {
			t.Fatal("statement finished despite the shutdown timeout")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("client not closed")
	}
	// The statement was cancelled on the server, not left running.
	conn := connectDirect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
	for i := 0; ; i++ {
		var n int
		if err := conn.QueryRow(testContext(t),
			"SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(30)' AND state = 'active'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if i == 200 {
			t.Fatal("statement still running on the server")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestServeReturnsListenerError(t *testing.T) {
	before := goleak.IgnoreCurrent()
	rw, err := rewrite.New(testRules, rewrite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Upstream: "127.0.0.1:1", Rewriter: rw})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(context.Background(), ln) }()
	// Closing the listener is not a shutdown request: Serve reports it.
	_ = ln.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Serve returned nil after its listener failed")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return")
	}
	checkNoLeaks(t, before)
}

func TestNewValidates(t *testing.T) {
	rw, _ := rewrite.New(nil, rewrite.Options{})
	if _, err := New(Config{Rewriter: rw}); err == nil {
		t.Error("no error without Upstream")
	}
	if _, err := New(Config{Upstream: "127.0.0.1:5432"}); err == nil {
		t.Error("no error without Rewriter")
	}
	small, _ := rewrite.New(nil, rewrite.Options{MaxStatementBytes: 20})
	if _, err := New(Config{Upstream: "127.0.0.1:5432", Rewriter: small, MaxMessageBytes: 10}); err == nil ||
		!strings.Contains(err.Error(), "max message bytes (10) is smaller than the rewriter's max statement bytes (20)") {
		t.Errorf("MaxMessageBytes below MaxStatementBytes: %v", err)
	}
	if _, err := New(Config{Upstream: "127.0.0.1:5432", Rewriter: rw, MaxMessageBytes: 1 << 10}); err == nil {
		t.Error("MaxMessageBytes below the default MaxStatementBytes accepted")
	}
	reg := prometheus.NewRegistry()
	if _, err := New(Config{Upstream: "127.0.0.1:5432", Rewriter: rw, Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Upstream: "127.0.0.1:5432", Rewriter: rw, Registerer: reg}); err == nil {
		t.Error("metrics registered twice without an error")
	}
}
