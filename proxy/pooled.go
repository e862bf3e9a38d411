package proxy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/ttlproxy/ttlproxy/internal/wire"
	"github.com/ttlproxy/ttlproxy/proxy/internal/metrics"
	"github.com/ttlproxy/ttlproxy/proxy/internal/upstream"
)

// Transaction mode (docs/design/pooling.md): a client holds a server
// connection from the first message of a transaction (or of an implicit
// one) to the ReadyForQuery that ends it, then the server goes back to its
// pool (pool.go). The client pump and the relay are session mode's; what
// differs is here:
//
//   - the client logs in to the proxy (package auth), and the proxy logs
//     in to servers in its name (package upstream, serverlogin.go);
//   - each pooled server has a pump of its own for its whole life
//     (runServer), which relays what the server sends to the link it
//     serves and, at the ReadyForQuery that leaves the link idle outside a
//     transaction block, gives the server back (pooledLink.release);
//   - a client that holds no server acquires one at its next unit
//     (clientConn.claim, relink); a server that served another client, or
//     whose settings differ from the client's, is reset (RESET ROLE; RESET
//     ALL) and given the client's settings (settings.go) and named
//     prepared statements (statements.go) first;
//   - a client whose statements may leave state that cannot be carried
//     (temporary tables, LISTEN, advisory locks, WITH HOLD cursors, …:
//     pin.go) keeps its server for the rest of its session; the server is
//     closed when it leaves.

// pooledLink is the transaction-mode part of a client's link.
type pooledLink struct {
	pool    *pool
	client  uint64 // the client's id: affinity in the pool
	metrics *metrics.Set

	// ctx ends a wait for a server (the client is closed).
	ctx    context.Context
	cancel context.CancelFunc

	// mu guards held and unheld, and orders a release against the client's
	// and the server pump's other changes of them.
	mu sync.Mutex
	// held is the server the client holds, nil when none.
	held *pooledServer
	// ending: a server pump is ending the client's session (drop); unheld
	// is signalled when it is done.
	ending bool
	// unheld (capacity 1, made once) is signalled when held becomes nil,
	// once per hold: under mu by a release, by drop's caller once the
	// client's session has ended there.
	unheld chan struct{}
	// pinned: the client keeps its server (pin.go) until the server shows
	// the state gone (at a check-in asked for by pinCheck) or, forLife,
	// until it leaves; pinReason is the first reason, set by the client
	// pump before pinned.
	pinned    atomic.Bool
	pinCheck  atomic.Bool
	forLife   atomic.Bool
	confirmed atomic.Bool // pin.go's confirmPin
	pinReason string
	// spans is the pin scan's buffer (scanStatement), the client pump's.
	spans []int
	// cancels counts the CancelRequests being forwarded to held's server
	// (cancel.go): while not 0 the server is not released.
	cancels int

	// unnamed is the Parse message of the client's unnamed statement as
	// forwarded (empty: none), parsed on server unnamedOn; unnamedOK while
	// the client holds that server and nobody used it since. Owned by the
	// client pump.
	unnamed   []byte
	unnamedOn *serverConn
	unnamedOK bool
	// cur is the server the client pump last linked (it holds it while
	// pending is not releasedMark); prepGen counts the changes of the
	// client's named prepared statements (statements.go). Client pump only.
	cur     *pooledServer
	prepGen uint64

	// Settings (settings.go). dirty: a statement of the transaction may
	// have changed them (set by the client pump, cleared at check-in);
	// custom: the placeholders the client named (client pump), and
	// customNames a copy of them for the check-in's question; readback:
	// the check-in's answer, taken by the client pump at its next relink;
	// settings: the client's settings as last read (client pump);
	// checkedIn: signalled after a check-in's release.
	dirty       atomic.Bool
	custom      []string
	customNames atomic.Pointer[[]string]
	readback    atomic.Pointer[sessionSettings]
	settings    *sessionSettings
	checkedIn   chan struct{}
	// settingsStmts: the client's prepared statements (by name, "" the
	// unnamed one) whose text changes settings, for noteBind (pin.go;
	// client pump).
	settingsStmts map[string]bool

	// reported: the ParameterStatus values the client was sent
	// (paramstatus.go), set at its welcome.
	reported *reportedParams

	// onEnd ends the client's session when the pump of the server it held
	// stopped (the server or the client's socket failed, or shutdown); it
	// runs on that pump, which owns the client's writer then.
	onEnd func(pumpEnd)
}

