package proxy

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// The PEERS table of /status (docs/design/pooling.md §6): each configured
// peer and what became of the last CancelRequest forwarded to it, so that
// an operator sees a peer that cannot be reached before a client misses a
// cancel.

// PeerStatus is one entry of peers in transaction mode.
type PeerStatus struct {
	ID   int    `json:"id"`
	Addr string `json:"addr"` // host:port
	// Self marks the entry with the instance's own peer_id, to which
	// nothing is forwarded.
	Self bool `json:"self"`
	// LastForward is when a CancelRequest was last forwarded to the peer
	// (zero: never since the start), LastResult what became of it: to_peer
	// (delivered) or peer_down (not; LastError says why).
	LastForward time.Time `json:"last_forward"`
	LastResult  string    `json:"last_result,omitempty"`
	LastError   string    `json:"last_error,omitempty"`
	// Forwarded and Failed count the requests delivered to the peer and
	// those that could not be, since the start.
	Forwarded uint64 `json:"forwarded"`
	Failed    uint64 `json:"failed"`
}

// peerRecord is what became of the CancelRequests forwarded to one peer.
type peerRecord struct {
	at                time.Time
	result, err       string
	forwarded, failed uint64
}

// peerRecords are the peerRecords by peer id. The zero value is ready.
type peerRecords struct {
	mu sync.Mutex
	m  map[uint32]*peerRecord
}

// note records a request forwarded to peer id: its result (cancelToPeer or
// cancelPeerDown) and, for the latter, the error.
func (r *peerRecords) note(id uint32, result string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = make(map[uint32]*peerRecord)
	}
	rec := r.m[id]
	if rec == nil {
		rec = &peerRecord{}
		r.m[id] = rec
	}
	rec.at, rec.result, rec.err = time.Now(), result, ""
	if err != nil {
		rec.err = err.Error()
	}
	if result == cancelToPeer {
		rec.forwarded++
	} else {
		rec.failed++
	}
}

// get returns a copy of peer id's record, the zero record when nothing was
// forwarded to it.
func (r *peerRecords) get(id uint32) peerRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rec := r.m[id]; rec != nil {
		return *rec
	}
	return peerRecord{}
}

// peerStatus returns the PEERS table sorted by id; empty in session mode,
// where the proxy forwards no CancelRequest to peers.
func (s *Server) peerStatus() []PeerStatus {
	rows := []PeerStatus{}
	if s.cancelKeys == nil {
		return rows
	}
	for _, p := range s.cfg.Peers {
		id := uint32(p.ID) //nolint:gosec // checkPeers bounds p.ID to 1..MaxPeerID
		rec := s.cancelKeys.peers.get(id)
		rows = append(rows, PeerStatus{ID: p.ID, Addr: p.Addr, Self: id == s.cancelKeys.peer,
			LastForward: rec.at, LastResult: rec.result, LastError: rec.err, Forwarded: rec.forwarded, Failed: rec.failed})
	}
	slices.SortFunc(rows, func(a, b PeerStatus) int { return cmp.Compare(a.ID, b.ID) })
	return rows
}
