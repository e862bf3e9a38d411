package proxy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/ttlproxy/ttlproxy/internal/wire"
	"github.com/ttlproxy/ttlproxy/rewrite"
)

// clientToServer forwards client messages to the server, rewriting Query and
// Parse texts. It decodes nothing else.
func (s *clientConn) clientToServer() error {
	l := s.link
	r := s.cr
	pooled := l.pooled.Load() != nil

	ready := false
	open := false // extended-protocol messages sent since the last Sync
	// owedAtOpen: answers were owed when the open batch started, and its
	// first Parse did not wait for them; ran: an Execute was sent in it.
	// Either may have changed a setting not reported yet (lexregime.go).
	owedAtOpen, ran := false, false
	// dirty: messages written to the server and not flushed yet. In
	// transaction mode the server is only written while the client holds
	// it (after claim, up to the flush of the unit's last message).
	dirty := false
	var buf []byte
	for {
		limit := int64(s.rs.Load().maxMessageBytes)
		// An idle session (nothing owed, outside a transaction block) waits
		// for its client at most IdleSessionTimeout: the read fails when
		// the server's idle sweep finds it so (sweep.go).
		typ, length, err := wire.PeekHeader(r)
		if err != nil {
			if wire.IsTimeout(err) && pooled && s.fatal.Load() != nil {
				// Woken to be closed (shutdown): endPooled tells the client.
				return errShutdown
			}
			if wire.IsTimeout(err) && l.owesNothing() {
				if st := l.txStatus.Load(); st == 'T' || st == 'E' {
					return s.idleInTxTimedOut()
				}
				return s.idleTimedOut()
			}
			return s.clientEnded(err, true)
		}
		if length < 4 {
			return s.violation(codeProtocolViolation, fmt.Sprintf("invalid message length %d", length))
		}
		if length+1 > limit {
			return s.violation(codeProgramLimit,
				fmt.Sprintf("message of %d bytes exceeds the proxy's limit of %d bytes", length+1, limit))
		}
		total := int(length) + 1
		if !ready && typ != 'p' && typ != 'X' {
			// Authentication responses ('p') and a Terminate go straight
			// through; anything else waits for the end of startup (and the
			// catalog query, which shares the upstream connection).
			select {
			case <-s.ready:
				ready = true
			case <-s.quit:
				return errQuit
			}
		}

		var partial bool
		write := true
		switch typ {
		case 'Q':
			if buf, err = wire.ReadMessage(r, buf, total); err != nil {
				return s.clientEnded(err, false)
			}
			wait, lexErr := s.lexGate(buf, !open, owedAtOpen || ran)
			if err := s.announce(!open, wait); err != nil {
				return err
			}
			if wait {
				lexErr = lexRefusal(s.lexRisk(buf), l.lex.bits.Load(), s.rs.Load().nonASCII)
			}
			err = s.forwardQuery(buf, lexErr)
		case 'P':
			if buf, err = wire.ReadMessage(r, buf, total); err != nil {
				return s.clientEnded(err, false)
			}
			wait, lexErr := s.lexGate(buf, !open, owedAtOpen || ran)
			if !open {
				owedAtOpen = !wait && !l.owesNothing()
				if err := s.announce(true, wait); err != nil {
					return err
				}
				open = true
				if wait {
					lexErr = lexRefusal(s.lexRisk(buf), l.lex.bits.Load(), s.rs.Load().nonASCII)
				}
			}
			err = s.forwardParse(buf, lexErr)
		case 'S':
			owedAtOpen, ran = false, false
			if open {
				open = false
			} else if err := s.claim(); err != nil {
				return err
			}
			partial, err = wire.RelayRaw(r, l.sw, total)
		case 'F':
			if err := s.claim(); err != nil {
				return err
			}
			refusal, perr := s.functionCallRefusal(r, total)
			if perr != nil {
				return s.clientEnded(perr, false)
			}
			if refusal != nil {
				// Nothing runs: the server fails a marker in its place,
				// with the ErrorResponse and ReadyForQuery a failed
				// FunctionCall gets.
				if _, err = r.Discard(total); err == nil {
					s.out = appendQuery(s.out[:0], rejectMarker(s.addRejection(refusal)))
					err = s.write(s.out)
				}
				break
			}
			s.st.onFunctionCall()
			if pooled {
				_ = s.pin(pinFunctionCall, true)
			}
			partial, err = wire.RelayRaw(r, l.sw, total)
		case 'B', 'E', 'D', 'C', 'H':
			if !open {
				if err := s.announce(true, false); err != nil {
					return err
				}
				open = true
				if pooled && (typ == 'B' || typ == 'D') {
					if err := s.reparseUnnamed(typ, r, total); err != nil {
						return s.stateFailed(err)
					}
				}
				if typ == 'B' && len(s.st.prepared) > 0 {
					if err := s.reprepareBound(r, total); err != nil {
						return s.stateFailed(err)
					}
				}
			}
			if pooled && typ == 'C' {
				s.noteClose(r, total)
			}
			ran = ran || typ == 'E'
			if pooled && typ == 'B' {
				s.noteBind(r, total)
			}
			if (typ == 'B' || typ == 'C') && s.st.watchesBindClose() {
				var stale error
				if stale, err = s.inspect(typ, r, total); stale != nil && err == nil {
					// Never bind a statement rewritten for another state:
					// the server fails a placeholder in its place.
					if _, err = r.Discard(total); err == nil {
						p := pgproto3.Parse{Name: "ttlproxy_stale", Query: rejectMarker(s.addRejection(stale))}
						s.out, _ = p.Encode(s.out[:0])
						err = s.write(s.out)
					}
					break
				}
				if err != nil {
					break
				}
			}
			partial, err = wire.RelayRaw(r, l.sw, total)
		case 'X':
			s.closing.Store(true)
			if pooled {
				// A server the client still holds is closed (endPooled);
				// an idle one stays in the pool.
				s.closeClient()
				return nil
			}
			if _, err := wire.RelayRaw(r, l.sw, total); err == nil {
				_ = l.sw.Flush()
			}
			s.closeClient()
			s.closeUpstream()
			return nil
		default:
			if pooled && l.owesNothing() && !open {
				// Nothing owed: no COPY in progress. The server ignores
				// CopyData, CopyDone and CopyFail then, and ends the
				// session on any other type.
				if typ != 'd' && typ != 'c' && typ != 'f' {
					return s.violation(codeProtocolViolation, fmt.Sprintf("invalid frontend message type %d", typ))
				}
				write = false
				_, err = r.Discard(total)
				break
			}
			partial, err = wire.RelayRaw(r, l.sw, total)
		}
		dirty = dirty || write
		if cap(buf) > maxKeptBuffer {
			buf = nil
		}
		if err != nil {
			var pe *wire.ProtocolError
			switch {
			case errors.As(err, &pe):
				return s.violation(pe.Code, pe.Msg)
			case wire.IsWriteError(err):
				return s.upstreamWriteFailed(err)
			default:
				return s.clientEnded(err, !partial)
			}
		}
		if dirty && !wire.NextBuffered(r) {
			dirty = false
			if err := l.sw.Flush(); err != nil {
				return s.upstreamWriteFailed(err)
			}
		}
	}
}