// release gives sc back to the pool when it is the server l holds and the
// link is idle outside a transaction block, not pinned and not closing:
// pending goes from 0 to releasedMark, so that the client's next unit
// acquires a server again. Called by sc's pump at a ReadyForQuery, and by
// the client at the end of its startup; false when the link keeps sc.
func (pl *pooledLink) release(l *link, sc *serverConn) bool {
	pl.mu.Lock()
	ps := pl.held
	if ps == nil || ps.sc != sc || pl.pinned.Load() || pl.cancels > 0 || l.txStatus.Load() != 'I' ||
		!l.pending.CompareAndSwap(0, releasedMark) {
		pl.mu.Unlock()
		return false
	}
	pl.held = nil
	signal(pl.unheld)
	sc.link.Store(nil)
	pl.mu.Unlock()
	pl.pool.release(ps, pl.client, true)
	return true
}

// checkIn is the server pump's release after a transaction that may have
// changed the client's settings, or, for a pinned client (pins), what pins
// it: with pending 0 it marks the link (the client's next unit waits), asks
// the server on the pump's own writer (pinCheckMessages, readbackMessages),
// keeps the settings for the client, and releases the server, recording its
// settings' fingerprint, unless a pin's state is left (the client keeps the
// server, and the check is not asked again until a statement may end it).
// released is false when the client keeps the server or claimed it first
// (the next ReadyForQuery tries again). A failure of the server or the
// client's socket is returned as end (end.err set): the session ends. An
// answer that cannot be read closes the server and leaves the client's
// settings as they were.
func (pl *pooledLink) checkIn(l *link, sc *serverConn, pins bool) (released bool, end pumpEnd) {
	var custom []string
	if c := pl.customNames.Load(); c != nil {
		custom = *c
	}
	var msgs []byte
	if pins {
		msgs = pinCheckMessages(pl.pool.key.user, custom)
	} else {
		msgs = readbackMessages(custom)
	}
	pl.mu.Lock()
	ps := pl.held
	if ps == nil || ps.sc != sc || pl.cancels > 0 || !l.pending.CompareAndSwap(0, checkInMark) {
		pl.mu.Unlock()
		return false, pumpEnd{}
	}
	pl.mu.Unlock()
	if pins {
		pl.pinCheck.Store(false)
	}
	if _, err := sc.w.Write(msgs); err != nil {
		return false, pumpEnd{why: stopServerEnded, err: err, lastType: 'Z'}
	}
	if err := sc.w.Flush(); err != nil {
		return false, pumpEnd{why: stopServerEnded, err: err, lastType: 'Z'}
	}
	results, qerr, _, err := readResults(sc.r, l.cw, pl.reported, &l.lex)
	if err == nil {
		err = pl.reported.release(l.cw)
	}
	if err == nil {
		if ferr := l.cw.Flush(); ferr != nil {
			err = &wire.WriteError{Err: ferr}
		}
	}
	switch {
	case err == nil:
	case wire.IsWriteError(err):
		return false, pumpEnd{why: stopClientWrite, err: err}
	default:
		return false, pumpEnd{why: stopServerEnded, err: err, lastType: 'Z'}
	}
	reusable := qerr == nil
	if pins {
		reason, ok := "", false
		if reusable && len(results) == 2 && len(results[0]) == 1 {
			reason, ok = stillPinned(results[0][0])
			results = results[1:]
		}
		if !ok || reason != "" {
			// Still pinned (or no answer to trust): the client keeps the
			// server.
			pl.confirmPin()
			pl.mu.Lock()
			l.pending.CompareAndSwap(checkInMark, 0) // fails when closing: the client leaves
			pl.mu.Unlock()
			signal(pl.checkedIn)
			return false, pumpEnd{}
		}
		pl.unpin()
	}
	if reusable {
		st, perr := parseReadback(results)
		if perr != nil {
			reusable = false
		} else {
			pl.readback.Store(st)
			ps.settingsFP = st.fp
			pl.metrics.PoolReadbacks.Inc()
		}
	}
	pl.dirty.Store(false)
	pl.mu.Lock()
	pl.held = nil
	signal(pl.unheld)
	sc.link.Store(nil)
	l.pending.CompareAndSwap(checkInMark, releasedMark) // fails when closing: the client leaves
	pl.mu.Unlock()
	pl.pool.release(ps, pl.client, reusable)
	signal(pl.checkedIn)
	return true, pumpEnd{}
}

