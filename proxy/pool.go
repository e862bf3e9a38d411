package proxy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ttlproxy/ttlproxy/internal/wire"
	"github.com/ttlproxy/ttlproxy/proxy/internal/auth"
	"github.com/ttlproxy/ttlproxy/proxy/internal/upstream"
)

// A pool holds the server connections of one pool key for transaction
// pooling (docs/design/pooling.md §1): an idle stack reused last in, first
// out, so that few servers stay warm (PgBouncer's default); a first in,
// first out queue of clients waiting for one; the limits of the pool and of
// its database; and the server logins, made in the name of the pool's last
// client login. It knows nothing of what runs on a server: a client holds
// one from acquire to release.

// poolKey identifies a pool: servers of one key are interchangeable but
// for the session state a client leaves on them, which the relay resets.
type poolKey struct {
	database, user string
	// params are the keyed startup parameters (all but user, database and
	// pool_unkeyed_parameters), canonical: "name=value\x00…" sorted by name.
	params string
	// settings is the hash of the role's and database's pg_db_role_setting
	// rows from auth_query, "" without one: an ALTER ROLE … SET makes new
	// logins land in a new pool, as a new session would see it.
	settings string
}

// keyParams is the canonical form of startup parameters for poolKey.params.
func keyParams(params map[string]string) string {
	names := make([]string, 0, len(params))
	for n := range params {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		b.WriteString(n)
		b.WriteByte('=')
		b.WriteString(params[n])
		b.WriteByte(0)
	}
	return b.String()
}

// poolConfig are a pool's limits and timeouts, PgBouncer's settings of the
// same names (design §6). Zero durations disable what they bound, except
// connectTimeout (DefaultDialTimeout then).
type poolConfig struct {
	// size is default_pool_size: servers the pool may hold (≥ 1).
	size int
	// minSize is min_pool_size: servers kept open once a login has given
	// the pool credentials.
	minSize int
	// reserveSize servers more may be opened for a client that has waited
	// reserveTimeout (reserve_pool_size, reserve_pool_timeout).
	reserveSize    int
	reserveTimeout time.Duration
	// lifetime closes a server at its release once it is older
	// (server_lifetime); idleTimeout closes one idle for longer
	// (server_idle_timeout), never below minSize.
	lifetime, idleTimeout time.Duration
	// connectTimeout bounds one server login (server_connect_timeout).
	// loginRetry (server_login_retry) bounds the wait before a failed
	// login is tried again (loginBackoff); after a failure that will not
	// heal by itself (loginPermanent), clients that would need a new
	// server fail at once for that long.
	connectTimeout, loginRetry time.Duration
	// waitTimeout bounds a client's wait for a server (query_wait_timeout).
	waitTimeout time.Duration
	// maxPinned bounds the clients pinned at once (max_pinned_connections;
	// negative: no bound).
	maxPinned int
}

// loginFunc logs in one server connection (Server.loginServer).
type loginFunc func(ctx context.Context, lg serverLogin) (*serverConn, *upstream.Welcome, error)

// pooledServer is one server connection of a pool.
type pooledServer struct {
	pool    *pool
	sc      *serverConn
	welcome *upstream.Welcome
	// born is when the login finished, idleSince when the server was last
	// put on the idle stack (monoNow).
	born, idleSince int64
	// lastClient is the id of the client that held it last (0: none), so
	// that a client may get back the server whose state it left.
	lastClient uint64
	// settingsFP is the fingerprint of the session-level settings it has
	// (sessionSettings.fp; 0: its login's), written by the client that
	// holds it and by its pump at check-in.
	settingsFP uint64
	// prepOwner is the client whose named prepared statements it holds (0:
	// none), as of that client's statement generation prepGen
	// (pooledLink.prepGen); written by the client that holds it.
	prepOwner, prepGen uint64
	// mayHoldState: a client ran statements on it since its last complete
	// reset (completeResetQuery), which the next other client gets first;
	// written by the client that holds it.
	mayHoldState bool
}

// waiter is one client waiting in a pool's queue.
type waiter struct {
	since  int64  // monoNow at enqueue
	client uint64 // the client's id (status)
	// handed is set under the pool's lock when the waiter was given a
	// result; ch then holds it.
	handed bool
	ch     chan waitResult
}

