package proxy

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// poolRow returns the POOLS row of database postgres, failing without one.
func poolRow(t *testing.T, st Status) PoolStatus {
	t.Helper()
	if len(st.Pools) != 1 || st.Pools[0].Database != "postgres" {
		t.Fatalf("pools %+v, want one row for database postgres", st.Pools)
	}
	return st.Pools[0]
}

// stateOf returns the state /status gives the session whose client
// is conn (its id found by the client's address).
func stateOf(t *testing.T, st Status, conn *pgx.Conn) string {
	t.Helper()
	addr := conn.PgConn().Conn().LocalAddr().String()
	for _, s := range st.Sessions {
		if s.ClientAddr == addr {
			return s.State
		}
	}
	t.Fatalf("no session of %s in %+v", addr, st.Sessions)
	return ""
}

// TestPoolStatus: on a pool of two servers, while one client holds a
// server in a transaction block, another is pinned to the second and a
// third waits, /status's POOLS row counts each, the longest wait grows, and
// the waiting client's session reads "waiting"; once the block ends, the
// waiter is served and the counts follow.
func TestPoolStatus(t *testing.T) {
	p := startPooledProxyCfg(t, Config{Pool: PoolSettings{DefaultPoolSize: 2, ReservePoolSize: 1, ReservePoolTimeout: time.Hour}})
	inTx := p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
	pinned := p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
	waiter := p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
	idle := p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)

	st := p.srv.Status()
	if st.PoolMode != PoolModeTransaction || st.PeerID != 0 || len(st.Peers) != 0 {
		t.Errorf("pool mode %q, peer id %d, peers %+v", st.PoolMode, st.PeerID, st.Peers)
	}
	r := poolRow(t, st)
	if r.Clients != 4 || r.ClientsActive != 0 || r.ClientsWaiting != 0 || r.ClientsPinned != 0 || r.ServersActive != 0 ||
		r.ServersIdle != 1 || r.LongestWaitSeconds != 0 || r.PoolSize != 2 || r.ReservePoolSize != 1 ||
		r.Mode != PoolModeTransaction || r.Pools != 1 || r.User == "" {
		t.Errorf("four idle clients: %+v", r)
	}

	mustExec(t, inTx, "BEGIN")
	mustExec(t, pinned, "CREATE TEMP TABLE pool_status_t (x int)")
	done := make(chan error, 1)
	go func() {
		_, err := waiter.Exec(context.Background(), "SELECT 1")
		done <- err
	}()
	waitFor(t, "a client to wait", func() bool { return p.srv.pools.stats().waiting == 1 })
	time.Sleep(50 * time.Millisecond)
	st = p.srv.Status()
	r = poolRow(t, st)
	if r.Clients != 4 || r.ClientsActive != 2 || r.ClientsWaiting != 1 || r.ClientsPinned != 1 ||
		r.ServersActive != 2 || r.ServersIdle != 0 || r.ServersLogin != 0 {
		t.Errorf("one client in a block, one pinned, one waiting: %+v", r)
	}
	if w := r.LongestWait(); w < 50*time.Millisecond || w > 10*time.Second {
		t.Errorf("longest wait %s, want at least the 50 ms slept", w)
	}
	for conn, want := range map[*pgx.Conn]string{inTx: "idle in transaction", pinned: "idle", waiter: "waiting", idle: "idle"} {
		if got := stateOf(t, st, conn); got != want {
			t.Errorf("session state %q, want %q", got, want)
		}
	}
	time.Sleep(20 * time.Millisecond)
	if r2 := poolRow(t, p.srv.Status()); r2.LongestWaitSeconds <= r.LongestWaitSeconds {
		t.Errorf("longest wait did not grow: %v then %v", r.LongestWaitSeconds, r2.LongestWaitSeconds)
	}

	mustExec(t, inTx, "COMMIT")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the server to go back", func() bool {
		r = poolRow(t, p.srv.Status())
		return r.ServersIdle == 1
	})
	if r.Clients != 4 || r.ClientsActive != 1 || r.ClientsWaiting != 0 || r.ClientsPinned != 1 ||
		r.ServersActive != 1 || r.LongestWaitSeconds != 0 {
		t.Errorf("after the block: %+v", r)
	}
	_ = pinned.Close(context.Background())
	waitFor(t, "the pinned client to leave", func() bool {
		r = poolRow(t, p.srv.Status())
		return r.Clients == 3
	})
	if r.ClientsPinned != 0 || r.ClientsActive != 0 {
		t.Errorf("after the pinned client left: %+v", r)
	}
}

