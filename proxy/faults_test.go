package proxy

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
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

// Network faults between the proxy and the server, injected by a faultShim
// (faultshim_test.go). After each the client must have had a connection
// error (class 08) or 57P01 within a bound, and then: an acknowledged write
// is still there, no expired row was or is served, a new client is served,
// and the faulted session left no goroutine (the proxy's leak check at the
// test's end) and no file descriptor behind.

// faultRows is the number of live rows of the fault tests' TTL table;
// row 0 is expired.
const faultRows = 1000

// faultBound is how long after a reset the client may wait for its error.
const faultBound = 2 * time.Second

type faultEnv struct {
	p    *testProxy
	shim *faultShim
	db   string
	// fds is the process's open descriptors before the faulted client.
	fds int
	// acked are the ids written through the proxy and acknowledged.
	acked []int
}

// startFaultProxy makes a database with a TTL table items (faultRows live
// rows, row 0 expired) and a proxy with the real rewriter whose upstream is
// a fault shim in front of the test server.
func startFaultProxy(t *testing.T, cfg Config) *faultEnv {
	t.Helper()
	return startFaultProxyIn(t, cfg, nil)
}

// startFaultProxyIn is startFaultProxy with the link between the proxy
// and the shim inside ns (nil: none): the shim listens there, and the
// proxy's upstream sockets are made there.
func startFaultProxyIn(t *testing.T, cfg Config, ns *netns) *faultEnv {
	t.Helper()
	db := pgtest.NewDatabase(t)
	execDirect(t, db,
		"CREATE TABLE items (id int PRIMARY KEY, expires_at timestamptz, payload text)",
		fmt.Sprintf("INSERT INTO items SELECT g, now() + interval '1 hour', repeat('x', 100) FROM generate_series(1, %d) g", faultRows),
		"INSERT INTO items VALUES (0, now() - interval '1 hour', 'expired')")
	var shim *faultShim
	if ns == nil {
		shim = newFaultShim(t, pgtest.Server(t).Addr())
	} else {
		var ln net.Listener
		var err error
		ns.do(func() { ln, err = net.Listen("tcp", "127.0.0.1:0") })
		if err != nil {
			t.Fatal(err)
		}
		shim = newFaultShimOn(t, ln, pgtest.Server(t).Addr())
		cfg.dialTCP = func(ctx context.Context, d *net.Dialer, addr string) (c net.Conn, err error) {
			ns.do(func() { c, err = d.DialContext(ctx, "tcp", addr) })
			return c, err
		}
	}
	rw, err := rewrite.New(testRules, rewrite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Upstream, cfg.Rewriter, cfg.rewriter = shim.addr(), rw, rw
	p := startProxy(t, cfg)
	// Registered after startProxy's, so it runs first: a blackholed link
	// must be gone before the leak check.
	t.Cleanup(shim.close)
	return &faultEnv{p: p, shim: shim, db: db, fds: openFDs(t)}
}

// client connects through the proxy and writes one row, acknowledged by
// its commit, that must survive the fault.
func (e *faultEnv) client(t *testing.T, mode pgx.QueryExecMode) *pgx.Conn {
	t.Helper()
	conn := e.p.connect(t, e.db, mode)
	id := 100000 + len(e.acked)
	mustExec(t, conn, "INSERT INTO items (id, payload) VALUES ($1, 'acked')", id)
	e.acked = append(e.acked, id)
	return conn
}

// requireConnectionError fails t unless err is a connection failure
// (SQLSTATE class 08) or 57P01, and returns the SQLSTATE.
func requireConnectionError(t *testing.T, err error) string {
	t.Helper()
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		t.Fatalf("want a connection error with a SQLSTATE (08xxx or 57P01), got %v", err)
	}
	if !strings.HasPrefix(pe.Code, "08") && pe.Code != "57P01" {
		t.Fatalf("want SQLSTATE 08xxx or 57P01, got %s: %v", pe.Code, err)
	}
	return pe.Code
}

