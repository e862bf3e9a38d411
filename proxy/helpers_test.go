package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/ttlproxy/ttlproxy/internal/pgtest"
	"github.com/ttlproxy/ttlproxy/rewrite"
	"github.com/ttlproxy/ttlproxy/ttl"
)

// TestMain checks, after every test, parallel ones included, that no
// goroutine outlived its test.
func TestMain(m *testing.M) {
	if upstream := os.Getenv(fdChildEnv); upstream != "" {
		os.Exit(fdChild(upstream))
	}
	if upstream := os.Getenv(memChildEnv); upstream != "" {
		os.Exit(memChild(upstream))
	}
	pgtest.Main(m, func() error { return findLeaks() })
}

// findLeaks returns goleak's report of the goroutines, other than those
// ignored by opts, still running after up to 5 seconds: closing a
// connection or a pool ends its goroutines asynchronously, and goleak's own
// retries last well under a second.
func findLeaks(opts ...goleak.Option) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := goleak.Find(opts...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// parallelTests holds the names of the tests run in parallel (parallel):
// their goroutines are checked once every test has ended (TestMain), since
// the others' are still running at their end.
var parallelTests sync.Map

// parallel marks t as parallel, for a test that owns its database and
// proxy.
func parallel(t *testing.T) {
	t.Parallel()
	parallelTests.Store(t.Name(), true)
}

// standIn is a rewriter with fixed, recognisable behaviour, so the proxy can
// be tested whatever state package rewrite is in: it rejects any statement
// naming reject_me, rewrites 'original' to 'rewritten', panics on panic_me,
// and records the sessions it is given.
type standIn struct {
	mu     sync.Mutex
	states []*rewrite.State
	calls  int
}

var errRejectMe = &rewrite.Error{
	Code:    "0A000",
	Message: `ttlproxy: table "reject_me" cannot be used here`,
	Detail:  "stand-in rejection",
	Hint:    "do not name reject_me",
}

func (f *standIn) Rewrite(sql string, st *rewrite.State) (rewrite.Result, error) {
	f.mu.Lock()
	f.calls++
	f.states = append(f.states, st)
	f.mu.Unlock()
	switch {
	case strings.Contains(sql, "panic_me"):
		panic("stand-in rewriter panic")
	case strings.Contains(sql, "reject_me"):
		return rewrite.Result{}, errRejectMe
	case strings.Contains(sql, "'original'"):
		return rewrite.Result{SQL: strings.ReplaceAll(sql, "'original'", "'rewritten'"), Rewritten: true, Parsed: true}, nil
	}
	return rewrite.Result{SQL: sql}, nil
}

// lastState returns the State of the last call, or nil.
func (f *standIn) lastState() *rewrite.State {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.states) == 0 {
		return nil
	}
	return f.states[len(f.states)-1]
}

// lastSession returns the facts of the last call's State, or nil.
func (f *standIn) lastSession() *rewrite.Session {
	st := f.lastState()
	if st == nil {
		return nil
	}
	s := st.Session()
	return &s
}

func (f *standIn) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// testRules is one TTL table, public.items.
var testRules = []ttl.Rule{{Table: "items", DefaultTTL: time.Hour}}

type testProxy struct {
	srv    *Server
	addr   string
	fake   *standIn
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error
}

// startProxy runs a proxy in front of the test server on 127.0.0.1:0 with
// the stand-in rewriter unless cfg sets one. It is shut down (and checked
// for leaked goroutines) when the test ends.
func startProxy(t testing.TB, cfg Config) *testProxy {
	t.Helper()
	if cfg.Upstream == "" {
		cfg.Upstream = pgtest.Server(t).Addr()
	}
	if os.Getenv(envPoolMode) == PoolModeTransaction && cfg.PoolMode == "" {
		cfg.PoolMode, cfg.Auth.File = PoolModeTransaction, writeServerAuthFile(t)
	}
	if cfg.Rewriter == nil {
		rw, err := rewrite.New(testRules, rewrite.Options{BypassRoles: cfg.BypassRoles})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Rewriter = rw
	}
	fake := &standIn{}
	if cfg.rewriter == nil {
		cfg.rewriter = fake
	}
	reg := prometheus.NewRegistry()
	if cfg.Registerer == nil {
		cfg.Registerer = reg
	}
	before := goleak.IgnoreCurrent()
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &testProxy{srv: srv, addr: ln.Addr().String(), fake: fake, reg: reg, cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		if err := p.stop(); err != nil {
			t.Errorf("Serve: %v", err)
		}
		if _, par := parallelTests.Load(t.Name()); !par {
			checkNoLeaks(t, before)
		}
	})
	return p
}

