package proxy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
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
	db := pgtest.NewDatabase(t)
	execDirect(t, db,
		"CREATE TABLE items (id int PRIMARY KEY, expires_at timestamptz, payload text)",
		fmt.Sprintf("INSERT INTO items SELECT g, now() + interval '1 hour', repeat('x', 100) FROM generate_series(1, %d) g", faultRows),
		"INSERT INTO items VALUES (0, now() - interval '1 hour', 'expired')")
	shim := newFaultShim(t, pgtest.Server(t).Addr())
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
		if fds <= e.fds && sessions == 0 && e.shim.linkCount() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the fault: %d descriptors open (%d before), %v sessions, %d shim links",
				fds, e.fds, sessions, e.shim.linkCount())
		}
	}
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

