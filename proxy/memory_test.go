package proxy

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/ttlproxy/ttlproxy/internal/pgtest"
	"github.com/ttlproxy/ttlproxy/rewrite"
)

// Memory is bounded by configuration, not by clients: what an idle client
// costs, what a client that stops reading a large result costs, and what a
// client that announces a large message costs.

// idleSessionBudget is what one idle client may cost the proxy, heap and
// goroutine stacks: a thousand idle clients in 64 MiB.
const idleSessionBudget = 64 << 10

// idleSessionMemory opens sessions connections straight to the server, then
// as many through p, each after one statement (so that its buffers have
// been used), and returns the heap and stacks in use (after a garbage
// collection) that each session through the proxy adds: the pgconn clients
// live in this process too, so the direct connections' share is
// subtracted. The kernel's socket buffers are not counted.
func idleSessionMemory(tb testing.TB, p *testProxy, sessions int) (heap, stack float64) {
	tb.Helper()
	ctx := context.Background()
	inUse := func() (heap, stack int64) {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapInuse), int64(ms.StackInuse)
	}
	open := func(connString string) (heap, stack int64) {
		heap0, stack0 := inUse()
		conns := make([]*pgconn.PgConn, 0, sessions)
		defer func() {
			for _, c := range conns {
				_ = c.Close(ctx)
			}
		}()
		for range sessions {
			c, err := pgconn.Connect(ctx, connString)
			if err != nil {
				tb.Fatal(err)
			}
			conns = append(conns, c)
			if _, err := c.Exec(ctx, "SELECT 1").ReadAll(); err != nil {
				tb.Fatal(err)
			}
		}
		time.Sleep(100 * time.Millisecond) // the proxy's goroutines settle
		heap1, stack1 := inUse()
		return heap1 - heap0, stack1 - stack0
	}
	directHeap, directStack := open(pgtest.Server(tb).ConnString("postgres"))
	proxyHeap, proxyStack := open(p.connString(tb, "postgres"))
	n := float64(sessions)
	return float64(proxyHeap-directHeap) / n, float64(proxyStack-directStack) / n
}

// TestIdleSessionMemory: an idle client costs the proxy less than
// idleSessionBudget, heap and stacks (BenchmarkIdleSession reports the
// figures). 100 clients stand for the thousand: the cost is per session,
// and the test server allows 200 connections.
func TestIdleSessionMemory(t *testing.T) {
	rw, err := rewrite.New(testRules, rewrite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, Config{Rewriter: rw, rewriter: rw})
	heap, stack := idleSessionMemory(t, p, 100)
	t.Logf("per idle session: %.0f bytes of heap, %.0f of stacks", heap, stack)
	if heap+stack >= idleSessionBudget {
		t.Errorf("an idle session costs %.0f bytes (heap %.0f, stacks %.0f), want under %d",
			heap+stack, heap, stack, idleSessionBudget)
	}
}

// memChildEnv, set to the upstream address, makes the test binary run
// memChild instead of the tests: a proxy in a process of its own, whose
// resident memory a test reads from /proc.
const memChildEnv = "TTLPROXY_TEST_MEM_CHILD"

// memChild runs a proxy in front of upstream on 127.0.0.1:0, writes
// "addr=HOST:PORT" to stdout, and serves until stdin closes.
func memChild(upstream string) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return runChild(upstream, log, nil, "", nil)
}

// startMemChild starts memChild in front of the test server and returns
// a connection string for it and its process ID; the process is stopped
// when the test ends.
func startMemChild(t *testing.T) (connString string, pid int) {
	t.Helper()
	c := startChildProxy(t, memChildEnv)
	return c.connString, c.cmd.Process.Pid
}

// procStatus returns a "kB" field of /proc/PID/status (VmRSS, VmHWM) in
// bytes.
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", field, line, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// slowReaderRSS is the resident memory the proxy's process may reach
// while a client does not read a result that is larger.
const slowReaderRSS = 64 << 20

// TestSlowReaderMemory: a client that stops reading a 10-million-row result
// (about 170 MiB on the wire) does not make the proxy hold it: once the
// sockets' buffers are full the proxy stops reading the server, which
// waits (pg_stat_activity shows it in ClientWrite), and the proxy's
// resident memory, in a process of its own, stays under 64 MiB; when the
// client reads again it gets every row.
func TestSlowReaderMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process and streams 10 million rows")
	}
	connString, pid := startMemChild(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	conn, err := pgconn.Connect(ctx, connString)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "SELECT 1").ReadAll(); err != nil {
		t.Fatal(err)
	}
	before := procStatus(t, pid, "VmRSS")

	var peak atomic.Int64
	sampled := make(chan struct{})
	stopSampling := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
			if err == nil {
				for line := range strings.Lines(string(b)) {
					if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
						kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
						if kb<<10 > peak.Load() {
							peak.Store(kb << 10)
						}
					}
				}
			}
			select {
			case <-stopSampling:
				return
			case <-tick.C:
			}
		}
	}()
	defer func() {
		select {
		case <-stopSampling:
		default:
			close(stopSampling)
		}
		<-sampled
	}()

	const rows = 10_000_000
	query := fmt.Sprintf("SELECT g FROM generate_series(1, %d) g", rows)
	mrr := conn.Exec(ctx, query)
	if !mrr.NextResult() {
		t.Fatal(mrr.Close())
	}
	rr := mrr.ResultReader()
	n := 0
	for n < 1000 && rr.NextRow() {
		n++
	}

	// The client stops reading. The server fills the sockets' buffers,
	// and then waits to write: the proxy no longer reads it.
	direct := connectDirect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var wait string
		err := direct.QueryRow(ctx, `SELECT coalesce(wait_event, '') FROM pg_catalog.pg_stat_activity
			WHERE query = $1 AND pid <> pg_catalog.pg_backend_pid()`, query).Scan(&wait)
		if err == nil && wait == "ClientWrite" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server never waited for the proxy to read (wait event %q, %v)", wait, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second) // the proxy holds still
	stalled := peak.Load()

	// The client reads again: every row arrives.
	for rr.NextRow() {
		n++
		if n%1_000_000 == 0 {
			runtime.Gosched()
		}
	}
	tag, err := rr.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := mrr.Close(); err != nil {
		t.Fatal(err)
	}
	if n != rows || tag.RowsAffected() != rows {
		t.Fatalf("got %d rows (%s), want %d", n, tag, rows)
	}
	close(stopSampling)
	<-sampled
	hwm := procStatus(t, pid, "VmHWM")
	t.Logf("proxy RSS: %d KiB before the query, peak %d KiB while the client did not read, peak %d KiB sampled, high-water mark %d KiB",
		before>>10, stalled>>10, peak.Load()>>10, hwm>>10)
	if raceEnabled {
		return // the race detector's shadow memory is part of the RSS
	}
	if hwm >= slowReaderRSS {
		t.Errorf("the proxy's resident memory reached %d KiB, want under %d KiB", hwm>>10, slowReaderRSS>>10)
	}
}