type waitResult struct {
	ps  *pooledServer
	err error
}

// Errors of acquire.
var (
	// errPoolClosed: the pool was closed (shutdown, or its key dropped).
	errPoolClosed = &wire.ProtocolError{Code: codeAdminShutdown, Msg: "terminating connection due to proxy shutdown"}
)

// waitTimeoutError is the answer to a client that waited query_wait_timeout
// (53300, as PgBouncer's "query_wait_timeout"; FATAL: the client is closed).
func waitTimeoutError(d time.Duration) error {
	return &wire.ProtocolError{Code: codeTooManyConnections,
		Msg: fmt.Sprintf("ttlproxy: query_wait_timeout: no server connection became free within %s", d)}
}

// loginError is the wire.ProtocolError a client gets for a failed server login:
// the server's own SQLSTATE and message, or 08001.
func loginError(err error) *wire.ProtocolError {
	var se *upstream.ServerError
	if errors.As(err, &se) {
		return &wire.ProtocolError{Code: se.Code, Msg: se.Message}
	}
	return &wire.ProtocolError{Code: codeUnableToConnect, Msg: "ttlproxy: could not connect to the upstream server"}
}

// loginPermanent reports a failed server login that will not heal by
// itself, which PgBouncer too answers clients with at once: the server
// refused the role or its password (class 28: 28P01, 28000, a role that
// does not exist), the database does not exist (3D000), or the server asks
// for an authentication the client's login left nothing to answer with.
// Anything else (57P03 while the server starts or stops, 53300 at its
// max_connections, class 08, a refused or reset connection, an end of
// stream during the login) is transient: clients wait while the login is
// tried again.
func loginPermanent(err error) bool {
	var se *upstream.ServerError
	if !errors.As(err, &se) {
		return false
	}
	return se.Unanswerable || strings.HasPrefix(se.Code, "28") || se.Code == codeInvalidCatalogName
}

// First and longest wait before a transiently failed server login is tried
// again: 100 ms, doubling while logins keep failing, up to 1 s or
// server_login_retry if less (PgBouncer waits all of server_login_retry, 15
// s by default, at once). A refused or 57P03 login costs the server little,
// and a server back after an outage of any length serves the waiting
// clients within about a second.
const (
	loginBackoffFirst = 100 * time.Millisecond
	loginBackoffMax   = time.Second
)

// loginBackoff is the wait after the fails-th transient failed login in a
// row (≥ 1): at most limit (server_login_retry) and loginBackoffMax, at
// least loginBackoffFirst.
func loginBackoff(fails int, limit time.Duration) time.Duration {
	limit = min(limit, loginBackoffMax)
	d := loginBackoffFirst
	for i := 1; i < fails && d < limit; i++ {
		d *= 2
	}
	return max(min(d, limit), loginBackoffFirst)
}

// loginObserver hears of a pool's failed and recovered server logins
// (metrics and logs: the pool's owner; nil: nobody).
type loginObserver interface {
	// loginFailed: a login of pool key failed with err (its clients'
	// answer pe), the fails-th in a row; the next is tried after retry;
	// the waiting clients wait (permanent false) or were answered with it.
	loginFailed(key poolKey, err error, pe *wire.ProtocolError, permanent bool, fails int, retry time.Duration, waiting int)
	// loginRetried: a login started after a failed one.
	loginRetried(key poolKey)
	// loginRecovered: a login succeeded after fails failed ones, the
	// first outage before.
	loginRecovered(key poolKey, outage time.Duration, fails int)
}

