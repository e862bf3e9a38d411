package tests

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ttlproxy/ttlproxy/install"
	"github.com/ttlproxy/ttlproxy/internal/pgtest"
	"github.com/ttlproxy/ttlproxy/proxy"
	"github.com/ttlproxy/ttlproxy/rewrite"
	"github.com/ttlproxy/ttlproxy/sweeper"
	"github.com/ttlproxy/ttlproxy/ttl"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// stack is a database, a proxy in front of it, and optionally a sweeper.
type stack struct {
	t        *testing.T
	db       string
	direct   string // connection string straight to the server
	proxied  string // connection string through the proxy
	proxyAdr string
	reg      *prometheus.Registry
	sweeper  *sweeper.Sweeper
}

type stackOptions struct {
	setup       []string // SQL run directly before the proxy starts
	rules       []ttl.Rule
	bypassRoles []string
	sweep       *sweeper.Config // nil: no sweeper; DSN and Rules are filled in
	// pool, when set, runs the proxy in transaction mode with these pool
	// settings whatever TTLPROXY_TEST_POOL_MODE says, authenticating
	// clients with auth (serverAuthFile's auth_file when auth is zero).
	pool *proxy.PoolSettings
	auth proxy.AuthConfig
	// requireRowSecurity runs the proxy at row_security required; ddlEvents
	// gives it DDL events (the event triggers installed, the superuser's
	// login); beforeStart runs on a direct connection after setup, before
	// the proxy starts.
	requireRowSecurity, ddlEvents bool
	beforeStart                   func(conn *pgx.Conn)
}

func newStack(t *testing.T, o stackOptions) *stack {
	t.Helper()
	srv := pgtest.Server(t)
	s := &stack{t: t, db: pgtest.NewDatabase(t), reg: prometheus.NewRegistry()}
	s.direct = srv.ConnString(s.db)
	ctx := context.Background()
	if len(o.setup) > 0 {
		conn := s.connect(s.direct)
		for _, q := range o.setup {
			if _, err := conn.Exec(ctx, q); err != nil {
				t.Fatalf("setup %q: %v", q, err)
			}
		}
		conn.Close(ctx)
	}
	if o.beforeStart != nil || o.ddlEvents {
		conn := s.connect(s.direct)
		if o.ddlEvents {
			if _, err := install.ApplyDDLEvents(ctx, conn, false); err != nil {
				t.Fatalf("installing DDL events: %v", err)
			}
		}
		if o.beforeStart != nil {
			o.beforeStart(conn)
		}
		conn.Close(ctx)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rw, err := rewrite.New(o.rules, rewrite.Options{BypassRoles: o.bypassRoles, RequireRowSecurity: o.requireRowSecurity})
	if err != nil {
		t.Fatal(err)
	}
	cfg := proxy.Config{
		Upstream:    srv.Addr(),
		Rewriter:    rw,
		BypassRoles: o.bypassRoles,
		Logger:      logger,
		Registerer:  s.reg,
	}
	if o.ddlEvents {
		cfg.DDLEventsDSN = s.direct
	}
	switch {
	case o.pool != nil:
		cfg.PoolMode, cfg.Pool, cfg.Auth = proxy.PoolModeTransaction, *o.pool, o.auth
		if cfg.Auth == (proxy.AuthConfig{}) {
			cfg.Auth.File = s.serverAuthFile()
		}
	case os.Getenv(envPoolMode) == proxy.PoolModeTransaction:
		cfg.PoolMode, cfg.Auth.File = proxy.PoolModeTransaction, s.serverAuthFile()
	}
	p, err := proxy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.proxyAdr = ln.Addr().String()
	pctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Serve(pctx, ln) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("proxy Serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("proxy did not stop within 30s")
		}
	})
	u, _ := url.Parse(s.direct)
	u.Host = s.proxyAdr
	s.proxied = u.String()

	if o.sweep != nil {
		cfg := *o.sweep
		cfg.DSN = s.direct
		cfg.Rules = o.rules
		cfg.Logger = logger
		cfg.Registerer = s.reg
		if s.sweeper, err = sweeper.New(cfg); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.sweeper.Stop)
	}
	return s
}

func (s *stack) connect(connString string) *pgx.Conn {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		s.t.Fatalf("connect %s: %v", redact(connString), err)
	}
	s.t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// connectMode connects through the proxy with the given query exec mode.
func (s *stack) connectMode(mode pgx.QueryExecMode) *pgx.Conn {
	s.t.Helper()
	cfg, err := pgx.ParseConfig(s.proxied)
	if err != nil {
		s.t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = mode
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		s.t.Fatalf("connect through proxy: %v", err)
	}
	s.t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func redact(connString string) string {
	u, err := url.Parse(connString)
	if err != nil {
		return "?"
	}
	return u.Redacted()
}

// metric returns the sum of all samples of the named counter or gauge whose
// labels include want.
func (s *stack) metric(name string, want map[string]string) float64 {
	s.t.Helper()
	families, err := s.reg.Gather()
	if err != nil {
		s.t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if !labelsMatch(m, want) {
				continue
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			}
		}
		return sum
	}
	s.t.Fatalf("metric %s not registered", name)
	return 0
}

func labelsMatch(m *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == k && l.GetValue() == v {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// sqlstate returns the SQLSTATE of a pgx error, or "".
func sqlstate(err error) string {
	var pgErr interface{ SQLState() string }
	if errors.As(err, &pgErr) {
		return pgErr.SQLState()
	}
	return ""
}

func ids(t *testing.T, conn *pgx.Conn, sql string, args ...any) string {
	t.Helper()
	rows, err := conn.Query(context.Background(), sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	vals, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var v any
		if err := r.Scan(&v); err != nil {
			return "", err
		}
		if v == nil {
			return "NULL", nil
		}
		return strings.TrimSpace(strings.ReplaceAll(fmt.Sprint(v), "\n", " ")), nil
	})
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return strings.Join(vals, ",")
}

// envPoolMode set to "transaction" runs the stacks' proxies in transaction
// mode, authenticating clients against serverAuthFile.
const envPoolMode = "TTLPROXY_TEST_POOL_MODE"

// serverAuthFile writes an auth_file with the server's own secrets
// (pg_authid) of the roles that have one: clients log in to the proxy as
// they would to the server, and the proxy logs in with their SCRAM keys.
// Roles made after the stack starts are not in it.
func (s *stack) serverAuthFile() string {
	s.t.Helper()
	conn := s.connect(s.direct)
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(), "SELECT rolname, rolpassword FROM pg_authid WHERE rolpassword IS NOT NULL")
	if err != nil {
		s.t.Fatal(err)
	}
	var b strings.Builder
	for rows.Next() {
		var name, secret string
		if err := rows.Scan(&name, &secret); err != nil {
			s.t.Fatal(err)
		}
		b.WriteString(`"` + name + `" "` + secret + "\"\n")
	}
	if err := rows.Err(); err != nil {
		s.t.Fatal(err)
	}
	path := filepath.Join(s.t.TempDir(), "userlist.txt")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		s.t.Fatal(err)
	}
	return path
}
