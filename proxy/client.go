package proxy

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ttlproxy/ttlproxy/internal/wire"
)

const (
	// maxKeptBuffer: a message buffer grown past this (a huge statement) is
	// dropped after use instead of being kept for the session's life.
	maxKeptBuffer = 1 << 20
	// lingerTimeout bounds how long a client that was sent its last
	// ErrorResponse may go on sending before its connection is closed
	// (lingerClient).
	lingerTimeout = time.Second
)

var (
	errShutdown = errors.New("proxy shutdown")
	// errIdleTimeout ends a session closed by IdleSessionTimeout.
	errIdleTimeout = errors.New("idle session timeout")
)

// clientConn is one client's session: the client socket and its pump,
// what the client believes (sessionState: search_path, role, ttlproxy.ttl,
// prepared statements by name), and how its session ends. It reaches its
// server connection (serverconn.go) only through its link (link.go); in
// session mode it has one link, to a server of its own, for its life.
//
// After startup two goroutines forward messages: clientToServer, the
// client pump, owns cr, the server's writer and the fields it documents;
// serverToClient, the server pump, runs the link's relay, which owns the
// server's reader and the client's writer (link.cw), and ends the session
// where the relay stops.
type clientConn struct {
	srv *Server
	id  uint64
	log *slog.Logger

	// mu guards nc, and log while startup replaces it (read it with
	// logger() outside the session's own goroutines: the login timer, a
	// forced shutdown).
	mu     sync.Mutex
	nc     net.Conn
	ncOnce sync.Once
	// link binds the client to its server connection.
	link *link
	// authOK is the end of a transaction-mode login's exchange
	// (auth.Login.ok), sent with the welcome.
	authOK []byte

	user, database string
	replication    bool

	cr *wire.Reader

	// ready is closed by serverToClient at the end of startup, once st is
	// set up; quit is closed when serverToClient returns (in transaction
	// mode: when the session's server side has ended, quitOnce).
	ready    chan struct{}
	quit     chan struct{}
	quitOnce sync.Once
	// ended: transaction mode, a server pump has ended the session
	// (serverEnded) and told the client.
	ended atomic.Bool
	// cancelKey is the BackendKeyData the client was given in transaction
	// mode.
	cancelKey cancelKey
	// st is the session state and the rewriter's input (state.go); owned by
	// clientToServer after ready, by serverToClient before.
	st sessionState
	// rs is the rule set the session works under (reload.go); replaced by
	// clientToServer only.
	rs atomic.Pointer[ruleSet]

	// closing marks a deliberate close: losing the upstream is not an error.
	closing atomic.Bool
	// fatal is the ErrorResponse serverToClient sends the client before
	// closing it, when the close was decided elsewhere.
	fatal atomic.Pointer[[]byte]
	// lingering: the client was sent its last message and a FIN; its
	// connection is closed once what it still sends is read (lingerClient).
	lingering atomic.Bool

	// Owned by clientToServer.
	out []byte
	// statements and nrejected count the Query and Parse texts forwarded
	// and rejected (the end log line, Status).
	statements, nrejected atomic.Uint64
	// started is when the client connected.
	started time.Time
}

func newClientConn(srv *Server, conn net.Conn) *clientConn {
	id := srv.nextID.Add(1)
	log := srv.log.With("session_id", id, "client_addr", conn.RemoteAddr().String())
	rs := srv.set.Load()
	s := &clientConn{
		srv:     srv,
		id:      id,
		log:     log,
		st:      newSessionState(log, rs.rw, rs.bypass),
		nc:      wire.NewConn(conn),
		link:    newLink(&serverConn{}),
		ready:   make(chan struct{}),
		quit:    make(chan struct{}),
		started: time.Now(),
	}
	s.rs.Store(rs)
	s.st.guard = &s.link.guard
	s.st.guard.Store(&detailGuard{rw: rs.rw})
	return s
}

