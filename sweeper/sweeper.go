package sweeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// ErrStopped is returned by RunOnce and Start once Stop has been called.
var ErrStopped = errors.New("sweeper stopped")

// RunResult is the outcome of one run, keyed by qualified table name
// ("schema.table"; a sidecar rule's registry under its own name; an
// expiring column's nulling under "schema.table.column").
type RunResult struct {
	// Deleted is the number of rows deleted per table, also for a table that
	// failed part way.
	Deleted map[string]int64
	// Nulled is the number of expired values set to NULL per expiring
	// column ("schema.table.column"), also for one that failed part way.
	Nulled map[string]int64
	// Batches is the number of DELETE (for a column, UPDATE) statements
	// that completed per table or column.
	Batches map[string]int
	// Errors holds the error that ended a table's sweep in this run.
	Errors map[string]error
	// LongestBatch is the duration of the table's longest completed batch
	// (its transaction, as the sweeper timed it).
	LongestBatch map[string]time.Duration
	// PartitionsDropped is the number of expired partitions of the table
	// detached and dropped (Config.DropExpiredPartitions).
	PartitionsDropped map[string]int
}

// Sweeper deletes expired rows of its rules' tables in the background. Create
// it with New, run it with Start, end it with Stop. Its methods are safe for
// concurrent use; runs never overlap.
type Sweeper struct {
	cfg   Config
	log   *slog.Logger
	pool  *pgxpool.Pool
	m     *metrics
	rules []ttl.Rule

	mu       sync.Mutex // guards started, stopped, loopDone
	started  bool
	stopped  bool
	loopDone chan struct{} // closed when the loop goroutine exits
	stopCh   chan struct{} // closed by Stop
	closed   chan struct{} // closed when Stop has released everything

	runMu sync.Mutex // held for the length of a run
	// fgBaseline is the foreground latency read at the start of the run
	// (Config.ForegroundLatency; 0: none); written under runMu before the
	// run's workers start.
	fgBaseline time.Duration
	// uncoordinated says why this run's server cannot coordinate instances
	// with advisory locks ("": it can; coordinate.go); written under runMu
	// before the run's workers start.
	uncoordinated string
	// originMu makes batches that carry CDCOrigin take turns (origin.go).
	originMu sync.Mutex
	// batchSizes is the current batch size per target name: adapted, or
	// below cfg.BatchSize after timeouts.
	batchSizes map[string]int
	sizeMu     sync.Mutex // guards batchSizes
	// flows holds each target's inflow state between runs (inflow.go).
	flows  map[string]flowState
	flowMu sync.Mutex // guards flows
	// tables holds each table's Status.
	tables tableStates

	// Test knobs.
	blocksPerSlice uint32                                  // 0: DefaultBlocksPerSlice
	lockRows       bool                                    // FOR UPDATE SKIP LOCKED in the inner select
	pickBlocks     bool                                    // block slices by row picks only, no range DELETEs (tests of per-row batches)
	cutoffFunc     func() time.Time                        // replaces the database's now() when set
	afterBatch     func(table string, deleted int64)       // called after each completed batch
	beforeBatch    func(ctx context.Context, table string) // called before each batch
}

// Constants of the batch loop and the run loop.
const (
	// timeoutsBeforeShrink is the number of consecutive batch timeouts on a
	// table after which its batch size is halved (river's cleaner shrinks
	// after repeated timeouts the same way).
	timeoutsBeforeShrink = 2
	// maxTimeoutsPerRun is the number of batch timeouts after which a table
	// is given up until the next run.
	maxTimeoutsPerRun = 6
	// minBatchSize is the floor the batch size is halved down to.
	minBatchSize = 10
	// clientTimeoutSlack is added to BatchTimeout for the client-side
	// deadline of a batch; the server's statement_timeout fires first
	// unless the network or a pooler in between swallows it.
	clientTimeoutSlack = 5 * time.Second
	// firstRetryDelay is the wait after a run that failed as a whole
	// (database unreachable); it doubles per failure up to Interval.
	firstRetryDelay = time.Second
)

