package proxy

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// serverToClient forwards server messages to the client. It decodes only
// ReadyForQuery, ErrorResponse while rejections are pending, and during
// startup the SASL mechanism list.
func (s *clientConn) serverToClient() error {
	l := s.link
	r, w := l.server.r, s.cw
	started := false
	var lastType byte
	var zSeq uint64
	var buf, out []byte
	for {
		typ, length, err := peekHeader(r)
		if err != nil {
			return s.upstreamEnded(err, false, lastType)
		}
		if length < 4 {
			return s.upstreamEnded(fmt.Errorf("invalid message length %d from upstream", length), false, lastType)
		}
		total := int(length) + 1

		var partial bool
		switch {
		case typ != 'D' && l.answers.refreshing.Load() > 0:
			// The answer to the proxy's state query (state.go).
			if err = s.readState(); err != nil && !isWriteError(err) {
				return s.upstreamEnded(err, false, lastType)
			}
		case typ == 'Z' && length == 5:
			hdr, err := r.Peek(6)
			if err != nil {
				return s.upstreamEnded(err, false, lastType)
			}
			status := hdr[5]
			_, _ = r.Discard(6)
			if !started {
				started = true
				if err := s.finishStartup(); err != nil {
					if isWriteError(err) {
						return s.clientWriteFailed(err)
					}
					return s.upstreamEnded(err, false, lastType)
				}
				l.idleAt.Store(monoNow())
				s.writeZ(status)
				// Shut down while authenticating: the client gets its first
				// exchange (beginShutdown), closed at its ReadyForQuery.
				break
			}
			zSeq++
			if l.rejects.pending() {
				l.rejects.drop(zSeq)
			}
			// idleAt and txStatus before pending: a pending of 0 comes
			// with them (sweep.go).
			now := monoNow()
			l.idleAt.Store(now)
			l.txStatus.Store(uint32(status))
			v := l.pending.Add(-1)
			if v < 0 && !isClosed(v) {
				// A ReadyForQuery the proxy did not foresee (a Sync ignored
				// in COPY mode is the other way round): resynchronise.
				l.pending.CompareAndSwap(v, 0)
			}
			if v == 0 {
				s.srv.latency.observe(now, time.Duration(now-l.busySince.Load()))
			}
			if v <= 0 {
				l.noteIdle()
			}
			s.writeZ(status)
			if v <= 0 && s.shutdown.Load() && l.closeIfIdle() {
				return s.closeAtShutdown()
			}
		case typ == 'E' && l.rejects.pending():
			if buf, err = readMessage(r, buf, total); err != nil {
				return s.upstreamEnded(err, false, lastType)
			}
			out = l.substituteRejection(buf, out[:0])
			_, err = w.Write(out)
		case typ == 'K' && !started:
			if buf, err = readMessage(r, buf, total); err != nil {
				return s.upstreamEnded(err, false, lastType)
			}
			s.link.server.setBackendKey(buf[headerLen:])
			_, err = w.Write(buf)
		case typ == 'R' && !started:
			if buf, err = readMessage(r, buf, total); err != nil {
				return s.upstreamEnded(err, false, lastType)
			}
			_, err = w.Write(filterSASL(buf))
		default:
			partial, err = relayRaw(r, w, total)
			if err != nil && !isWriteError(err) {
				return s.upstreamEnded(err, partial, lastType)
			}
		}
		if err != nil {
			return s.clientWriteFailed(err)
		}
		if cap(buf) > maxKeptBuffer {
			buf, out = nil, nil
		}
		lastType = typ
		if !nextBuffered(r) {
			if err := w.Flush(); err != nil {
				return s.clientWriteFailed(err)
			}
		}
	}
}

func (s *clientConn) writeZ(status byte) {
	_, _ = s.cw.WriteString("Z\x00\x00\x00\x05")
	_ = s.cw.WriteByte(status)
}

// closeAtShutdown ends a session that has just become idle during shutdown.
func (s *clientConn) closeAtShutdown() error {
	s.closing.Store(true)
	_ = s.conn().SetWriteDeadline(time.Now().Add(finalWriteTimeout))
	_, _ = s.cw.Write(adminShutdownError())
	_ = s.cw.Flush()
	s.link.server.terminate()
	s.closeClient()
	return errShutdown
}

// upstreamEnded handles a failed read from the server. At a message
// boundary the client is told why, unless the server already said so (its
// last message was an ErrorResponse) or the proxy closed the connection on
// purpose; then both connections are closed.
func (s *clientConn) upstreamEnded(err error, partial bool, lastType byte) error {
	_ = s.conn().SetWriteDeadline(time.Now().Add(finalWriteTimeout))
	if !partial {
		if f := s.fatal.Load(); f != nil {
			_, _ = s.cw.Write(*f)
		} else if !s.closing.Load() && lastType != 'E' {
			s.srv.metrics.upstreamErrors.Inc()
			s.log.Warn("upstream connection lost", "err", err)
			_, _ = s.cw.Write(errorResponse(nil, "FATAL", codeConnectionFailure,
				"ttlproxy: lost the connection to the upstream server", "", ""))
		}
		_ = s.cw.Flush()
	}
	s.closing.Store(true)
	if partial {
		s.closeClient()
	} else {
		s.lingerClient()
	}
	s.closeUpstream()
	return fmt.Errorf("upstream: %w", err)
}

func (s *clientConn) clientWriteFailed(err error) error {
	s.closing.Store(true)
	s.closeClient()
	s.closeUpstream()
	return fmt.Errorf("client: %w", err)
}

// filterSASL removes SCRAM-SHA-256-PLUS from an AuthenticationSASL message:
// channel binding ties the SCRAM exchange to one TLS connection, and the
// client's and the server's are different connections.
func filterSASL(msg []byte) []byte {
	if len(msg) < headerLen+4 || binary.BigEndian.Uint32(msg[headerLen:]) != pgproto3.AuthTypeSASL {
		return msg
	}
	var m pgproto3.AuthenticationSASL
	if err := m.Decode(msg[headerLen:]); err != nil {
		return msg
	}
	keep := m.AuthMechanisms[:0]
	for _, mech := range m.AuthMechanisms {
		if mech != "SCRAM-SHA-256-PLUS" {
			keep = append(keep, mech)
		}
	}
	if len(keep) == len(m.AuthMechanisms) {
		return msg
	}
	m.AuthMechanisms = keep
	out, err := m.Encode(nil)
	if err != nil {
		return msg
	}
	return out
}