// run serves the connection until it ends. It never panics.
func (s *clientConn) run() {
	m := s.srv.metrics
	m.ClientConnectionsTotal.Inc()
	m.ClientConnections.Inc()
	defer m.ClientConnections.Dec()
	defer s.closeClient()
	defer s.closeUpstream()
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("session panic", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		}
	}()

	// Authentication happens after startup, relayed by the pumps (or, in
	// transaction mode, by startup itself): the login timeout covers it too.
	login := time.AfterFunc(s.rs.Load().clientLoginTimeout, s.loginTimedOut)
	defer login.Stop()

	if err := s.startup(); err != nil {
		var pe *wire.ProtocolError
		switch {
		case errors.As(err, &pe):
			s.log.Info("closing client at startup", "sqlstate", pe.Code, "err", err)
			c := s.conn()
			_ = c.SetWriteDeadline(time.Now().Add(finalWriteTimeout))
			_, _ = c.Write(wire.ErrorResponse(nil, "FATAL", pe.Code, pe.Msg, "", ""))
		case errors.Is(err, errStartupDone):
		default:
			s.log.Debug("startup ended", "err", err)
		}
		return
	}
	s.log.Info("session started", "replication", s.replication, "pooled", s.link.pooled.Load() != nil)
	var err error
	if s.link.pooled.Load() != nil {
		err = s.forwardPooled()
	} else {
		err = s.forward()
	}
	s.log.Info("session ended", "duration", time.Since(s.started).Round(time.Millisecond),
		"statements", s.statements.Load(), "rejected", s.nrejected.Load(), "err", err)
}

// loginTimedOut closes a client that has not finished logging in.
func (s *clientConn) loginTimedOut() {
	select {
	case <-s.ready:
		return
	default:
	}
	s.srv.metrics.LoginTimeouts.Inc()
	s.logger().Info("closing client: login timeout", "timeout", s.rs.Load().clientLoginTimeout)
	b := wire.ErrorResponse(nil, "FATAL", codeQueryCanceled, "ttlproxy: canceling authentication due to timeout", "", "")
	s.fatal.CompareAndSwap(nil, &b)
	s.link.markClosed()
	_ = s.conn().SetDeadline(time.Now())
	s.closeUpstream()
}

// forward runs the two forwarding loops and returns the first error.
func (s *clientConn) forward() error {
	idle := s.link.owesNothing
	s.cr = wire.NewReader(clientReader{s.nc, s}, wire.ClientBufSize, idle)
	s.link.cw = wire.NewWriter(s.nc)
	s.link.server.startBuffers(idle)
	s.link.sw = s.link.server.w

	errc := make(chan error, 1)
	report := func(err error) {
		select {
		case errc <- err:
		default:
		}
	}
	// clientToServer runs on the session's own goroutine: one stack less
	// for every idle client.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(s.quit)
		report(s.pump("server_to_client", s.link.server.nc, s.serverToClient))
	}()
	report(s.pump("client_to_server", s.nc, s.clientToServer))
	err := <-errc
	wg.Wait()
	if s.lingering.Load() {
		s.drainClient()
	}
	return err
}

// pump runs one forwarding loop, which reads src, under guard; when src is
// a socket, it reads it under wire.Conn.Drive.
func (s *clientConn) pump(name string, src net.Conn, loop func() error) error {
	if rc := wire.ConnOf(src); rc != nil {
		return rc.Drive(func() error { return s.guard(name, loop) })
	}
	return s.guard(name, loop)
}

// guard runs one forwarding loop; a panic closes this session only. A
// panic in clientToServer (the rewriter runs there) is reported to the
// client by serverToClient; one in serverToClient just closes both sides.
func (s *clientConn) guard(name string, loop func() error) (err error) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		s.log.Error("session panic", "goroutine", name, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		err = fmt.Errorf("panic in %s: %v", name, r)
		if name == "client_to_server" {
			b := wire.ErrorResponse(nil, "FATAL", codeInternalError, "ttlproxy: internal error", "", "")
			s.fatal.CompareAndSwap(nil, &b)
			s.link.markClosed()
			_ = s.conn().SetWriteDeadline(time.Now().Add(finalWriteTimeout))
			s.closeUpstream()
			return
		}
		s.closing.Store(true)
		s.closeClient()
		s.closeUpstream()
	}()
	return loop()
}

// logger returns the session's logger, for the goroutines that may run
// while startup replaces it.
func (s *clientConn) logger() *slog.Logger {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log
}

func (s *clientConn) conn() net.Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nc
}

func (s *clientConn) setClient(c net.Conn) {
	s.mu.Lock()
	s.nc = c
	s.mu.Unlock()
}

// lingerClient ends the client's connection after its last ErrorResponse
// has been flushed: a FIN now, and the close once the client has stopped
// sending (drainClient, after both pumps), within lingerTimeout. Closing a
// socket whose input is unread sends a RST instead of a FIN (RFC 2525,
// 2.17), and a client still sending, COPY data or a pipeline, then fails
// its write and may drop the ErrorResponse it has not read yet: pgx does,
// mid-COPY FROM. Web servers linger for the same reason (nginx's
// lingering_close).
func (s *clientConn) lingerClient() {
	c := s.conn()
	// A client read that times out from now on ends clientToServer
	// (clientReader, timedOut).
	s.link.markClosed()
	if err := wire.HalfClose(c); err != nil {
		s.closeClient()
		return
	}
	s.lingering.Store(true)
	_ = c.SetReadDeadline(time.Now().Add(lingerTimeout))
}

