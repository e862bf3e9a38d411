package proxy

import (
	"context"
	"net"
	"time"

	"github.com/ttlproxy/ttlproxy/internal/wire"
)

// The server's sweep over its sessions, every idleSweepPeriod:
//
//   - IdleSessionTimeout without a timer per transaction: serverToClient
//     notes when a ReadyForQuery leaves the session idle (idleAt); the sweep
//     finds the sessions idle outside a transaction block for longer than
//     the timeout and sets their client's read deadline in the past, and
//     clientToServer, whose read then fails, closes the session
//     (idleTimedOut). IdleTransactionTimeout the same way, for sessions
//     idle inside a transaction block. A session that became busy after the sweep looked at
//     it reads on (clientReader), so the race costs nothing but a retried
//     read. A session is closed up to a quarter of the timeout late (at most
//     half a second), as PgBouncer's janitor, which runs once a second, does.
//   - An end of stream that came with a peer's last data: wire.Conn.CheckEnd
//     on both sockets of every session (wire.Conn.Drive says why).

const (
	minIdleSweep = 10 * time.Millisecond
	// maxSweepPeriod bounds how long an end of stream that arrived with the
	// last data can go unseen.
	maxSweepPeriod = 500 * time.Millisecond
)

// idleSweepPeriod is how often sweepSessions runs for an IdleSessionTimeout
// of timeout (0: disabled).
func idleSweepPeriod(timeout time.Duration) time.Duration {
	if timeout <= 0 {
		return maxSweepPeriod
	}
	return min(max(timeout/4, minIdleSweep), maxSweepPeriod)
}

// sweepPeriod is the sweep's period for the set's idle timeouts.
func (rs *ruleSet) sweepPeriod() time.Duration {
	return min(idleSweepPeriod(rs.idleSessionTimeout), idleSweepPeriod(rs.idleTxTimeout))
}

// sweepSessions runs the sweep until ctx is done; the timeout is read again
// at every round (a reload may change it).
func (s *Server) sweepSessions(ctx context.Context) {
	t := time.NewTimer(s.set.Load().sweepPeriod())
	defer t.Stop()
	var idle, all []*clientConn
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rs := s.set.Load()
		now := monoNow()
		idle, all = idle[:0], all[:0]
		s.mu.Lock()
		for sess := range s.sessions {
			all = append(all, sess)
			if sess.link.idleExpired(now, rs.idleSessionTimeout) || sess.link.idleInTxExpired(now, rs.idleTxTimeout) {
				idle = append(idle, sess)
			}
		}
		s.mu.Unlock()
		for _, sess := range idle {
			_ = sess.conn().SetReadDeadline(time.Unix(1, 0))
		}
		for _, sess := range all {
			sess.checkEnds()
		}
		if s.pools != nil {
			s.pools.maintain()
		}
		clear(all)
		clear(idle)
		t.Reset(rs.sweepPeriod())
	}
}

// checkEnds runs wire.Conn.CheckEnd on the session's two sockets.
func (s *clientConn) checkEnds() {
	if rc := wire.ConnOf(s.conn()); rc != nil {
		rc.CheckEnd()
	}
	if pl := s.link.pooled.Load(); pl != nil {
		// The server the client holds; idle ones are checked by their
		// pool (pool.maintain).
		if ps, _ := pl.holding(); ps != nil {
			ps.sc.checkEnd()
		}
		return
	}
	s.link.server.checkEnd()
}

// clientReader is what clientToServer reads the client through: a read
// deadline that sweepIdle set for a session that has become busy since (or
// sent a message it was about to read) is taken back and the read goes
// on. Every other error, a real idle timeout and the login timeout's
// included, is returned.
type clientReader struct {
	net.Conn
	s *clientConn
}

func (c clientReader) Read(b []byte) (int, error) {
	for {
		n, err := c.Conn.Read(b)
		if err == nil || !wire.IsTimeout(err) || c.s.timedOut() {
			return n, err
		}
		_ = c.SetReadDeadline(time.Time{})
		if n > 0 {
			return n, nil
		}
	}
}

// timedOut reports that a read deadline of the client's is meant: the
// session is closing (the login timeout), or it is idle for longer than
// IdleSessionTimeout, or IdleTransactionTimeout inside a block.
func (s *clientConn) timedOut() bool {
	rs, now := s.rs.Load(), monoNow()
	return isClosed(s.link.pending.Load()) || s.link.idleExpired(now, rs.idleSessionTimeout) ||
		s.link.idleInTxExpired(now, rs.idleTxTimeout)
}
