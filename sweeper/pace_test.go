package sweeper

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/ttlproxy/ttlproxy/ttl"
)

func TestPacer(t *testing.T) {
	p := newPacer(50*time.Millisecond, 10_000)
	// Quiet and fast: the size doubles at most per batch, up to the cap.
	size, wait := p.next(1000, 1000, 5*time.Millisecond, true, 0)
	if size != 2000 || wait != 0 {
		t.Errorf("fast batch: next %d, wait %v; want 2000, 0", size, wait)
	}
	if size, _ = p.next(8000, 8000, 10*time.Millisecond, true, 0); size != 10_000 {
		t.Errorf("capped: next %d, want 10000", size)
	}
	// About on the aim, half the target: about the same size.
	if size, _ = p.next(4000, 4000, 24*time.Millisecond, true, 0); size < 4000 || size > 4300 {
		t.Errorf("on aim: next %d, want about 4000", size)
	}
	// On the target itself: smaller, so that the next doubling stays
	// within it.
	if size, _ = p.next(4000, 4000, 50*time.Millisecond, true, 0); size != 2000 {
		t.Errorf("on target: next %d, want 2000", size)
	}
	// Too slow: at most halved, never below minBatchSize.
	if size, _ = p.next(4000, 4000, 400*time.Millisecond, true, 0); size != 2000 {
		t.Errorf("slow batch: next %d, want 2000", size)
	}
	if size, _ = p.next(minBatchSize, minBatchSize, time.Second, true, 0); size != minBatchSize {
		t.Errorf("floor: next %d, want %d", size, minBatchSize)
	}
	// A short batch ends the table: the size stays.
	if size, _ = p.next(3000, 10, time.Millisecond, false, 0); size != 3000 {
		t.Errorf("last batch: next %d, want 3000", size)
	}

	// CoDel: rows that cost over twice the best seen for codelInterval
	// of batch time mean contention, and the sweeper waits as long as the
	// batch took; one slow batch is noise.
	q := newPacer(50*time.Millisecond, 10_000)
	if _, wait := q.next(1000, 1000, 10*time.Millisecond, true, 0); wait != 0 {
		t.Errorf("first batch waits %v", wait)
	}
	if _, wait := q.next(1000, 1000, 15*time.Millisecond, true, 0); wait != 0 {
		t.Errorf("1.5x the floor waits %v", wait)
	}
	if _, wait := q.next(1000, 1000, 40*time.Millisecond, true, 0); wait != 0 {
		t.Errorf("one batch at 4x the floor waits %v, want 0", wait)
	}
	if _, wait := q.next(1000, 1000, 12*time.Millisecond, true, 0); wait != 0 {
		t.Errorf("back under twice the floor waits %v", wait)
	}
	for i, want := range []time.Duration{0, 0, 40 * time.Millisecond} {
		if _, wait := q.next(1000, 1000, 40*time.Millisecond, true, 0); wait != want {
			t.Errorf("slow batch %d in a row waits %v, want %v", i+1, wait, want)
		}
	}
	// The foreground's latency against its baseline. Foreground traffic at
	// the start: an eighth of the time, so the wait is seven batch times;
	// the target is a tenth of the baseline.
	near := func(got, want time.Duration) bool { return got >= want*95/100 && got <= want*105/100 }
	f := newPacer(50*time.Millisecond, 10_000)
	f.baseline(200 * time.Millisecond)
	if f.target != 20*time.Millisecond {
		t.Errorf("foreground baseline 200ms: target %s, want 20ms", f.target)
	}
	size, wait = f.next(1000, 1000, 10*time.Millisecond, true, 220*time.Millisecond) // +10%: no queue
	if size != 2000 || !near(wait, 70*time.Millisecond) {
		t.Errorf("start with foreground traffic: next %d, wait %s; want 2000, about 70ms", size, wait)
	}
	// A queue (+50%): the share and the size halve; a second reading of
	// the same queue within fgReact does not cut again.
	size, wait = f.next(2000, 2000, 10*time.Millisecond, true, 300*time.Millisecond)
	if size != 1000 || !near(wait, 150*time.Millisecond) {
		t.Errorf("queue: next %d, wait %s; want 1000, about 150ms (share 1/16)", size, wait)
	}
	size, wait = f.next(1000, 1000, 10*time.Millisecond, true, 300*time.Millisecond)
	if size != 500 || !near(wait, 150*time.Millisecond) {
		t.Errorf("the same queue within fgReact: next %d, wait %s; want 500, about 150ms", size, wait)
	}
	// +15% is a queue too (over an eighth).
	if size, _ = f.next(1000, 1000, 10*time.Millisecond, true, 230*time.Millisecond); size != 500 {
		t.Errorf("+15%%: next %d, want 500 (a queue)", size)
	}
	// A lasting queue takes the share down to fgMinShare.
	for range 20 {
		_, wait = f.next(1000, 1000, 10*time.Millisecond, true, 300*time.Millisecond)
	}
	if want := time.Duration(float64(10*time.Millisecond) * (1 - fgMinShare) / fgMinShare); !near(wait, want) {
		t.Errorf("a lasting queue: wait %s, want %s", wait, want)
	}
	// Without a queue the share grows back to 1 within about ten seconds:
	// no wait.
	for run := time.Duration(0); run < 12*time.Second; run += 10*time.Millisecond + wait {
		_, wait = f.next(1000, 1000, 10*time.Millisecond, true, 200*time.Millisecond)
	}
	if wait != 0 {
		t.Errorf("the queue gone for seconds: wait %s, want 0", wait)
	}
	// A lower floor lowers the target.
	f.next(1000, 1000, time.Millisecond, true, 40*time.Millisecond)
	if f.target != 4*time.Millisecond {
		t.Errorf("floor 40ms: target %s, want 4ms", f.target)
	}
	// No foreground traffic at the start: full speed, the whole target.
	quiet := newPacer(50*time.Millisecond, 10_000)
	quiet.baseline(0)
	if size, wait := quiet.next(1000, 1000, 10*time.Millisecond, true, 0); size != 2000 || wait != 0 || quiet.target != 50*time.Millisecond {
		t.Errorf("no foreground: next %d, wait %s, target %s; want 2000, 0, 50ms", size, wait, quiet.target)
	}
	// The target is a tenth of the foreground floor, between fgMinTarget
	// and the configured target.
	for _, tc := range []struct{ fg, want time.Duration }{
		{2 * time.Millisecond, fgMinTarget},
		{100 * time.Millisecond, 10 * time.Millisecond},
		{2 * time.Second, 50 * time.Millisecond},
	} {
		r := newPacer(50*time.Millisecond, 10_000)
		r.baseline(tc.fg)
		if r.target != tc.want {
			t.Errorf("foreground floor %s: target %s, want %s", tc.fg, r.target, tc.want)
		}
	}
	// Sub-millisecond latencies: a rise under fgMinExcess is noise.
	g := newPacer(50*time.Millisecond, 10_000)
	g.baseline(300 * time.Microsecond)
	if size, _ := g.next(2000, 2000, 500*time.Microsecond, true, 380*time.Microsecond); size != 4000 {
		t.Errorf("0.3ms to 0.38ms: next %d; want 4000 (no queue)", size)
	}
	// A floor on the rate bounds the wait: 1000 rows in 10ms and at least
	// 20,000 rows/s leave 40ms to wait, where the share of 1/8 asks 70ms.
	m := newPacer(50*time.Millisecond, 10_000)
	m.minRate = 20_000
	m.baseline(200 * time.Millisecond)
	size, wait = m.next(1000, 1000, 10*time.Millisecond, true, 200*time.Millisecond)
	if size, wait = m.floor(1000, size, wait, 1000, 10*time.Millisecond, true); wait != 40*time.Millisecond || size != 2000 {
		t.Errorf("min 20,000 rows/s: next %d, wait %s; want 2000, 40ms", size, wait)
	}
	// A batch slower than the floor by itself: no wait, and the next one
	// twice as large, even in a queue that halves it.
	if size, wait = m.floor(100, 50, 70*time.Millisecond, 100, 10*time.Millisecond, true); wait != 0 || size != 200 {
		t.Errorf("min 20,000 rows/s, 100 rows in 10ms: next %d, wait %s; want 200, 0", size, wait)
	}
	if size, _ = m.floor(100, 50, 0, 100, 10*time.Millisecond, false); size != 50 {
		t.Errorf("a short batch: next %d, want 50 (no growth)", size)
	}
	// Without a target the size is fixed, with foreground traffic too.
	fixed := newPacer(0, 10_000)
	fixed.baseline(100 * time.Millisecond)
	if size, _ := fixed.next(1000, 1000, time.Millisecond, true, 0); size != 1000 {
		t.Errorf("no target: next %d, want 1000", size)
	}
}