// drop ends the link's hold on sc, whose pump has stopped, and returns the
// channel the caller signals once it has ended the client's session
// (onEnd): nil when the link did not hold sc.
func (pl *pooledLink) drop(sc *serverConn) chan struct{} {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.held == nil || pl.held.sc != sc {
		return nil
	}
	pl.held, pl.ending = nil, true
	return pl.unheld
}

// signal wakes the one waiter of a channel of capacity 1, if any, without
// blocking.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// holding returns the server the client holds and the channel signalled
// when it no longer does; nil and the channel when it holds none.
func (pl *pooledLink) holding() (*pooledServer, <-chan struct{}) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return pl.held, pl.unheld
}

// claim announces one more ReadyForQuery owed (link.expect); in transaction
// mode a client that holds no server acquires one first. Errors: errShutdown
// when the link is closing; a *wire.ProtocolError (FATAL) when no server could be
// had, the session's end then decided.
func (s *clientConn) claim() error {
	for {
		switch s.link.expect() {
		case expectOK:
			return nil
		case expectClosed:
			return errShutdown
		case expectReleased:
			return s.relink(1)
		}
		// The server pump reads the settings back: wait for its release.
		select {
		case <-s.link.pooled.Load().checkedIn:
		case <-s.quit:
			return errQuit
		}
	}
}

// relink acquires a server from the client's pool and links it with pending
// set to owed (1 for the unit about to be forwarded, 0 at startup); when the
// server last served another client, its settings are reset first.
func (s *clientConn) relink(owed int64) error {
	l := s.link
	pl := l.pooled.Load()
	for {
		start := monoNow()
		ps, err := pl.pool.acquire(pl.ctx, s.id)
		if err != nil {
			return s.acquireFailed(err)
		}
		s.srv.metrics.PoolWait.Observe(float64(monoNow()-start) / 1e9)
		sc := ps.sc
		sc.mu.Lock()
		if sc.dead {
			sc.mu.Unlock()
			pl.pool.release(ps, s.id, false)
			continue
		}
		pl.mu.Lock()
		if !l.pending.CompareAndSwap(releasedMark, owed) {
			pl.mu.Unlock()
			sc.mu.Unlock()
			pl.pool.release(ps, s.id, true)
			return errShutdown
		}
		select { // a signal of an earlier hold nobody waited for
		case <-pl.unheld:
		default:
		}
		pl.held = ps
		sc.link.Store(l)
		pl.mu.Unlock()
		sc.mu.Unlock()
		l.server, l.target.sc = sc, sc
		pl.cur = ps
		l.txStatus.Store('I') // a pooled server is idle when handed out
		pl.unnamedOK = sc == pl.unnamedOn && ps.lastClient == s.id
		if owed > 0 {
			l.busySince.Store(monoNow())
			l.expected++
		}
		err = s.restoreSettings(ps)
		if owed > 0 {
			// The client's unit runs on it: statements the proxy cannot
			// see into (issue 29, class 7).
			ps.mayHoldState = true
		}
		return err
	}
}