// pool is the servers of one key. Its methods are safe for concurrent use.
type pool struct {
	key   poolKey
	login loginFunc
	// params is the StartupMessage of the pool's logins.
	params map[string]string
	// db bounds the servers of the pool's database together
	// (max_db_connections); nil: no bound.
	db *dbSlots
	// serve, when set, starts a new server's pump (Server.runServer), on a
	// goroutine of its own, from its login on.
	serve func(*pooledServer)
	// baseline is what a new client of the pool is welcomed with, read on a
	// server at its login's settings (pooled.go); nil until a first login.
	baseline atomic.Pointer[poolBaseline]
	// obs hears of failed and recovered logins; set before the first.
	obs loginObserver

	mu  sync.Mutex
	cfg poolConfig
	// secret is what the last client login left to log in with (nil before
	// the first: no server can be opened).
	secret *auth.Login
	// idle is the stack of idle servers, its top last.
	idle []*pooledServer
	// waiters is the queue of clients waiting, its head first.
	waiters []*waiter
	// active counts the servers held by clients, logins those being opened.
	active, logins int
	// loginErr is the last failed login, at loginErrAt (monoNow), the
	// loginFails-th in a row since outageAt; cleared by a successful one.
	// No login starts before retryAt (heldLocked); loginPerm: loginErr is
	// permanent (loginPermanent), and clients that would need a new server
	// get it for loginRetry.
	loginErr   *wire.ProtocolError
	loginErrAt int64
	loginFails int
	loginPerm  bool
	retryAt    int64
	outageAt   int64
	// retry starts the logins the waiting clients need at retryAt
	// (retryLaterLocked); retrying while it is set to.
	retry    *time.Timer
	retrying bool
	// dbStarved: the last count of logins was cut short by the database's
	// limit (max_db_connections).
	dbStarved bool
	// pinned counts the clients whose pin outlasted a transaction (pin.go).
	pinned int
	closed bool
	// wg counts the login goroutines.
	wg sync.WaitGroup
}

func newPool(key poolKey, params map[string]string, cfg poolConfig, login loginFunc, db *dbSlots) *pool {
	cfg.size = max(cfg.size, 1)
	if cfg.connectTimeout <= 0 {
		cfg.connectTimeout = DefaultDialTimeout
	}
	p := &pool{key: key, params: params, cfg: cfg, login: login, db: db}
	db.add(p)
	return p
}

// setConfig applies new limits (a reload); servers above a smaller size are
// closed as they are released or idle out.
func (p *pool) setConfig(cfg poolConfig) {
	cfg.size = max(cfg.size, 1)
	if cfg.connectTimeout <= 0 {
		cfg.connectTimeout = DefaultDialTimeout
	}
	p.mu.Lock()
	p.cfg = cfg
	p.mu.Unlock()
}

// pinRoom reports whether one more client may be pinned: force, or fewer
// than max_pinned_connections confirmed pins; limit is the bound in force.
func (p *pool) pinRoom(force bool) (ok bool, limit int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return force || p.cfg.maxPinned < 0 || p.pinned < p.cfg.maxPinned, p.cfg.maxPinned
}

// addPin counts confirmed pins: +1 or -1.
func (p *pool) addPin(n int) {
	p.mu.Lock()
	p.pinned += n
	p.mu.Unlock()
}

// setSecret records what a client login left; new servers log in with it.
func (p *pool) setSecret(s *auth.Login) {
	p.mu.Lock()
	p.secret = s
	p.mu.Unlock()
}

// total is the number of servers the pool holds or is opening. p.mu held.
func (p *pool) total() int { return p.active + len(p.idle) + p.logins }

