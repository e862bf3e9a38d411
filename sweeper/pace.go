package sweeper

import "time"

// Pacing: how big a batch is and how long to wait before the next.
//
// Batch size adapts to a target transaction time (Config.TargetBatchDuration)
// instead of a fixed row count: after each full batch the next size is the
// current one scaled by target/duration, at most doubled or halved at a time
// (the multiplicative steps of AIMD, TCP's congestion control, both ways, so
// that it settles in a few batches), between minBatchSize and MaxBatchSize.
// On a quiet server batches grow until each takes about the target, which is
// what bulk-delete speed needs; on a busy one the same rows take longer, so
// batches shrink and the sweeper's row locks stay short. Sizes aim at half
// the configured target (aimShare), so that a batch doubled after a short
// one, or slowed by a neighbour's burst of work, still ends within it: the
// target is a bound on transactions, not their mean. (With foreground
// traffic the target is a tenth of the foreground's latency, when that is
// lower: margin enough.) A batch's fixed cost
// (one round trip, planning, the commit) is well under a millisecond, a few
// percent of a batch of half of 50 ms.
//
// Waiting follows CoDel's idea (Nichols and Jacobson, "Controlling Queue
// Delay", ACM Queue 2012): a standing delay above the best seen means a
// queue. The pacer keeps the lowest time per row of the table's run; when
// batches' time per row has stayed more than twice that floor for
// codelInterval of batch time, the database is busy with something else,
// and the sweeper sleeps as long as the last batch took (at most half the
// database's time for the sweeper). A single slow batch is not a queue: on
// a shared machine a neighbour's burst slows one batch in a few, and
// sleeping on each cost the sweeper a tenth of its quiet rate. With no
// contention there is no sleep at all; Config.BatchPause adds a fixed one.
//
// Config.MinRowsPerSecond, when set, bounds every wait so that the table's
// rows deleted per second stay above it whatever the foreground does: the
// operator's choice of progress over the foreground's tail latency.
//
// The second signal is the one only a proxy has: the latency of the
// foreground statements it relays (Config.ForegroundLatency, the 99th
// percentile over the last second). Its floor is the value read when the
// run starts, before the sweeper loads the server (the baseline, as BBR
// takes its minimum RTT when its own queue is empty), and the lowest value
// seen afterwards. A reading over the floor by an eighth (fgRise, about one
// bucket of the proxy's latency histogram) and by at least fgMinExcess
// means the foreground is queueing behind someone, quite possibly the
// sweeper.
//
// Against that signal the pacer controls the sweeper's share of time, the
// fraction it spends in batches, with AIMD (as TCP controls its window, and
// as CockroachDB's admission control throttles elastic background work when
// foreground latency rises): while the foreground queues, the share halves,
// at most once per fgReact, down to fgMinShare, and the batch size halves
// with it; while it does not, the share grows by fgIncrease per second of
// the run. After a batch of duration d the sweeper waits d·(1−share)/share.
// A run that finds foreground traffic starts at fgStartShare (TCP's slow
// start, the other way round: the signal lags by up to a window, so the
// sweeper must not start at full speed); one that finds none, and every run
// of `ttlproxy sweep`, which has no proxy, starts at 1: full speed. A
// latency of 0 means no signal: nothing relayed lately, or no proxy.

const (
	// fgRise is the rise of the foreground latency over its floor, as a
	// fraction of the floor, that counts as a queue.
	fgRise = 1.0 / 8
	// fgMinExcess is the smallest rise that counts: below it, a rise is
	// jitter more often than contention (a third of a 0.3 ms point
	// select). CoDel's own target delay is 5 ms for a network queue; a
	// database statement's jitter is smaller.
	fgMinExcess = 100 * time.Microsecond
	// fgReact is the least time between two cuts of the share: a quarter
	// of the signal's one-second window, so that one queue is not cut for
	// again and again before the cut can show.
	fgReact = 250 * time.Millisecond
	// fgMinShare keeps the sweeper making progress under any load.
	fgMinShare = 1.0 / 32
	// fgStartShare is the share of a run that starts with foreground
	// traffic.
	fgStartShare = 1.0 / 8
	// fgIncrease is the share's additive increase per second without a
	// queue: from fgMinShare to 1 in about 10 s.
	fgIncrease = 0.1
	// fgTailShare: with foreground traffic a batch's target time is the
	// foreground latency's floor divided by this.
	fgTailShare = 10
	// fgMinTarget is the shortest target time: below it a batch is mostly
	// the round trip and planning.
	fgMinTarget = time.Millisecond
	// aimShare is the fraction of the target time batch sizes aim at.
	aimShare = 2
	// codelInterval is how long, in batch time, rows must stay over twice
	// the floor's cost before the pacer waits: CoDel's interval (100 ms),
	// the time a queue must stand before it counts.
	codelInterval = 100 * time.Millisecond
)