// restoreSettings makes the settings of server ps the client's: when
// another client used it last, or its settings differ from the client's,
// it is reset to its login's (RESET ROLE; RESET ALL), written ahead of the
// client's first message, and the client's own settings, if any, are
// applied in one round trip before the client's statement. A server on
// which another client ran statements (mayHoldState) gets the complete
// reset (completeResetQuery) instead: whatever the statements were, a
// function, trigger, view or default they reached may have left state the
// proxy did not see. A failure (a role the client may no longer take, say)
// ends the session with the server's SQLSTATE: the statement never runs
// under other settings or state. The client's named statements follow
// (restoreStatements).
func (s *clientConn) restoreSettings(ps *pooledServer) error {
	l, pl := s.link, s.link.pooled.Load()
	if rb := pl.readback.Swap(nil); rb != nil {
		pl.settings = rb
	}
	var want uint64
	if pl.settings != nil {
		want = pl.settings.fp
	}
	complete := ps.mayHoldState && ps.lastClient != s.id
	if !complete && ps.settingsFP == want && (ps.lastClient == 0 || ps.lastClient == s.id) {
		return s.restoreStatements(ps)
	}
	pl.unnamedOK = false // the reset's Query drops it
	if complete {
		ps.mayHoldState = false
		ps.prepOwner = 0 // DEALLOCATE ALL: the client's are prepared again
	}
	if want == 0 {
		// Only the reset, which cannot fail for want of a privilege: sent
		// ahead of the client's first message, flushed with it, its answer
		// dropped by the server pump. No round trip of its own.
		reset := resetQuery
		if complete {
			reset = completeResetQuery
		}
		l.answers.swallow.Add(1)
		if _, err := l.sw.Write(reset); err != nil {
			return &wire.WriteError{Err: err}
		}
		ps.settingsFP = 0
		return s.restoreStatements(ps)
	}
	msgs, n := applyMessages(pl.settings, complete)
	res, err := l.ask(msgs, n, s.quit)
	if err != nil {
		return err
	}
	if res.qerr != nil {
		s.srv.metrics.PoolApplies.WithLabelValues("failed").Inc()
		msg := "ttlproxy: could not restore this session's settings: " + res.qerr.Message
		s.logger().Info("closing client: settings not restored", "sqlstate", res.qerr.Code, "err", res.qerr.Message)
		s.endWithFatal(res.qerr.Code, msg)
		return &wire.ProtocolError{Code: res.qerr.Code, Msg: msg}
	}
	ps.settingsFP = want
	s.srv.metrics.PoolApplies.WithLabelValues("ok").Inc()
	return s.restoreStatements(ps)
}

// noteUnnamed records the Parse message msg, about to be forwarded, when it
// is of the unnamed statement (name empty), in transaction mode.
func (s *clientConn) noteUnnamed(name, msg []byte) {
	pl := s.link.pooled.Load()
	if pl == nil || len(name) > 0 {
		return
	}
	pl.unnamed = append(pl.unnamed[:0], msg...)
	pl.unnamedOn, pl.unnamedOK = s.link.server, true
	if cap(pl.unnamed) > maxKeptBuffer {
		pl.unnamed, pl.unnamedOn, pl.unnamedOK = nil, nil, false
	}
}

// reparseUnnamed, for a Bind or Describe that starts a batch (total bytes,
// unread in r), parses the client's unnamed statement again on the server
// the client holds now when the message names it and the server does not
// have it (the client parsed it in an earlier transaction, on another
// server or before another client used this one): drivers describe a
// statement in one exchange and bind it in the next (pgx's
// QueryExecModeCacheDescribe). The Parse and a Sync go as a question of the
// proxy's own, whose answer the client does not see; a failure leaves the
// client's message to fail as the server would fail it (26000).
func (s *clientConn) reparseUnnamed(typ byte, r *wire.Reader, total int) error {
	pl := s.link.pooled.Load()
	if pl.unnamedOK || len(pl.unnamed) == 0 {
		return nil
	}
	b, err := r.Peek(min(total, r.Size()))
	if err != nil && len(b) < total {
		return nil // the relay reports the short read
	}
	body := b[wire.HeaderLen:]
	switch typ {
	case 'B':
		if name, ok := bindStatement(body); !ok || len(name) > 0 {
			return nil
		}
	case 'D':
		if len(body) < 2 || body[0] != 'S' || body[1] != 0 {
			return nil
		}
	}
	msgs := append(append([]byte(nil), pl.unnamed...), 'S', 0, 0, 0, 4)
	if _, err := s.link.ask(msgs, 1, s.quit); err != nil {
		return err
	}
	pl.unnamedOn, pl.unnamedOK = s.link.server, true
	return nil
}