// acquire returns a server for client, waiting in the queue when none is
// idle, at most the pool's waitTimeout; ctx ends the wait (the client went
// away). A client gets back the server it held last when that one is idle
// and nobody held it since; otherwise the top of the stack. Errors:
// errPoolClosed, waitTimeoutError, the failed login (loginError gives the
// client's answer) when the pool has no server to wait for, ctx.Err().
func (p *pool) acquire(ctx context.Context, client uint64) (*pooledServer, error) {
	p.mu.Lock()
	for {
		if p.closed {
			p.mu.Unlock()
			return nil, errPoolClosed
		}
		ps := p.popIdleLocked(client)
		if ps == nil {
			break
		}
		p.active++
		p.mu.Unlock()
		if !ps.sc.peekEnded() {
			return ps, nil
		}
		// Killed while idle (a restart of the server), and its pump has
		// not seen it yet: another, or a new login.
		p.release(ps, client, false)
		p.mu.Lock()
	}
	now := monoNow()
	if p.loginPerm && p.active == 0 && p.heldLocked(now) {
		err := p.loginErr
		p.mu.Unlock()
		return nil, err
	}
	w := &waiter{since: now, client: client, ch: make(chan waitResult, 1)}
	p.waiters = append(p.waiters, w)
	timeout := p.cfg.waitTimeout
	n := p.startLoginsLocked(now)
	starved := p.dbStarved
	p.mu.Unlock()
	p.runLogins(n)
	if starved {
		p.db.evictFor(p)
	}

	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	select {
	case r := <-w.ch:
		return r.ps, r.err
	case <-expired:
		if r, ok := p.leave(w); ok {
			return r.ps, r.err
		}
		p.mu.Lock()
		lerr := p.loginErr
		p.mu.Unlock()
		if lerr != nil {
			// Waited for a server that does not let the proxy in: say
			// why, with the server's SQLSTATE.
			return nil, &wire.ProtocolError{Code: lerr.Code,
				Msg: fmt.Sprintf("ttlproxy: query_wait_timeout: no server connection within %s; the last server login failed: %s", timeout, lerr.Msg)}
		}
		return nil, waitTimeoutError(timeout)
	case <-ctx.Done():
		if r, ok := p.leave(w); ok && r.ps != nil {
			p.release(r.ps, 0, true)
		}
		return nil, ctx.Err()
	}
}

// leave takes w out of the queue; when it was handed a result first, that
// result and true.
func (p *pool) leave(w *waiter) (waitResult, bool) {
	p.mu.Lock()
	if w.handed {
		p.mu.Unlock()
		return <-w.ch, true
	}
	for i, x := range p.waiters {
		if x == w {
			p.waiters = slices.Delete(p.waiters, i, i+1)
			break
		}
	}
	p.mu.Unlock()
	return waitResult{}, false
}

// popIdleLocked takes the idle server client held last if nobody held it
// since, else the top of the stack; nil when none is idle. p.mu held.
func (p *pool) popIdleLocked(client uint64) *pooledServer {
	n := len(p.idle)
	if n == 0 {
		return nil
	}
	i := n - 1
	if client != 0 {
		for j := n - 1; j >= 0; j-- {
			if p.idle[j].lastClient == client {
				i = j
				break
			}
		}
	}
	ps := p.idle[i]
	p.idle = slices.Delete(p.idle, i, i+1) // clears the vacated slot
	return ps
}

// handLocked gives ps (or err) to the head waiter; false when nobody
// waits. p.mu held.
func (p *pool) handLocked(r waitResult) bool {
	if len(p.waiters) == 0 {
		return false
	}
	w := p.waiters[0]
	p.waiters[0] = nil
	p.waiters = p.waiters[1:]
	w.handed = true
	w.ch <- r
	return true
}

// release returns a server acquired from the pool by client (its id, 0 for
// none). reusable is false when its state is unknown (a client gone
// mid-transaction, an error on its socket): it is closed then, as it is
// past server_lifetime or beyond a pool made smaller by a reload. Otherwise
// it goes to the head waiter, or onto the idle stack.
func (p *pool) release(ps *pooledServer, client uint64, reusable bool) {
	p.mu.Lock()
	p.active--
	ps.lastClient = client
	now := monoNow()
	if !reusable || p.closed || p.expiredLocked(ps, now) || p.total()+1 > p.cfg.size+p.cfg.reserveSize {
		p.mu.Unlock()
		ps.sc.terminate()
		p.freed()
		return
	}
	if p.handLocked(waitResult{ps: ps}) {
		p.active++
		p.mu.Unlock()
		return
	}
	ps.idleSince = now
	p.idle = append(p.idle, ps)
	p.mu.Unlock()
}

// expiredLocked reports a server past server_lifetime.
func (p *pool) expiredLocked(ps *pooledServer, now int64) bool {
	return p.cfg.lifetime > 0 && now-ps.born >= int64(p.cfg.lifetime)
}

// freed follows a server's close or a failed login: the database slot goes
// back, and the waiting clients of the pool (of every pool of the database
// when it has a limit) get the logins they need.
func (p *pool) freed() {
	if p.db.limited() {
		p.db.give()
		return
	}
	p.kick()
}