// announce prepares to forward a Query or the Parse that starts a batch:
// when refresh is set and the session state may have changed, it waits for
// the answers the client is owed and re-reads the state (state.go); when
// wait is set (lexGate) it waits for them too; then it announces the
// ReadyForQuery the message will cost.
func (s *clientConn) announce(refresh, wait bool) error {
	if rs := s.srv.set.Load(); refresh && rs != s.rs.Load() {
		s.adopt(rs)
	}
	if refresh {
		if err := s.ageCatalog(); err != nil {
			return err
		}
	}
	refresh = refresh && s.st.needsRefresh()
	if refresh || wait {
		if err := s.link.awaitIdle(s.quit); err != nil {
			return s.stateFailed(err)
		}
	}
	if err := s.claim(); err != nil {
		return err
	}
	if refresh {
		if err := s.syncState(); err != nil {
			return s.stateFailed(err)
		}
	}
	return nil
}

func (s *clientConn) stateFailed(err error) error {
	if wire.IsWriteError(err) {
		return s.upstreamWriteFailed(err)
	}
	return err
}

// clientEnded handles a failed read from the client: the client is gone.
// At a message boundary the server gets a Terminate, so it does not log an
// unexpected EOF.
func (s *clientConn) clientEnded(err error, boundary bool) error {
	if !s.closing.Swap(true) && boundary {
		s.endUpstreamAtBoundary()
	}
	s.closeClient()
	s.closeUpstream()
	return fmt.Errorf("client: %w", err)
}

