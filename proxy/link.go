package proxy

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/ttlproxy/ttlproxy/internal/wire"
)

// closedMark in link.pending means the link is closing: no statement may
// be forwarded any more.
const closedMark = math.MinInt64 / 2

// releasedMark in link.pending means, in transaction mode, that the client
// holds no server: its server pump gave the server back to the pool at the
// ReadyForQuery that left it idle (pooled.go). It is far from both 0 and
// closedMark: isClosed is false for it, and no count reaches it.
const releasedMark = -(1 << 40)

// checkInMark in link.pending means, in transaction mode, that the server
// pump reads the client's settings back before it releases the server
// (pooledLink.checkIn): the client's next unit waits for the release.
const checkInMark = -(1 << 41)

// errQuit: the server pump has ended, and with it the link.
var errQuit = errors.New("session ended")

// link binds one client to one server connection: what the server owes the
// client (the ReadyForQuery messages, the rejections whose errors are to be
// swapped, the answers to the proxy's own queries) and the transaction
// status it last reported. In session mode a client has one link, to its
// own server, for its whole life. The client pump calls the link and, through
// it, writes to the server; the link never calls the client.
type link struct {
	server *serverConn
	// sw is the writer the client pump writes the server through: in
	// session mode the server's own (serverConn.w); in transaction mode
	// the link's, over whichever server it holds (target), so that the end
	// of a flush, after the bytes have reached the server, never touches a
	// buffer the server's next client writes.
	sw     *wire.Writer
	target serverTarget
	// cw is the client's writer: the server pump relays the server's
	// messages through it (the client writes it only once the relay has
	// stopped, to end the session).
	cw *wire.Writer

	// pending counts the ReadyForQuery messages the server still owes: one
	// per Query, FunctionCall and extended-protocol batch (up to its Sync).
	// closedMark once the link is closing.
	pending atomic.Int64
	// busySince is when pending last rose from 0 (monoNow), the start of
	// a foreground latency sample (latency.go).
	busySince atomic.Int64
	// idleAt is when the last ReadyForQuery came (monoNow): with pending
	// at 0, since when the client is waited for (sweep.go).
	idleAt atomic.Int64
	// txStatus is the status byte of the last ReadyForQuery.
	txStatus atomic.Uint32
	// closeAtIdle is set at shutdown: the ReadyForQuery that leaves the
	// link idle closes it (beginShutdown).
	closeAtIdle atomic.Bool
	// expected counts the ReadyForQuery messages announced so far; owned by
	// the client pump.
	expected uint64

	// zSeq counts the ReadyForQuery messages relayed: the server pump's
	// side of expected (rejections are keyed by it). In transaction mode
	// the pumps of successive servers carry it on.
	zSeq uint64

	// rejects are the rejected statements whose markers the server is to
	// answer (reject.go).
	rejects rejections
	// answers is the queue of the proxy's own questions to the server,
	// whose answers are kept from the client (refresh.go).
	answers handoff

	// lex is what the server last reported of the settings it reads
	// statement text under (lexregime.go).
	lex lexRegime

	// guard tells the server pump which tables' constraint errors lose
	// their DETAIL (redact.go); the client pump publishes it.
	guard atomic.Pointer[detailGuard]

	// pooled is the transaction-mode part (pooled.go), set once at startup;
	// nil in session mode. Read by the sweep and shutdown too, hence atomic.
	pooled atomic.Pointer[pooledLink]
}

func newLink(server *serverConn) *link {
	return &link{server: server, answers: newHandoff()}
}

// serverTarget writes to the server connection a pooled link holds; set by
// the client pump at each relink.
type serverTarget struct{ sc *serverConn }

func (t *serverTarget) Write(b []byte) (int, error) { return t.sc.nc.Write(b) }

// expectResult is what expect found.
type expectResult uint8

const (
	// expectOK: one more ReadyForQuery is owed; forward the message.
	expectOK expectResult = iota
	// expectClosed: the link is closing; forward nothing.
	expectClosed
	// expectReleased: in transaction mode, the client holds no server; it
	// acquires one first (clientConn.claim).
	expectReleased
	// expectCheckIn: in transaction mode, the server pump is reading the
	// client's settings back; the client waits for the release.
	expectCheckIn
)