// kick starts the logins the waiting clients need, now that a server or a
// database slot may have been freed.
func (p *pool) kick() {
	p.mu.Lock()
	n := p.startLoginsLocked(monoNow())
	p.mu.Unlock()
	p.runLogins(n)
}

// startLoginsLocked counts the logins to start for the waiting clients (one
// per waiter not yet covered by a login in flight), within the pool's size,
// its reserve when the head waiter has waited reserveTimeout, and the
// database's slots; it reserves them (logins, database slots) and returns
// their number. p.mu held.
func (p *pool) startLoginsLocked(now int64) int {
	if p.closed || p.secret == nil {
		return 0
	}
	if p.heldLocked(now) {
		if !p.loginPerm && (len(p.waiters) > p.logins || p.cfg.minSize > p.total()) {
			p.retryLaterLocked(time.Duration(p.retryAt - now))
		}
		return 0
	}
	limit := p.cfg.size
	if len(p.waiters) > 0 && p.cfg.reserveSize > 0 && now-p.waiters[0].since >= int64(p.cfg.reserveTimeout) {
		limit += p.cfg.reserveSize
	}
	want := max(len(p.waiters)-p.logins, p.cfg.minSize-p.total())
	want = min(want, limit-p.total())
	n := 0
	for ; n < want; n++ {
		if !p.db.take() {
			break
		}
	}
	p.dbStarved = n < want
	p.logins += n
	if n > 0 && p.loginErr != nil && p.obs != nil {
		p.obs.loginRetried(p.key)
	}
	return n
}

// heldLocked reports whether no login may start yet after a failed one:
// within server_login_retry (as configured now) of a permanent failure,
// before retryAt after a transient one. p.mu held.
func (p *pool) heldLocked(now int64) bool {
	switch {
	case p.loginErr == nil:
		return false
	case p.loginPerm:
		return now-p.loginErrAt < int64(p.cfg.loginRetry)
	}
	return now < p.retryAt
}

// retryLaterLocked has the logins the waiting clients need started after
// d, unless a retry is already due. p.mu held.
func (p *pool) retryLaterLocked(d time.Duration) {
	if p.retrying {
		return
	}
	p.retrying = true
	if p.retry == nil {
		p.retry = time.AfterFunc(d, p.retryNow)
	} else {
		p.retry.Reset(d)
	}
}

// retryNow is the retry timer's: it starts the logins due.
func (p *pool) retryNow() {
	p.mu.Lock()
	p.retrying = false
	n := p.startLoginsLocked(monoNow())
	starved := p.dbStarved
	p.mu.Unlock()
	p.runLogins(n)
	if starved {
		p.db.evictFor(p)
	}
}

// runLogins starts n logins reserved by startLoginsLocked. When the pool
// was closed since (a sweep or a waiter reserved them as it closed), the
// reservation is given back instead: close waits only for the logins
// started before it.
func (p *pool) runLogins(n int) {
	if n == 0 {
		return
	}
	p.mu.Lock()
	if p.closed {
		p.logins -= n
		p.mu.Unlock()
		for range n {
			p.db.give()
		}
		return
	}
	lg := serverLogin{params: p.params, secret: p.secret}
	timeout := p.cfg.connectTimeout
	p.wg.Add(n)
	p.mu.Unlock()
	started := monoNow()
	for range n {
		go p.loginOne(lg, timeout, started)
	}
}