// acquireFailed ends the session of a client that could not get a server:
// err is pool.acquire's.
func (s *clientConn) acquireFailed(err error) error {
	var pe *wire.ProtocolError
	switch {
	case errors.As(err, &pe):
	case errors.Is(err, context.Canceled):
		pe = &wire.ProtocolError{Code: codeAdminShutdown, Msg: "terminating connection due to proxy shutdown"}
	default:
		pe = loginError(err)
	}
	s.srv.metrics.PoolNoServer.WithLabelValues(pe.Code).Inc()
	s.logger().Info("closing client: no server connection", "sqlstate", pe.Code, "err", pe.Msg)
	b := wire.ErrorResponse(nil, "FATAL", pe.Code, pe.Msg, "", "")
	s.fatal.CompareAndSwap(nil, &b)
	s.link.markClosed()
	return pe
}

// startPooled logs the client in to the proxy (the StartupMessage of
// protocol version, with parameters params) and attaches it to the pool of
// its key; its session starts in forwardPooled. The proxy speaks protocol
// 3.0 and 3.2 to clients itself (servers are logged in with 3.0: the two
// differ only in the length of the cancel key, which the proxy makes), and
// answers a later minor version or _pq_ options with
// NegotiateProtocolVersion, as PostgreSQL does.
func (s *clientConn) startPooled(version uint32, params map[string]string) error {
	var unknown []string
	keyed := make(map[string]string, len(params))
	for k, v := range params {
		switch {
		case strings.HasPrefix(k, "_pq_."):
			unknown = append(unknown, k)
		case k != "user" && k != "database":
			keyed[k] = v
		}
	}
	if minor := version & 0xffff; minor > 2 || minor == 1 || len(unknown) > 0 {
		newest := uint32(0)
		if minor >= 2 {
			newest = 2
		}
		slices.Sort(unknown)
		b, _ := (&pgproto3.NegotiateProtocolVersion{NewestMinorProtocol: newest, UnrecognizedOptions: unknown}).Encode(nil)
		if _, err := s.nc.Write(b); err != nil {
			return fmt.Errorf("writing NegotiateProtocolVersion: %w", err)
		}
		for _, k := range unknown {
			delete(params, k)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.rs.Load().clientLoginTimeout)
	defer cancel()
	login, err := s.srv.auth.Authenticate(ctx, s.nc, s.user, s.database)
	if err != nil {
		return err
	}
	s.authOK = login.OK
	key := poolKey{database: s.database, user: s.user, params: keyParams(keyed), settings: login.Settings}
	startup := make(map[string]string, len(params)+1)
	for k, v := range params {
		startup[k] = v
	}
	startup["database"] = s.database
	p := s.srv.pools.get(key, startup)
	p.setSecret(login)
	pctx, pcancel := context.WithCancel(context.Background())
	s.link.pending.Store(releasedMark)
	s.link.pooled.Store(&pooledLink{pool: p, client: s.id, metrics: s.srv.metrics, ctx: pctx, cancel: pcancel, onEnd: s.serverEnded,
		checkedIn: make(chan struct{}, 1), unheld: make(chan struct{}, 1)})
	// Registered last: a CancelRequest may find the client from now on.
	_, err = s.srv.cancelKeys.issue(s)
	return err
}

// forwardPooled runs a transaction-mode session: the welcome (ParameterStatus,
// BackendKeyData, ReadyForQuery, after the catalog and the session state are
// read on a server of the pool), then the client pump on this goroutine; the
// servers' pumps relay the answers.
func (s *clientConn) forwardPooled() error {
	l := s.link
	s.cr = wire.NewReader(clientReader{s.nc, s}, wire.ClientBufSize, l.owesNothing)
	l.cw = wire.NewWriter(s.nc)
	l.sw = wire.NewWriter(&l.target)
	err := s.welcome()
	if err == nil {
		err = s.pump("client_to_server", s.nc, s.clientToServer)
	}
	s.endPooled()
	return err
}

// welcome reads the catalog and the session state on a server of the pool
// and sends the client what a server sends after authentication.
func (s *clientConn) welcome() error {
	l, pl := s.link, s.link.pooled.Load()
	params, ok := s.welcomeFromBaseline(pl.pool)
	if !ok {
		var err error
		if params, err = s.welcomeFromServer(); err != nil {
			return err
		}
	}
	close(s.ready)
	pl.reported = newReportedParams(params)
	b := s.authOK
	s.authOK = nil
	for _, p := range params {
		l.lex.set(p.Name, p.Value)
	}
	if s.st.track && l.lex.bits.Load()&lexHighBytes != 0 {
		_, _ = l.cw.Write(append(b, startupLexRefusal()...))
		_ = l.cw.Flush()
		s.closing.Store(true)
		return errUnsafeEncoding
	}
	for _, p := range params {
		b, _ = (&pgproto3.ParameterStatus{Name: p.Name, Value: p.Value}).Encode(b)
	}
	b, _ = (&pgproto3.BackendKeyData{ProcessID: s.cancelKey.pid, SecretKey: s.cancelKey.secret[:]}).Encode(b)
	_, _ = l.cw.Write(b)
	l.idleAt.Store(monoNow())
	l.txStatus.Store('I')
	l.writeZ('I')
	if err := l.cw.Flush(); err != nil {
		s.closing.Store(true)
		return fmt.Errorf("client: %w", err)
	}
	return nil
}

// poolBaseline is a pool's welcome for new clients: the ParameterStatus
// values of a server at its login's settings and the session state read
// there, valid under rule set rs (the state query's columns depend on it).
type poolBaseline struct {
	rs     *ruleSet
	params []upstream.ParamStatus
	row    stateRow
}

// welcomeFromBaseline sets the new client's session state from its pool's
// baseline and a fresh shared catalog, so that its login takes no server;
// false when there is no baseline for the client's rule set or no catalog
// young enough (welcomeFromServer reads them then).
func (s *clientConn) welcomeFromBaseline(p *pool) ([]upstream.ParamStatus, bool) {
	b := p.baseline.Load()
	rs := s.rs.Load()
	if b == nil || b.rs != rs {
		return nil, false
	}
	if len(rs.rules) > 0 {
		cat, at, gen := s.startupCatalog(rs)
		if cat == nil {
			return nil, false
		}
		s.st.track = true
		s.st.setCatalog(cat, at)
		s.st.catalogGen = gen
		row := b.row
		row.TempShadows = nil
		s.st.apply(&row)
	}
	return b.params, true
}

// welcomeFromServer reads the catalog and the session state on a server of
// the pool, at its login's settings, and records them as the pool's
// baseline.
func (s *clientConn) welcomeFromServer() ([]upstream.ParamStatus, error) {
	l, pl := s.link, s.link.pooled.Load()
	if err := s.relink(0); err != nil {
		return nil, err
	}
	ps, _ := pl.holding()
	if ps == nil {
		return nil, errQuit
	}
	rs := s.rs.Load()
	b := &poolBaseline{rs: rs, params: ps.welcome.Params}
	var results [][][]string
	if len(rs.rules) > 0 {
		s.st.track = true
		err := s.loadCatalog(func(q []byte) ([][][]string, *pgproto3.ErrorResponse, byte, error) {
			res, err := l.ask(q, 1, s.quit)
			results = res.results
			return res.results, res.qerr, res.status, err
		})
		if err != nil {
			return nil, err
		}
	}
	if !pl.release(l, ps.sc) {
		return nil, s.violation(codeInternalError, "ttlproxy: the server connection was not idle after startup")
	}
	if len(rs.rules) == 0 {
		pl.pool.baseline.Store(b)
	} else if row, ok := stateResult(results, rs.queries.names); ok && len(row.TempShadows) == 0 {
		b.row = row
		pl.pool.baseline.Store(b)
	}
	return b.params, nil
}

// endPooled ends a transaction-mode session once the client pump has
// stopped: a server the client still holds (mid-transaction or pinned) is
// closed, and its pump ends the session as in session mode (serverEnded);
// otherwise the client is sent the FATAL decided for it, if any.
func (s *clientConn) endPooled() {
	l, pl := s.link, s.link.pooled.Load()
	l.markClosed()
	pl.cancel()
	pl.unpin()
	pl.mu.Lock()
	ps, ending, unheld := pl.held, pl.ending, pl.unheld
	pl.mu.Unlock()
	if ps != nil || ending {
		// A server pump ends the session (serverEnded): a held server is
		// closed to make it, and the client's socket stays open until it
		// has said why.
		if ps != nil {
			ps.sc.close()
		}
		<-unheld
	} else if !s.ended.Load() {
		if f := s.fatal.Load(); f != nil {
			_ = s.conn().SetWriteDeadline(time.Now().Add(finalWriteTimeout))
			_, _ = l.cw.Write(*f)
			_ = l.cw.Flush()
			s.lingerClient()
		}
	}
	s.quitOnce.Do(func() { close(s.quit) })
	s.srv.cancelKeys.forget(s)
	if s.lingering.Load() {
		s.drainClient()
	}
}

// serverEnded is pooledLink.onEnd: the pump of the server the client held
// has stopped, and the session ends as serverToClient ends it in session
// mode. It runs on that pump.
func (s *clientConn) serverEnded(end pumpEnd) {
	s.ended.Store(true)
	switch end.why {
	case stopServerEnded:
		_ = s.upstreamEnded(end.err, end.partial, end.lastType)
	case stopClientWrite:
		_ = s.clientWriteFailed(end.err)
	default: // stopShutdown
		_ = s.closeAtShutdown()
	}
	s.quitOnce.Do(func() { close(s.quit) })
}

// startServer sets up a new pooled server's buffers and starts its pump
// (pool.serve): before the pool hands the server out.
func (srv *Server) startServer(ps *pooledServer) {
	sc := ps.sc
	sc.startBuffers(func() bool {
		l := sc.linked()
		return l == nil || l.owesNothing()
	})
	srv.serverPumps.Add(1)
	go func() {
		defer srv.serverPumps.Done()
		srv.runServer(ps)
	}()
}

// runServer is a pooled server's pump, for the server's whole life: it
// relays what the server sends to the link it serves, and drops what it
// sends while it serves none (a NoticeResponse, the FATAL before a
// terminated backend closes); when the connection ends it takes the server
// out of its pool, or ends the session of the client that held it.
func (srv *Server) runServer(ps *pooledServer) {
	sc := ps.sc
	loop := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				srv.log.Error("server pump panic", "panic", fmt.Sprint(r))
				err = fmt.Errorf("panic in server pump: %v", r)
				srv.serverGone(ps, pumpEnd{why: stopServerEnded, err: err, partial: true})
			}
		}()
		return srv.pumpServer(ps)
	}
	if rc := wire.ConnOf(sc.nc); rc != nil {
		_ = rc.Drive(loop)
	} else {
		_ = loop()
	}
}

