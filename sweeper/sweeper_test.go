package sweeper

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/ttlproxy/ttlproxy/ttl"
)

func sessionsRule(table string) ttl.Rule {
	return ttl.Rule{Schema: "public", Table: table}
}

// createSessions creates public.<table> (id, expires_at timestamptz) with
// expired rows 1..expired, live rows after them and live NULL-expiry rows
// after those.
func createSessions(t *testing.T, e *env, table string, expired, live, null int) {
	t.Helper()
	e.exec(t, "CREATE TABLE "+table+" (id bigint PRIMARY KEY, expires_at timestamptz, note text)")
	e.exec(t, `INSERT INTO `+table+` (id, expires_at)
		SELECT g, CASE WHEN g <= $1::int THEN now() - interval '1 hour' - g * interval '1 second'
		               WHEN g <= $1::int + $2::int THEN now() + interval '1 hour' END
		FROM generate_series(1, $1::int + $2::int + $3::int) AS g`, expired, live, null)
}

func TestBatching(t *testing.T) {
	e := setup(t)
	createSessions(t, e, "big", 2500, 100, 10)
	s := e.newSweeper(t, Config{Rules: []ttl.Rule{sessionsRule("big")}, BatchSize: 1000})
	// Batches of rows picked: the table is read sequentially, so it is a
	// block slice, whose default range batches TestRangeBatches covers.
	s.pickBlocks = true
	var sizes []int64
	s.afterBatch = func(_ string, n int64) { sizes = append(sizes, n) }

	res, err := s.RunOnce(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Deleted["public.big"]; got != 2500 {
		t.Errorf("Deleted = %d, want 2500", got)
	}
	if got := res.LongestBatch["public.big"]; got <= 0 || got > 2*time.Minute {
		t.Errorf("LongestBatch = %v, want the longest of 3 batches", got)
	}
	if got := res.Batches["public.big"]; got != 3 {
		t.Errorf("Batches = %d, want 3 (sizes %v)", got, sizes)
	}
	if want := []int64{1000, 1000, 500}; !equalInts(sizes, want) {
		t.Errorf("batch sizes %v, want %v", sizes, want)
	}
	if got := e.count(t, "big"); got != 110 {
		t.Errorf("%d rows left, want 110 (live and NULL expiry)", got)
	}
	if got := len(e.ids(t, "big", "s.expires_at IS NULL OR s.expires_at > now()")); got != 110 {
		t.Errorf("%d live rows left, want 110", got)
	}
	if got := testutil.ToFloat64(s.m.rowsDeleted.WithLabelValues("public.big")); got != 2500 {
		t.Errorf("rows_deleted_total = %v", got)
	}
	if got := testutil.ToFloat64(s.m.batches.WithLabelValues("public.big")); got != 3 {
		t.Errorf("batches_total = %v", got)
	}
	if got := testutil.ToFloat64(s.m.errors.WithLabelValues("public.big")); got != 0 {
		t.Errorf("errors_total = %v", got)
	}
	if got := testutil.ToFloat64(s.m.lastRun); got < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Errorf("last_run_timestamp_seconds = %v", got)
	}
	if got := testutil.ToFloat64(s.m.runs.WithLabelValues("ok")); got != 1 {
		t.Errorf("runs_total{result=ok} = %v", got)
	}
	// The names cmd's /metrics will show.
	n, err := testutil.GatherAndCount(e.reg,
		"ttlproxy_sweeper_rows_deleted_total", "ttlproxy_sweeper_batches_total",
		"ttlproxy_sweeper_errors_total", "ttlproxy_sweeper_run_duration_seconds",
		"ttlproxy_sweeper_last_run_timestamp_seconds")
	if err != nil || n != 5 {
		t.Errorf("gathered %d series (err %v), want 5", n, err)
	}
}