// checkHealthy heals the shim and checks what must hold after any fault:
// a new client is served, sees every live row and no expired one; every
// acknowledged write is there; the faulted session's descriptors are
// closed and its connection gauge is back.
func (e *faultEnv) checkHealthy(t *testing.T, faulted *pgx.Conn) {
	t.Helper()
	e.shim.heal()
	if faulted != nil {
		_ = faulted.Close(context.Background())
		if !faulted.IsClosed() {
			t.Error("the faulted client's connection is still open")
		}
	}
	conn := e.p.connect(t, e.db, pgx.QueryExecModeCacheStatement)
	rows, err := conn.Query(testContext(t), "SELECT id FROM items ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int32]bool{}
	for _, id := range ids {
		seen[id] = true
	}
	if seen[0] {
		t.Error("the expired row 0 was served after the fault")
	}
	for _, id := range e.acked {
		if !seen[int32(id)] {
			t.Errorf("acknowledged write %d lost", id)
		}
	}
	if want := faultRows + len(e.acked); len(ids) != want {
		t.Errorf("%d rows served after the fault, want %d", len(ids), want)
	}
	_ = conn.Close(context.Background())

	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		fds, sessions := openFDs(t), counterValue(t, e.p.reg, "ttlproxy_proxy_client_connections")
		// In transaction mode the pool keeps its idle servers: a shim link
		// each, three sockets of this process (the proxy's, and the
		// shim's two), nothing else.
		idle := e.p.srv.pools.stats().idle
		if fds <= e.fds+3*idle && sessions == 0 && e.shim.linkCount() == idle {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the fault: %d descriptors open (%d before), %v sessions, %d shim links, %d idle pooled servers",
				fds, e.fds, sessions, e.shim.linkCount(), idle)
		}
	}
}

// noExpired fails t if a result's text holds the expired row's payload.
func noExpired(t *testing.T, b []byte) {
	t.Helper()
	if bytes.Contains(b, []byte("expired")) {
		t.Error("the expired row was served")
	}
}

// TestFaultLatency: 20 ms each way between proxy and server slows every
// round trip by at least 40 ms, and results stay right.
func TestFaultLatency(t *testing.T) {
	e := startFaultProxy(t, Config{})
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			conn := e.client(t, m.mode)
			e.shim.setLatency(20 * time.Millisecond)
			defer e.shim.setLatency(0)
			start := time.Now()
			var n int64
			if err := conn.QueryRow(testContext(t), "SELECT count(*) FROM items WHERE id < $1", 5).Scan(&n); err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			if n != 4 {
				t.Errorf("count %d, want 4 (rows 1 to 4; row 0 is expired)", n)
			}
			if took < 40*time.Millisecond {
				t.Errorf("a round trip took %v under 20 ms of latency each way", took)
			}
			t.Logf("one statement: %v", took.Round(time.Millisecond))
			e.checkHealthy(t, conn)
		})
	}
}

// TestFaultBandwidth: a result of about 1 MB through a 1 MB/s link takes
// about a second, arrives whole, and holds no expired row.
func TestFaultBandwidth(t *testing.T) {
	e := startFaultProxy(t, Config{})
	conn := e.client(t, pgx.QueryExecModeCacheStatement)
	e.shim.setRate(1 << 20)
	start := time.Now()
	var buf bytes.Buffer
	tag, err := conn.PgConn().CopyTo(testContext(t), &buf,
		"COPY (SELECT i.id, i.payload FROM items i, generate_series(1, 8)) TO STDOUT")
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if tag.RowsAffected() != 8*faultRows+8 { // and the acknowledged row
		t.Errorf("COPY returned %d rows, want %d", tag.RowsAffected(), 8*faultRows+8)
	}
	noExpired(t, buf.Bytes())
	if took < 500*time.Millisecond {
		t.Errorf("%d bytes took %v at 1 MB/s", buf.Len(), took)
	}
	t.Logf("%d bytes in %v", buf.Len(), took.Round(time.Millisecond))
	e.checkHealthy(t, conn)
}

