package proxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/ttlproxy/ttlproxy/internal/pgtest"
	"github.com/ttlproxy/ttlproxy/internal/wire"
	"github.com/ttlproxy/ttlproxy/rewrite"
)

// panicCounter is a slog handler that counts the sessions' "session panic"
// records: the guard recovers a panic and logs it, so this is how a fuzz
// target sees one.
type panicCounter struct {
	slog.Handler
	n *atomic.Int64
}

func (h panicCounter) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "session panic" {
		h.n.Add(1)
	}
	return h.Handler.Handle(ctx, r)
}

func (h panicCounter) WithAttrs(as []slog.Attr) slog.Handler {
	return panicCounter{h.Handler.WithAttrs(as), h.n}
}

func (h panicCounter) WithGroup(name string) slog.Handler {
	return panicCounter{h.Handler.WithGroup(name), h.n}
}

// openFDs counts the process's open sockets: what a session leaks when it
// leaks a descriptor. Other descriptors of the test process (files and
// pipes of the harness and the runtime) are not the proxy's.
func openFDs(t testing.TB) int { return countSockets(t, nil) }

// countSockets counts the process's open sockets whose inode skip does not
// claim (skip nil: every socket).
func countSockets(t testing.TB, skip func(inode uint64) bool) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	n := 0
	for _, e := range ents {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil || !strings.HasPrefix(target, "socket:[") {
			continue
		}
		if skip != nil {
			ino, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]"), 10, 64)
			if err == nil && skip(ino) {
				continue
			}
		}
		n++
	}
	return n
}

// sendAndAwaitEnd sends data to the proxy as a new client, half-closes,
// and reads until the proxy closes: the session must end within 10 s and
// the proxy must have no session open 10 s after that.
func sendAndAwaitEnd(t *testing.T, p *testProxy, data []byte) {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	// The proxy may close before reading everything: write errors are
	// part of the game.
	_, _ = c.Write(data)
	_ = c.(*net.TCPConn).CloseWrite()
	_, err = io.Copy(io.Discard, c)
	_ = c.Close()
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the session did not end within 10 s")
	}
	for deadline := time.Now().Add(10 * time.Second); p.srv.active.Load() > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%d session(s) still open 10 s after the client left", p.srv.active.Load())
		}
		time.Sleep(time.Millisecond)
	}
}