// New checks cfg, prepares the connection pool (it connects lazily: the
// database may be down when New runs) and registers the metrics.
func New(cfg Config) (*Sweeper, error) {
	cfg = cfg.withDefaults()
	if cfg.BatchPause < 0 {
		return nil, fmt.Errorf("sweeper: negative batch pause %v", cfg.BatchPause)
	}
	if cfg.MinRowsPerSecond < 0 {
		return nil, fmt.Errorf("sweeper: negative min rows per second %v", cfg.MinRowsPerSecond)
	}
	if len(cfg.Rules) == 0 {
		return nil, errors.New("sweeper: no tables to sweep")
	}
	rules := append([]ttl.Rule(nil), cfg.Rules...)
	seen := map[string]bool{}
	for i := range rules {
		if err := validateRule(&rules[i]); err != nil {
			return nil, fmt.Errorf("sweeper: %w", err)
		}
		for _, t := range sweepTargets(&rules[i]) {
			if seen[t.name] {
				return nil, fmt.Errorf("sweeper: table %s is listed twice", t.name)
			}
			seen[t.name] = true
		}
	}
	pcfg, err := pgxpool.ParseConfig(cfg.DSN)
	if err != nil {
		// pgconn's parse errors do not carry the password.
		return nil, fmt.Errorf("sweeper: parsing dsn: %w", err)
	}
	// Per worker, one connection holds the slice's advisory lock and one
	// runs its batches; one more serves the odd catalog query without
	// waiting.
	if cfg.DialFunc != nil {
		pcfg.ConnConfig.DialFunc = cfg.DialFunc
	}
	pcfg.MaxConns = int32(2*cfg.Workers + 1)
	rp := pcfg.ConnConfig.RuntimeParams
	// The server-side timeout of each batch, so that a stuck DELETE is
	// cancelled even when the client-side cancel request cannot get through.
	rp["statement_timeout"] = strconv.FormatInt(cfg.BatchTimeout.Milliseconds(), 10)
	// timestamptz arithmetic with day or month intervals depends on the
	// session's TimeZone; pin it so that a sweep does not depend on the
	// login's settings.
	rp["TimeZone"] = "UTC"
	// The re-check in each DELETE relies on READ COMMITTED re-evaluating the
	// newest row version; a stricter default would turn a concurrent refresh
	// into a serialization failure.
	rp["default_transaction_isolation"] = "read committed"
	// A batch's commit need not wait for its WAL to reach the disk: a
	// crash loses at most the last few batches' deletes (wal_writer_delay,
	// 200 ms by default), whose rows are still expired, still hidden, and
	// swept again by the next run. Each short transaction would otherwise
	// wait for a WAL flush that a bulk DELETE waits for once. A setting in
	// the DSN (options, or the parameter itself) stands.
	if rp["synchronous_commit"] == "" && !strings.Contains(rp["options"], "synchronous_commit") {
		rp["synchronous_commit"] = "off"
	}
	if rp["application_name"] == "" {
		rp["application_name"] = "ttlproxy-sweeper"
	}
	var m *metrics
	if cfg.Metrics != nil {
		m = cfg.Metrics.m
		m.forgetTables()
	} else if m, err = newMetrics(cfg.Registerer); err != nil {
		return nil, fmt.Errorf("sweeper: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		return nil, fmt.Errorf("sweeper: creating connection pool: %w", err)
	}
	s := &Sweeper{
		cfg:        cfg,
		log:        cfg.Logger,
		pool:       pool,
		m:          m,
		rules:      rules,
		stopCh:     make(chan struct{}),
		closed:     make(chan struct{}),
		batchSizes: map[string]int{},
		flows:      map[string]flowState{},
		lockRows:   true,
	}
	for i := range rules {
		for _, t := range sweepTargets(&rules[i]) {
			// Series exist from the start, so rate() sees the first run.
			if t.column != nil {
				m.rowsNulled.WithLabelValues(t.column.table, t.column.name)
				continue
			}
			m.rowsDeleted.WithLabelValues(t.name)
			m.batches.WithLabelValues(t.name)
			m.errors.WithLabelValues(t.name)
		}
	}
	return s, nil
}

// Start starts the sweep loop in a goroutine: the first run at once, then
// each run Interval after the previous one ended. A run that fails as a whole
// (no database) is retried after 1s, 2s, 4s… up to Interval. Cancelling ctx
// ends the loop at once, in-flight batch included; Stop ends it after the
// current batch. A second Start is a no-op; Start after Stop returns
// ErrStopped.
func (s *Sweeper) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return ErrStopped
	}
	if s.started {
		return nil
	}
	s.started = true
	s.loopDone = make(chan struct{})
	go s.loop(ctx, s.loopDone)
	return nil
}