// TestMessageOverLimit: a client message of max_message_bytes is relayed;
// one of max_message_bytes + 1 is answered with SQLSTATE 54000 and a close
// as soon as its header has arrived, before any of its body was sent, so
// there was nothing to buffer.
func TestMessageOverLimit(t *testing.T) {
	const limit = 1 << 20
	p := startProxy(t, Config{MaxMessageBytes: limit})
	rawSession := func(t *testing.T) *rawClient {
		pc, err := pgconn.Connect(testContext(t), p.connString(t, "postgres"))
		if err != nil {
			t.Fatal(err)
		}
		hc, err := pc.Hijack()
		if err != nil {
			t.Fatal(err)
		}
		raw := &rawClient{hc.Conn}
		t.Cleanup(func() { _ = raw.Close() })
		_ = raw.SetDeadline(time.Now().Add(20 * time.Second))
		return raw
	}
	header := func(total int) []byte {
		h := []byte{'Q', 0, 0, 0, 0}
		binary.BigEndian.PutUint32(h[1:], uint32(total-1))
		return h
	}

	t.Run("at_limit", func(t *testing.T) {
		raw := rawSession(t)
		// Q, length, text, NUL: limit bytes in all.
		text := "SELECT length('" + strings.Repeat("x", limit-len("SELECT length('')")-6) + "')"
		msg := append(header(limit), text...)
		msg = append(msg, 0)
		if len(msg) != limit {
			t.Fatalf("built a message of %d bytes", len(msg))
		}
		if _, err := raw.Write(msg); err != nil {
			t.Fatal(err)
		}
		fe := pgproto3.NewFrontend(raw, raw)
		for {
			m, err := fe.Receive()
			if err != nil {
				t.Fatal(err)
			}
			if e, ok := m.(*pgproto3.ErrorResponse); ok {
				t.Fatalf("a message of max_message_bytes: %s %s", e.Code, e.Message)
			}
			if _, ok := m.(*pgproto3.ReadyForQuery); ok {
				break
			}
		}
	})

	t.Run("over_limit", func(t *testing.T) {
		raw := rawSession(t)
		if _, err := raw.Write(header(limit + 1)); err != nil {
			t.Fatal(err)
		}
		b, err := raw.readAll()
		if err != nil {
			t.Fatalf("reading until close: %v", err)
		}
		if codes := errorCodes(b); !slices.Equal(codes, []string{codeProgramLimit}) {
			t.Fatalf("got errors %v, want [%s]", codes, codeProgramLimit)
		}
	})
}

// TestAnnouncedMessageNotReserved: a client that announces a Query of
// max_message_bytes and sends a little of it costs the proxy about what it
// sent, not what it announced: the message buffer grows as bytes arrive.
func TestAnnouncedMessageNotReserved(t *testing.T) {
	p := startProxy(t, Config{}) // max_message_bytes: 64 MiB
	const clients = 4
	heapAlloc := func() int64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	var raws []*rawClient
	for range clients {
		pc, err := pgconn.Connect(testContext(t), p.connString(t, "postgres"))
		if err != nil {
			t.Fatal(err)
		}
		hc, err := pc.Hijack()
		if err != nil {
			t.Fatal(err)
		}
		raw := &rawClient{hc.Conn}
		t.Cleanup(func() { _ = raw.Close() })
		raws = append(raws, raw)
	}
	before := heapAlloc()
	for _, raw := range raws {
		msg := []byte{'Q', 0, 0, 0, 0}
		binary.BigEndian.PutUint32(msg[1:], DefaultMaxMessageBytes-1)
		msg = append(msg, "SELECT '"...)
		msg = append(msg, strings.Repeat("x", 64<<10)...)
		if _, err := raw.Write(msg); err != nil {
			t.Fatal(err)
		}
	}
	// The proxy reads what was sent within moments; the largest heap seen
	// over half a second is what it holds.
	grown := int64(0)
	for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); {
		grown = max(grown, heapAlloc()-before)
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("%d clients that announced %d MiB and sent 64 KiB: the heap grew by %d KiB",
		clients, DefaultMaxMessageBytes>>20, grown>>10)
	if limit := int64(clients) << 20; grown > limit {
		t.Errorf("the heap grew by %d KiB, want at most %d KiB", grown>>10, limit>>10)
	}
}