// TestFaultResetMidResult: the link to the server is reset in the middle
// of a result; the client gets 08006 at once.
func TestFaultResetMidResult(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			e := startFaultProxy(t, Config{})
			conn := e.client(t, m.mode)
			e.shim.resetAfterBytes(toProxy, 64<<10)
			start := time.Now()
			rows, err := conn.Query(testContext(t), "SELECT i.id, i.payload FROM items i, generate_series(1, 100)")
			var n int
			if err == nil {
				for rows.Next() {
					var id int32
					var payload string
					if err := rows.Scan(&id, &payload); err != nil {
						t.Fatal(err)
					}
					if id == 0 {
						t.Error("the expired row was served")
					}
					n++
				}
				err = rows.Err()
			}
			took := time.Since(start)
			code := requireConnectionError(t, err)
			if took > faultBound {
				t.Errorf("the error came after %v", took)
			}
			t.Logf("SQLSTATE %s after %d rows, %v", code, n, took.Round(time.Millisecond))
			e.checkHealthy(t, conn)
		})
	}
}

// TestFaultResetMidLargeRow: the link is reset while the proxy streams a
// row larger than its buffer to the client. Part of the message is
// already the client's, so the proxy cannot append an ErrorResponse: it
// closes the connection at once, as a server that dies mid-message would,
// and the client reports a broken connection (pgx: unexpected EOF).
func TestFaultResetMidLargeRow(t *testing.T) {
	e := startFaultProxy(t, Config{})
	conn := e.client(t, pgx.QueryExecModeCacheStatement)
	e.shim.resetAfterBytes(toProxy, 250<<10)
	start := time.Now()
	rows, err := conn.Query(testContext(t), "SELECT repeat('x', 100000) FROM generate_series(1, 50)")
	var n int
	if err == nil {
		for rows.Next() {
			n++
		}
		err = rows.Err()
	}
	took := time.Since(start)
	if err == nil {
		t.Fatal("the result was cut but the query succeeded")
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		requireConnectionError(t, err)
	}
	if took > faultBound {
		t.Errorf("the error came after %v", took)
	}
	t.Logf("%v after %d rows, %v", err, n, took.Round(time.Millisecond))
	e.checkHealthy(t, conn)
}

// TestFaultServerTerminates: the server ends the session itself
// (pg_terminate_backend, or a fast shutdown) while a statement runs: the
// client gets the server's 57P01, relayed, at once.
func TestFaultServerTerminates(t *testing.T) {
	e := startFaultProxy(t, Config{})
	conn := e.client(t, pgx.QueryExecModeCacheStatement)
	errc := make(chan error, 1)
	go func() {
		_, err := conn.Exec(context.Background(), "SELECT pg_sleep(20) -- terminated")
		errc <- err
	}()
	// The backend that runs it (in transaction mode the client's key is
	// not the server's).
	pid := activeQuery(t, "SELECT pg_sleep(20) -- terminated")
	start := time.Now()
	execDirect(t, e.db, fmt.Sprintf("SELECT pg_terminate_backend(%d)", pid))
	err := <-errc
	took := time.Since(start)
	requireCode(t, err, "57P01")
	if took > faultBound {
		t.Errorf("the error came after %v", took)
	}
	t.Logf("SQLSTATE 57P01 after %v", took.Round(time.Millisecond))
	e.checkHealthy(t, conn)
}

// copySource is COPY text for rows with ids from next to end, about 100
// bytes each; after `after` bytes it calls at, once. pgx reads it in a
// goroutine that may outlive CopyFrom: read is the only field to look at
// while it may run.
type copySource struct {
	next, end int
	buf       []byte
	read      atomic.Int64
	after     int64
	at        func()
}

func (s *copySource) Read(p []byte) (int, error) {
	for len(s.buf) < len(p) && s.next < s.end {
		s.buf = fmt.Appendf(s.buf, "%d\t%s\n", s.next, strings.Repeat("c", 90))
		s.next++
	}
	if len(s.buf) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.buf)
	s.buf = s.buf[n:]
	if s.read.Add(int64(n)) >= s.after && s.at != nil {
		s.at()
		s.at = nil
	}
	return n, nil
}

