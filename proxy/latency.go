package proxy

import (
	"math"
	"math/bits"
	"sync"
	"time"
)

// Foreground latency: how long the server takes to answer what the proxy
// relays, as the sweeper's pacing signal (sweeper.Config.ForegroundLatency).
//
// One sample is a session's busy period: from relaying a Query, or the first
// message of an extended-protocol batch, to a session with nothing owed
// (link.pending back to 0) to relaying the ReadyForQuery that settles
// it. For a client that waits for each answer that is one statement's (or
// one batch's) time at the server plus the loopback hop; a pipelining client
// contributes one sample per pipeline. Time the client takes to read the
// answer is included only as far as it stalls the server's writes.
//
// Samples go into one log-spaced histogram per quarter second (eight
// buckets per doubling, so a reported value is within 12.5% of the true
// one, from 8µs to about 30s); ForegroundLatency reads their 99th
// percentile over the last second. The cost per statement is two monotonic clock reads and a
// short critical section.

const (
	// latencySlotWidth and latencyWindowSlots make the span
	// ForegroundLatency reports on: one second, long enough to hold a few
	// hundred statements of a quiet application, short enough that the
	// sweeper sees a queue it causes within a few batches.
	latencySlotWidth   = 250 * time.Millisecond
	latencyWindowSlots = 4
	latencySlots       = latencyWindowSlots + 1
	latencyBuckets     = 184 // 0-7: 0-7µs; then 8 per doubling from 8µs up to 15·2^21µs ≈ 31s
)

// foregroundQuantile is the quantile ForegroundLatency reports: the
// sweeper's pacing guards the foreground's tail, which a queue behind the
// sweeper lengthens long before it moves the median (measured with
// bench/sweep-load.sh: while the sweeper doubled pgbench's p99, the
// relayed statements' 90th percentile rose by a fifth, their 99th
// percentile up to twofold). With few statements in the last second it is their
// maximum, which errs on the gentle side.
const foregroundQuantile = 0.99

// monoStart anchors the monotonic timestamps sessions store as integers.
var monoStart = time.Now()

// monoNow is the monotonic time since monoStart, in nanoseconds.
func monoNow() int64 { return int64(time.Since(monoStart)) }

type latencySlot struct {
	slot   int64 // monoNow()/latencySlotWidth of the samples held; -1 when empty
	n      uint32
	counts [latencyBuckets]uint32
}

// latencyWindow holds the samples of the last latencySlots seconds.
type latencyWindow struct {
	mu    sync.Mutex
	slots [latencySlots]latencySlot
}

func newLatencyWindow() *latencyWindow {
	w := &latencyWindow{}
	for i := range w.slots {
		w.slots[i].slot = -1
	}
	return w
}

// latencyBucket maps d to its bucket: 8·log2(d/1µs) rounded down, above
// 8µs; one bucket per microsecond below.
func latencyBucket(d time.Duration) int {
	us := uint64(max(d, 0) / time.Microsecond)
	if us < 8 {
		return int(us)
	}
	e := bits.Len64(us) - 1 // us in [2^e, 2^(e+1)), e >= 3
	frac := int(us>>(e-3)) & 7
	return min(8*e+frac-16, latencyBuckets-1)
}

// latencyBucketLow is the smallest duration of bucket b.
func latencyBucketLow(b int) time.Duration {
	if b < 8 {
		return time.Duration(b) * time.Microsecond
	}
	e, frac := (b+16)/8, (b+16)%8
	return time.Duration(uint64(8+frac)<<(e-3)) * time.Microsecond
}

// observe records a sample d that ended at monotonic time now (monoNow).
func (w *latencyWindow) observe(now int64, d time.Duration) {
	slot := now / int64(latencySlotWidth)
	b := latencyBucket(d)
	w.mu.Lock()
	sl := &w.slots[slot%latencySlots]
	if sl.slot != slot {
		*sl = latencySlot{slot: slot}
	}
	sl.n++
	sl.counts[b]++
	w.mu.Unlock()
}

// quantile returns the q-quantile (0 < q <= 1) of the samples of the
// latencyWindowSlots slots up to now (monoNow), the current one included,
// or 0 when there is none.
func (w *latencyWindow) quantile(now int64, q float64) time.Duration {
	slot := now / int64(latencySlotWidth)
	var counts [latencyBuckets]uint32
	var n uint32
	w.mu.Lock()
	for i := range w.slots {
		sl := &w.slots[i]
		if sl.slot < 0 || sl.slot > slot || slot-sl.slot >= latencyWindowSlots {
			continue
		}
		n += sl.n
		for b, c := range sl.counts {
			counts[b] += c
		}
	}
	w.mu.Unlock()
	if n == 0 {
		return 0
	}
	rank := max(uint32(math.Ceil(q*float64(n))), 1)
	var seen uint32
	for b, c := range counts {
		seen += c
		if seen >= rank {
			return max(latencyBucketLow(b), time.Microsecond)
		}
	}
	return 0 // unreachable: the counts sum to n
}

// ForegroundLatency is the 99th percentile of the sessions' busy periods
// over the last second (see latency.go): the time from relaying a Query or an
// extended-protocol batch to relaying the ReadyForQuery that leaves the
// session with nothing owed, within 12.5%. It returns 0 when no such exchange
// ended in that window. Safe for concurrent use; it does not block on I/O.
// The sweeper paces on it (sweeper.Config.ForegroundLatency).
func (s *Server) ForegroundLatency() time.Duration {
	return s.latency.quantile(monoNow(), foregroundQuantile)
}
