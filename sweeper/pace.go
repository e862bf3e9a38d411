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
// batches shrink and the sweeper's row locks stay short.
//
// Waiting follows CoDel's idea (Nichols and Jacobson, "Controlling Queue
// Delay", ACM Queue 2012): a standing delay above the best seen means a
// queue. The pacer keeps the lowest time per row of the table's run; when a
// batch's time per row is more than twice that floor, the database is busy
// with something else, and the sweeper sleeps as long as that batch took
// (at most half the database's time for the sweeper). With no contention
// there is no sleep at all; Config.BatchPause adds a fixed one.
//
// The second signal is the one only a proxy has: the latency of the
// foreground statements it relays (Config.ForegroundLatency). The same
// CoDel test applies to it: the pacer keeps the lowest latency reported in
// the run, and when the latency now is over twice that floor and at least
// fgMinExcess above it, the foreground is queueing behind someone (quite
// possibly the sweeper): the next batch is half the size (AIMD's
// multiplicative decrease) and the sweeper sleeps as long as the batch took.
// A latency of 0 means no signal.

// fgMinExcess is the smallest rise of the foreground latency over its floor
// that counts as a queue: below a millisecond, doubling is noise (a 0.3 ms
// point select going to 0.6 ms) more often than contention. CoDel's own
// target delay is 5 ms for a network queue; a database statement's jitter
// is smaller.
const fgMinExcess = time.Millisecond

// pacer adapts one table's batches within a run.
type pacer struct {
	target   time.Duration
	max      int
	floorRow time.Duration // lowest time per row seen; 0 before the first batch
	floorFg  time.Duration // lowest foreground latency seen; 0 before the first
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
		case perRow > 2*p.floorRow && d > p.target/4:
			wait = d
		}
	}
	fgQueue := false
	if fg > 0 {
		switch {
		case p.floorFg == 0 || fg < p.floorFg:
			p.floorFg = fg
		case fg > 2*p.floorFg && fg-p.floorFg >= fgMinExcess:
			fgQueue = true
			wait = max(wait, d)
		}
	}
	if !full || d <= 0 {
		return size, wait
	}
	if fgQueue {
		return max(size/2, minBatchSize), wait
	}
	if p.target <= 0 {
		return size, wait
	}
	scaled := int(int64(size) * int64(p.target) / int64(d))
	scaled = min(max(scaled, size/2), size*2)
	return min(max(scaled, minBatchSize), p.max), wait
}
