package proxy

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/ttlproxy/ttlproxy/internal/wire"
)

// pumpStop says why link.relay returned.
type pumpStop uint8

const (
	// stopStartup: the server's first ReadyForQuery, not yet relayed; the
	// client finishes its startup, then relays it and resumes the relay.
	stopStartup pumpStop = iota
	// stopServerEnded: a read from the server failed (partial: mid-message).
	stopServerEnded
	// stopClientWrite: a write to the client failed.
	stopClientWrite
	// stopShutdown: the link became idle during shutdown and is closed.
	stopShutdown
	// stopReleased: transaction mode, the ReadyForQuery that left the link
	// idle gave the server back to the pool (pooledLink.release).
	stopReleased
	// stopUnlinked: transaction mode, a message from a server that no
	// longer serves this link (released by the client, pooled.go): not
	// read, for the pump to pass to whoever holds the server now.
	stopUnlinked
)

// pumpEnd is what link.relay returns: why it stopped, the error, and the
// state the client needs to end its session (or to resume the relay).
type pumpEnd struct {
	why     pumpStop
	partial bool
	// lastType is the type of the last message relayed to the client.
	lastType byte
	// status is the ReadyForQuery's status byte at stopStartup.
	status byte
	err    error
}

// serverToClient is the server pump: it runs link.relay, which forwards the
// server's messages to the client, and does the client's part where the
// relay stops: the end of startup and the end of the session.
func (s *clientConn) serverToClient() error {
	l := s.link
	started := false
	var lastType byte
	for {
		end := l.relay(l.server, s.srv.latency, started, lastType)
		switch end.why {
		case stopStartup:
			started = true
			if err := s.finishStartup(); err != nil {
				if wire.IsWriteError(err) {
					return s.clientWriteFailed(err)
				}
				return s.upstreamEnded(err, false, end.lastType)
			}
			l.idleAt.Store(monoNow())
			l.writeZ(end.status)
			// Shut down while authenticating: the client gets its first
			// exchange (beginShutdown), closed at its ReadyForQuery.
			lastType = 'Z'
			if !wire.NextBuffered(l.server.r) {
				if err := l.cw.Flush(); err != nil {
					return s.clientWriteFailed(err)
				}
			}
		case stopServerEnded:
			return s.upstreamEnded(end.err, end.partial, end.lastType)
		case stopClientWrite:
			return s.clientWriteFailed(end.err)
		default: // stopShutdown
			return s.closeAtShutdown()
		}
	}
}

