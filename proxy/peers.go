package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Cancel across instances in transaction mode (docs/design/pooling.md §5,
// PgBouncer's [peers]): behind a load balancer a client's CancelRequest
// may reach any instance, but only the instance that issued the key can
// place it. The key's process ID carries that instance's peer id (bits
// 29–16, cancel.go), so an instance that receives a key of another peer
// sends the packet, unchanged, to that peer's address once. The peer
// receives it as any CancelRequest and finds the key its own, so a
// request is forwarded at most once when every instance's peer_id matches
// its entry in peers; no hop count is needed. A list that disagrees with
// the instances could bounce a request between them: maxPeerForwards
// bounds what that, or a flood of requests for a peer that never answers,
// can hold open.

// Results of a CancelRequest (ttlproxy_proxy_cancel_results_total).
const (
	cancelForwarded = "forwarded" // sent to the server running the statement
	cancelToPeer    = "to_peer"   // sent to the peer whose key it is
	cancelStale     = "stale"     // the key's client runs no statement now
	cancelUnknown   = "unknown"   // no live client has the key, or no peer the id
	cancelPeerDown  = "peer_down" // the key's peer could not be reached
)

var cancelResults = []string{cancelForwarded, cancelToPeer, cancelStale, cancelUnknown, cancelPeerDown}

// errTooManyForwards: a request was dropped at maxPeerForwards.
var errTooManyForwards = errors.New("too many cancel requests forwarded to peers at once")

// maxPeerForwards bounds the CancelRequests an instance forwards to peers
// at once; each waits at most DialTimeout for its peer to close.
const maxPeerForwards = 64

// peerOf returns the peer id a key's process ID carries. A process ID
// without cancelPIDMark or with bit 31 set (never issued) gives an id above
// MaxPeerID, which no peer has.
func peerOf(pid uint32) uint32 {
	if pid&(1<<31|cancelPIDMark) != cancelPIDMark {
		return MaxPeerID + 1
	}
	return (pid &^ cancelPIDMark) >> cancelPeerShift
}

// peerAddr returns the address of the peer with id, "" when none is
// configured.
func (srv *Server) peerAddr(id uint32) string {
	for _, p := range srv.cfg.Peers {
		if uint32(p.ID) == id { //nolint:gosec // checkPeers bounds p.ID to 1..MaxPeerID
			return p.Addr
		}
	}
	return ""
}

// cancelForPeer handles, in transaction mode, a CancelRequest (pkt, with
// process ID pid) whose key another instance issued: it forwards pkt to
// that peer, or drops it when the peer is unknown or cannot be reached. It
// reports false, doing nothing, for a key with this instance's own peer
// id, which cancelKeys.lookup places.
func (srv *Server) cancelForPeer(pkt []byte, pid uint32) bool {
	k := srv.cancelKeys
	id := peerOf(pid)
	if id == k.peer {
		return false
	}
	addr := srv.peerAddr(id)
	if addr == "" {
		srv.cancelDropped(cancelUnknown, "cancel request for an unknown peer dropped", "peer_id", id)
		return true
	}
	if k.peerForwards.Add(1) > maxPeerForwards {
		k.peerForwards.Add(-1)
		k.peers.note(id, cancelPeerDown, errTooManyForwards)
		srv.cancelDropped(cancelPeerDown, "cancel request dropped: too many forwarded to peers at once",
			"peer_id", id, "peer_addr", addr, "in_flight", maxPeerForwards)
		return true
	}
	defer k.peerForwards.Add(-1)
	if err := srv.sendToPeer(addr, pkt); err != nil {
		k.peers.note(id, cancelPeerDown, err)
		srv.cancelDropped(cancelPeerDown, "cancel request dropped: peer unreachable", "peer_id", id, "peer_addr", addr, "err", err)
		return true
	}
	k.peers.note(id, cancelToPeer, nil)
	srv.metrics.CancelResults.WithLabelValues(cancelToPeer).Inc()
	srv.log.Debug("cancel request forwarded to peer", "peer_id", id, "peer_addr", addr)
	return true
}

// sendToPeer delivers pkt to the peer at addr and waits until the peer
// closes the connection, which it does once it has passed the request on,
// or until DialTimeout: the client's cancel connection stays open as long,
// since libpq waits for that close (pgbouncer#833).
func (srv *Server) sendToPeer(addr string, pkt []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), srv.cfg.DialTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	if _, err := conn.Write(pkt); err != nil {
		return fmt.Errorf("sending cancel request: %w", err)
	}
	var b [1]byte
	_, _ = conn.Read(b[:])
	return nil
}

// cancelDropped counts a CancelRequest that cancels nothing by result and
// logs it, at most once a second: keys are cheap to forge, and a peer
// that is down is reported by every request meant for it.
func (srv *Server) cancelDropped(result, msg string, args ...any) {
	srv.metrics.CancelResults.WithLabelValues(result).Inc()
	srv.cancelKeys.drops.log(srv.log, msg, append(args, "result", result)...)
}

// dropLog limits a log to one record a second, counting the ones left out.
type dropLog struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

func (d *dropLog) log(log *slog.Logger, msg string, args ...any) {
	d.mu.Lock()
	now := time.Now()
	if now.Sub(d.last) < time.Second {
		d.suppressed++
		d.mu.Unlock()
		return
	}
	n := d.suppressed
	d.last, d.suppressed = now, 0
	d.mu.Unlock()
	log.Warn(msg, append(args, "suppressed", n)...)
}
