package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ttlproxy/ttlproxy/internal/pgcluster"
	"github.com/ttlproxy/ttlproxy/proxy/internal/upstream"
)

// restartWriters is the number of clients inserting through the proxy while
// the server restarts; restartPoolSize the servers of their pool, fewer than
// the clients, so that some always wait.
const (
	restartClients  = 8
	restartPoolSize = 4
)

// restartBound is the longest a proxy may take, after the server accepts
// connections again, to serve a statement. The goal is 2 s; the bound is
// generous for a busy machine, and the measured time is logged.
const restartBound = 5 * time.Second

// TestServerRestart: 8 clients insert through the proxy while the server is
// restarted (fast), stopped at once and started, crashed (the postmaster
// killed) and started, and has every backend terminated. After each, a
// statement is served within restartBound of the server's return, and every
// insert that was acknowledged is stored. The clients' errors are logged by
// SQLSTATE. In both pool modes: a transaction pool must survive what a
// session does.
func TestServerRestart(t *testing.T) {
	if _, err := pgcluster.BinDir(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	for _, mode := range []string{PoolModeSession, PoolModeTransaction} {
		t.Run(mode, func(t *testing.T) {
			if mode == PoolModeSession && os.Getenv(envPoolMode) == PoolModeTransaction {
				t.Skip("the run in session mode covers it")
			}
			testServerRestart(t, mode)
		})
	}
}

func testServerRestart(t *testing.T, mode string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// A cluster of its own, restarted without disturbing other tests;
	// synchronous_commit on, so that an acknowledged insert survives a
	// crash.
	c, err := pgcluster.Start(ctx, pgcluster.Options{Settings: map[string]string{"synchronous_commit": "on"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	direct := func(t *testing.T, sql string) {
		t.Helper()
		conn, err := pgx.Connect(ctx, c.ConnString("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	direct(t, "CREATE TABLE acks (id bigint PRIMARY KEY, writer int)")

	cfg := Config{Upstream: c.Addr(), PoolMode: mode}
	if mode == PoolModeTransaction {
		cfg.Auth.File = writeAuthFileOf(t, c)
		cfg.Pool.DefaultPoolSize = restartPoolSize
	}
	p := startProxy(t, cfg)
	u, err := url.Parse(c.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.addr
	ccfg, err := pgx.ParseConfig(u.String())
	if err != nil {
		t.Fatal(err)
	}
	ccfg.ConnectTimeout = 10 * time.Second

	w := &restartWriters{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range restartClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(ctx, ccfg, i, stop)
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
		w.check(t, c)
	}()
	w.waitServed(t, time.Now(), time.Minute)

	for _, fault := range []struct {
		name string
		// do breaks the server and brings it back; it returns when the
		// server accepts connections again.
		do func(t *testing.T)
	}{
		{"fast restart", func(t *testing.T) {
			if err := c.Restart(ctx, "fast"); err != nil {
				t.Fatal(err)
			}
		}},
		{"immediate stop and start", func(t *testing.T) {
			if err := c.StopServer(ctx, "immediate"); err != nil {
				t.Fatal(err)
			}
			time.Sleep(500 * time.Millisecond)
			if err := c.StartServer(ctx); err != nil {
				t.Fatal(err)
			}
		}},
		{"postmaster crash", func(t *testing.T) {
			pid, err := c.PostmasterPID()
			if err != nil {
				t.Fatal(err)
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			for syscall.Kill(pid, 0) == nil {
				time.Sleep(10 * time.Millisecond)
			}
			if err := c.StartServer(ctx); err != nil {
				t.Fatal(err)
			}
		}},
		{"every backend terminated", func(t *testing.T) {
			direct(t, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'")
		}},
	} {
		// Served before the fault, so that the pool holds servers the
		// fault kills.
		w.waitServed(t, time.Now(), time.Minute)
		time.Sleep(300 * time.Millisecond)
		fault.do(t)
		back := time.Now()
		got := w.waitServed(t, back, 30*time.Second)
		t.Logf("%s mode, %s: first statement served %v after the server's return", mode, fault.name, got.Round(time.Millisecond))
		if got > restartBound {
			t.Errorf("%s: first statement served %v after the server's return, want at most %v", fault.name, got, restartBound)
		}
	}
	time.Sleep(300 * time.Millisecond)
}

// restartWriters are the clients of TestServerRestart.
type restartWriters struct {
	// served is the time (UnixNano) of the last acknowledged insert.
	served atomic.Int64
	mu     sync.Mutex
	acked  []int64
	// errs counts the clients' errors by where and SQLSTATE.
	errs map[string]int
}

// run inserts rows with ids of writer i until stop, connecting again after
// any error; every id is tried once, so that an insert whose answer was
// lost cannot be acknowledged under another attempt.
func (w *restartWriters) run(ctx context.Context, cfg *pgx.ConnConfig, i int, stop <-chan struct{}) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
	}()
	next := int64(i) * 1e9
	for {
		select {
		case <-stop:
			return
		default:
		}
		if conn == nil {
			var err error
			if conn, err = pgx.ConnectConfig(ctx, cfg); err != nil {
				w.fail("connect", err)
				conn = nil
				time.Sleep(10 * time.Millisecond)
				continue
			}
		}
		id := next
		next++
		if _, err := conn.Exec(ctx, "INSERT INTO acks (id, writer) VALUES ($1, $2)", id, i); err != nil {
			w.fail("insert", err)
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = conn.Close(cctx)
			cancel()
			conn = nil
			continue
		}
		w.mu.Lock()
		w.acked = append(w.acked, id)
		w.mu.Unlock()
		w.served.Store(time.Now().UnixNano())
	}
}

func (w *restartWriters) fail(where string, err error) {
	code := "no SQLSTATE"
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		code = pe.Code
	}
	w.mu.Lock()
	if w.errs == nil {
		w.errs = map[string]int{}
	}
	w.errs[where+" "+code]++
	w.mu.Unlock()
}

// waitServed waits until an insert is acknowledged after since and returns
// how long after since; it fails t after limit.
func (w *restartWriters) waitServed(t *testing.T, since time.Time, limit time.Duration) time.Duration {
	t.Helper()
	for deadline := since.Add(limit); ; time.Sleep(5 * time.Millisecond) {
		if s := w.served.Load(); s > since.UnixNano() {
			return time.Duration(s - since.UnixNano())
		}
		if time.Now().After(deadline) {
			t.Fatalf("no statement served within %v", limit)
		}
	}
}

// check logs the errors and fails t unless every acknowledged insert is
// stored.
func (w *restartWriters) check(t *testing.T, c *pgcluster.Cluster) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	var errs []string
	for k, n := range w.errs {
		errs = append(errs, fmt.Sprintf("%s: %d", k, n))
	}
	sort.Strings(errs)
	t.Logf("%d inserts acknowledged; errors: %s", len(w.acked), strings.Join(errs, ", "))
	conn, err := pgx.Connect(testContext(t), c.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var lost int64
	if err := conn.QueryRow(testContext(t),
		"SELECT count(*) FROM unnest($1::bigint[]) AS a(id) WHERE NOT EXISTS (SELECT FROM acks WHERE acks.id = a.id)",
		w.acked).Scan(&lost); err != nil {
		t.Fatal(err)
	}
	if lost > 0 {
		t.Errorf("%d of %d acknowledged inserts lost", lost, len(w.acked))
	}
}

// TestPoolLoginTransient: while server logins fail with 57P03 (the server
// starts or stops) or a refused connection, a client waits and is served
// by the first login that succeeds, tried 100 ms after the first failure
// and then at doubling intervals; a failure that will not heal (28P01) is
// the client's answer at once (TestPoolLoginFailure).
func TestPoolLoginTransient(t *testing.T) {
	for _, fail := range []error{
		&upstream.ServerError{Code: "57P03", Message: "the database system is starting up"},
		fmt.Errorf("%w: dial tcp: connection refused", upstream.ErrLogin),
	} {
		t.Run(fmt.Sprint(fail), func(t *testing.T) {
			srv := newLoginServer(t)
			var logins atomic.Int64
			login := func(ctx context.Context, lg serverLogin) (*serverConn, *upstream.Welcome, error) {
				if logins.Add(1) <= 3 {
					return nil, nil, fail
				}
				return srv.loginServer(ctx, lg)
			}
			p := newTestPool(t, poolConfig{size: 2, loginRetry: 15 * time.Second, waitTimeout: 10 * time.Second}, nil, login)
			start := time.Now()
			ps := mustAcquire(t, p, 1)
			took := time.Since(start)
			p.release(ps, 1, true)
			// 100 + 200 + 400 ms of waits between the four logins.
			if n := logins.Load(); n != 4 {
				t.Errorf("%d logins, want 4", n)
			}
			if took < 700*time.Millisecond || took > 5*time.Second {
				t.Errorf("served after %v, want about 700 ms", took)
			}
		})
	}
}