// expect announces one more ReadyForQuery owed by the server.
func (l *link) expect() expectResult {
	for {
		v := l.pending.Load()
		if isClosed(v) {
			return expectClosed
		}
		switch v {
		case releasedMark:
			return expectReleased
		case checkInMark:
			return expectCheckIn
		}
		if l.pending.CompareAndSwap(v, v+1) {
			if v == 0 {
				l.busySince.Store(monoNow())
			}
			l.expected++
			return expectOK
		}
	}
}

// owesNothing reports that the server owes no ReadyForQuery: the client
// is still to send, the server has nothing more to answer (or, in
// transaction mode, the client holds no server).
func (l *link) owesNothing() bool {
	v := l.pending.Load()
	return v == 0 || v == releasedMark || v == checkInMark
}

// markClosed closes the link: nothing more is forwarded.
func (l *link) markClosed() { l.pending.Store(closedMark) }

// closeIfIdle closes the link if the server owes nothing (or, in
// transaction mode, the client holds no server); false when it does (or the
// link is closed already).
func (l *link) closeIfIdle() bool {
	return l.pending.CompareAndSwap(0, closedMark) || l.pending.CompareAndSwap(releasedMark, closedMark) ||
		l.pending.CompareAndSwap(checkInMark, closedMark)
}

// isClosed reports a pending count that carries closedMark. Small negative
// counts (a ReadyForQuery the proxy did not foresee) are not closed.
func isClosed(pending int64) bool { return pending < closedMark/2 }

// idleExpired reports a logged-in link (idleAt is set from the
// ReadyForQuery that ends the startup on) that has waited for its client
// outside a transaction block, with nothing outstanding, for at least
// timeout, as of now (monoNow). The ReadyForQuery sets idleAt and txStatus
// before it lowers pending, so a pending of 0 seen here comes with the
// idleAt of the exchange that ended.
func (l *link) idleExpired(now int64, timeout time.Duration) bool {
	if timeout <= 0 || !l.owesNothing() || l.txStatus.Load() != 'I' {
		return false
	}
	at := l.idleAt.Load()
	return at != 0 && now-at >= int64(timeout)
}

// idleInTxExpired is idleExpired inside a transaction block (a transaction
// status of T or E).
func (l *link) idleInTxExpired(now int64, timeout time.Duration) bool {
	if timeout <= 0 || !l.owesNothing() {
		return false
	}
	if st := l.txStatus.Load(); st != 'T' && st != 'E' {
		return false
	}
	at := l.idleAt.Load()
	return at != 0 && now-at >= int64(timeout)
}

// handoff is how the client pump waits for, and borrows, what the server
// pump reads from the server: the link's queue for the proxy's own answers.
type handoff struct {
	// refreshing counts the answers (each up to a ReadyForQuery) that the
	// server pump hands the client pump through refreshed instead of
	// relaying them to the client.
	refreshing atomic.Int32
	// idleWait asks the server pump to signal idle when pending drops to 0.
	idleWait atomic.Bool
	// swallow counts the answers (each up to a ReadyForQuery) to questions
	// the client pump sent ahead of the client's messages without waiting
	// (transaction mode's reset, pooled.go): the server pump reads and drops
	// them.
	swallow atomic.Int32
	// lenient counts the last of the swallowed answers whose error is
	// expected: the Parse of a client's statement made again on a new
	// server (statements.go), which may no longer parse there; the client's
	// Bind of it then fails as the server fails it. An error in any other
	// swallowed answer ends the session.
	lenient   atomic.Int32
	refreshed chan refreshResult
	idle      chan struct{}
}

func newHandoff() handoff {
	return handoff{refreshed: make(chan refreshResult, 1), idle: make(chan struct{}, 1)}
}

// refreshResult is what the server pump hands the client pump after reading
// the answer to one of the proxy's queries.
type refreshResult struct {
	results [][][]string
	qerr    *pgproto3.ErrorResponse
	status  byte
	err     error
}