// pacer adapts one table's batches within a run.
type pacer struct {
	// target is the transaction time batch sizes adapt to: want, or less
	// with foreground traffic (retarget).
	target   time.Duration
	want     time.Duration // Config.TargetBatchDuration; 0: fixed sizes
	max      int
	floorRow time.Duration // lowest time per row seen; 0 before the first batch
	floorFg  time.Duration // lowest foreground latency seen; 0 before the first
	share    float64       // the sweeper's share of time; 0 means 1 (not yet set)
	sinceCut time.Duration // run time since the share was last cut
	lastWait time.Duration
	overFor  time.Duration // batch time in a row spent over twice floorRow
	minRate  float64       // Config.MinRowsPerSecond; 0: none
}

// newPacer returns a pacer for batches that take about target (0: fixed
// sizes), of at most maxRows rows.
func newPacer(target time.Duration, maxRows int) pacer {
	return pacer{target: target, want: target, max: maxRows}
}

// baseline seeds the foreground floor with the latency before the run's
// first batch (0: no signal) and sets the starting share.
func (p *pacer) baseline(fg time.Duration) {
	p.share = 1
	p.sinceCut = fgReact
	if fg > 0 {
		p.share = fgStartShare
		if p.floorFg == 0 || fg < p.floorFg {
			p.floorFg = fg
		}
	}
	p.retarget()
}

// retarget sets the target time from want and the foreground floor.
func (p *pacer) retarget() {
	p.target = p.want
	if p.want > 0 && p.floorFg > 0 {
		p.target = min(p.want, max(p.floorFg/fgTailShare, fgMinTarget))
	}
}

// next returns the size of the batch after one of size rows that deleted n
// and took d, with the foreground latency fg now (0: unknown), and how long
// to wait before it.
func (p *pacer) next(size int, n int64, d time.Duration, full bool, fg time.Duration) (int, time.Duration) {
	var wait time.Duration
	if n > 0 {
		perRow := d / time.Duration(n)
		switch {
		case p.floorRow == 0 || perRow < p.floorRow:
			p.floorRow = perRow
			p.overFor = 0
		case perRow > 2*p.floorRow && d > p.target/4:
			p.overFor += d
			if p.overFor >= codelInterval {
				wait = d
			}
		default:
			p.overFor = 0
		}
	}
	if p.share == 0 {
		p.share = 1
	}
	elapsed := d + p.lastWait
	p.sinceCut += elapsed
	fgQueue := false
	if fg > 0 {
		switch {
		case p.floorFg == 0 || fg < p.floorFg:
			p.floorFg = fg
			p.retarget()
		case fg-p.floorFg > max(time.Duration(float64(p.floorFg)*fgRise), fgMinExcess):
			fgQueue = true
		}
	}
	switch {
	case fgQueue && p.sinceCut >= fgReact:
		p.share = max(p.share/2, fgMinShare)
		p.sinceCut = 0
	case !fgQueue:
		p.share = min(p.share+fgIncrease*elapsed.Seconds(), 1)
	}
	if p.share < 1 {
		wait = max(wait, time.Duration(float64(d)*(1-p.share)/p.share))
	}
	p.lastWait = wait
	if !full || d <= 0 {
		return size, wait
	}
	if fgQueue {
		return max(size/2, minBatchSize), wait
	}
	if p.target <= 0 {
		return size, wait
	}
	// With foreground traffic the target is already a tenth of its
	// latency; without, half of want.
	aim := min(p.target, p.want/aimShare)
	scaled := int(int64(size) * int64(aim) / int64(d))
	scaled = min(max(scaled, size/2), size*2)
	return min(max(scaled, minBatchSize), p.max), wait
}

// floor applies minRate to the pacing after a batch of size rows that
// deleted n in d and was full: the wait is bounded so that the batch and its
// wait together keep minRate rows per second, and when the batch alone fell
// short of it (a batch of a few rows is mostly its round trip and planning,
// all the more on a busy server) the next batch is at least twice as large,
// up to max, instead of nextSize. 0 minRate changes nothing.
func (p *pacer) floor(size, nextSize int, wait time.Duration, n int64, d time.Duration, full bool) (int, time.Duration) {
	if p.minRate <= 0 || n <= 0 {
		return nextSize, wait
	}
	most := time.Duration(float64(n)/p.minRate*float64(time.Second)) - d
	wait = max(min(wait, most), 0)
	p.lastWait = wait
	if full && p.target > 0 && float64(n) < p.minRate*d.Seconds() {
		nextSize = min(max(nextSize, 2*size), max(p.max, size))
	}
	return nextSize, wait
}