// awaitSockets waits up to 5 s for count to come down to want: a socket
// closed while its pump drives it is closed once the pump lets go
// (wire.Conn.Close), and a peer's side after the proxy's.
func awaitSockets(t *testing.T, count func(testing.TB) int, want int, what string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); count(t) > want; {
		if time.Now().After(deadline) {
			t.Fatalf("%d %s left open", count(t)-want, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// fuzzStartup is a StartupMessage for ttl_trust (trust authentication in
// the test server's pg_hba.conf) to database db, with a statement_timeout
// so that no input can keep the server busy for long.
func fuzzStartup(db string) []byte {
	b, err := (&pgproto3.StartupMessage{
		ProtocolVersion: pgproto3.ProtocolVersionNumber,
		Parameters:      map[string]string{"user": "ttl_trust", "database": db, "statement_timeout": "2s"},
	}).Encode(nil)
	if err != nil {
		panic(err)
	}
	return b
}

// FuzzClientWire feeds arbitrary bytes to the proxy as a client: from the
// first byte (loggedIn false: startup packets, SSL and cancel requests), or
// after a valid StartupMessage and authentication (loggedIn true: protocol
// messages relayed to a real server). Each input must end with the session
// closed (the client half-closes after its bytes; an ErrorResponse may
// come first) within 10 s, with no panic recovered by the session's guard
// and no file descriptor left open; no goroutine may outlive the target
// (startProxy's cleanup); and what the proxy sends the server must be well
// formed (wireChecker).
func FuzzClientWire(f *testing.F) {
	var panics atomic.Int64
	log := slog.New(panicCounter{slog.DiscardHandler, &panics})
	rw, err := rewrite.New(testRules, rewrite.Options{})
	if err != nil {
		f.Fatal(err)
	}
	// The real rewriter, not startProxy's stand-in, which panics on purpose.
	// What reaches the server passes through a checker of its framing.
	checker := startWireChecker(f, pgtest.Server(f).Addr())
	p := startProxy(f, Config{Logger: log, ClientLoginTimeout: 5 * time.Second, Rewriter: rw, rewriter: rw,
		Upstream: checker.addr(), UpstreamTLS: &UpstreamTLS{SSLMode: SSLDisable}})
	ensureRole(f, roleSQL("ttl_trust", "unused"))
	db := pgtest.NewDatabase(f)
	execDirect(f, db, "CREATE TABLE items (id int PRIMARY KEY, expires_at timestamptz)",
		"GRANT ALL ON items TO ttl_trust")
	startup := fuzzStartup(db)

	ssl := negotiationRequest(wire.SSLRequestCode)
	for _, seed := range []struct {
		loggedIn bool
		data     []byte
	}{
		{false, nil},
		{false, []byte("GET / HTTP/1.1\r\n\r\n")},
		{false, ssl},
		{false, append(ssl, negotiationRequest(wire.GSSEncRequestCode)...)},
		{false, negotiationRequest(wire.CancelRequestCode)},
		{false, []byte{0, 0, 0, 16, 0x04, 0xd2, 0x16, 0x2e, 0, 0, 0, 1, 0, 0, 0, 2}},
		{false, []byte{0, 0, 0, 8, 0, 2, 0, 0}},
		{false, []byte{0x7f, 0xff, 0xff, 0xff}},
		{false, startup[:len(startup)-3]},
		{true, nil},
		{true, msg('Q', "SELECT 1\x00")},
		{true, msg('Q', "SELECT * FROM items; UPDATE items SET id = 2\x00")},
		{true, msg('Q', "SELECT 1")},
		{true, append(msg('P', "s1\x00SELECT $1::int FROM items\x00\x00\x00"), append(msg('B', "\x00s1\x00\x00\x00\x00\x01\x00\x00\x00\x011\x00\x00"), append(msg('E', "\x00\x00\x00\x00\x00"), msg('S', "")...)...)...)},
		{true, msg('P', "\x00")},
		{true, msg('Q', "COPY items FROM STDIN\x00")},
		{true, append(msg('Q', "COPY items FROM STDIN\x00"), msg('d', "1\t2020-01-01\n")...)},
		{true, msg('d', "stray copy data")},
		{true, msg('f', "\x00")},
		{true, msg('X', "")},
		{true, []byte{'Q', 0xff, 0xff, 0xff, 0xff}},
		{true, []byte{'Q', 0, 0, 0, 2}},
		{true, []byte{0, 0, 0, 0, 0}},
		{true, msg('H', "")},
		{true, msg('F', "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00")},
	} {
		f.Add(seed.loggedIn, seed.data)
	}

	f.Fuzz(func(t *testing.T, loggedIn bool, data []byte) {
		// The checker's own sockets close when it sees the proxy's close:
		// they are not counted.
		before, fds := panics.Load(), checker.proxySockets(t)
		malformed, _ := checker.seen()
		if loggedIn {
			data = append(append([]byte(nil), startup...), data...)
		}
		sendAndAwaitEnd(t, p, data)
		if n := panics.Load() - before; n > 0 {
			t.Fatalf("%d session panic(s) recovered", n)
		}
		if n, first := checker.seen(); n > malformed {
			t.Fatalf("the server received %d malformed message(s) from the proxy, the first: %s", n-malformed, first)
		}
		awaitSockets(t, checker.proxySockets, fds, "socket(s)")
	})
}

// fakeServer is an upstream that answers every connection's startup packet
// with a script of bytes, then either closes or reads until the proxy
// does.
type fakeServer struct {
	ln     net.Listener
	script atomic.Pointer[[]byte]
	hangUp atomic.Bool
}

func startFakeServer(t testing.TB) *fakeServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fs := &fakeServer{ln: ln}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go fs.serve(c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
	})
	return fs
}

func (fs *fakeServer) serve(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := wire.ReadStartupPacket(c, nil); err != nil {
		return
	}
	if s := fs.script.Load(); s != nil {
		if _, err := c.Write(*s); err != nil {
			return
		}
	}
	if fs.hangUp.Load() {
		return
	}
	_, _ = io.Copy(io.Discard, c)
}

// backend builds one backend message: type byte, length, body.
func backend(typ byte, body string) []byte { return msg(typ, body) }

// FuzzServerWire feeds arbitrary bytes to the proxy as the upstream
// server's answer to a client's StartupMessage and Query: malformed,
// truncated, oversized or out-of-order messages. The session must end
// within 10 s once the client half-closes (or the server hangs up), with
// no panic recovered and no descriptor left open.
func FuzzServerWire(f *testing.F) {
	var panics atomic.Int64
	log := slog.New(panicCounter{slog.DiscardHandler, &panics})
	fs := startFakeServer(f)
	rw, err := rewrite.New(testRules, rewrite.Options{})
	if err != nil {
		f.Fatal(err)
	}
	p := startProxy(f, Config{Upstream: fs.ln.Addr().String(), Logger: log, ClientLoginTimeout: 5 * time.Second,
		Rewriter: rw, rewriter: rw})
	clientBytes := append(fuzzStartup("postgres"), msg('Q', "SELECT 1\x00")...)

	authOK := backend('R', "\x00\x00\x00\x00")
	ready := backend('Z', "I")
	key := backend('K', "\x00\x00\x00\x01\x00\x00\x00\x02")
	param := backend('S', "server_version\x0017.0\x00")
	for _, seed := range []struct {
		hangUp bool
		script []byte
	}{
		{true, nil},
		{false, nil},
		{true, authOK},
		{false, append(append(append(authOK, param...), key...), ready...)},
		{true, backend('E', "SFATAL\x00C28000\x00Mno\x00\x00")},
		{false, backend('R', "\x00\x00\x00\x0aSCRAM-SHA-256-PLUS\x00SCRAM-SHA-256\x00\x00")},
		{false, backend('R', "\x00\x00\x00\x05salt")},
		{false, []byte{'R', 0, 0, 0}},
		{false, []byte{'R', 0x7f, 0xff, 0xff, 0xff}},
		{false, []byte{'Z', 0, 0, 0, 3}},
		{false, append(ready, backend('T', "\x00\x01a\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x17\x00\x04\xff\xff\xff\xff\x00\x00")...)},
		{false, append(append(authOK, ready...), append(backend('D', "\x00\x01\x00\x00\x00\x011"), backend('C', "SELECT 1\x00")...)...)},
		{false, append(append(authOK, ready...), ready...)},
		{false, append(append(authOK, ready...), backend('G', "\x00\x00\x00")...)},
		{false, append(append(authOK, ready...), backend('N', "SWARNING\x00Mhm\x00\x00")...)},
		{false, append(append(authOK, ready...), backend('A', "\x00\x00\x00\x01chan\x00payload\x00")...)},
		{true, append(append(authOK, ready...), backend('E', "SFATAL\x00C57P01\x00Mterminating\x00\x00")...)},
		{false, append(authOK, 'v', 0, 0, 0, 8, 0, 0, 0, 0)},
	} {
		f.Add(seed.hangUp, seed.script)
	}

	f.Fuzz(func(t *testing.T, hangUp bool, script []byte) {
		before, fds := panics.Load(), openFDs(t)
		script = append([]byte(nil), script...)
		fs.script.Store(&script)
		fs.hangUp.Store(hangUp)
		sendAndAwaitEnd(t, p, clientBytes)
		if n := panics.Load() - before; n > 0 {
			t.Fatalf("%d session panic(s) recovered", n)
		}
		// The fake server's side of the connection is in this process too.
		awaitSockets(t, openFDs, fds, "file descriptor(s)")
	})
}