// upstreamWriteFailed: serverToClient will see the broken connection too and
// tell the client; closing the upstream makes sure it wakes up.
func (s *clientConn) upstreamWriteFailed(err error) error {
	s.closeUpstream()
	return fmt.Errorf("upstream: %w", err)
}

// idleTimedOut closes a client idle for longer than IdleSessionTimeout:
// serverToClient sends the FATAL ErrorResponse once the upstream session has
// ended.
func (s *clientConn) idleTimedOut() error {
	s.srv.metrics.IdleTimeouts.Inc()
	s.log.Info("closing client: idle session timeout", "timeout", s.rs.Load().idleSessionTimeout)
	s.endWithFatal(codeIdleSessionTimeout, "terminating connection due to idle-session timeout")
	return errIdleTimeout
}

// idleInTxTimedOut closes a client idle inside a transaction block for
// longer than IdleTransactionTimeout; its server connection is closed, so
// the transaction rolls back.
func (s *clientConn) idleInTxTimedOut() error {
	s.srv.metrics.IdleTxTimeouts.Inc()
	s.log.Info("closing client: idle in transaction timeout", "timeout", s.rs.Load().idleTxTimeout)
	s.endWithFatal(codeIdleInTxTimeout, "terminating connection due to idle-in-transaction timeout")
	return errIdleTimeout
}

// violation closes the client for a protocol error: serverToClient sends the
// FATAL ErrorResponse after what it has already relayed, then closes.
func (s *clientConn) violation(code, msg string) error {
	s.log.Warn("closing client: protocol violation", "sqlstate", code, "err", msg)
	s.endWithFatal(code, msg)
	return &wire.ProtocolError{Code: code, Msg: msg}
}

// endWithFatal ends the session from clientToServer: no statement is
// forwarded any more, the server gets a Terminate, and serverToClient,
// woken by the upstream's close, sends the client a FATAL ErrorResponse
// (code, msg) after what it has already relayed.
func (s *clientConn) endWithFatal(code, msg string) {
	b := wire.ErrorResponse(nil, "FATAL", code, msg, "", "")
	s.fatal.CompareAndSwap(nil, &b)
	s.link.markClosed()
	_ = s.conn().SetWriteDeadline(time.Now().Add(finalWriteTimeout))
	s.endUpstreamAtBoundary()
	s.closeUpstream()
}

// lexGate decides whether the server will read the text of msg, a Query
// or a Parse, as the proxy does (lexregime.go): wait when it must wait for
// the answers the client is owed first (then check it with lexRefusal),
// else the refusal of a text the proxy cannot read as the server will, or
// nil. first is set for a Query or the Parse that starts a batch; inBatch
// when a change may be on its way inside the open batch. It costs nothing
// while the settings are the proxy's and no answer is owed.
func (s *clientConn) lexGate(msg []byte, first, inBatch bool) (wait bool, refusal error) {
	if !s.st.track || s.replication {
		return false, nil
	}
	bits := s.link.lex.bits.Load()
	nonASCII := s.rs.Load().nonASCII
	if !nonASCII {
		bits &^= lexConverted
	}
	owed := first && !s.link.owesNothing() || !first && inBatch
	if bits == 0 && !owed {
		return false, nil
	}
	risk := s.lexRisk(msg)
	switch {
	case risk == 0:
		return false, nil
	case owed && first:
		return true, nil
	case owed:
		return false, errLexPipeline
	}
	return false, lexRefusal(risk, bits, nonASCII)
}

