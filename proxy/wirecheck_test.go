package proxy

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/ttlproxy/ttlproxy/internal/wire"
	"golang.org/x/sys/unix"
)

// wireChecker is a TCP relay the tests put between the proxy and the test
// server that reads what the proxy sends upstream as the server would and
// records every message that is not well formed: a startup packet that is
// not a StartupMessage or CancelRequest of a sane length, a message type a
// frontend never sends, a length under 4 or over PostgreSQL's 1 GB limit,
// and a Query or Parse whose body does not decode (the two messages the
// proxy writes itself: every other message is relayed as the client sent
// it, framed by the proxy, its contents checked by the server, which
// answers 08P01). A stream that ends inside a message is not counted: it
// can only be the last thing on the connection, and the server drops it.
// The bytes are relayed unchanged both ways.
type wireChecker struct {
	t      testing.TB
	ln     net.Listener
	target string

	mu     sync.Mutex
	faults []string
	wg     sync.WaitGroup
	// own holds the inodes of the checker's sockets, from accept or dial
	// until they are closed.
	own map[uint64]bool
}

// frontendTypes are the message types a frontend sends after startup
// (PostgreSQL documentation, "Message Formats").
const frontendTypes = "BCdcfDEHFpPQSX"

// maxUpstreamMessage is PostgreSQL's limit on a message's length
// (PQ_LARGE_MESSAGE_LIMIT, 1 GB - 1, in src/include/libpq/libpq.h).
const maxUpstreamMessage = 1<<30 - 1

func startWireChecker(t testing.TB, target string) *wireChecker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w := &wireChecker{t: t, ln: ln, target: target}
	w.wg.Add(1)
	go w.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		w.wg.Wait()
	})
	return w
}

func (w *wireChecker) addr() string { return w.ln.Addr().String() }

// proxySockets counts the test process's open sockets that are not the
// checker's: a checker's socket closes when the checker sees the proxy's
// close, a moment later, and must not count as the proxy's.
func (w *wireChecker) proxySockets(t testing.TB) int {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	return countSockets(t, func(ino uint64) bool { return w.own[ino] })
}

// track adds c's socket to the checker's own and returns its inode.
func (w *wireChecker) track(c net.Conn) uint64 {
	var ino uint64
	if sc, ok := c.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			_ = rc.Control(func(fd uintptr) {
				var st unix.Stat_t
				if unix.Fstat(int(fd), &st) == nil {
					ino = st.Ino
				}
			})
		}
	}
	w.mu.Lock()
	if w.own == nil {
		w.own = map[uint64]bool{}
	}
	w.own[ino] = true
	w.mu.Unlock()
	return ino
}

// closeOwn closes c, then forgets its socket: until then it is the
// checker's, never the proxy's.
func (w *wireChecker) closeOwn(c net.Conn) {
	ino := w.track(c)
	_ = c.Close()
	w.mu.Lock()
	delete(w.own, ino)
	w.mu.Unlock()
}

// seen returns how many malformed messages were recorded, and the first.
func (w *wireChecker) seen() (int, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.faults) == 0 {
		return 0, ""
	}
	return len(w.faults), w.faults[0]
}

func (w *wireChecker) fault(format string, args ...any) {
	w.mu.Lock()
	w.faults = append(w.faults, fmt.Sprintf(format, args...))
	w.mu.Unlock()
}

func (w *wireChecker) accept() {
	defer w.wg.Done()
	for {
		c, err := w.ln.Accept()
		if err != nil {
			return
		}
		w.track(c)
		s, err := net.DialTimeout("tcp", w.target, 5*time.Second)
		if err != nil {
			w.t.Logf("wire checker: dialling %s: %v", w.target, err)
			w.closeOwn(c)
			continue
		}
		w.track(s)
		w.wg.Add(2)
		go func() {
			defer w.wg.Done()
			_, _ = io.Copy(c, s)
			w.closeOwn(c)
		}()
		go func() {
			defer w.wg.Done()
			w.check(bufio.NewReader(c), s)
			w.closeOwn(s)
		}()
	}
}

// check reads the proxy's stream from r, checks it and writes it to s.
func (w *wireChecker) check(r *bufio.Reader, s io.Writer) {
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return
	}
	length := binary.BigEndian.Uint32(hdr[:4])
	code := binary.BigEndian.Uint32(hdr[4:])
	if length < 8 || length > 10000 {
		w.fault("startup packet of %d bytes", length)
		return
	}
	body := make([]byte, length-4)
	copy(body, hdr[4:])
	if _, err := io.ReadFull(r, body[4:]); err != nil {
		return
	}
	switch {
	case code == wire.CancelRequestCode:
		if length != 16 {
			w.fault("CancelRequest of %d bytes", length)
		}
	case code>>16 == 3:
		var m pgproto3.StartupMessage
		if err := m.Decode(body); err != nil {
			w.fault("StartupMessage: %v", err)
		}
	default:
		// An SSLRequest or GSSENCRequest would start encryption this
		// checker cannot read: the tests run it with sslmode disable.
		w.fault("startup packet with code %d", code)
	}
	if _, err := s.Write(append(hdr[:4:4], body...)); err != nil {
		return
	}
	var msg []byte
	for {
		h, err := r.Peek(wire.HeaderLen)
		if err != nil {
			if errors.Is(err, io.EOF) && len(h) > 0 {
				_, _ = s.Write(h) // a header cut by the end of the stream
			}
			return
		}
		typ, n := h[0], binary.BigEndian.Uint32(h[1:])
		switch {
		case strings.IndexByte(frontendTypes, typ) < 0:
			w.fault("message type %q", typ)
		case n < 4 || n > maxUpstreamMessage:
			w.fault("%q message with length %d", typ, n)
			_, _ = s.Write(h)
			return
		}
		total := int(n) + 1
		if cap(msg) < total {
			msg = make([]byte, total)
		}
		msg = msg[:total]
		got, err := io.ReadFull(r, msg)
		if err != nil {
			_, _ = s.Write(msg[:got]) // the stream ended inside a message
			return
		}
		switch typ {
		case 'Q':
			var q pgproto3.Query
			if err := q.Decode(msg[wire.HeaderLen:]); err != nil {
				w.fault("Query: %v", err)
			}
		case 'P':
			var p pgproto3.Parse
			if err := p.Decode(msg[wire.HeaderLen:]); err != nil {
				w.fault("Parse: %v", err)
			}
		}
		if _, err := s.Write(msg); err != nil {
			return
		}
	}
}
