package proxy

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/internal/pgtest"
)

func TestLatencyBuckets(t *testing.T) {
	prev := -1
	for us := time.Duration(0); us < 40*time.Second; us = us*9/8 + time.Microsecond {
		b := latencyBucket(us)
		if b < prev {
			t.Fatalf("bucket of %s is %d, below the %d of a shorter duration", us, b, prev)
		}
		prev = b
		low := latencyBucketLow(b)
		if low > us {
			t.Fatalf("%s is in bucket %d, whose lower bound is %s", us, b, low)
		}
		if b < latencyBuckets-1 && us >= 8*time.Microsecond && float64(us) >= 1.125*float64(low)+float64(time.Microsecond) {
			t.Fatalf("%s is in bucket %d, whose lower bound %s is more than 12.5%% below it", us, b, low)
		}
	}
	if got := latencyBucket(time.Hour); got != latencyBuckets-1 {
		t.Fatalf("an hour is in bucket %d, want the last, %d", got, latencyBuckets-1)
	}
}

func TestLatencyWindowMedian(t *testing.T) {
	w := newLatencyWindow()
	q := int64(latencySlotWidth)
	now := 400 * q
	if got := w.quantile(now, 0.5); got != 0 {
		t.Fatalf("empty window: median %s, want 0", got)
	}
	for range 10 {
		w.observe(now, time.Millisecond)
	}
	for range 9 {
		w.observe(now+q+q/2, 50*time.Millisecond)
	}
	if got := w.quantile(now+q+q/2, 0.5); got < 800*time.Microsecond || got > time.Millisecond {
		t.Fatalf("10×1ms and 9×50ms: median %s, want about 1ms", got)
	}
	for range 2 {
		w.observe(now+2*q, 50*time.Millisecond)
	}
	if got := w.quantile(now+3*q, 0.5); got < 40*time.Millisecond || got > 50*time.Millisecond {
		t.Fatalf("10×1ms and 11×50ms: median %s, want about 50ms", got)
	}
	if got := w.quantile(now+3*q, 0.4); got < 800*time.Microsecond || got > time.Millisecond {
		t.Fatalf("10×1ms and 11×50ms: 40th percentile %s, want about 1ms", got)
	}
	// Samples older than the window no longer count; a slot reused for a
	// later span starts empty.
	if got := w.quantile(now+latencyWindowSlots*q, 0.5); got < 40*time.Millisecond {
		t.Fatalf("after the 1ms slot left the window: median %s, want about 50ms", got)
	}
	if got := w.quantile(now+(latencyWindowSlots+2)*q, 0.5); got != 0 {
		t.Fatalf("after every sample left the window: median %s, want 0", got)
	}
	// The slot of now+2q, reused: its two 50ms samples are gone.
	w.observe(now+(latencySlots+2)*q, 3*time.Millisecond)
	if got := w.quantile(now+(latencySlots+2)*q, 0.5); got < 2500*time.Microsecond || got > 3*time.Millisecond {
		t.Fatalf("one 3ms sample in a reused slot: median %s, want about 3ms", got)
	}
}

// TestForegroundLatency: the proxy reports the time the server takes to
// answer the statements it relays, in both protocols, and nothing for a
// session that only connected.
func TestForegroundLatency(t *testing.T) {
	parallel(t)
	p := startProxy(t, Config{})
	db := pgtest.NewDatabase(t)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		conn := p.connect(t, db, mode)
		if got := p.srv.ForegroundLatency(); got != 0 && mode == pgx.QueryExecModeSimpleProtocol {
			t.Fatalf("after connecting only: %s, want 0", got)
		}
		for range 3 {
			mustExec(t, conn, "SELECT pg_sleep(0.06)")
		}
		if got := p.srv.ForegroundLatency(); got < 45*time.Millisecond || got > time.Second {
			t.Fatalf("%v: three statements of 60ms: 99th percentile %s, want about 60ms", mode, got)
		}
		conn.Close(context.Background())
	}
}

// BenchmarkLatencyObserve is what the foreground latency costs one relayed
// exchange: two monotonic clock reads and one sample, from parallel
// sessions.
func BenchmarkLatencyObserve(b *testing.B) {
	w := newLatencyWindow()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			start := monoNow()
			now := monoNow()
			w.observe(now, time.Duration(now-start))
		}
	})
}