// copiedRows counts the rows a COPY FROM wrote (ids from 200000 on), read
// directly.
func copiedRows(t *testing.T, db string) int64 {
	t.Helper()
	conn := connectDirect(t, db, pgx.QueryExecModeSimpleProtocol)
	defer conn.Close(context.Background())
	var n int64
	if err := conn.QueryRow(testContext(t), "SELECT count(*) FROM items WHERE id >= 200000").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestFaultResetMidCopy: the link to the server is reset in the middle of
// a COPY, either way; the client gets 08006 at once, and a COPY FROM that
// was not acknowledged left no row.
func TestFaultResetMidCopy(t *testing.T) {
	t.Run("to_stdout", func(t *testing.T) {
		e := startFaultProxy(t, Config{})
		conn := e.client(t, pgx.QueryExecModeCacheStatement)
		e.shim.resetAfterBytes(toProxy, 32<<10)
		start := time.Now()
		var buf bytes.Buffer
		_, err := conn.PgConn().CopyTo(testContext(t), &buf, "COPY items TO STDOUT")
		took := time.Since(start)
		code := requireConnectionError(t, err)
		noExpired(t, buf.Bytes())
		if took > faultBound {
			t.Errorf("the error came after %v", took)
		}
		t.Logf("SQLSTATE %s after %d bytes, %v", code, buf.Len(), took.Round(time.Millisecond))
		e.checkHealthy(t, conn)
	})
	t.Run("from_stdin", func(t *testing.T) {
		e := startFaultProxy(t, Config{})
		conn := e.client(t, pgx.QueryExecModeCacheStatement)
		e.shim.resetAfterBytes(toServer, 1<<20)
		start := time.Now()
		src := &copySource{next: 200000, end: 400000}
		_, err := conn.PgConn().CopyFrom(testContext(t), src, "COPY items (id, payload) FROM STDIN")
		took := time.Since(start)
		code := requireConnectionError(t, err)
		if took > faultBound {
			t.Errorf("the error came after %v", took)
		}
		t.Logf("SQLSTATE %s after %d bytes sent, %v", code, src.read.Load(), took.Round(time.Millisecond))
		if n := copiedRows(t, e.db); n != 0 {
			t.Errorf("the COPY failed but %d of its rows are in the table", n)
		}
		e.checkHealthy(t, conn)
	})
}

// TestFaultResetMidCopyClientStillSending: a client that goes on
// streaming COPY data after the link to the server was reset must not have
// its connection reset by the proxy: it reads the 08006 ErrorResponse and
// an end of stream when it stops. Closing a socket with unread input sends
// a RST, which made the client's write fail first and pgx drop the
// ErrorResponse (a bare "use of closed network connection" about one COPY
// in four).
func TestFaultResetMidCopyClientStillSending(t *testing.T) {
	e := startFaultProxy(t, Config{})
	conn := e.client(t, pgx.QueryExecModeSimpleProtocol)
	hc, err := conn.PgConn().Hijack()
	if err != nil {
		t.Fatal(err)
	}
	c, fe := hc.Conn, hc.Frontend
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	fe.Send(&pgproto3.Query{String: "COPY items (id, payload) FROM STDIN"})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	if m, err := fe.Receive(); err != nil {
		t.Fatal(err)
	} else if _, ok := m.(*pgproto3.CopyInResponse); !ok {
		t.Fatalf("want CopyInResponse, got %T", m)
	}
	e.shim.resetAfterBytes(toServer, 1<<20)
	src := &copySource{next: 200000, end: 1 << 30}
	buf := make([]byte, 64<<10)
	var sent int
	for {
		n, _ := src.Read(buf[5:])
		buf[0] = 'd'
		binary.BigEndian.PutUint32(buf[1:], uint32(n+4))
		if _, err := c.Write(buf[:n+5]); err != nil {
			t.Fatalf("writing COPY data (%d bytes sent, %d resets): %v", sent, e.shim.resets.Load(), err)
		}
		sent += n + 5
		if at := e.shim.resetAt.Load(); at != 0 && time.Since(time.Unix(0, at)) > 300*time.Millisecond {
			break
		}
	}
	m, err := fe.Receive()
	if err != nil {
		t.Fatalf("after %d bytes sent: %v", sent, err)
	}
	er, ok := m.(*pgproto3.ErrorResponse)
	if !ok || er.Code != codeConnectionFailure {
		t.Fatalf("want ErrorResponse 08006, got %#v", m)
	}
	if m, err := fe.Receive(); err == nil {
		t.Fatalf("after the ErrorResponse: %T, want the end of the stream", m)
	}
	t.Logf("08006 read after %d bytes sent", sent)
	_ = c.Close()
	e.checkHealthy(t, nil)
}

// blackholeTCP are upstream socket settings that give a blackholed server
// up within about two seconds: TCP_USER_TIMEOUT 1 s, and keepalive probes
// from 1 s of silence on.
var blackholeTCP = UpstreamTCP{
	KeepalivesIdle:     time.Second,
	KeepalivesInterval: time.Second,
	KeepalivesCount:    1,
	TCPUserTimeout:     time.Second,
}

// blackholeBound is how long after a blackhole the client may wait for its
// error under blackholeTCP: the kernel checks the timeout when a
// retransmission, window probe or keepalive timer fires, which back off.
const blackholeBound = 5 * time.Second

// TestFaultBlackholeCopy: the shim stops all traffic while a client streams
// COPY data (faultShim's emulated blackhole: the proxy's window to the
// server closes and stays closed); TCP_USER_TIMEOUT ends the connection
// and the client gets 08006, and the COPY left no row.
func TestFaultBlackholeCopy(t *testing.T) {
	e := startFaultProxy(t, Config{UpstreamTCP: blackholeTCP})
	conn := e.client(t, pgx.QueryExecModeCacheStatement)
	var holed atomic.Int64
	src := &copySource{next: 200000, end: 1 << 30, after: 2 << 20, at: func() {
		holed.Store(time.Now().UnixNano())
		e.shim.blackhole()
	}}
	_, err := conn.PgConn().CopyFrom(testContext(t), src, "COPY items (id, payload) FROM STDIN")
	took := time.Since(time.Unix(0, holed.Load()))
	code := requireConnectionError(t, err)
	if took > blackholeBound {
		t.Errorf("the error came %v after the blackhole", took)
	}
	t.Logf("SQLSTATE %s %v after the blackhole, %d bytes sent", code, took.Round(time.Millisecond), src.read.Load())
	e.shim.heal()
	if n := copiedRows(t, e.db); n != 0 {
		t.Errorf("the COPY failed but %d of its rows are in the table", n)
	}
	e.checkHealthy(t, conn)
}

// TestFaultBlackholeNetns: the packets between the proxy and the shim
// vanish (the loopback of a network namespace of the test's own goes
// down), while a statement runs (keepalive finds the silence) and before
// one is sent (its bytes go unacknowledged: TCP_USER_TIMEOUT). The client
// gets 08006 within the bound.
func TestFaultBlackholeNetns(t *testing.T) {
	for _, tc := range []struct {
		name string
		// running: the blackhole comes while a statement runs; otherwise
		// before the next is sent.
		running bool
	}{
		{"statement_running", true},
		{"statement_sent", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNetns(t)
			e := startFaultProxyIn(t, Config{UpstreamTCP: blackholeTCP}, ns)
			conn := e.client(t, pgx.QueryExecModeCacheStatement)
			var errc chan error
			if tc.running {
				errc = make(chan error, 1)
				go func() {
					_, err := conn.Exec(context.Background(), "SELECT pg_sleep(20)")
					errc <- err
				}()
				time.Sleep(200 * time.Millisecond) // the query is sent and acknowledged
			}
			if err := ns.setLoopback(false); err != nil {
				t.Fatal(err)
			}
			holed := time.Now()
			var err error
			if errc == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				_, err = conn.Exec(ctx, "SELECT count(*) FROM items")
			} else {
				err = <-errc
			}
			took := time.Since(holed)
			code := requireConnectionError(t, err)
			if took > blackholeBound {
				t.Errorf("the error came %v after the blackhole", took)
			}
			t.Logf("SQLSTATE %s %v after the blackhole", code, took.Round(time.Millisecond))
			if err := ns.setLoopback(true); err != nil {
				t.Fatal(err)
			}
			// The shim's side of the link never heard of the end.
			e.shim.dropLinks()
			e.checkHealthy(t, conn)
		})
	}
}
