package proxy

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"sync"
	"sync/atomic"

	"github.com/ttlproxy/ttlproxy/internal/wire"
)

// CancelRequest in transaction mode (docs/design/pooling.md §5): each
// client is given a BackendKeyData the proxy makes, and a CancelRequest
// with it is forwarded, with the server's own key, to the server the client
// holds, only while a statement of the client's runs there. A key whose
// client is idle, gone or unknown cancels nothing, even when the server
// it last used now serves another client.

// Process ID layout (design §5): bit 31 zero (pgjdbc ignores negative IDs);
// bit 30 one (cancelPIDMark); bits 29–16 the instance's peer id (0: not
// peered); bits 15–0 chosen at random, unique among the instance's live
// clients. The mark puts every process ID above any operating system's
// (Linux's PID_MAX_LIMIT is 2^22), so that a client that passes its
// BackendKeyData process ID to pg_terminate_backend, pg_cancel_backend or
// pg_stat_activity, believing it its backend's (pgx's own tests do), names
// no backend at all rather than another session's.
const (
	cancelPIDMark   = 1 << 30
	cancelPeerShift = 16
	cancelLocalMask = 1<<cancelPeerShift - 1
)

// cancelPID is the process ID of a key issued by peer with the random part
// local.
func cancelPID(peer, local uint32) uint32 { return cancelPIDMark | peer<<cancelPeerShift | local }

// cancelKey is the BackendKeyData the proxy gives a client in transaction
// mode.
type cancelKey struct {
	pid    uint32
	secret [4]byte
}

// cancelKeys maps the keys handed out to their clients.
type cancelKeys struct {
	peer uint32 // the instance's peer id
	mu   sync.Mutex
	m    map[uint32]*clientConn
	// peerForwards counts the requests being forwarded to peers and drops
	// rate-limits the log of requests dropped (peers.go); peers records
	// what became of the last one per peer (peerstatus.go).
	peerForwards atomic.Int32
	drops        dropLog
	peers        peerRecords
}

func newCancelKeys(peer uint32) *cancelKeys {
	return &cancelKeys{peer: peer, m: make(map[uint32]*clientConn)}
}

// issue makes a key for s, sets s.cancelKey and registers it: a process ID
// not in use and a random secret (48 random bits in all).
func (k *cancelKeys) issue(s *clientConn) (cancelKey, error) {
	var b [8]byte
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.m) >= cancelLocalMask {
		return cancelKey{}, errNoCancelKey
	}
	_, _ = rand.Read(b[:])
	local := binary.BigEndian.Uint32(b[:4]) & cancelLocalMask
	// From a random start, the first free one: a free key exists.
	for {
		if local != 0 {
			if _, used := k.m[cancelPID(k.peer, local)]; !used {
				break
			}
		}
		local = (local + 1) & cancelLocalMask
	}
	key := cancelKey{pid: cancelPID(k.peer, local)}
	copy(key.secret[:], b[4:])
	s.cancelKey = key // before a lookup can find s
	k.m[key.pid] = s
	return key, nil
}

// errNoCancelKey: every key of the instance is held by a live client.
var errNoCancelKey = &wire.ProtocolError{Code: codeTooManyConnections,
	Msg: "sorry, too many clients already: no cancel key left for this instance"}

// forget unregisters s's key when its session ends.
func (k *cancelKeys) forget(s *clientConn) {
	k.mu.Lock()
	if k.m[s.cancelKey.pid] == s {
		delete(k.m, s.cancelKey.pid)
	}
	k.mu.Unlock()
}

// lookup returns the client whose key is (pid, secret), nil when none is:
// the secret is compared in constant time.
func (k *cancelKeys) lookup(pid uint32, secret []byte) *clientConn {
	k.mu.Lock()
	s := k.m[pid]
	k.mu.Unlock()
	if s == nil || subtle.ConstantTimeCompare(s.cancelKey.secret[:], secret) != 1 {
		return nil
	}
	return s
}

// cancelPooled forwards a CancelRequest for the statement s runs now, if it
// runs one: the server the client holds is kept from being released until
// the server has taken the request (PgBouncer's SV_BEING_CANCELED), so that
// the cancel cannot reach the next client of that server; a release the
// cancel held back happens when it is done. It reports whether it was
// forwarded.
func (srv *Server) cancelPooled(s *clientConn) (bool, error) {
	l, pl := s.link, s.link.pooled.Load()
	pl.mu.Lock()
	ps := pl.held
	if ps == nil || l.pending.Load() <= 0 {
		pl.mu.Unlock()
		return false, nil
	}
	pl.cancels++
	pl.mu.Unlock()
	defer func() {
		pl.mu.Lock()
		pl.cancels--
		last := pl.cancels == 0
		pl.mu.Unlock()
		if last {
			// The statement may have ended meanwhile, its ReadyForQuery
			// not releasing the server because of this cancel: release it
			// now if the link is idle.
			pl.release(l, ps.sc)
		}
	}()
	pkt := ps.sc.cancelRequest()
	if pkt == nil {
		return false, nil
	}
	return true, srv.sendCancel(pkt)
}