// ask sends msgs, which the server answers with n ReadyForQuery messages,
// and returns the last answer; quit is closed when the server pump has
// ended. The server pump reads the answers (readState) instead of relaying
// them. Nothing else may be outstanding.
func (l *link) ask(msgs []byte, n int, quit <-chan struct{}) (refreshResult, error) {
	l.answers.refreshing.Store(int32(n))
	if _, err := l.sw.Write(msgs); err != nil {
		return refreshResult{}, &wire.WriteError{Err: err}
	}
	if err := l.sw.Flush(); err != nil {
		return refreshResult{}, &wire.WriteError{Err: err}
	}
	var res refreshResult
	for range n {
		select {
		case res = <-l.answers.refreshed:
		case <-quit:
			return res, errQuit
		}
		if res.err != nil {
			// The server pump has ended the session.
			return res, errQuit
		}
	}
	return res, nil
}

// readState is the server pump's side of ask: it reads one answer from sc
// up to its ReadyForQuery, flushes what it passed on to the client (the
// asynchronous messages among the answer) and hands the answer over.
func (l *link) readState(sc *serverConn) error {
	view := l.view()
	results, qerr, status, err := readResults(sc.r, l.cw, view, &l.lex)
	if err == nil && l.answers.refreshing.Load() == 1 {
		err = view.release(l.cw) // the last answer of the question
	}
	if err == nil {
		if ferr := l.cw.Flush(); ferr != nil {
			err = &wire.WriteError{Err: ferr}
		}
	}
	l.answered(refreshResult{results: results, qerr: qerr, status: status, err: err})
	return err
}

// swallowAnswer is the server pump's side of a question sent ahead
// (answers.swallow): it reads one answer from sc up to its ReadyForQuery
// and drops it, passing asynchronous messages on to the client.
func (l *link) swallowAnswer(sc *serverConn) error {
	view := l.view()
	_, qerr, status, err := readResults(sc.r, l.cw, view, &l.lex)
	if err != nil {
		return err
	}
	// Among the last `lenient` answers still owed: statements.go adds to
	// swallow before lenient, so an earlier answer never counts as one.
	left := l.answers.swallow.Add(-1)
	lenient := left < l.answers.lenient.Load()
	if lenient {
		l.answers.lenient.Add(-1)
	}
	if left == 0 {
		if err := view.release(l.cw); err != nil {
			return err
		}
	}
	l.txStatus.Store(uint32(status))
	if qerr != nil && !lenient {
		return fmt.Errorf("server refused the reset: %s: %s", qerr.Code, qerr.Message)
	}
	return nil
}

// view returns the client's reported parameters in transaction mode, nil
// in session mode (every ParameterStatus is relayed).
func (l *link) view() *reportedParams {
	if pl := l.pooled.Load(); pl != nil {
		return pl.reported
	}
	return nil
}

// answered hands over one answer, read up to its ReadyForQuery.
func (l *link) answered(res refreshResult) {
	if res.err == nil {
		l.txStatus.Store(uint32(res.status))
		l.answers.refreshing.Add(-1)
	} else {
		l.answers.refreshing.Store(0)
	}
	l.answers.refreshed <- res
}

// awaitIdle waits until the server has answered every Query, FunctionCall
// and Sync sent so far; quit is closed when the server pump has ended. The
// caller must not have an extended-protocol batch open, whose
// ReadyForQuery waits for a Sync not yet sent.
func (l *link) awaitIdle(quit <-chan struct{}) error {
	if l.pending.Load() <= 0 {
		return nil
	}
	if err := l.sw.Flush(); err != nil {
		return &wire.WriteError{Err: err}
	}
	l.answers.idleWait.Store(true)
	defer l.answers.idleWait.Store(false)
	for {
		if v := l.pending.Load(); v <= 0 {
			return nil
		}
		select {
		case <-l.answers.idle:
		case <-quit:
			return errQuit
		}
	}
}

// noteIdle wakes awaitIdle; called by the server pump when a ReadyForQuery
// leaves nothing outstanding.
func (l *link) noteIdle() {
	if l.answers.idleWait.Load() {
		select {
		case l.answers.idle <- struct{}{}:
		default:
		}
	}
}