// pumpServer is runServer's loop.
func (srv *Server) pumpServer(ps *pooledServer) error {
	sc := ps.sc
	var lastType byte
	var buf []byte
	for {
		_, length, err := wire.PeekHeader(sc.r)
		if err == nil && length < 4 {
			err = fmt.Errorf("invalid message length %d from upstream", length)
		}
		if err != nil {
			srv.serverGone(ps, pumpEnd{why: stopServerEnded, err: err, lastType: lastType})
			return err
		}
		l := sc.linked()
		if l == nil {
			if buf, err = wire.ReadMessage(sc.r, buf, int(length)+1); err != nil {
				srv.serverGone(ps, pumpEnd{why: stopServerEnded, err: err, partial: true})
				return err
			}
			if cap(buf) > maxKeptBuffer {
				buf = nil
			}
			continue
		}
		end := l.relay(sc, srv.latency, true, lastType)
		switch end.why {
		case stopReleased, stopUnlinked:
			lastType = end.lastType
		default:
			srv.serverGone(ps, end)
			return end.err
		}
	}
}

// serverGone handles the end of a pooled server's pump: the client that
// held the server has its session ended (onEnd) and the server closed;
// an idle server is taken out of its pool.
func (srv *Server) serverGone(ps *pooledServer, end pumpEnd) {
	sc := ps.sc
	sc.mu.Lock()
	sc.dead = true
	l := sc.link.Load()
	var unheld chan struct{}
	if l != nil {
		unheld = l.pooled.Load().drop(sc)
	}
	sc.mu.Unlock()
	if unheld != nil {
		// The client's session ends here; endPooled waits for it.
		pl := l.pooled.Load()
		pl.onEnd(end)
		signal(unheld)
		ps.pool.release(ps, pl.client, false)
		return
	}
	sc.close()
	ps.pool.remove(ps)
}