// TestPoolStatusSessionMode: session mode has no pools and no peers.
func TestPoolStatusSessionMode(t *testing.T) {
	sessionModeOnly(t, "the status of session mode")
	p := startProxy(t, Config{Peers: []Peer{{ID: 2, Addr: "127.0.0.1:1"}}, PeerID: 1})
	conn := p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
	mustExec(t, conn, "SELECT 1")
	st := p.srv.Status()
	if st.PoolMode != PoolModeSession || st.PeerID != 0 || st.Pools == nil || len(st.Pools) != 0 ||
		st.Peers == nil || len(st.Peers) != 0 {
		t.Errorf("session mode: mode %q, peer id %d, pools %+v, peers %+v", st.PoolMode, st.PeerID, st.Pools, st.Peers)
	}
}

// TestPeerStatus: /status's PEERS lists every configured peer, this
// instance's own entry marked, with what became of the last cancel request
// forwarded to each: to_peer for a peer that took it, peer_down with the
// error for one that listens nowhere, nothing for one never asked.
func TestPeerStatus(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	_ = ln.Close()
	ps := startPeers(t, PoolModeTransaction, 2, []int{1, 2}, func([]string) []Peer { return []Peer{{ID: 3, Addr: down}, {ID: 4, Addr: "127.0.0.1:1"}} })
	a, b := ps[0], ps[1]
	conn := a.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
	before := time.Now()
	sleepAndCancel(t, conn, b.addr, "peer status")
	key := keyOf(conn)
	key.ProcessID = cancelPID(3, key.ProcessID&cancelLocalMask)
	sendRawCancel(t, b.addr, key)
	waitFor(t, "peer_down to count", func() bool { return cancelResult(b, cancelPeerDown) == 1 })

	st := b.srv.Status()
	if st.PeerID != 2 || len(st.Peers) != 4 {
		t.Fatalf("peer id %d, peers %+v", st.PeerID, st.Peers)
	}
	one, self, three, four := st.Peers[0], st.Peers[1], st.Peers[2], st.Peers[3]
	if one.ID != 1 || one.Addr != a.addr || one.Self || one.LastResult != cancelToPeer || one.LastForward.Before(before) ||
		one.Forwarded != 1 || one.Failed != 0 || one.LastError != "" {
		t.Errorf("the peer that took the request: %+v", one)
	}
	if self.ID != 2 || !self.Self || !self.LastForward.IsZero() || self.Forwarded != 0 {
		t.Errorf("the instance's own entry: %+v", self)
	}
	if three.ID != 3 || three.LastResult != cancelPeerDown || three.LastError == "" || three.Failed != 1 || three.Forwarded != 0 ||
		three.LastForward.Before(one.LastForward) {
		t.Errorf("the peer that listens nowhere: %+v", three)
	}
	if four.ID != 4 || four.LastResult != "" || !four.LastForward.IsZero() || four.Forwarded+four.Failed != 0 {
		t.Errorf("a peer never asked: %+v", four)
	}
	// The issuer forwarded to its server, not to a peer.
	if st := a.srv.Status(); len(st.Peers) != 4 || !st.Peers[0].Self || st.Peers[1].Forwarded != 0 || !st.Peers[1].LastForward.IsZero() {
		t.Errorf("the issuer's peers: %+v", st.Peers)
	}
}