// loginOne opens one server and hands it to the head waiter or the idle
// stack. After a failure no login starts for a while (loginBackoff; for a
// permanent failure, loginRetry); the waiters fail with a permanent one
// when the pool has no server that could be released to them, and wait for
// the next login after a transient one.
func (p *pool) loginOne(lg serverLogin, timeout time.Duration, started int64) {
	defer p.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	sc, welcome, err := p.login(ctx, lg)
	cancel()
	now := monoNow()
	p.mu.Lock()
	p.logins--
	if err != nil {
		p.loginFailedLocked(err, started, now)
		return // p.mu unlocked
	}
	if p.loginErr != nil && p.obs != nil {
		p.obs.loginRecovered(p.key, time.Duration(now-p.outageAt), p.loginFails)
	}
	p.loginErr, p.loginFails, p.loginPerm, p.retryAt, p.outageAt = nil, 0, false, 0, 0
	if welcome.Keys != nil && p.secret != nil && p.secret.Keys == nil && p.secret.Password != "" {
		// Later logins skip PBKDF2.
		s := *p.secret
		s.Keys = welcome.Keys
		p.secret = &s
	}
	ps := &pooledServer{pool: p, sc: sc, welcome: welcome, born: now, idleSince: now}
	if p.closed {
		p.mu.Unlock()
		sc.terminate()
		p.db.give()
		return
	}
	if p.serve != nil {
		p.serve(ps)
	}
	if p.handLocked(waitResult{ps: ps}) {
		p.active++
	} else {
		p.idle = append(p.idle, ps)
	}
	p.mu.Unlock()
}

// loginFailedLocked records a failed login (started at started), answers
// the waiters with a permanent failure when no server can come to them,
// and has a transient one tried again; it unlocks p.mu.
func (p *pool) loginFailedLocked(err error, started, now int64) {
	pe := loginError(err)
	perm := loginPermanent(err)
	// Logins started together fail together: one failure in a row.
	if p.loginErr == nil || started > p.loginErrAt {
		p.loginFails++
	}
	if p.loginErr == nil {
		p.outageAt = now
	}
	p.loginErr, p.loginErrAt, p.loginPerm = pe, now, perm
	wait := loginBackoff(p.loginFails, p.cfg.loginRetry)
	if perm {
		wait = p.cfg.loginRetry
	} else {
		p.retryAt = now + int64(wait)
	}
	if perm && p.active == 0 && len(p.idle) == 0 && p.logins == 0 {
		for p.handLocked(waitResult{err: pe}) {
		}
	}
	waiting := len(p.waiters)
	if !perm {
		p.startLoginsLocked(now) // 0 before retryAt: times the retry
	}
	fails := p.loginFails
	p.mu.Unlock()
	p.db.give()
	if p.obs != nil {
		p.obs.loginFailed(p.key, err, pe, perm, fails, wait, waiting)
	}
}

// maintain is the pool's share of the server's sweep: it closes idle
// servers past server_idle_timeout (oldest first, never below
// min_pool_size) or server_lifetime, opens servers up to min_pool_size, and
// the reserve for clients that have waited reserve_pool_timeout.
func (p *pool) maintain() {
	now := monoNow()
	var closing []*pooledServer
	p.mu.Lock()
	keep := p.idle[:0]
	open := p.total()
	for _, ps := range p.idle { // bottom (oldest idle) first
		idleOut := p.cfg.idleTimeout > 0 && now-ps.idleSince >= int64(p.cfg.idleTimeout) && open > p.cfg.minSize
		if idleOut || p.expiredLocked(ps, now) || p.closed {
			closing = append(closing, ps)
			open--
			continue
		}
		keep = append(keep, ps)
	}
	clear(p.idle[len(keep):])
	p.idle = keep
	n := p.startLoginsLocked(now)
	starved := p.dbStarved
	check := append([]*pooledServer(nil), p.idle...)
	p.mu.Unlock()
	for _, ps := range check {
		ps.sc.checkEnd()
	}
	for _, ps := range closing {
		ps.sc.terminate()
		p.db.give()
	}
	p.runLogins(n)
	if starved {
		p.db.evictFor(p)
	}
}

// remove takes a server whose connection has ended out of the idle stack;
// false when it is not there (a client holds it, and releases it as
// unusable when it finds it dead).
func (p *pool) remove(ps *pooledServer) bool {
	p.mu.Lock()
	for i, x := range p.idle {
		if x == ps {
			p.idle = slices.Delete(p.idle, i, i+1)
			p.mu.Unlock()
			ps.sc.close()
			p.freed()
			return true
		}
	}
	p.mu.Unlock()
	return false
}