func equalInts(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A row that a foreground transaction refreshes while the sweeper runs is
// not deleted, and the sweeper does not wait for that transaction.
func TestRefreshedRowSurvives(t *testing.T) {
	e := setup(t)
	createSessions(t, e, "sessions", 50, 5, 0)
	tx := e.otherTx(t)
	if _, err := tx.Exec(e.ctx, "UPDATE sessions SET expires_at = now() + interval '1 day' WHERE id = 7"); err != nil {
		t.Fatal(err)
	}

	s := e.newSweeper(t, Config{Rules: []ttl.Rule{sessionsRule("sessions")}, BatchSize: 10, BatchTimeout: 5 * time.Second})
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	res, err := s.RunOnce(ctx)
	if err != nil || len(res.Errors) > 0 {
		t.Fatalf("RunOnce: %v %v", err, res.Errors)
	}
	if got := res.Deleted["public.sessions"]; got != 49 {
		t.Errorf("deleted %d, want 49 (all expired rows but the locked one)", got)
	}
	if err := tx.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	if ids := e.ids(t, "sessions", "s.id = 7 AND s.expires_at > now()"); len(ids) != 1 {
		t.Errorf("refreshed row 7 is gone")
	}
	res, err = s.RunOnce(e.ctx)
	if err != nil || res.Deleted["public.sessions"] != 0 {
		t.Errorf("second run deleted %v (err %v), want nothing", res.Deleted, err)
	}
}

// A row locked by a transaction that does not refresh it is left for the
// next run.
func TestLockedRowLeftForNextRun(t *testing.T) {
	e := setup(t)
	createSessions(t, e, "sessions", 20, 0, 0)
	tx := e.otherTx(t)
	if _, err := tx.Exec(e.ctx, "SELECT 1 FROM sessions WHERE id = 3 FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	s := e.newSweeper(t, Config{Rules: []ttl.Rule{sessionsRule("sessions")}})
	res, err := s.RunOnce(e.ctx)
	if err != nil || res.Deleted["public.sessions"] != 19 {
		t.Fatalf("first run: deleted %v, err %v; want 19", res.Deleted, err)
	}
	if err := tx.Rollback(e.ctx); err != nil {
		t.Fatal(err)
	}
	res, err = s.RunOnce(e.ctx)
	if err != nil || res.Deleted["public.sessions"] != 1 {
		t.Fatalf("second run: deleted %v, err %v; want 1", res.Deleted, err)
	}
}

// Without SKIP LOCKED the DELETE waits for the refreshing transaction and
// then re-checks the rule on the newest row version: the row survives.
func TestDeleteRechecksAfterWait(t *testing.T) {
	e := setup(t)
	createSessions(t, e, "sessions", 30, 0, 0)
	tx := e.otherTx(t)
	if _, err := tx.Exec(e.ctx, "UPDATE sessions SET expires_at = now() + interval '1 day' WHERE id = 5"); err != nil {
		t.Fatal(err)
	}

	s := e.newSweeper(t, Config{Rules: []ttl.Rule{sessionsRule("sessions")}, BatchTimeout: 20 * time.Second})
	s.lockRows = false
	type outcome struct {
		res RunResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := s.RunOnce(e.ctx)
		done <- outcome{res, err}
	}()
	// Wait until the sweeper's DELETE waits for row 5's lock.
	deadline := time.Now().Add(15 * time.Second)
	for {
		var waiting bool
		err := e.conn.QueryRow(e.ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE application_name = 'ttlproxy-sweeper' AND wait_event_type = 'Lock' AND datname = current_database())`).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the sweeper never waited for the row lock")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := tx.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	o := <-done
	if o.err != nil || len(o.res.Errors) > 0 {
		t.Fatalf("RunOnce: %v %v", o.err, o.res.Errors)
	}
	if got := o.res.Deleted["public.sessions"]; got != 29 {
		t.Errorf("deleted %d, want 29", got)
	}
	if ids := e.ids(t, "sessions", ""); len(ids) != 1 || ids[0] != 5 {
		t.Errorf("rows left %v, want [5]", ids)
	}
}

func TestMissingTableDoesNotStopOthers(t *testing.T) {
	e := setup(t)
	createSessions(t, e, "first", 10, 1, 1)
	createSessions(t, e, "last", 10, 1, 1)
	logger, rec := newLogger(t)
	rules := []ttl.Rule{sessionsRule("first"), sessionsRule("missing"), sessionsRule("last")}
	s := e.newSweeper(t, Config{Rules: rules, Logger: logger})
	res, err := s.RunOnce(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Deleted["public.first"] != 10 || res.Deleted["public.last"] != 10 {
		t.Errorf("Deleted = %v, want 10 from first and last", res.Deleted)
	}
	var pgErr *pgconn.PgError
	if err := res.Errors["public.missing"]; !errors.As(err, &pgErr) || pgErr.Code != "42P01" {
		t.Errorf("Errors[public.missing] = %v, want undefined_table", err)
	}
	if len(res.Errors) != 1 {
		t.Errorf("Errors = %v", res.Errors)
	}
	if got := testutil.ToFloat64(s.m.errors.WithLabelValues("public.missing")); got != 1 {
		t.Errorf("errors_total{missing} = %v", got)
	}
	if got := testutil.ToFloat64(s.m.runs.WithLabelValues("partial")); got != 1 {
		t.Errorf("runs_total{partial} = %v", got)
	}
	if logs := rec.atLeast("ERROR"); len(logs) != 1 || !strings.Contains(logs[0], "table=public.missing") {
		t.Errorf("error logs %v, want one naming public.missing", logs)
	}
}

func TestPermissionDeniedDoesNotStopOthers(t *testing.T) {
	e := setup(t)
	createSessions(t, e, "mine", 5, 0, 0)
	createSessions(t, e, "theirs", 5, 0, 0)
	role := "ttl_sweeper_" + strings.ReplaceAll(strings.TrimPrefix(e.conn.Config().Database, "t"), "_", "x")
	e.exec(t, "CREATE ROLE "+role+" LOGIN PASSWORD 'sweeper-secret'")
	t.Cleanup(func() {
		// The database is dropped first (cleanups run in reverse), then the role.
		c, err := pgx.Connect(context.Background(), strings.Replace(e.dsn, "/"+e.conn.Config().Database+"?", "/postgres?", 1))
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP ROLE IF EXISTS "+role)
			c.Close(context.Background())
		}
	})
	e.exec(t, "GRANT SELECT, DELETE, UPDATE ON mine TO "+role)
	e.exec(t, "GRANT SELECT ON theirs TO "+role)
	cfg := e.conn.Config()
	dsn := "host=" + cfg.Host + " port=" + strconv.Itoa(int(cfg.Port)) + " dbname=" + cfg.Database +
		" user=" + role + " password=sweeper-secret sslmode=disable"
	if c, err := pgx.Connect(e.ctx, dsn); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("cannot log in as a new role (the test cluster's pg_hba allows it): %v", err)
		}
		t.Skipf("cannot log in as a new role on this server (pg_hba): %v", err)
	} else {
		c.Close(e.ctx)
	}
	s := e.newSweeper(t, Config{DSN: dsn, Rules: []ttl.Rule{sessionsRule("theirs"), sessionsRule("mine")}})
	res, err := s.RunOnce(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var pgErr *pgconn.PgError
	if err := res.Errors["public.theirs"]; !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		t.Errorf("Errors[public.theirs] = %v, want insufficient_privilege", err)
	}
	if res.Deleted["public.mine"] != 5 {
		t.Errorf("Deleted = %v, want 5 from mine", res.Deleted)
	}
	if strings.Contains(res.Errors["public.theirs"].Error(), "sweeper-secret") {
		t.Errorf("error text shows the password: %v", res.Errors["public.theirs"])
	}
}

// Batches that time out are retried with half the batch size; after too
// many the table is given up for the run and the others go on.
func TestTimeoutHalvesBatchSize(t *testing.T) {
	e := setup(t)
	createSessions(t, e, "slow", 3000, 0, 0)
	createSessions(t, e, "fast", 10, 0, 0)
	tx := e.otherTx(t)
	if _, err := tx.Exec(e.ctx, "LOCK TABLE slow IN SHARE MODE"); err != nil {
		t.Fatal(err)
	}
	s := e.newSweeper(t, Config{
		Rules:        []ttl.Rule{sessionsRule("slow"), sessionsRule("fast")},
		BatchSize:    1000,
		BatchTimeout: 100 * time.Millisecond,
	})
	s.pickBlocks = true // batch sizes in rows picked, not ranges of blocks
	var sizes []int
	s.beforeBatch = func(_ context.Context, table string) {
		if table == "public.slow" {
			sizes = append(sizes, s.batchSize(table))
		}
	}
	res, err := s.RunOnce(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors["public.slow"] == nil || !isTimeout(res.Errors["public.slow"]) {
		t.Errorf("Errors[public.slow] = %v, want a timeout", res.Errors["public.slow"])
	}
	if res.Deleted["public.fast"] != 10 {
		t.Errorf("Deleted = %v, want 10 from fast", res.Deleted)
	}
	wantSizes := []int{1000, 1000, 500, 500, 250, 250}
	if len(sizes) != len(wantSizes) || sizes[0] != 1000 || sizes[2] != 500 || sizes[4] != 250 {
		t.Errorf("attempted batch sizes %v, want %v", sizes, wantSizes)
	}
	if got := testutil.ToFloat64(s.m.errors.WithLabelValues("public.slow")); got != maxTimeoutsPerRun {
		t.Errorf("errors_total{slow} = %v, want %d", got, maxTimeoutsPerRun)
	}
	if err := tx.Rollback(e.ctx); err != nil {
		t.Fatal(err)
	}
	// The smaller size sticks for the next run, which succeeds, and a clean
	// run doubles it again.
	sizes = nil
	res, err = s.RunOnce(e.ctx)
	if err != nil || len(res.Errors) > 0 {
		t.Fatalf("second run: %v %v", err, res.Errors)
	}
	if res.Deleted["public.slow"] != 3000 || res.Batches["public.slow"] != 13 {
		t.Errorf("second run deleted %d in %d batches, want 3000 in 13 (size 250)",
			res.Deleted["public.slow"], res.Batches["public.slow"])
	}
	if got := s.batchSize("public.slow"); got != 500 {
		t.Errorf("batch size after a clean run = %d, want 500", got)
	}
}

// Stop during a run lets the current batch finish, then ends the run; a
// second Stop returns at once.
func TestStopDuringRun(t *testing.T) {
	e := setup(t)
	createSessions(t, e, "big", 2500, 0, 0)
	s := e.newSweeper(t, Config{Rules: []ttl.Rule{sessionsRule("big")}, BatchSize: 1000, Interval: time.Hour})
	inBatch := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	var first int64
	s.afterBatch = func(_ string, n int64) {
		once.Do(func() {
			first = n
			close(inBatch)
			<-release
		})
	}
	if err := s.Start(e.ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(e.ctx); err != nil {
		t.Fatalf("second Start: %v", err)
	}
	<-inBatch
	stopped := make(chan struct{})
	go func() {
		s.Stop()
		close(stopped)
	}()
	<-s.stopCh // Stop has been asked for while the first batch is in hand
	select {
	case <-stopped:
		t.Fatal("Stop returned before the batch in progress finished")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not return")
	}
	if got := e.count(t, "big"); first == 0 || got != 2500-first {
		t.Errorf("%d rows left after a first batch of %d, want %d: only the first batch ran", got, first, 2500-first)
	}
	s.Stop() // idempotent
	if err := s.Start(e.ctx); !errors.Is(err, ErrStopped) {
		t.Errorf("Start after Stop = %v, want ErrStopped", err)
	}
	if _, err := s.RunOnce(e.ctx); !errors.Is(err, ErrStopped) {
		t.Errorf("RunOnce after Stop = %v, want ErrStopped", err)
	}
}

// The loop's first run starts at once; cancelling Start's context ends it
// without an error in the log.
func TestLoopCancelNotLoggedAsError(t *testing.T) {
	e := setup(t)
	createSessions(t, e, "big", 2500, 0, 0)
	logger, rec := newLogger(t)
	s := e.newSweeper(t, Config{Rules: []ttl.Rule{sessionsRule("big")}, Interval: time.Hour, Logger: logger})
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	batches := make(chan struct{}, 10)
	s.beforeBatch = func(ctx context.Context, _ string) {
		batches <- struct{}{}
		if len(batches) == 2 {
			cancel() // while the second batch is about to run
		}
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	<-ctx.Done()
	s.Stop()
	if logs := rec.atLeast("WARN"); len(logs) > 0 {
		t.Errorf("cancellation logged as a problem: %v", logs)
	}
	if got := testutil.ToFloat64(s.m.errors.WithLabelValues("public.big")); got != 0 {
		t.Errorf("errors_total = %v after a cancellation", got)
	}
}

// A run that cannot reach the database fails as a whole and is retried with
// backoff; the loop keeps going.
func TestUnreachableDatabaseRetried(t *testing.T) {
	e := setup(t)
	reg := prometheus.NewRegistry()
	s := e.newSweeper(t, Config{
		DSN:        "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=1",
		Rules:      []ttl.Rule{sessionsRule("x")},
		Interval:   time.Hour,
		Registerer: reg,
	})
	if _, err := s.RunOnce(e.ctx); err == nil || !strings.Contains(err.Error(), "starting sweeper run") {
		t.Fatalf("RunOnce = %v, want a run-level error", err)
	}
	if err := s.Start(e.ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(s.m.runs.WithLabelValues("failed")) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("runs_total{failed} = %v: the loop did not retry within the backoff",
				testutil.ToFloat64(s.m.runs.WithLabelValues("failed")))
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.Stop()
}

func TestOldestExpiredAge(t *testing.T) {
	e := setup(t)
	cutoff := time.Date(2030, 6, 1, 0, 0, 0, 0, time.UTC)
	for _, table := range []string{"indexed", "plain"} {
		e.exec(t, "CREATE TABLE "+table+" (id bigint PRIMARY KEY, expires_at timestamptz)")
		e.exec(t, "INSERT INTO "+table+" SELECT g, $1::timestamptz - g * interval '1 hour' FROM generate_series(1, 5) g", cutoff)
	}
	e.exec(t, "CREATE INDEX ON indexed (expires_at)")
	tx := e.otherTx(t)
	// Row 3 (expired 3h before the cutoff) is held and survives the run.
	if _, err := tx.Exec(e.ctx, "SELECT 1 FROM indexed WHERE id = 3 FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	s := e.newSweeper(t, Config{Rules: []ttl.Rule{sessionsRule("indexed"), sessionsRule("plain")}})
	s.cutoffFunc = func() time.Time { return cutoff }
	if _, err := s.RunOnce(e.ctx); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(s.m.oldestExpired.WithLabelValues("public.indexed")); got != 3*3600 {
		t.Errorf("oldest_expired_age_seconds{indexed} = %v, want 10800", got)
	}
	if err := tx.Rollback(e.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RunOnce(e.ctx); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(s.m.oldestExpired.WithLabelValues("public.indexed")); got != 0 {
		t.Errorf("oldest_expired_age_seconds{indexed} = %v, want 0", got)
	}
	n, err := testutil.GatherAndCount(e.reg, "ttlproxy_sweeper_oldest_expired_age_seconds")
	if err != nil || n != 1 {
		t.Errorf("%d oldest_expired_age series (err %v), want 1: none for the table without an index", n, err)
	}
}

// A per-row lifetime of '1 day' is 24 hours in UTC whatever the session's
// TimeZone: the read filter in a client's New York session and the sweeper
// give the same verdict across a daylight saving change.
func TestDerivedIntervalTimeZone(t *testing.T) {
	e := setup(t)
	e.exec(t, "ALTER DATABASE "+pgx.Identifier{e.conn.Config().Database}.Sanitize()+" SET TimeZone = 'America/New_York'")
	e.exec(t, "CREATE TABLE ev (id bigint PRIMARY KEY, created_at timestamptz, lifetime interval)")
	// 2030-03-09 12:00 EST; New York moves to EDT at 2030-03-10 07:00 UTC,
	// so there, timestamptz arithmetic makes '1 day' later 23 hours later.
	e.exec(t, "INSERT INTO ev VALUES (1, '2030-03-09 17:00+00', interval '1 day')")
	cutoff := time.Date(2030, 3, 10, 16, 30, 0, 0, time.UTC) // 23.5 hours later
	r := ttl.Rule{Schema: "public", Table: "ev", Kind: ttl.KindDerived, BaseColumn: "created_at", IntervalColumn: "lifetime"}

	for _, tz := range []string{"America/New_York", "UTC"} {
		e.exec(t, "SET TimeZone = '"+tz+"'")
		if got := e.ids(t, "ev", r.LiveCondition("s", "$1::timestamptz"), cutoff); len(got) != 1 {
			t.Fatalf("in %s the row is expired at %v; a 24-hour lifetime keeps it live", tz, cutoff)
		}
	}
	s := e.newSweeper(t, Config{Rules: []ttl.Rule{r}})
	s.cutoffFunc = func() time.Time { return cutoff }
	res, err := s.RunOnce(e.ctx)
	if err != nil || len(res.Errors) > 0 {
		t.Fatal(err, res.Errors)
	}
	if res.Deleted["public.ev"] != 0 {
		t.Errorf("the sweeper deleted a row whose 24-hour lifetime has not ended")
	}
}

func TestNewValidates(t *testing.T) {
	ok := ttl.Rule{Table: "t"}
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no rules", Config{DSN: "postgres://x@127.0.0.1/db"}, "no tables"},
		{"bad dsn", Config{DSN: "postgres://x@127.0.0.1:notaport/db", Rules: []ttl.Rule{ok}}, "parsing dsn"},
		{"twice", Config{Rules: []ttl.Rule{ok, {Schema: "public", Table: "t"}}}, "listed twice"},
		{"sidecar without keys", Config{Rules: []ttl.Rule{{Table: "t", Kind: ttl.KindSidecar, SidecarTable: "r"}}}, "key columns"},
		{"derived without base", Config{Rules: []ttl.Rule{{Table: "t", Kind: ttl.KindDerived}}}, "base column"},
		{"bad type", Config{Rules: []ttl.Rule{{Table: "t", ColumnType: "text"}}}, "column type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	reg := prometheus.NewRegistry()
	s, err := New(Config{Rules: []ttl.Rule{ok}, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if _, err := New(Config{Rules: []ttl.Rule{ok}, Registerer: reg}); err == nil || !strings.Contains(err.Error(), "already registered") {
		t.Errorf("second Sweeper on one registry: %v", err)
	}
	// Zero Interval, BatchSize and BatchTimeout take the defaults; a zero
	// BatchPause is no pause, and DefaultConfig holds the default one.
	if s.cfg.Interval != DefaultInterval || s.cfg.BatchSize != DefaultBatchSize ||
		s.cfg.BatchPause != 0 || s.cfg.BatchTimeout != DefaultBatchTimeout {
		t.Errorf("defaults not applied: %+v", s.cfg)
	}
	if d := DefaultConfig(); d.Interval != DefaultInterval || d.BatchSize != DefaultBatchSize ||
		d.BatchPause != DefaultBatchPause || d.BatchTimeout != DefaultBatchTimeout {
		t.Errorf("DefaultConfig() = %+v", d)
	}
	if _, err := New(Config{Rules: []ttl.Rule{ok}, BatchPause: -time.Millisecond}); err == nil {
		t.Error("New accepted a negative BatchPause")
	}
}

// A sidecar row whose registry entry a foreground transaction is refreshing
// is not deleted: the refresh locks only the registry row, not the base row.
func TestSidecarRefreshedRowSurvives(t *testing.T) {
	e := setup(t)
	e.exec(t, "CREATE TABLE items (id bigint PRIMARY KEY, payload text)")
	e.exec(t, "CREATE TABLE items_ttl (id bigint PRIMARY KEY, expires_at timestamptz NOT NULL)")
	e.exec(t, "INSERT INTO items SELECT g, 'x' FROM generate_series(1, 20) g")
	e.exec(t, "INSERT INTO items_ttl SELECT g, now() - interval '1 hour' FROM generate_series(1, 20) g")
	tx := e.otherTx(t)
	if _, err := tx.Exec(e.ctx, "UPDATE items_ttl SET expires_at = now() + interval '1 day' WHERE id = 4"); err != nil {
		t.Fatal(err)
	}
	r := ttl.Rule{Schema: "public", Table: "items", Kind: ttl.KindSidecar, SidecarTable: "items_ttl", KeyColumns: []string{"id"}}
	s := e.newSweeper(t, Config{Rules: []ttl.Rule{r}, BatchSize: 8, BatchTimeout: 5 * time.Second})
	res, err := s.RunOnce(e.ctx)
	if err != nil || len(res.Errors) > 0 {
		t.Fatalf("RunOnce: %v %v", err, res.Errors)
	}
	if err := tx.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.ids(t, "items", ""); len(got) != 1 || got[0] != 4 {
		t.Errorf("items left %v, want [4]", got)
	}
	if got := e.ids(t, "items_ttl", ""); len(got) != 1 || got[0] != 4 {
		t.Errorf("registry left %v, want [4]", got)
	}
	if res.Deleted["public.items"] != 19 || res.Deleted["public.items_ttl"] != 19 {
		t.Errorf("Deleted = %v, want 19 and 19", res.Deleted)
	}
}

func TestStopWithoutStart(t *testing.T) {
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { checkNoGoroutineLeak(t, before) })
	s, err := New(Config{DSN: "postgres://nobody@127.0.0.1:1/none", Rules: []ttl.Rule{{Table: "t"}}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		s.Stop()
		s.Stop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop without Start hangs")
	}
	if err := s.Start(context.Background()); !errors.Is(err, ErrStopped) {
		t.Errorf("Start after Stop = %v", err)
	}
}

// TestSessionSettings: the sweeper's sessions commit asynchronously unless
// the DSN says otherwise.
func TestSessionSettings(t *testing.T) {
	for _, tc := range []struct{ dsn, want string }{
		{"postgres://u@127.0.0.1:1/db", "off"},
		{"postgres://u@127.0.0.1:1/db?synchronous_commit=remote_apply", "remote_apply"},
		{"postgres://u@127.0.0.1:1/db?options=-c%20synchronous_commit%3Don", ""},
	} {
		s, err := New(Config{DSN: tc.dsn, Rules: []ttl.Rule{sessionsRule("t")}})
		if err != nil {
			t.Fatal(err)
		}
		if got := s.pool.Config().ConnConfig.RuntimeParams["synchronous_commit"]; got != tc.want {
			t.Errorf("%s: synchronous_commit %q, want %q", tc.dsn, got, tc.want)
		}
		s.Stop()
	}
}