// Stop ends the loop after the current batch, waits for it (and for a
// RunOnce in progress) to return, and closes the connection pool. It is safe
// to call more than once and without Start; every call returns once the
// sweeper has stopped.
func (s *Sweeper) Stop() {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		<-s.closed
		return
	}
	s.stopped = true
	close(s.stopCh)
	loopDone := s.loopDone
	s.mu.Unlock()

	if loopDone != nil {
		<-loopDone
	}
	// Wait for a RunOnce called directly, and close the pool before another
	// can start.
	s.runMu.Lock()
	s.pool.Close()
	s.runMu.Unlock()
	close(s.closed)
}

func (s *Sweeper) stopping() bool {
	select {
	case <-s.stopCh:
		return true
	default:
		return false
	}
}

func (s *Sweeper) loop(ctx context.Context, done chan struct{}) {
	defer close(done)
	s.log.Info("sweeper started", slog.Int("tables", len(s.rules)),
		slog.Duration("interval", s.cfg.Interval), slog.Int("batch_size", s.cfg.BatchSize))
	defer s.log.Info("sweeper stopped")
	s.createIndexes(ctx)
	failures := 0
	for {
		_, err := s.RunOnce(ctx)
		if errors.Is(err, ErrStopped) || ctx.Err() != nil {
			return
		}
		wait := s.cfg.Interval
		if err != nil {
			failures++
			wait = min(s.cfg.Interval, firstRetryDelay<<min(failures-1, 20))
			s.log.Warn("sweeper run failed", slog.Any("error", err),
				slog.Int("failures", failures), slog.Duration("retry_in", wait))
		} else {
			failures = 0
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-s.stopCh:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// RunOnce makes one pass over all tables at a cutoff fixed at its start (the
// database's now()). It returns an error only when the run as a whole failed
// (no database: no cutoff), was cancelled through ctx, or was stopped
// (ErrStopped, after the current batch); a table's failure is logged, counted
// and reported in RunResult.Errors, and the other tables are swept. Runs
// never overlap: a RunOnce waits for a run in progress.
func (s *Sweeper) RunOnce(ctx context.Context) (RunResult, error) {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	res := RunResult{Deleted: map[string]int64{}, Nulled: map[string]int64{}, Batches: map[string]int{}, Errors: map[string]error{},
		LongestBatch: map[string]time.Duration{}, PartitionsDropped: map[string]int{}}
	if s.stopping() {
		return res, ErrStopped
	}
	start := time.Now()
	cutoff, d, uncoordinated, err := s.begin(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		s.m.runs.WithLabelValues("failed").Inc()
		return res, fmt.Errorf("starting sweeper run: %w", err)
	}
	// The foreground latency before the run has loaded the server: every
	// table's pacer starts from it (pace.go).
	s.fgBaseline = 0
	if s.cfg.ForegroundLatency != nil {
		s.fgBaseline = s.cfg.ForegroundLatency()
	}
	log := s.log.With(slog.Time("cutoff", cutoff))
	log.Debug("sweeper run started", slog.String("database", d.String()))
	if uncoordinated != "" && uncoordinated != s.uncoordinated {
		log.Warn("sweeping without coordination between instances: " + uncoordinated)
	}
	s.uncoordinated = uncoordinated
	for i := range s.rules {
		if err := s.sweepRule(ctx, log, &s.rules[i], cutoff, d, &res); err != nil {
			return res, err
		}
	}
	elapsed := time.Since(start)
	s.m.runDuration.Observe(elapsed.Seconds())
	s.m.lastRun.SetToCurrentTime()
	result := "ok"
	if len(res.Errors) > 0 {
		result = "partial"
	}
	s.m.runs.WithLabelValues(result).Inc()
	var total, nulled int64
	for _, n := range res.Deleted {
		total += n
	}
	for _, n := range res.Nulled {
		nulled += n
	}
	lvl := slog.LevelInfo
	if total == 0 && nulled == 0 && len(res.Errors) == 0 {
		lvl = slog.LevelDebug // a quiet run every Interval is not news
	}
	log.Log(ctx, lvl, "sweeper run done", slog.Int64("deleted", total), slog.Int64("nulled", nulled),
		slog.Int("failed_tables", len(res.Errors)), slog.Duration("elapsed", elapsed))
	return res, nil
}

// begin fixes the run's cutoff and detects the database kind. uncoordinated
// says why advisory locks cannot coordinate instances on this server (""
// when they can: always on PostgreSQL; yugabyte.go).
func (s *Sweeper) begin(ctx context.Context) (cutoff time.Time, d dialect, uncoordinated string, err error) {
	if err := s.createOrigin(ctx); err != nil {
		return time.Time{}, 0, "", err
	}
	var version, silenced string
	err = s.pool.QueryRow(ctx, `SELECT now(), version(),
		coalesce(pg_catalog.current_setting('yb_silence_advisory_locks_not_supported_error', true), '')`).Scan(&cutoff, &version, &silenced)
	if err != nil {
		return time.Time{}, 0, "", err
	}
	if s.cutoffFunc != nil {
		cutoff = s.cutoffFunc()
	}
	d = dialectPostgres
	if strings.Contains(version, "-YB-") {
		d = dialectYugabyte
		uncoordinated = ybCoordination(version, silenced)
		if s.cfg.CDCOrigin != "" {
			if w := ybOriginWarning(version); w != "" {
				s.log.Warn(w, slog.String("version", version))
			}
		}
	}
	return cutoff, d, uncoordinated, nil
}

// sweepRule sweeps one rule's targets, the row deletes and then the
// expiring columns, and records the outcome in res. It returns an error
// only when the run must end (stopped or cancelled).
func (s *Sweeper) sweepRule(ctx context.Context, log *slog.Logger, r *ttl.Rule, cutoff time.Time, d dialect, res *RunResult) error {
	if s.cfg.DropExpiredPartitions && d == dialectPostgres {
		n, err := s.dropExpiredPartitions(ctx, log, r, cutoff)
		res.PartitionsDropped[r.QualifiedName()] += n
		if stop := s.endsRun(ctx, err); stop != nil {
			return stop
		}
		if err != nil {
			// The rows of the partitions left are swept as usual.
			s.m.errors.WithLabelValues(r.QualifiedName()).Inc()
			log.Error("dropping expired partitions failed", slog.String("table", r.QualifiedName()), slog.Any("error", err))
		}
	}
	for _, t := range sweepTargets(r) {
		tlog := log.With(slog.String("table", t.table()))
		what := "table"
		if t.column != nil {
			tlog = tlog.With(slog.String("column", t.column.name))
			what = "column"
		}
		start := time.Now()
		n, batches, longest, err := s.sweepTarget(ctx, tlog, t, cutoff, d)
		if t.column != nil {
			res.Nulled[t.name] += n
		} else {
			res.Deleted[t.name] += n
		}
		res.Batches[t.name] += batches
		res.LongestBatch[t.name] = max(res.LongestBatch[t.name], longest)
		if stop := s.endsRun(ctx, err); stop != nil {
			return stop
		}
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		if t.column != nil {
			s.tables.updateColumn(t, func(cs *ColumnStatus) { cs.Error = msg })
		} else {
			s.tables.update(t.name, func(st *TableStatus) { st.Error = msg })
		}
		if err != nil {
			res.Errors[t.name] = err
			tlog.Error("sweeping "+what+" failed", slog.Any("error", err),
				slog.Int64(t.done(), n), slog.Int("batches", batches))
			continue
		}
		lvl := slog.LevelDebug
		if n > 0 {
			lvl = slog.LevelInfo
		}
		tlog.Log(ctx, lvl, "swept "+what, slog.Int64(t.done(), n),
			slog.Int("batches", batches), slog.Duration("elapsed", time.Since(start)))
	}
	if err := s.observeOldest(ctx, log, r, cutoff, d); err != nil {
		if stop := s.endsRun(ctx, err); stop != nil {
			return stop
		}
		s.m.errors.WithLabelValues(r.QualifiedName()).Inc()
		log.Warn("measuring the oldest expired row failed",
			slog.String("table", r.QualifiedName()), slog.Any("error", err))
	}
	return nil
}

// endsRun returns the error that ends the run when err is (or ctx says) the
// run was stopped or cancelled, or nil.
func (s *Sweeper) endsRun(ctx context.Context, err error) error {
	if errors.Is(err, ErrStopped) {
		return ErrStopped
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return nil
}

// tableRun is one table's state within a run, shared by its workers.
type tableRun struct {
	t   target
	log *slog.Logger

	mu       sync.Mutex // guards the fields below
	pace     pacer
	deleted  int64
	batches  int
	longest  time.Duration // the longest completed batch
	skipped  int
	timeouts int  // in this run
	streak   int  // consecutive timeouts
	shrunk   bool // a timeout halved the batch size
	err      error
}

// failed returns the error that ended the table's sweep, or nil.
func (tr *tableRun) failed() error {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.err
}

// fail records err as the table's error unless one is recorded already.
func (tr *tableRun) fail(err error) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.err == nil {
		tr.err = err
	}
}

// sweepTarget deletes t's doomed rows (nulls an expiring column's doomed
// values) slice by slice, batch by batch, with Workers slices at a time,
// until each slice's batch comes back short. It returns the rows deleted
// (values nulled), the batches done and the longest batch's duration also
// on error.
func (s *Sweeper) sweepTarget(ctx context.Context, log *slog.Logger, t target, cutoff time.Time, d dialect) (int64, int, time.Duration, error) {
	tr := &tableRun{t: t, log: log, pace: newPacer(s.cfg.TargetBatchDuration, s.cfg.MaxBatchSize)}
	tr.pace.minRate = s.cfg.MinRowsPerSecond
	tr.pace.baseline(s.fgBaseline)
	if want := tr.pace.want; tr.pace.target < want {
		// With foreground traffic batches are shorter (pace.go): the
		// first one is scaled down with the target, and the sizes grow
		// back by doubling once they are under it.
		size := s.batchSize(t.name)
		s.setBatchSize(t.name, max(minBatchSize, int(int64(size)*int64(tr.pace.target)/int64(want))))
	}
	backlog, _, err := s.countDoomed(ctx, t, cutoff, runBacklogCap)
	if err != nil {
		s.m.errors.WithLabelValues(t.table()).Inc()
		return 0, 0, 0, err
	}
	s.setBacklog(t, backlog)
	inflow, err := s.observeInflow(ctx, t, cutoff, backlog)
	if err != nil {
		if ctx.Err() != nil {
			return 0, 0, 0, ctx.Err()
		}
		// A gauge, not a reason to leave the rows: counted and logged.
		s.m.errors.WithLabelValues(t.table()).Inc()
		log.Warn("counting the inflow failed", slog.Any("error", err))
	}
	if fs := s.flowOf(t); fs.rate > 0 {
		fs.inflow = inflow
		s.setDrain(t, fs, backlog)
	}
	sweepStart := time.Now()
	defer func() {
		left := max(backlog-tr.deleted, 0)
		s.setBacklog(t, left)
		s.observeFlow(t, cutoff, tr.deleted, time.Since(sweepStart), inflow, left)
		if t.column != nil {
			s.tables.updateColumn(t, func(cs *ColumnStatus) {
				cs.Backlog, cs.Nulled, cs.Batches, cs.SlicesSkipped = left, tr.deleted, tr.batches, tr.skipped
				cs.BatchSize, cs.LastSwept = s.batchSize(t.name), time.Now()
			})
			return
		}
		s.tables.update(t.name, func(st *TableStatus) {
			st.Backlog, st.Deleted, st.Batches, st.SlicesSkipped = left, tr.deleted, tr.batches, tr.skipped
			st.BatchSize, st.LastSwept = s.batchSize(t.name), time.Now()
		})
	}()
	if backlog == 0 {
		// Nothing is doomed at the cutoff (an exact count): no slice to
		// read, which on a table read sequentially would be all of it.
		log.Debug("nothing to sweep")
		return 0, 0, 0, nil
	}
	slices, err := slicerFor(d, s.blocksPerSlice).slices(ctx, s.pool, t, cutoff)
	if err != nil {
		s.m.errors.WithLabelValues(t.table()).Inc()
		return 0, 0, 0, err
	}
	log.Debug("sweeping table", slog.Int("slices", len(slices)), slog.Int64("backlog", backlog))
	next := make(chan int, len(slices))
	for i := range slices {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	for range min(s.cfg.Workers, len(slices)) {
		wg.Go(func() {
			for i := range next {
				if tr.failed() != nil {
					return
				}
				if err := s.sweepSliceHeld(ctx, tr, slices[i], i, d, cutoff); err != nil {
					tr.fail(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if tr.err != nil {
		return tr.deleted, tr.batches, tr.longest, tr.err
	}
	if !tr.shrunk && tr.pace.target <= 0 {
		// A clean run earns back half of what timeouts took away.
		s.sizeMu.Lock()
		if cur, ok := s.batchSizes[t.name]; ok {
			if next := cur * 2; next < s.cfg.BatchSize {
				s.batchSizes[t.name] = next
			} else {
				delete(s.batchSizes, t.name)
			}
		}
		s.sizeMu.Unlock()
	}
	return tr.deleted, tr.batches, tr.longest, nil
}

// sweepSliceHeld sweeps slice i of tr's table when no other instance holds
// it, then pauses.
func (s *Sweeper) sweepSliceHeld(ctx context.Context, tr *tableRun, sl slice, i int, d dialect, cutoff time.Time) error {
	t := tr.t
	release, held, err := s.holdSlice(ctx, d, t, i)
	if err != nil {
		s.m.errors.WithLabelValues(t.table()).Inc()
		return err
	}
	if !held {
		// Another instance sweeps this slice now.
		tr.mu.Lock()
		tr.skipped++
		tr.mu.Unlock()
		s.m.slicesSkipped.WithLabelValues(t.table()).Inc()
		tr.log.Debug("slice held by another instance", slog.String("slice", sl.label))
		return nil
	}
	err = s.sweepSlice(ctx, tr, sl, d, cutoff)
	release()
	if err != nil {
		return err
	}
	return s.pause(ctx)
}

// sweepSlice deletes slice sl's doomed rows batch by batch until a batch
// comes back short, or another worker of the table failed.
func (s *Sweeper) sweepSlice(ctx context.Context, tr *tableRun, sl slice, d dialect, cutoff time.Time) error {
	t, log := tr.t, tr.log
	exec := s.batchFunc(d, t, sl)
	for tr.failed() == nil {
		if s.beforeBatch != nil {
			s.beforeBatch(ctx, t.name)
		}
		size := s.batchSize(t.name)
		started := time.Now()
		n, work, full, err := exec(ctx, cutoff, size)
		took := time.Since(started)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s.m.errors.WithLabelValues(t.table()).Inc()
			if !isTimeout(err) {
				return fmt.Errorf("%s (slice %s): %w", t.verb(), sl.label, err)
			}
			tr.mu.Lock()
			tr.timeouts++
			tr.streak++
			timeouts := tr.timeouts
			if timeouts < maxTimeoutsPerRun && tr.streak >= timeoutsBeforeShrink {
				tr.streak = 0
				tr.shrunk = true
				s.setBatchSize(t.name, max(size/2, min(minBatchSize, s.cfg.BatchSize)))
			}
			tr.mu.Unlock()
			if timeouts >= maxTimeoutsPerRun {
				return fmt.Errorf("%s: %d batches timed out (last batch size %d, timeout %s): %w",
					t.verb(), timeouts, size, s.cfg.BatchTimeout, err)
			}
			log.Warn("sweeper batch timed out", slog.Int("batch_size", size),
				slog.Int("next_batch_size", s.batchSize(t.name)), slog.Duration("timeout", s.cfg.BatchTimeout))
			if err := s.pause(ctx); err != nil {
				return err
			}
			continue
		}
		if t.column != nil {
			s.m.rowsNulled.WithLabelValues(t.column.table, t.column.name).Add(float64(n))
		} else {
			s.m.batchDuration.WithLabelValues(t.name).Observe(took.Seconds())
			s.m.rowsDeleted.WithLabelValues(t.name).Add(float64(n))
			s.m.batches.WithLabelValues(t.name).Inc()
		}
		var fg time.Duration
		if s.cfg.ForegroundLatency != nil {
			fg = s.cfg.ForegroundLatency()
		}
		tr.mu.Lock()
		tr.streak = 0
		tr.deleted += n
		tr.batches++
		tr.longest = max(tr.longest, took)
		nextSize, wait := tr.pace.next(size, work, took, full, fg)
		nextSize, wait = tr.pace.floor(size, nextSize, wait, n, took, full)
		if log.Enabled(ctx, slog.LevelDebug) {
			log.Debug("batch", slog.Int("size", size), slog.Int64(t.done(), n), slog.Duration("took", took),
				slog.Duration("foreground", fg), slog.Float64("share", tr.pace.share), slog.Duration("wait", wait))
		}
		if (tr.pace.target > 0 || nextSize < size) && !tr.shrunk {
			s.setBatchSize(t.name, nextSize)
		}
		tr.mu.Unlock()
		if t.column == nil {
			s.m.batchSize.WithLabelValues(t.name).Set(float64(s.batchSize(t.name)))
		}
		if s.afterBatch != nil {
			s.afterBatch(t.name, n)
		}
		if !full {
			break
		}
		if err := s.wait(ctx, wait); err != nil {
			return err
		}
		if err := s.pause(ctx); err != nil {
			return err
		}
	}
	return nil
}

// batchSize returns the current batch size of target name.
func (s *Sweeper) batchSize(name string) int {
	s.sizeMu.Lock()
	defer s.sizeMu.Unlock()
	if n, ok := s.batchSizes[name]; ok {
		return n
	}
	return s.cfg.BatchSize
}

// setBatchSize sets the batch size of target name.
func (s *Sweeper) setBatchSize(name string, n int) {
	s.sizeMu.Lock()
	defer s.sizeMu.Unlock()
	s.batchSizes[name] = n
}

// wait sleeps d (the pacer's back-off); it returns ErrStopped or ctx's
// error when interrupted.
func (s *Sweeper) wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-s.stopCh:
		return ErrStopped
	case <-t.C:
		return nil
	}
}

// pause sleeps BatchPause jittered by ±50% (river sleeps a random interval
// between batches too, so that instances do not fall into step). It returns
// ErrStopped or ctx's error when interrupted.
func (s *Sweeper) pause(ctx context.Context) error {
	if s.stopping() {
		return ErrStopped
	}
	p := s.cfg.BatchPause
	if p <= 0 {
		return ctx.Err()
	}
	d := p/2 + rand.N(p) //nolint:gosec // jitter between batches, not a secret
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-s.stopCh:
		return ErrStopped
	case <-t.C:
		return nil
	}
}

// connect opens a connection of its own to the sweeper's DSN, outside the
// pool, dialled as the pool's.
func (s *Sweeper) connect(ctx context.Context) (*pgx.Conn, error) {
	conf, err := pgx.ParseConfig(s.cfg.DSN)
	if err != nil {
		return nil, err
	}
	if s.cfg.DialFunc != nil {
		conf.DialFunc = s.cfg.DialFunc
	}
	return pgx.ConnectConfig(ctx, conf)
}