// TestAdaptiveBatches: with a target batch duration the batches grow from
// BatchSize on a quiet server, and every row is still deleted.
func TestAdaptiveBatches(t *testing.T) {
	e := setup(t)
	createSessions(t, e, "adaptive", 20_000, 50, 5)
	e.exec(t, "ANALYZE adaptive") // above runBacklogCap the backlog is the planner's estimate
	s := e.newSweeper(t, Config{Rules: []ttl.Rule{sessionsRule("adaptive")}, BatchSize: 100,
		// A target far above any batch's time here, so that every batch
		// doubles whatever the machine's load: the growth is the point, the
		// pacer's arithmetic is TestPacer's.
		TargetBatchDuration: 10 * time.Second, MaxBatchSize: 50_000})
	var sizes []int64
	s.afterBatch = func(_ string, n int64) { sizes = append(sizes, n) }
	var backlogAtStart float64
	s.beforeBatch = func(context.Context, string) {
		if backlogAtStart == 0 {
			backlogAtStart = testutil.ToFloat64(s.m.backlog.WithLabelValues("public.adaptive"))
		}
	}
	res, err := s.RunOnce(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if backlogAtStart < 18_000 || backlogAtStart > 22_000 {
		t.Errorf("backlog at the start %v, want the planner's estimate of 20000", backlogAtStart)
	}
	if got := testutil.ToFloat64(s.m.backlog.WithLabelValues("public.adaptive")); got != 0 {
		t.Errorf("backlog after the run %v, want 0", got)
	}
	if got := res.Deleted["public.adaptive"]; got != 20_000 {
		t.Errorf("Deleted = %d, want 20000", got)
	}
	// A fixed size of 100 would need 200 batches; doubling from 100 takes
	// 8 (100 … 12,800, then the 7,300 left). The table is a block slice, so
	// a batch covers whole blocks: the first covers one (about 185 rows).
	if got := res.Batches["public.adaptive"]; got > 10 || len(sizes) < 3 || sizes[len(sizes)-2] < 16*sizes[0] {
		t.Errorf("Batches = %d, sizes %v: want them to grow, doubling", got, sizes)
	}
	if got := e.count(t, "adaptive"); got != 55 {
		t.Errorf("%d rows left, want 55", got)
	}
}

// TestForegroundLatencyPaces: the sweeper reads the foreground latency at
// the start of its run as the baseline; while it is a queue over it, batches
// halve instead of growing toward the target, and they grow again once it
// is gone. Every row is still deleted.
func TestForegroundLatencyPaces(t *testing.T) {
	e := setup(t)
	createSessions(t, e, "fg", 5000, 10, 0)
	var calls int
	s := e.newSweeper(t, Config{Rules: []ttl.Rule{sessionsRule("fg")}, BatchSize: 1000,
		// Far above any batch's time: without the foreground signal every
		// batch would double.
		TargetBatchDuration: 10 * time.Second,
		// Latencies ten times the target, so that the target stays whole
		// (a tenth of the baseline; TestForegroundShortensBatches).
		ForegroundLatency: func() time.Duration {
			calls++
			if calls >= 3 && calls <= 5 {
				return 1000 * time.Second // the foreground queues
			}
			return 100 * time.Second // the baseline, and after the queue
		}})
	sizes := runBatchSizes(t, e, s, "public.fg", 5000)
	// Call 1 is the baseline; after batch 1 (1000 rows) the latency is on
	// it: 2000; after batches 2-4 it queues: 1000, 500, 250; then it is
	// gone: 500, of which 250 rows are left.
	if want := []int64{1000, 2000, 1000, 500, 250, 250}; !slices.Equal(sizes, want) {
		t.Errorf("batch sizes %v, want %v", sizes, want)
	}
	if got := testutil.ToFloat64(s.m.batchSize.WithLabelValues("public.fg")); got != 500 {
		t.Errorf("batch_size gauge %v, want 500", got)
	}
}

// TestForegroundShortensBatches: with foreground traffic a run's first batch
// is scaled down to a tenth of the foreground baseline's time, and the
// sizes grow back by doubling while the batches stay under it.
func TestForegroundShortensBatches(t *testing.T) {
	e := setup(t)
	createSessions(t, e, "fgshort", 3000, 10, 0)
	s := e.newSweeper(t, Config{Rules: []ttl.Rule{sessionsRule("fgshort")}, BatchSize: 1000,
		TargetBatchDuration: 10 * time.Second,
		// Target: a tenth of 10s, 1s; the first batch 1000·1s/10s = 100 rows.
		ForegroundLatency: func() time.Duration { return 10 * time.Second }})
	sizes := runBatchSizes(t, e, s, "public.fgshort", 3000)
	if want := []int64{100, 200, 400, 800, 1500}; !slices.Equal(sizes, want) {
		t.Errorf("batch sizes %v, want %v", sizes, want)
	}
}

// runBatchSizes runs s once with batch sizes counted in rows picked (not
// ranges of blocks), checks that it deleted want rows of table, and returns
// the rows each batch deleted.
func runBatchSizes(t *testing.T, e *env, s *Sweeper, table string, want int64) []int64 {
	t.Helper()
	s.pickBlocks = true
	var sizes []int64
	s.afterBatch = func(_ string, n int64) { sizes = append(sizes, n) }
	res, err := s.RunOnce(e.ctx)
	if err != nil || len(res.Errors) > 0 {
		t.Fatalf("RunOnce: %v %v", err, res.Errors)
	}
	if got := res.Deleted[table]; got != want {
		t.Errorf("deleted %d from %s, want %d", got, table, want)
	}
	return sizes
}