// lexRisk is statementRisk of msg's text, but none for a text whose bytes
// name nothing the proxy guards: however the server reads its backslashes,
// it reads no TTL table. Non-ASCII bytes count there too unless a rule
// spells a name with a non-ASCII character: a conversion to the server's
// encoding turns each multibyte character into a non-ASCII one, never into
// ASCII, so the ASCII runs the server reads (every name of a relation the
// proxy guards) are runs of the bytes the proxy checked; a converted
// single-byte encoding can turn caf\xe9 into a rule's café.
func (s *clientConn) lexRisk(msg []byte) uint32 {
	sql := string(msg[wire.HeaderLen:])
	risk := statementRisk(sql)
	if risk == 0 {
		return 0
	}
	rs := s.rs.Load()
	if rs.rw != nil && !rs.rw.MayNameTTL(sql, s.st.cur) {
		risk &^= lexBackslash
		if !rs.nonASCII {
			risk &^= lexHighBytes
		}
	}
	return risk
}

// forwardQuery rewrites one Query message and writes the result; lexErr
// (lexGate) refuses it.
func (s *clientConn) forwardQuery(msg []byte, lexErr error) error {
	text, rest, ok := wire.CString(msg[wire.HeaderLen:])
	if !ok || len(rest) != 0 {
		return &wire.ProtocolError{Code: codeProtocolViolation, Msg: "invalid Query message format"}
	}
	if s.replication {
		return s.write(msg)
	}
	sql := string(text)
	var refused error
	if pl := s.link.pooled.Load(); pl != nil {
		refused = s.noteStatement(sql)
		pl.unnamed = pl.unnamed[:0] // a simple Query drops the unnamed statement
		if len(s.st.prepared) > 0 && mayDeallocate(sql) && refused == nil && lexErr == nil {
			pl.prepGen++ // the server's set may no longer be the client's
		}
	}
	if refused == nil {
		refused = lexErr
	}
	res, err := s.rewriteUnlessRefused(sql, refused)
	err = s.st.onQuery(sql, res, err)
	switch {
	case err != nil:
		s.out = appendQuery(s.out[:0], rejectMarker(s.addRejection(err)))
		return s.write(s.out)
	case res.Rewritten:
		s.out = appendQuery(s.out[:0], res.SQL)
		return s.write(s.out)
	default:
		return s.write(msg)
	}
}