// evictIdle closes the pool's oldest idle server, for another pool of the
// database waiting for a slot; false when none is idle.
func (p *pool) evictIdle() bool {
	p.mu.Lock()
	if len(p.idle) == 0 {
		p.mu.Unlock()
		return false
	}
	ps := p.idle[0]
	p.idle = slices.Delete(p.idle, 0, 1)
	p.mu.Unlock()
	ps.sc.terminate()
	p.db.give()
	return true
}

// close closes the pool: idle servers get Terminate, waiters fail with
// errPoolClosed, servers held by clients are closed at their release,
// logins in flight when they finish. It waits for the logins.
func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	if p.retry != nil {
		p.retry.Stop()
	}
	idle := p.idle
	p.idle = nil
	for p.handLocked(waitResult{err: errPoolClosed}) {
	}
	p.mu.Unlock()
	for _, ps := range idle {
		ps.sc.terminate()
		p.db.give()
	}
	p.wg.Wait()
	p.db.remove(p)
}

// poolStats is a pool's counts at one moment (status, metrics).
type poolStats struct {
	active, idle, logins, waiting int
	// longestWait is how long the head waiter has waited.
	longestWait time.Duration
}

// add adds o's counts to s, keeping the longer wait.
func (s *poolStats) add(o poolStats) {
	s.active += o.active
	s.idle += o.idle
	s.logins += o.logins
	s.waiting += o.waiting
	s.longestWait = max(s.longestWait, o.longestWait)
}

func (p *pool) stats() poolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := poolStats{active: p.active, idle: len(p.idle), logins: p.logins, waiting: len(p.waiters)}
	if len(p.waiters) > 0 {
		s.longestWait = time.Duration(monoNow() - p.waiters[0].since)
	}
	return s
}

// limits returns the pool's size and reserve in force (status).
func (p *pool) limits() (size, reserve int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cfg.size, p.cfg.reserveSize
}

// waitingClients returns the ids of the clients in the queue, head first
// (status).
func (p *pool) waitingClients() []uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	ids := make([]uint64, len(p.waiters))
	for i, w := range p.waiters {
		ids[i] = w.client
	}
	return ids
}

// dbSlots bounds the servers of one database across its pools
// (max_db_connections). A nil *dbSlots bounds nothing.
type dbSlots struct {
	mu    sync.Mutex
	max   int
	used  int
	pools map[*pool]struct{}
}

func newDBSlots(limit int) *dbSlots {
	if limit <= 0 {
		return nil
	}
	return &dbSlots{max: limit, pools: make(map[*pool]struct{})}
}

func (d *dbSlots) limited() bool { return d != nil }

func (d *dbSlots) add(p *pool) {
	if d == nil {
		return
	}
	d.mu.Lock()
	d.pools[p] = struct{}{}
	d.mu.Unlock()
}

func (d *dbSlots) remove(p *pool) {
	if d == nil {
		return
	}
	d.mu.Lock()
	delete(d.pools, p)
	d.mu.Unlock()
}

// take reserves a slot for a login; false at the limit. The slot comes
// back with give when the server closes or the login fails.
func (d *dbSlots) take() bool {
	if d == nil {
		return true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.used < d.max {
		d.used++
		return true
	}
	return false
}

// give returns a slot and lets the database's pools start the logins their
// waiters need (the first to ask gets the slot). No pool's lock may be held.
func (d *dbSlots) give() {
	if d == nil {
		return
	}
	d.mu.Lock()
	d.used--
	d.mu.Unlock()
	for _, p := range d.others(nil) {
		p.kick()
	}
}

// evictFor closes an idle server of another pool of the database, so that
// starving's waiters get its slot: PgBouncer waits for server_idle_timeout
// instead, but a slot held by an idle server of another key is better spent
// on a waiting client. No pool's lock may be held.
func (d *dbSlots) evictFor(starving *pool) {
	if d == nil {
		return
	}
	for _, p := range d.others(starving) {
		if p.evictIdle() {
			return
		}
	}
}

// others returns the database's pools other than but (nil: all).
func (d *dbSlots) others(but *pool) []*pool {
	d.mu.Lock()
	defer d.mu.Unlock()
	pools := make([]*pool, 0, len(d.pools))
	for p := range d.pools {
		if p != but {
			pools = append(pools, p)
		}
	}
	return pools
}
