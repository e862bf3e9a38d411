package proxy

import (
	"context"
	"errors"
	"net"
	"runtime"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/ttlproxy/ttlproxy/internal/pgtest"
	"github.com/ttlproxy/ttlproxy/internal/wire"
	"github.com/ttlproxy/ttlproxy/proxy/internal/auth"
	"github.com/ttlproxy/ttlproxy/rewrite"
)

// BenchmarkRelay measures one round trip of a simple-protocol SELECT 1
// straight to the server and through the proxy (with the real rewriter and
// one TTL rule, so the statement takes the rewriter's fast path).
func BenchmarkRelay(b *testing.B) {
	benchmarkRoundTrip(b, func(ctx context.Context, c *pgconn.PgConn) error {
		_, err := c.Exec(ctx, "SELECT 1").ReadAll()
		return err
	})
}

// BenchmarkRelayPrepared is the same with a prepared statement (Bind,
// Execute, Sync): nothing to rewrite, pure relay.
func BenchmarkRelayPrepared(b *testing.B) {
	benchmarkRoundTrip(b, func(ctx context.Context, c *pgconn.PgConn) error {
		return c.ExecPrepared(ctx, "bench", nil, nil, nil).Read().Err
	})
}

func benchmarkRoundTrip(b *testing.B, roundTrip func(context.Context, *pgconn.PgConn) error) {
	rw, err := rewrite.New(testRules, rewrite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	p := startProxy(b, Config{Rewriter: rw, rewriter: rw})
	// The clients run in this process: the proxy's own allocations per
	// round trip are the proxy target's less the direct target's, reported
	// as proxy-allocs/op.
	var directAllocs float64
	for _, target := range []struct{ name, connString string }{
		{"direct", pgtest.Server(b).ConnString("postgres")},
		{"proxy", p.connString(b, "postgres")},
	} {
		b.Run(target.name, func(b *testing.B) {
			ctx := context.Background()
			conn, err := pgconn.Connect(ctx, target.connString)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close(ctx)
			if _, err := conn.Prepare(ctx, "bench", "SELECT 1", nil); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			n := 0
			for b.Loop() {
				if err := roundTrip(ctx, conn); err != nil {
					b.Fatal(err)
				}
				n++
			}
			runtime.ReadMemStats(&after)
			allocs := float64(after.Mallocs-before.Mallocs) / float64(n)
			if target.name == "direct" {
				directAllocs = allocs
			} else {
				b.ReportMetric(max(allocs-directAllocs, 0), "proxy-allocs/op")
			}
		})
	}
}

// BenchmarkIdleSession reports the memory one idle client session holds in
// the proxy (heap and goroutine stacks, after a garbage collection), as
// bytes/session: the same number of connections is opened straight to the
// server and through the proxy, and the difference is the proxy's share
// (idleSessionMemory). The kernel's socket buffers are not counted. The
// timing figure is meaningless.
func BenchmarkIdleSession(b *testing.B) {
	rw, err := rewrite.New(testRules, rewrite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	p := startProxy(b, Config{Rewriter: rw, rewriter: rw})
	for b.Loop() {
		heap, stack := idleSessionMemory(b, p, 50)
		b.ReportMetric(heap+stack, "bytes/session")
		b.ReportMetric(heap, "heap-bytes/session")
		b.ReportMetric(stack, "stack-bytes/session")
	}
}

// TestRelayAllocations: relaying a prepared statement's Bind, Execute and
// Sync and its answers allocates nothing in the proxy (the heap is the
// garbage collector's to sweep, and every allocation on the relay path
// costs each transaction). Measured as BenchmarkRelayPrepared does: the
// allocations of round trips through the proxy less those of the same
// round trips straight to the server, both clients in this process.
func TestRelayAllocations(t *testing.T) {
	rw, err := rewrite.New(testRules, rewrite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, Config{Rewriter: rw, rewriter: rw})
	perRoundTrip := func(connString string) float64 {
		ctx := testContext(t)
		conn, err := pgconn.Connect(ctx, connString)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Prepare(ctx, "s", "SELECT 1", nil); err != nil {
			t.Fatal(err)
		}
		const n = 2000
		roundTrip := func() {
			if err := conn.ExecPrepared(ctx, "s", nil, nil, nil).Read().Err; err != nil {
				t.Fatal(err)
			}
		}
		for range 100 { // warm: buffers grown, catalog read
			roundTrip()
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range n {
			roundTrip()
		}
		runtime.ReadMemStats(&after)
		return float64(after.Mallocs-before.Mallocs) / n
	}
	direct := perRoundTrip(pgtest.Server(t).ConnString("postgres"))
	proxied := perRoundTrip(p.connString(t, "postgres"))
	if raceEnabled {
		// The race detector's sync.Pool drops a quarter of the buffers
		// given back (internal/wire/buffer.go), so they are made again: the relay runs,
		// the count means nothing.
		t.Logf("%.2f allocations per round trip through the proxy, %.2f direct (race detector)", proxied, direct)
		return
	}
	if extra := proxied - direct; extra > 0.5 {
		t.Errorf("the proxy allocates %.2f times per relayed round trip (%.2f through it, %.2f direct), want 0", extra, proxied, direct)
	}
}

// BenchmarkPooledConnect measures a client that connects per transaction
// (pgbench -C) through transaction mode with auth_type trust: dial,
// StartupMessage to ReadyForQuery, one simple-protocol SELECT 1, Terminate.
// The client is a few raw writes and reads in this process; the same loop
// straight to the server gives the client's own allocations, and the
// difference is reported as proxy-allocs/op and proxy-bytes/op. The
// timing is the round trips on a busy machine, not the proxy's cost
// (bench/pooling.sh measures that against PgBouncer).
func BenchmarkPooledConnect(b *testing.B) {
	ensureRole(b, roleSQL("ttl_trust", "unused"))
	p := startProxy(b, Config{PoolMode: PoolModeTransaction, Auth: AuthConfig{Type: auth.Trust},
		Pool: PoolSettings{DefaultPoolSize: 4}})
	startup, err := (&pgproto3.StartupMessage{
		ProtocolVersion: pgproto3.ProtocolVersionNumber,
		Parameters:      map[string]string{"user": "ttl_trust", "database": "postgres"},
	}).Encode(nil)
	if err != nil {
		b.Fatal(err)
	}
	query := appendQuery(nil, "SELECT 1")
	var directAllocs, directBytes float64
	for _, target := range []struct{ name, addr string }{
		{"direct", pgtest.Server(b).Addr()},
		{"proxy", p.addr},
	} {
		b.Run(target.name, func(b *testing.B) {
			buf := make([]byte, 16<<10)
			b.ReportAllocs()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			n := 0
			for b.Loop() {
				if err := connectOnce(target.addr, startup, query, buf); err != nil {
					b.Fatal(err)
				}
				n++
			}
			runtime.ReadMemStats(&after)
			allocs := float64(after.Mallocs-before.Mallocs) / float64(n)
			bytes := float64(after.TotalAlloc-before.TotalAlloc) / float64(n)
			if target.name == "direct" {
				directAllocs, directBytes = allocs, bytes
			} else {
				b.ReportMetric(max(allocs-directAllocs, 0), "proxy-allocs/op")
				b.ReportMetric(max(bytes-directBytes, 0), "proxy-bytes/op")
			}
		})
	}
}

// connectOnce is BenchmarkPooledConnect's client: it logs in (trust),
// runs query and terminates, reading each answer to its ReadyForQuery.
func connectOnce(addr string, startup, query, buf []byte) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	untilReady := func() error {
		have := 0
		for {
			n, err := c.Read(buf[have:])
			if err != nil {
				return err
			}
			have += n
			// The answer ends with ReadyForQuery: 'Z', length 5, status.
			if have >= 6 && buf[have-6] == 'Z' && buf[have-2] == 5 {
				return nil
			}
			if have == len(buf) {
				return errors.New("answer larger than the buffer")
			}
		}
	}
	if _, err := c.Write(startup); err != nil {
		return err
	}
	if err := untilReady(); err != nil {
		return err
	}
	if _, err := c.Write(query); err != nil {
		return err
	}
	if err := untilReady(); err != nil {
		return err
	}
	_, err = c.Write([]byte(wire.TerminateMsg))
	return err
}