// forwardParse rewrites the query of one Parse message, keeping the
// statement name and parameter types; lexErr (lexGate) refuses it.
func (s *clientConn) forwardParse(msg []byte, lexErr error) error {
	name, rest, ok := wire.CString(msg[wire.HeaderLen:])
	if !ok {
		return &wire.ProtocolError{Code: codeProtocolViolation, Msg: "invalid Parse message format"}
	}
	text, rest, ok := wire.CString(rest)
	if !ok || len(rest) < 2 || len(rest) != 2+4*int(binary.BigEndian.Uint16(rest)) {
		return &wire.ProtocolError{Code: codeProtocolViolation, Msg: "invalid Parse message format"}
	}
	if s.replication {
		return s.write(msg)
	}
	sql := string(text)
	var refused error
	if pl := s.link.pooled.Load(); pl != nil {
		switch {
		case len(name) == 0:
		case !s.st.track:
			// Named statements are recorded only when tracked
			// (state.go): not carried to another server.
			_ = s.pin(pinPrepared, true)
		default:
			pl.namedStatementChanged(s.id)
		}
		refused = s.noteParse(name, sql)
	}
	if refused == nil {
		refused = lexErr
	}
	res, err := s.rewriteUnlessRefused(sql, refused)
	err = s.st.onParse(name, sql, rest[2:], res, err)
	if err == nil && !res.Rewritten {
		s.noteUnnamed(name, msg)
		return s.write(msg)
	}
	p := pgproto3.Parse{Name: string(name)}
	if err != nil {
		// The placeholder takes no parameters: the server fails before it
		// would look at parameter types.
		p.Query = rejectMarker(s.addRejection(err))
	} else {
		p.Query = res.SQL
		for oids := rest[2:]; len(oids) >= 4; oids = oids[4:] {
			p.ParameterOIDs = append(p.ParameterOIDs, binary.BigEndian.Uint32(oids))
		}
	}
	if s.out, err = p.Encode(s.out[:0]); err != nil {
		return &wire.ProtocolError{Code: codeProgramLimit, Msg: "rewritten Parse message too large"}
	}
	s.noteUnnamed(name, s.out)
	return s.write(s.out)
}

func (s *clientConn) write(b []byte) error {
	if _, err := s.link.sw.Write(b); err != nil {
		return &wire.WriteError{Err: err}
	}
	if cap(s.out) > maxKeptBuffer {
		s.out = nil
	}
	return nil
}

// rewriteUnlessRefused rewrites sql, unless the pool refused it already
// (refused, errPinLimit): that error is then the statement's answer.
func (s *clientConn) rewriteUnlessRefused(sql string, refused error) (rewrite.Result, error) {
	if refused != nil {
		return rewrite.Result{}, refused
	}
	return s.rewriteStatement(sql)
}

// rewriteStatement runs the rewriter and records the outcome.
func (s *clientConn) rewriteStatement(sql string) (rewrite.Result, error) {
	m := s.srv.metrics
	start := time.Now()
	res, err := s.rs.Load().rewriter.Rewrite(sql, s.st.cur)
	m.RewriteDuration.Observe(time.Since(start).Seconds())
	if res.CacheHit {
		m.RewriteCacheHits.Inc()
	}
	s.statements.Add(1)
	switch {
	case err != nil:
		m.Rejected.Inc()
		s.nrejected.Add(1)
		// The message names the table and the construct; the text may hold
		// data, so it is logged at debug level only.
		code := ""
		var re *rewrite.Error
		if errors.As(err, &re) {
			code = re.Code
		}
		m.Rejections.WithLabelValues(code).Inc()
		s.log.Info("statement rejected", "sqlstate", code, "err", err)
		if s.log.Enabled(context.Background(), slog.LevelDebug) {
			s.log.Debug("rejected statement", "query", sql)
		}
	case res.Rewritten:
		m.Rewritten.Inc()
		if s.log.Enabled(context.Background(), slog.LevelDebug) {
			s.log.Debug("statement rewritten", "query", sql, "rewritten", res.SQL)
		}
	default:
		m.Passthrough.Inc()
	}
	return res, err
}

// appendQuery encodes a Query message.
func appendQuery(dst []byte, sql string) []byte {
	n := 4 + len(sql) + 1
	dst = append(dst, 'Q', byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	dst = append(dst, sql...)
	return append(dst, 0)
}

// rejectMarker is the statement sent in place of rejection n. It fails in
// the server's parse analysis with SQLSTATE 22P02 and a message holding the
// marker, at exactly the point where the original would have run; if the
// transaction is already aborted the server answers 25P02 instead, and when
// it is skipping to Sync it answers nothing, as it would have for the
// original. serverToClient swaps the 22P02 for the rejection.
func rejectMarker(n uint64) string {
	return "SELECT '" + rejectPrefix + strconv.FormatUint(n, 10) + "'::pg_catalog.int4"
}

const rejectPrefix = "ttlproxy:reject:"