// relay forwards the messages of server sc to the client until it must
// stop (pumpEnd). It decodes only ReadyForQuery, ErrorResponse while
// rejections are pending, and during startup (until started) BackendKeyData
// and the SASL mechanism list. lastType is the type of the last message
// relayed before; lat takes the foreground latency samples.
func (l *link) relay(sc *serverConn, lat *latencyWindow, started bool, lastType byte) pumpEnd {
	r, w := sc.r, l.cw
	pl := l.pooled.Load()
	var buf, out []byte
	for {
		typ, length, err := wire.PeekHeader(r)
		if err != nil {
			return pumpEnd{why: stopServerEnded, err: err, lastType: lastType}
		}
		if pl != nil && sc.linked() != l {
			return pumpEnd{why: stopUnlinked, lastType: lastType}
		}
		if length < 4 {
			return pumpEnd{why: stopServerEnded, lastType: lastType,
				err: fmt.Errorf("invalid message length %d from upstream", length)}
		}
		total := int(length) + 1

		var partial bool
		switch {
		case pl != nil && l.answers.swallow.Load() > 0:
			// The answer to the reset sent ahead of the client's messages.
			if err = l.swallowAnswer(sc); err != nil {
				if wire.IsWriteError(err) {
					return pumpEnd{why: stopClientWrite, err: err}
				}
				return pumpEnd{why: stopServerEnded, err: err, lastType: lastType}
			}
			if !wire.NextBuffered(r) {
				if err := w.Flush(); err != nil {
					return pumpEnd{why: stopClientWrite, err: err}
				}
			}
			continue
		case typ != 'D' && l.answers.refreshing.Load() > 0:
			// The answer to the proxy's state query (state.go). readState
			// has flushed what it passed on to the client before handing
			// the answer over: from then on the client may write to its
			// own connection (transaction mode's welcome, pooled.go).
			if err = l.readState(sc); err != nil {
				if wire.IsWriteError(err) {
					return pumpEnd{why: stopClientWrite, err: err}
				}
				return pumpEnd{why: stopServerEnded, err: err, lastType: lastType}
			}
			continue
		case typ == 'Z' && length == 5:
			hdr, err := r.Peek(6)
			if err != nil {
				return pumpEnd{why: stopServerEnded, err: err, lastType: lastType}
			}
			status := hdr[5]
			_, _ = r.Discard(6)
			if !started {
				return pumpEnd{why: stopStartup, status: status, lastType: lastType}
			}
			l.zSeq++
			if l.rejects.pending() {
				l.rejects.drop(l.zSeq)
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
				lat.observe(now, time.Duration(now-l.busySince.Load()))
			}
			if v <= 0 {
				l.noteIdle()
			}
			l.writeZ(status)
			if v <= 0 && l.closeAtIdle.Load() && l.closeIfIdle() {
				return pumpEnd{why: stopShutdown}
			}
			if pl != nil && v == 0 && status == 'I' {
				// The transaction is over: flushed first, since once
				// released the client may take another server, whose
				// pump writes to the client next.
				if err := w.Flush(); err != nil {
					return pumpEnd{why: stopClientWrite, err: err}
				}
				switch pinned := pl.pinned.Load(); {
				case pinned && (!pl.pinCheck.Load() || pl.forLife.Load()):
					// Kept: nothing may have ended the pin.
				case pinned || pl.dirty.Load():
					released, end := pl.checkIn(l, sc, pinned)
					if end.err != nil {
						return end
					}
					if released {
						return pumpEnd{why: stopReleased, lastType: 'Z'}
					}
				case pl.release(l, sc):
					return pumpEnd{why: stopReleased, lastType: 'Z'}
				}
				// Kept (the client claimed it first, or a cancel holds
				// it back and releases it when done): flushed above, and
				// not touched again until the next message, whose start
				// sees whether the link still holds this server.
				lastType = 'Z'
				continue
			}
		case typ == 'S':
			// Noted for the settings statement text is read under
			// (lexregime.go). Transaction mode: a ParameterStatus reaches
			// the client only when it changes what the client was told
			// (paramstatus.go).
			if buf, err = wire.ReadMessage(r, buf, total); err != nil {
				return pumpEnd{why: stopServerEnded, err: err, lastType: lastType}
			}
			l.lex.note(buf[wire.HeaderLen:])
			if pl == nil || !started || pl.reported.pass(buf[wire.HeaderLen:]) {
				_, err = w.Write(buf)
			}
		case typ == 'E' && l.rejects.pending():
			if buf, err = wire.ReadMessage(r, buf, total); err != nil {
				return pumpEnd{why: stopServerEnded, err: err, lastType: lastType}
			}
			out = l.substituteRejection(buf, out[:0])
			if len(out) > 0 && out[0] == 'E' {
				// Not the marker's answer: the server's own error.
				out = redactConstraintDetail(l.guard.Load(), out, nil)
			}
			_, err = w.Write(out)
		case typ == 'E' && started:
			// Rare: decoded for the constraint DETAIL only (redact.go).
			if buf, err = wire.ReadMessage(r, buf, total); err != nil {
				return pumpEnd{why: stopServerEnded, err: err, lastType: lastType}
			}
			out = redactConstraintDetail(l.guard.Load(), buf, out[:0])
			_, err = w.Write(out)
		case typ == 'K' && !started:
			if buf, err = wire.ReadMessage(r, buf, total); err != nil {
				return pumpEnd{why: stopServerEnded, err: err, lastType: lastType}
			}
			sc.setBackendKey(buf[wire.HeaderLen:])
			_, err = w.Write(buf)
		case typ == 'R' && !started:
			if buf, err = wire.ReadMessage(r, buf, total); err != nil {
				return pumpEnd{why: stopServerEnded, err: err, lastType: lastType}
			}
			_, err = w.Write(filterSASL(buf))
		default:
			partial, err = wire.RelayRaw(r, w, total)
			if err != nil && !wire.IsWriteError(err) {
				return pumpEnd{why: stopServerEnded, err: err, partial: partial, lastType: lastType}
			}
		}
		if err != nil {
			return pumpEnd{why: stopClientWrite, err: err}
		}
		if cap(buf) > maxKeptBuffer {
			buf, out = nil, nil
		}
		lastType = typ
		if !wire.NextBuffered(r) {
			if err := w.Flush(); err != nil {
				return pumpEnd{why: stopClientWrite, err: err}
			}
		}
	}
}

// writeZ writes a ReadyForQuery to the client.
func (l *link) writeZ(status byte) {
	_, _ = l.cw.WriteString("Z\x00\x00\x00\x05")
	_ = l.cw.WriteByte(status)
}

// closeAtShutdown ends a session that has just become idle during shutdown.
func (s *clientConn) closeAtShutdown() error {
	s.closing.Store(true)
	_ = s.conn().SetWriteDeadline(time.Now().Add(finalWriteTimeout))
	_, _ = s.link.cw.Write(adminShutdownError())
	_ = s.link.cw.Flush()
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
			_, _ = s.link.cw.Write(*f)
		} else if !s.closing.Load() && lastType != 'E' {
			s.srv.metrics.UpstreamErrors.Inc()
			s.log.Warn("upstream connection lost", "err", err)
			_, _ = s.link.cw.Write(wire.ErrorResponse(nil, "FATAL", codeConnectionFailure,
				"ttlproxy: lost the connection to the upstream server", "", ""))
		}
		_ = s.link.cw.Flush()
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
	if len(msg) < wire.HeaderLen+4 || binary.BigEndian.Uint32(msg[wire.HeaderLen:]) != pgproto3.AuthTypeSASL {
		return msg
	}
	var m pgproto3.AuthenticationSASL
	if err := m.Decode(msg[wire.HeaderLen:]); err != nil {
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