// stop cancels Serve and waits for it; safe to call twice.
func (p *testProxy) stop() error {
	p.cancel()
	select {
	case err, ok := <-p.done:
		if ok {
			close(p.done)
		}
		return err
	case <-time.After(30 * time.Second):
		return errors.New("Serve did not return")
	}
}

// connString is the test server's superuser URL for db, pointed at the proxy.
func (p *testProxy) connString(t testing.TB, db string) string {
	t.Helper()
	u, err := url.Parse(pgtest.Server(t).ConnString(db))
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.addr
	return u.String()
}

func (p *testProxy) connect(t testing.TB, db string, mode pgx.QueryExecMode) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(p.connString(t, db))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = mode
	return connectConfig(t, cfg)
}

func connectDirect(t testing.TB, db string, mode pgx.QueryExecMode) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(pgtest.Server(t).ConnString(db))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = mode
	return connectConfig(t, cfg)
}

func connectConfig(t testing.TB, cfg *pgx.ConnConfig) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connecting to %s: %v", cfg.Host, err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// execDirect runs statements on db as the superuser, bypassing the proxy.
func execDirect(t testing.TB, db string, sqls ...string) {
	t.Helper()
	conn := connectDirect(t, db, pgx.QueryExecModeSimpleProtocol)
	for _, sql := range sqls {
		if _, err := conn.Exec(testContext(t), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	_ = conn.Close(context.Background())
}

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// requireCode fails t unless err is a PostgreSQL error with the SQLSTATE
// code. It returns a copy of the error's fields, not an error, for a test
// that goes on to read them: one that only asserts the code drops it.
func requireCode(t testing.TB, err error, code string) pgconn.PgError {
	t.Helper()
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		t.Fatalf("want SQLSTATE %s, got %v", code, err)
	}
	if pe.Code != code {
		t.Fatalf("want SQLSTATE %s, got %s: %v", code, pe.Code, err)
	}
	return *pe
}

// checkNoLeaks fails the test if goroutines started since before (taken
// with goleak.IgnoreCurrent) are still running after the proxy was stopped.
func checkNoLeaks(t testing.TB, before goleak.Option) {
	t.Helper()
	if err := findLeaks(before); err != nil {
		t.Error(err)
	}
}

// rawClient is a hand-driven frontend for what pgx will not send.
type rawClient struct {
	net.Conn
}

func dialRaw(t testing.TB, addr string) *rawClient {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	t.Cleanup(func() { _ = c.Close() })
	return &rawClient{c}
}

// readAll reads until EOF and returns what arrived.
func (c *rawClient) readAll() ([]byte, error) {
	b, err := io.ReadAll(c.Conn)
	return b, err
}

// errorCodes returns the SQLSTATEs of the ErrorResponses in a byte stream of
// backend messages.
func errorCodes(b []byte) []string {
	var codes []string
	for len(b) >= 5 {
		n := int(uint32(b[1])<<24 | uint32(b[2])<<16 | uint32(b[3])<<8 | uint32(b[4]))
		if n < 4 || 1+n > len(b) {
			break
		}
		if b[0] == 'E' {
			for _, f := range strings.Split(string(b[5:1+n]), "\x00") {
				if strings.HasPrefix(f, "C") {
					codes = append(codes, f[1:])
				}
			}
		}
		b = b[1+n:]
	}
	return codes
}

func mustExec(t testing.TB, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(testContext(t), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func queryString(t testing.TB, conn *pgx.Conn, sql string, args ...any) string {
	t.Helper()
	var s string
	if err := conn.QueryRow(testContext(t), sql, args...).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}

var modes = []struct {
	name string
	mode pgx.QueryExecMode
}{
	{"extended_cache", pgx.QueryExecModeCacheStatement},
	{"extended_describe", pgx.QueryExecModeDescribeExec},
	{"simple", pgx.QueryExecModeSimpleProtocol},
}

func ensureRole(t testing.TB, sqls ...string) {
	t.Helper()
	execDirect(t, "postgres", sqls...)
}

func roleSQL(name, password string) string {
	return fmt.Sprintf(`DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '%[1]s') THEN CREATE ROLE %[1]s LOGIN; END IF;
END $$`, name) + ";" + fmt.Sprintf("ALTER ROLE %s PASSWORD '%s'", name, password)
}

func itoa(i int) string { return strconv.Itoa(i) }

// counterValue returns the value of a counter or gauge without labels
// (or the sum over its label values).
func counterValue(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}
