package proxy

import (
	"math/bits"
	"sync"
	"time"
)

// Foreground latency: how long the server takes to answer what the proxy
// relays, as the sweeper's pacing signal (sweeper.Config.ForegroundLatency).
//
// One sample is a session's busy period: from relaying a Query, or the first
// message of an extended-protocol batch, to a session with nothing owed
// (session.pending back to 0) to relaying the ReadyForQuery that settles
// it. For a client that waits for each answer that is one statement's (or
// one batch's) time at the server plus the loopback hop; a pipelining client
// contributes one sample per pipeline. Time the client takes to read the
// answer is included only as far as it stalls the server's writes.
//
// Samples go into one log-spaced histogram per second (four buckets per
// doubling, so a reported value is within 25% of the true one, from 4µs to
// about 30s); ForegroundLatency reads the median of the last
// latencyWindowSeconds. The cost per statement is two monotonic clock reads
// and a short critical section.

const (
	// latencyWindowSeconds is the span ForegroundLatency reports on: long
	// enough to hold a few hundred statements of a quiet application, short
	// enough that the sweeper sees a queue within a batch or two.
	latencyWindowSeconds = 3
	latencySlots         = latencyWindowSeconds + 1
	latencyBuckets       = 96 // 0-3: 0-3µs; then 4 per doubling from 4µs up to 7·2^22µs ≈ 29s
)

// monoStart anchors the monotonic timestamps sessions store as integers.
var monoStart = time.Now()

// monoNow is the monotonic time since monoStart, in nanoseconds.
func monoNow() int64 { return int64(time.Since(monoStart)) }

type latencySlot struct {
	sec    int64 // monoNow()/1e9 of the samples held; -1 when empty
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
		w.slots[i].sec = -1
	}
	return w
}

// latencyBucket maps d to its bucket: 4·log2(d/1µs), rounded down.
func latencyBucket(d time.Duration) int {
	us := uint64(max(d, 0) / time.Microsecond)
	if us < 4 {
		return int(us) // 0..3: below 4µs, one bucket per microsecond is finer than needed and harmless
	}
	e := bits.Len64(us) - 1 // us in [2^e, 2^(e+1))
	frac := int(us>>(e-2)) & 3
	return min(4*e+frac-4, latencyBuckets-1)
}

// latencyBucketLow is the smallest duration of bucket b.
func latencyBucketLow(b int) time.Duration {
	if b < 4 {
		return time.Duration(b) * time.Microsecond
	}
	e, frac := (b+4)/4, (b+4)%4
	return time.Duration(uint64(4+frac)<<(e-2)) * time.Microsecond
}

// observe records a sample d that ended at monotonic time now (monoNow).
func (w *latencyWindow) observe(now int64, d time.Duration) {
	sec := now / int64(time.Second)
	b := latencyBucket(d)
	w.mu.Lock()
	sl := &w.slots[sec%latencySlots]
	if sl.sec != sec {
		*sl = latencySlot{sec: sec}
	}
	sl.n++
	sl.counts[b]++
	w.mu.Unlock()
}

// median returns the median sample of the latencyWindowSeconds before now
// (monoNow), or 0 when there is none.
func (w *latencyWindow) median(now int64) time.Duration {
	sec := now / int64(time.Second)
	var counts [latencyBuckets]uint32
	var n uint32
	w.mu.Lock()
	for i := range w.slots {
		sl := &w.slots[i]
		if sl.sec < 0 || sl.sec > sec || sec-sl.sec >= latencyWindowSeconds {
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
	half := (n + 1) / 2
	var seen uint32
	for b, c := range counts {
		seen += c
		if seen >= half {
			return max(latencyBucketLow(b), time.Microsecond)
		}
	}
	return 0 // unreachable: the counts sum to n
}

// ForegroundLatency is the median busy period of the sessions over the last
// three seconds (see latency.go): the time from relaying a Query or an
// extended-protocol batch to relaying the ReadyForQuery that leaves the
// session with nothing owed, within 25%. It returns 0 when no such exchange
// ended in that window. Safe for concurrent use; it does not block on I/O.
// The sweeper paces on it (sweeper.Config.ForegroundLatency).
func (s *Server) ForegroundLatency() time.Duration {
	return s.latency.median(monoNow())
}
