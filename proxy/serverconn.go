package proxy

import (
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ttlproxy/ttlproxy/internal/wire"
)

// serverConn is one connection to the upstream server: the socket, the
// buffers the relay reads and writes it through, and the server's
// BackendKeyData. In session mode it serves one client for its whole life,
// reached through that client's link (link.go); in transaction mode it
// belongs to a pool and serves the link it is given (pooled.go). It knows
// nothing of the client.
//
// Every idle client in session mode holds one, so it is kept small: a
// clientConn, its link and its serverConn take about the 640 bytes one
// session object took.
type serverConn struct {
	// mu guards nc, closed, dead and key, which the pumps, startup, the
	// sweep and a forced shutdown reach from different goroutines, and the
	// writes of link.
	mu sync.Mutex
	// closed is set by the first close; the socket is closed then.
	closed bool
	// dead: transaction mode, the server pump has ended; the server may not
	// be linked any more.
	dead bool
	nc   net.Conn
	// link is, in transaction mode, the link the server serves, nil while
	// it is idle in its pool; read without mu by the server pump.
	link atomic.Pointer[link]
	// key is the body of the server's BackendKeyData (process ID and
	// secret key), to cancel a statement still running at forced shutdown.
	key string

	// r is read by the server pump only; w is written by the client pump
	// (and by the catalog query at startup, before the client pump writes).
	r *wire.Reader
	w *wire.Writer
}

// attach records the dialled connection; false when the connection is
// already closed (a shutdown came first) and c must be closed by the caller.
func (sc *serverConn) attach(c net.Conn) bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.closed {
		return false
	}
	sc.nc = c
	return true
}

// conn returns the socket, nil before startup has dialled it.
func (sc *serverConn) conn() net.Conn {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.nc
}

// startBuffers sets up the relay's buffers once the socket is attached;
// idle reports when the server owes nothing (the reader's buffer is small
// then, internal/wire/buffer.go).
func (sc *serverConn) startBuffers(idle func() bool) {
	sc.r = wire.NewReader(sc.nc, wire.ServerBufSize, idle)
	sc.w = wire.NewWriter(sc.nc)
}

// close closes the socket, once; a later attach fails.
func (sc *serverConn) close() {
	sc.mu.Lock()
	nc, closed := sc.nc, sc.closed
	sc.closed = true
	sc.mu.Unlock()
	if nc != nil && !closed {
		_ = nc.Close()
	}
}

// terminate ends the server session cleanly (Terminate, then close). Only
// used when no pump can be writing a message to the server.
func (sc *serverConn) terminate() {
	sc.mu.Lock()
	nc, closed := sc.nc, sc.closed
	sc.mu.Unlock()
	if nc != nil && !closed {
		_ = nc.SetWriteDeadline(time.Now().Add(finalWriteTimeout))
		_, _ = nc.Write([]byte(wire.TerminateMsg))
	}
	sc.close()
}

// endAtBoundary writes a Terminate through the relay's writer (flushing what
// the client pump has buffered before it) and closes the socket; called by
// the client pump at a message boundary when the session ends.
func (sc *serverConn) endAtBoundary() {
	_ = sc.conn().SetWriteDeadline(time.Now().Add(finalWriteTimeout))
	if _, err := sc.w.WriteString(wire.TerminateMsg); err == nil {
		_ = sc.w.Flush()
	}
}

// setBackendKey keeps a copy of a BackendKeyData body.
func (sc *serverConn) setBackendKey(body []byte) {
	sc.mu.Lock()
	sc.key = string(body)
	sc.mu.Unlock()
}

// cancelRequest returns the CancelRequest packet for the server's key, nil
// when the server sent none (yet).
func (sc *serverConn) cancelRequest() []byte {
	sc.mu.Lock()
	key := sc.key
	sc.mu.Unlock()
	if key == "" {
		return nil
	}
	pkt := make([]byte, 8, 8+len(key))
	binary.BigEndian.PutUint32(pkt, uint32(8+len(key)))
	binary.BigEndian.PutUint32(pkt[4:], wire.CancelRequestCode)
	return append(pkt, key...)
}

// linked returns the link a pooled server serves, nil when idle.
func (sc *serverConn) linked() *link { return sc.link.Load() }

// checkEnd runs wire.Conn.CheckEnd on the socket (sweep.go).
func (sc *serverConn) checkEnd() {
	if rc := wire.ConnOf(sc.conn()); rc != nil {
		rc.CheckEnd()
	}
}

// peekEnded reports whether an idle pooled server's socket has anything to
// read: an end of stream, an error, or bytes. Between transactions a server
// sends nothing unasked but the FATAL it ends its session with (57P01 when
// it shuts down or its backend is terminated), so any of them means the
// server is gone or going, though its pump may not have seen it yet (a
// driven pump waits for the sweep's checkEnd when the end came with the
// last data). One recv(MSG_PEEK|MSG_DONTWAIT), no round trip, no
// allocation. False when the socket is not a wire.Conn's (a net.Pipe in
// tests).
func (sc *serverConn) peekEnded() bool {
	if rc := wire.ConnOf(sc.conn()); rc != nil {
		return rc.PeekEnded()
	}
	return false
}
