package sweeper

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/ttlproxy/ttlproxy/internal/pgcluster"
	"github.com/ttlproxy/ttlproxy/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// env is one test's database: an admin connection for fixtures and
// assertions, and the DSN a Sweeper logs in with.
type env struct {
	ctx  context.Context
	dsn  string
	conn *pgx.Conn
	reg  *prometheus.Registry
}

// setup gives the test a fresh database and checks, when the test ends, that
// no sweeper or pool goroutine outlived it.
func setup(t *testing.T) *env {
	t.Helper()
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { checkNoGoroutineLeak(t, before) }) // registered first: runs last
	db := pgtest.NewDatabase(t)
	return setupDSN(t, pgtest.Server(t).ConnString(db))
}

// setupLogical gives the test a database on a server with wal_level =
// logical, for logical decoding: the shared server when it has it, else a
// cluster of the test's own, stopped when the test ends.
func setupLogical(t *testing.T) *env {
	t.Helper()
	srv := pgtest.Server(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, srv.ConnString("postgres"))
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	var level string
	err = conn.QueryRow(ctx, "SHOW wal_level").Scan(&level)
	conn.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if level == "logical" {
		return setup(t)
	}
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { checkNoGoroutineLeak(t, before) })
	c, err := pgcluster.Start(ctx, pgcluster.Options{Settings: map[string]string{"wal_level": "logical"}})
	if err != nil {
		t.Fatalf("starting a cluster with wal_level = logical: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stopping the logical cluster: %v", err)
		}
	})
	return setupDSN(t, c.ConnString("postgres"))
}

// setupDSN connects e's admin connection to dsn.
func setupDSN(t *testing.T, dsn string) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	e := &env{ctx: ctx, dsn: dsn, conn: conn, reg: prometheus.NewRegistry()}
	// A session TimeZone far from UTC: timestamp and date rules must not
	// depend on it.
	e.exec(t, "SET TimeZone = 'America/New_York'")
	return e
}

func (e *env) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := e.conn.Exec(e.ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// ids returns the sorted ids of table's rows matching where (no WHERE when
// empty).
func (e *env) ids(t *testing.T, table, where string, args ...any) []int64 {
	t.Helper()
	sql := "SELECT id FROM " + table + " AS s"
	if where != "" {
		sql += " WHERE " + where
	}
	rows, err := e.conn.Query(e.ctx, sql+" ORDER BY id", args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return ids
}

func (e *env) count(t *testing.T, table string) int64 {
	t.Helper()
	var n int64
	if err := e.conn.QueryRow(e.ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatalf("counting %s: %v", table, err)
	}
	return n
}

// newSweeper returns a Sweeper on e's database, stopped when the test ends.
// Unset pauses default to none, to keep tests fast.
func (e *env) newSweeper(t *testing.T, cfg Config) *Sweeper {
	t.Helper()
	if cfg.DSN == "" {
		cfg.DSN = e.dsn
	}
	if cfg.Registerer == nil {
		cfg.Registerer = e.reg
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// otherTx begins a transaction on a second connection, for tests of what
// the sweeper does to rows another session holds. It is rolled back (if
// still open) and its connection closed when the test ends.
func (e *env) otherTx(t *testing.T) pgx.Tx {
	t.Helper()
	other, err := pgx.Connect(e.ctx, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := other.Begin(e.ctx)
	if err != nil {
		other.Close(context.Background())
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = tx.Rollback(context.Background())
		other.Close(context.Background())
	})
	return tx
}

// checkNoGoroutineLeak fails t if a goroutine started since before (taken
// with goleak.IgnoreCurrent) is still running after up to 5 seconds:
// closing a pool ends its goroutines asynchronously, and goleak's own
// retries last well under a second.
func checkNoGoroutineLeak(t *testing.T, before goleak.Option) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := goleak.Find(before)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Error(err)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ----- logging -----

// logRecorder keeps log records so tests can check what was logged.
type logRecorder struct {
	mu      sync.Mutex
	records []string // "LEVEL msg k=v ..."
}

func (r *logRecorder) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, s)
}

func (r *logRecorder) atLeast(level string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, s := range r.records {
		lv, _, _ := strings.Cut(s, " ")
		switch level {
		case "WARN":
			if lv == "WARN" || lv == "ERROR" {
				out = append(out, s)
			}
		case "ERROR":
			if lv == "ERROR" {
				out = append(out, s)
			}
		}
	}
	return out
}

func (r *logRecorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprint(r.records)
}

// recordHandler is a slog.Handler that appends to a logRecorder.
type recordHandler struct {
	rec   *logRecorder
	attrs []slog.Attr
}

func (h recordHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h recordHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Level, r.Message)
	for _, a := range h.attrs {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
	}
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	h.rec.add(b.String())
	return nil
}

func (h recordHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return recordHandler{rec: h.rec, attrs: append(slices.Clip(h.attrs), as...)}
}

func (h recordHandler) WithGroup(string) slog.Handler { return h }

// newLogger returns a logger whose records are printed if the test fails.
func newLogger(t *testing.T) (*slog.Logger, *logRecorder) {
	rec := &logRecorder{}
	t.Cleanup(func() {
		if t.Failed() {
			rec.mu.Lock()
			defer rec.mu.Unlock()
			for _, r := range rec.records {
				t.Log(r)
			}
		}
	})
	return slog.New(recordHandler{rec: rec}), rec
}

func testLogger(t *testing.T) *slog.Logger {
	l, _ := newLogger(t)
	return l
}

// nowUTC returns the database's now().
func (e *env) nowUTC(t *testing.T) time.Time {
	t.Helper()
	var now time.Time
	if err := e.conn.QueryRow(e.ctx, "SELECT now()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}