// poolSet is the server's pools by key, for transaction mode.
type poolSet struct {
	srv *Server
	mu  sync.Mutex
	m   map[poolKey]*pool
	dbs map[string]*dbSlots
	cfg poolConfig
	// maxDB is max_db_connections.
	maxDB  int
	closed bool
}

func newPoolSet(srv *Server, cfg poolConfig, maxDB int) *poolSet {
	return &poolSet{srv: srv, m: make(map[poolKey]*pool), dbs: make(map[string]*dbSlots), cfg: cfg, maxDB: maxDB}
}

// get returns the pool of key, made on first use with startup as its
// logins' StartupMessage.
func (ps *poolSet) get(key poolKey, startup map[string]string) *pool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if p := ps.m[key]; p != nil {
		return p
	}
	db, ok := ps.dbs[key.database]
	if !ok {
		db = newDBSlots(ps.maxDB)
		ps.dbs[key.database] = db
	}
	srv := ps.srv
	login := func(ctx context.Context, lg serverLogin) (*serverConn, *upstream.Welcome, error) {
		sc, w, err := srv.loginServer(ctx, lg)
		if errors.Is(err, upstream.ErrLogin) {
			srv.metrics.UpstreamErrors.Inc()
		}
		return sc, w, err
	}
	p := newPool(key, startup, ps.cfg, login, db)
	p.serve = ps.srv.startServer
	p.obs = &loginLog{srv: srv}
	if ps.closed {
		p.close()
	}
	ps.m[key] = p
	return p
}