// drainClient reads and drops what a lingering client still sends, until
// it closes or the deadline lingerClient set passes; run closes it then.
func (s *clientConn) drainClient() {
	c := s.conn()
	buf := make([]byte, 4096)
	for {
		if _, err := c.Read(buf); err != nil {
			return
		}
	}
}

func (s *clientConn) closeClient() {
	s.ncOnce.Do(func() { _ = s.conn().Close() })
}

// closeUpstream closes the server connection: in transaction mode the one
// the client holds, if any (its pump then ends the session, serverEnded).
func (s *clientConn) closeUpstream() {
	if pl := s.link.pooled.Load(); pl != nil {
		if ps, _ := pl.holding(); ps != nil {
			ps.sc.close()
		}
		return
	}
	s.link.server.close()
}

// endUpstreamAtBoundary ends the server session at a message boundary
// (serverConn.endAtBoundary): in transaction mode, of a server the client
// holds, which is closed rather than returned (its state is the client's).
func (s *clientConn) endUpstreamAtBoundary() {
	if pl := s.link.pooled.Load(); pl != nil {
		s.link.markClosed() // no release from here on
		if ps, _ := pl.holding(); ps != nil {
			_ = ps.sc.conn().SetWriteDeadline(time.Now().Add(finalWriteTimeout))
			if _, err := s.link.sw.WriteString(wire.TerminateMsg); err == nil {
				_ = s.link.sw.Flush()
			}
		}
		return
	}
	s.link.server.endAtBoundary()
}

func adminShutdownError() []byte {
	return wire.ErrorResponse(nil, "FATAL", codeAdminShutdown, "terminating connection due to proxy shutdown", "", "")
}

// beginShutdown closes the session now if it is idle between statements;
// otherwise serverToClient closes it at the ReadyForQuery that leaves it idle.
func (s *clientConn) beginShutdown() {
	s.link.closeAtIdle.Store(true)
	if s.statements.Load() == 0 {
		// Still logging in, or not a statement yet: the client gets its
		// first exchange (a client that connects per transaction, as
		// pgbench -C does, would otherwise fail for a restart), and is
		// closed at the ReadyForQuery that ends it; shutdown_timeout
		// bounds the wait.
		return
	}
	if !s.link.closeIfIdle() {
		return
	}
	b := adminShutdownError()
	s.fatal.CompareAndSwap(nil, &b)
	if pl := s.link.pooled.Load(); pl != nil {
		// Idle in transaction mode: a server the client holds (pinned) is
		// closed and its pump tells the client; otherwise the client pump,
		// woken, does (endPooled).
		pl.cancel()
		if ps, _ := pl.holding(); ps != nil {
			ps.sc.terminate()
		} else {
			_ = s.conn().SetReadDeadline(time.Unix(1, 0))
		}
		return
	}
	if s.link.server.conn() == nil {
		// Still reading the startup packet: nothing to say yet.
		s.closeClient()
		return
	}
	// serverToClient sees the upstream close, sends fatal and closes the
	// client.
	s.link.server.terminate()
}

// forceClose ends a session that is still busy at the shutdown deadline.
// The running statement is cancelled first, so that the server does not go
// on executing it for a client that is gone.
func (s *clientConn) forceClose() {
	s.link.closeAtIdle.Store(true)
	s.link.markClosed()
	b := adminShutdownError()
	s.fatal.CompareAndSwap(nil, &b)
	_ = s.conn().SetWriteDeadline(time.Now().Add(finalWriteTimeout))
	if pl := s.link.pooled.Load(); pl != nil {
		pl.cancel()
		ps, _ := pl.holding()
		if ps == nil {
			_ = s.conn().SetReadDeadline(time.Unix(1, 0))
			return
		}
		if pkt := ps.sc.cancelRequest(); pkt != nil {
			if err := s.srv.sendCancel(pkt); err != nil {
				s.logger().Warn("cancelling statement at shutdown", "err", err)
			}
		}
		ps.sc.close()
		return
	}
	if s.link.server.conn() == nil {
		s.closeClient()
		return
	}
	if pkt := s.link.server.cancelRequest(); pkt != nil {
		if err := s.srv.sendCancel(pkt); err != nil {
			s.logger().Warn("cancelling statement at shutdown", "err", err)
		}
	}
	s.closeUpstream()
}
