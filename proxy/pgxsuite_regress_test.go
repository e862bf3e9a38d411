package proxy

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Regressions found by running pgx v5's own test suite through the proxy
// in transaction mode (bench/pgx-suite.sh).

// pidMaxLimit is Linux's PID_MAX_LIMIT on 64-bit systems: no process ID of
// the server's host reaches it.
const pidMaxLimit = 1 << 22

// TestPooledKeyNamesNoBackend: the process ID of the BackendKeyData a
// client gets in transaction mode is above any process ID of the server's
// host, unpeered and with the largest peer_id, so that a client that takes
// it for its backend's (pgx's TestFatalTxError, TestConnCheckConn,
// pgxpool's TestPoolAcquireChecksIdleConns pass it to
// pg_terminate_backend) terminates no other session. Keys with 17 random
// bits and no mark were below 2^17 when unpeered: a server with
// kernel.pid_max 32768 gave a quarter of them a live process's number.
func TestPooledKeyNamesNoBackend(t *testing.T) {
	for _, peer := range []int{0, MaxPeerID} {
		p := startProxy(t, Config{PoolMode: PoolModeTransaction, Auth: AuthConfig{File: writeServerAuthFile(t)},
			Pool: PoolSettings{DefaultPoolSize: 2}, PeerID: peer})
		other := p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
		for i := range 20 {
			conn := p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
			pid := conn.PgConn().PID()
			if pid < pidMaxLimit || pid >= 1<<31 {
				t.Fatalf("peer_id %d, client %d: BackendKeyData process ID %d, want in [2^22, 2^31)", peer, i, pid)
			}
			if got := peerOf(pid); got != uint32(peer) { //nolint:gosec // 0 or MaxPeerID
				t.Fatalf("peer_id %d: the key carries peer %d", peer, got)
			}
			// What pgx's tests do with it: the server finds no backend.
			var terminated bool
			if err := other.QueryRow(testContext(t), "SELECT pg_terminate_backend($1)", int64(pid)).Scan(&terminated); err != nil {
				t.Fatal(err)
			}
			if terminated {
				t.Fatalf("pg_terminate_backend(%d) terminated a backend", pid)
			}
			mustExec(t, conn, "SELECT 1")
			if err := conn.Close(testContext(t)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestCancelKeysExhausted: an instance whose every key is held by a live
// client refuses the next one (53300) rather than looking for a free key
// without end; with one key free, it finds that one.
func TestCancelKeysExhausted(t *testing.T) {
	k := newCancelKeys(3)
	for local := uint32(1); local <= cancelLocalMask; local++ {
		k.m[cancelPID(3, local)] = &clientConn{}
	}
	if _, err := k.issue(&clientConn{}); !errors.Is(err, errNoCancelKey) {
		t.Fatalf("issue with every key held: %v, want errNoCancelKey", err)
	}
	free := cancelPID(3, 12345)
	delete(k.m, free)
	key, err := k.issue(&clientConn{})
	if err != nil || key.pid != free {
		t.Fatalf("issue with one key free: %v, %v; want pid %d", key.pid, err, free)
	}
}