// pools returns the pools at this moment.
func (ps *poolSet) pools() []*pool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	pools := make([]*pool, 0, len(ps.m))
	for _, p := range ps.m {
		pools = append(pools, p)
	}
	return pools
}

// maintain runs each pool's maintenance (the sweep's tick).
func (ps *poolSet) maintain() {
	for _, p := range ps.pools() {
		p.maintain()
	}
}

// stats sums the pools' counts (longestWait: the longest of them); zero
// for a nil set (session mode).
func (ps *poolSet) stats() poolStats {
	var sum poolStats
	if ps == nil {
		return sum
	}
	for _, p := range ps.pools() {
		sum.add(p.stats())
	}
	return sum
}

// close closes every pool (shutdown): idle servers get Terminate.
func (ps *poolSet) close() {
	ps.mu.Lock()
	ps.closed = true
	ps.mu.Unlock()
	for _, p := range ps.pools() {
		p.close()
	}
}

// loginLog is a pool's loginObserver: metrics, and a log line at most once
// a second per pool while its logins fail, and one when they succeed again.
type loginLog struct {
	srv *Server
	// logged is when a failure was last logged (monoNow; 0: never).
	logged atomic.Int64
}

func (o *loginLog) loginFailed(key poolKey, err error, pe *wire.ProtocolError, permanent bool, fails int, retry time.Duration, waiting int) {
	o.srv.metrics.PoolLoginFailures.WithLabelValues(pe.Code).Inc()
	now := monoNow()
	last := o.logged.Load()
	if last != 0 && now-last < int64(time.Second) || !o.logged.CompareAndSwap(last, now) {
		return
	}
	clients := "wait"
	if permanent {
		clients = "answered with the error"
	}
	o.srv.log.Warn("server login failed", "database", key.database, "user", key.user, "sqlstate", pe.Code,
		"err", err, "failed_in_a_row", fails, "retry_in", retry, "waiting_clients", waiting, "clients", clients)
}

func (o *loginLog) loginRetried(poolKey) { o.srv.metrics.PoolLoginRetries.Inc() }

func (o *loginLog) loginRecovered(key poolKey, outage time.Duration, fails int) {
	o.srv.metrics.PoolRecovery.Observe(outage.Seconds())
	o.logged.Store(0)
	o.srv.log.Info("server logins succeed again", "database", key.database, "user", key.user,
		"after", outage.Round(time.Millisecond), "failed_logins", fails)
}
