package proxy

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/ttlproxy/ttlproxy/internal/pgtest"
	"github.com/ttlproxy/ttlproxy/rewrite"
)

// startPeers runs one instance per id in front of the test server, in
// mode, with a pool of size servers each in transaction mode, every one
// configured with the same peers list: the instances themselves plus what
// extra, given their addresses, returns (peers that may listen nowhere).
// The listeners are made first, since each instance must know the others'
// addresses.
func startPeers(t *testing.T, mode string, size int, ids []int, extra func(addrs []string) []Peer) []*testProxy {
	t.Helper()
	lns := make([]net.Listener, len(ids))
	var peers []Peer
	var addrs []string
	for i, id := range ids {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ln.Close() })
		lns[i] = ln
		peers = append(peers, Peer{ID: id, Addr: ln.Addr().String()})
		addrs = append(addrs, ln.Addr().String())
	}
	if extra != nil {
		peers = append(peers, extra(addrs)...)
	}
	var auth AuthConfig
	if mode == PoolModeTransaction {
		auth.File = writeServerAuthFile(t)
	}
	rw, err := rewrite.New(testRules, rewrite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	before := goleak.IgnoreCurrent()
	ps := make([]*testProxy, len(ids))
	for i, id := range ids {
		reg := prometheus.NewRegistry()
		fake := &standIn{}
		srv, err := New(Config{
			Upstream: pgtest.Server(t).Addr(), Rewriter: rw, rewriter: fake, Registerer: reg,
			PoolMode: mode, Auth: auth, Pool: PoolSettings{DefaultPoolSize: size},
			PeerID: id, Peers: peers,
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		p := &testProxy{srv: srv, addr: lns[i].Addr().String(), fake: fake, reg: reg, cancel: cancel, done: make(chan error, 1)}
		go func() { p.done <- srv.Serve(ctx, lns[i]) }()
		ps[i] = p
	}
	t.Cleanup(func() {
		for _, p := range ps {
			if p == nil {
				continue
			}
			if err := p.stop(); err != nil {
				t.Errorf("Serve: %v", err)
			}
		}
		checkNoLeaks(t, before)
	})
	return ps
}

// cancelResult is the instance's ttlproxy_proxy_cancel_results_total for
// result.
func cancelResult(p *testProxy, result string) float64 {
	return testutil.ToFloat64(p.srv.metrics.CancelResults.WithLabelValues(result))
}

// keyOf is the CancelRequest with conn's key.
func keyOf(conn *pgx.Conn) *pgproto3.CancelRequest {
	return &pgproto3.CancelRequest{ProcessID: conn.PgConn().PID(), SecretKey: conn.PgConn().SecretKey()}
}

// sleepAndCancel runs pg_sleep(10) on conn, sends conn's key to the
// instance at addr once the statement runs, and returns how long the
// cancel took to reach the client; it fails unless the statement ended
// with 57014, which the sleep, had it not been cancelled, would end
// without.
func sleepAndCancel(t *testing.T, conn *pgx.Conn, addr, tag string) time.Duration {
	t.Helper()
	sql := "SELECT pg_sleep(10) -- " + tag
	done := make(chan error, 1)
	var ended time.Time
	go func() {
		_, err := conn.Exec(context.Background(), sql)
		ended = time.Now()
		done <- err
	}()
	activeQuery(t, sql)
	sent := time.Now()
	sendRawCancel(t, addr, keyOf(conn))
	if err := <-done; pgCode(err) != codeQueryCanceled {
		t.Fatalf("%s: %v, want 57014", tag, err)
	}
	return ended.Sub(sent)
}

// TestPeersCancel: in transaction mode a statement running through one
// instance is cancelled by its client's key sent to any other instance,
// with two instances and with three; the request goes to the issuing
// instance once (to_peer there, forwarded by the issuer).
func TestPeersCancel(t *testing.T) {
	for _, ids := range [][]int{{1, 2}, {1, 2, 3}} {
		ps := startPeers(t, PoolModeTransaction, 2, ids, nil)
		for i, via := range ps {
			conn := via.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
			if got := peerOf(conn.PgConn().PID()); got != uint32(ids[i]) { //nolint:gosec // small test ids
				t.Fatalf("instance %d gave a key of peer %d", ids[i], got)
			}
			for j, to := range ps {
				if j == i {
					continue
				}
				toPeer, fwd := cancelResult(to, cancelToPeer), cancelResult(via, cancelForwarded)
				took := sleepAndCancel(t, conn, to.addr, "peers "+itoa(ids[i])+" via "+itoa(ids[j]))
				t.Logf("%d instances: a statement through instance %d cancelled through instance %d in %s",
					len(ids), ids[i], ids[j], took.Round(10*time.Microsecond))
				if cancelResult(to, cancelToPeer) != toPeer+1 || cancelResult(via, cancelForwarded) != fwd+1 {
					t.Fatalf("to_peer on %d and forwarded on %d did not count the cancel", ids[j], ids[i])
				}
				if _, err := conn.Exec(testContext(t), "SELECT 1"); err != nil {
					t.Fatalf("after the cancel: %v", err)
				}
			}
		}
	}
}

// TestPeersCancelStaleAndForged: a key that reaches its instance through a
// peer cancels nothing when it is stale (its client idle while its server,
// the only one, runs another client's statement) or forged (a wrong secret,
// an unconfigured peer id, bit 31 set).
func TestPeersCancelStaleAndForged(t *testing.T) {
	ps := startPeers(t, PoolModeTransaction, 1, []int{1, 2}, nil)
	a, b := ps[0], ps[1]
	idle := a.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
	busy := a.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
	mustExec(t, idle, "SELECT 1") // idle's last transaction used the one server
	forged := *keyOf(idle)
	forged.SecretKey = []byte{1, 2, 3, 4}
	if string(forged.SecretKey) == string(keyOf(idle).SecretKey) {
		forged.SecretKey = []byte{4, 3, 2, 1}
	}
	for _, c := range []struct {
		name     string
		key      *pgproto3.CancelRequest
		onA, onB string // the results counted on a and b
	}{
		{"stale", keyOf(idle), cancelStale, cancelToPeer},
		{"wrong secret", &forged, cancelUnknown, cancelToPeer},
		{"unconfigured peer", &pgproto3.CancelRequest{ProcessID: cancelPID(7, 1), SecretKey: []byte{1, 2, 3, 4}}, "", cancelUnknown},
		{"bit 31", &pgproto3.CancelRequest{ProcessID: keyOf(idle).ProcessID | 1<<31, SecretKey: keyOf(idle).SecretKey}, "", cancelUnknown},
	} {
		sql := "SELECT pg_sleep(0.3) -- " + c.name
		done := make(chan error, 1)
		go func() {
			_, err := busy.Exec(context.Background(), sql)
			done <- err
		}()
		activeQuery(t, sql)
		onA, onB := cancelResult(a, c.onA), cancelResult(b, c.onB)
		sendRawCancel(t, b.addr, c.key)
		if err := <-done; err != nil {
			t.Fatalf("%s: the other client's statement: %v", c.name, err)
		}
		if c.onA != "" && cancelResult(a, c.onA) != onA+1 {
			t.Errorf("%s: %s not counted on the issuing instance", c.name, c.onA)
		}
		if cancelResult(b, c.onB) != onB+1 {
			t.Errorf("%s: %s not counted on the instance it was sent to", c.name, c.onB)
		}
	}
	if n := cancelResult(a, cancelForwarded) + cancelResult(b, cancelForwarded); n != 0 {
		t.Errorf("%v cancels reached a server", n)
	}
}

// TestPeersCancelPeerDown: a key of a peer whose address listens nowhere
// is dropped, counted as peer_down, and the instance goes on serving,
// cancels included.
func TestPeersCancelPeerDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	_ = ln.Close()
	ps := startPeers(t, PoolModeTransaction, 2, []int{1}, func([]string) []Peer { return []Peer{{ID: 2, Addr: down}} })
	a := ps[0]
	conn := a.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
	other := a.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)

	sql := "SELECT pg_sleep(0.3) -- peer down"
	done := make(chan error, 1)
	go func() {
		_, err := other.Exec(context.Background(), sql)
		done <- err
	}()
	activeQuery(t, sql)
	key := keyOf(other)
	key.ProcessID = cancelPID(2, key.ProcessID&cancelLocalMask)
	sendRawCancel(t, a.addr, key)
	if err := <-done; err != nil {
		t.Fatalf("a statement on the instance: %v", err)
	}
	if n := cancelResult(a, cancelPeerDown); n != 1 {
		t.Fatalf("peer_down = %v, want 1", n)
	}
	if _, err := conn.Exec(testContext(t), "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	sleepAndCancel(t, conn, a.addr, "own key after a peer was down")
}

// TestPeersCancelLoop: a peers list that disagrees with the instances
// (here peer 5 is the instance itself, under another name) bounces a
// request between them; maxPeerForwards ends the bounce, and the instance
// goes on serving.
func TestPeersCancelLoop(t *testing.T) {
	ps := startPeers(t, PoolModeTransaction, 1, []int{1}, func(addrs []string) []Peer {
		_, port, _ := net.SplitHostPort(addrs[0])
		return []Peer{{ID: 5, Addr: "localhost:" + port}}
	})
	a := ps[0]
	sendRawCancel(t, a.addr, &pgproto3.CancelRequest{ProcessID: cancelPID(5, 1), SecretKey: []byte{1, 2, 3, 4}})
	if got := cancelResult(a, cancelPeerDown); got != 1 {
		t.Errorf("peer_down = %v, want 1 (the forward beyond the bound)", got)
	}
	if got := cancelResult(a, cancelToPeer); got != maxPeerForwards {
		t.Errorf("to_peer = %v, want %d", got, maxPeerForwards)
	}
	conn := a.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
	sleepAndCancel(t, conn, a.addr, "own key after a loop")
}

// TestPeersCancelSessionMode: in session mode the client holds the
// server's own key, which any instance relays, peers configured or not.
func TestPeersCancelSessionMode(t *testing.T) {
	for _, ids := range [][]int{{1, 2}, {1, 2, 3}} {
		ps := startPeers(t, PoolModeSession, 0, ids, nil)
		for i, via := range ps {
			conn := via.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
			for j, to := range ps {
				if j == i {
					continue
				}
				fwd := cancelResult(to, cancelForwarded)
				took := sleepAndCancel(t, conn, to.addr, "session "+itoa(ids[i])+" via "+itoa(ids[j]))
				t.Logf("session mode, %d instances: a statement through instance %d cancelled through instance %d in %s",
					len(ids), ids[i], ids[j], took.Round(10*time.Microsecond))
				if cancelResult(to, cancelForwarded) != fwd+1 {
					t.Fatalf("instance %d did not count the cancel it relayed", ids[j])
				}
			}
		}
	}
}

// TestPeersConfig: New refuses peer settings it cannot use, naming the
// configuration file's key.
func TestPeersConfig(t *testing.T) {
	rw, err := rewrite.New(testRules, rewrite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id    int
		peers []Peer
		want  string
	}{
		{-1, nil, "peer_id: -1 is not between 0 and 16383"},
		{16384, nil, "peer_id: 16384 is not between 0 and 16383"},
		{0, []Peer{{ID: 1, Addr: "a:1"}}, "peer_id: required with peers (or serve --peer-id)"},
		{1, []Peer{{ID: 0, Addr: "a:1"}}, "peers[0].id: 0 is not between 1 and 16383"},
		{1, []Peer{{ID: 1, Addr: "a:1"}, {ID: 1, Addr: "b:1"}}, "peers[1].id: 1 is peers[0]'s too"},
		{1, []Peer{{ID: 1, Addr: "a:1"}, {ID: 2, Addr: "a:1"}}, "peers[1].host: a:1 is peers[0]'s address too"},
		{1, []Peer{{ID: 2, Addr: "a"}}, `peers[0].host: invalid address "a": want host:port`},
	} {
		_, err := New(Config{Upstream: "db:5432", Rewriter: rw, PeerID: c.id, Peers: c.peers})
		if err == nil || err.Error() != c.want {
			t.Errorf("peer_id %d, peers %v: %v, want %q", c.id, c.peers, err, c.want)
		}
	}
	if _, err := New(Config{Upstream: "db:5432", Rewriter: rw, PeerID: MaxPeerID, Peers: []Peer{{ID: 1, Addr: "a:1"}, {ID: MaxPeerID, Addr: "b:1"}}}); err != nil {
		t.Error(err)
	}
}

// TestDropLog: dropped requests are logged at most once a second, the next
// record counting the ones left out.
func TestDropLog(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	var d dropLog
	for range 5 {
		d.log(log, "dropped", "result", cancelUnknown)
	}
	if n := strings.Count(buf.String(), "msg=dropped"); n != 1 {
		t.Fatalf("%d records within a second:\n%s", n, buf.String())
	}
	d.mu.Lock()
	d.last = d.last.Add(-time.Second)
	d.mu.Unlock()
	d.log(log, "dropped", "result", cancelUnknown)
	if n := strings.Count(buf.String(), "msg=dropped"); n != 2 || !strings.Contains(buf.String(), "suppressed=4") {
		t.Fatalf("after a second:\n%s", buf.String())
	}
}
