package main

import (
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ttlproxy/ttlproxy/config"
	"github.com/ttlproxy/ttlproxy/proxy"
)

// TestUpstreamTCP: the upstream_tcp section reaches the proxy, a
// tcp_user_timeout of 0s as "none" (negative) and an absent one as the
// proxy's default (0).
func TestUpstreamTCP(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   config.UpstreamTCP
		want proxy.UpstreamTCP
	}{
		{"absent", config.UpstreamTCP{}, proxy.UpstreamTCP{}},
		{"set", config.UpstreamTCP{KeepalivesIdle: 5 * time.Second, KeepalivesInterval: 2 * time.Second, KeepalivesCount: 4, TCPUserTimeout: new(3 * time.Second)},
			proxy.UpstreamTCP{KeepalivesIdle: 5 * time.Second, KeepalivesInterval: 2 * time.Second, KeepalivesCount: 4, TCPUserTimeout: 3 * time.Second}},
		{"off", config.UpstreamTCP{KeepalivesDisabled: true, TCPUserTimeout: new(time.Duration(0))},
			proxy.UpstreamTCP{KeepalivesDisabled: true, TCPUserTimeout: -1}},
	} {
		if got := upstreamTCP(tc.in); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestStackPoolSettings: the pooling keys reach the proxy, an absent one as
// the proxy's default (0) and a 0s that disables as the proxy's negative.
func TestStackPoolSettings(t *testing.T) {
	if got := poolSettings(config.Pool{}); got != (proxy.PoolSettings{}) {
		t.Errorf("absent: got %+v", got)
	}
	got := poolSettings(config.Pool{DefaultPoolSize: 10, MinPoolSize: 2, ReservePoolSize: 3, ReservePoolTimeout: 2 * time.Second, MaxDBConnections: 40,
		ServerLifetime: time.Minute, ServerIdleTimeout: new(time.Duration(0)), ServerConnectTimeout: 5 * time.Second,
		ServerLoginRetry: new(time.Duration(0)), QueryWaitTimeout: new(30 * time.Second)})
	want := proxy.PoolSettings{DefaultPoolSize: 10, MinPoolSize: 2, ReservePoolSize: 3, ReservePoolTimeout: 2 * time.Second, MaxDBConnections: 40,
		ServerLifetime: time.Minute, ServerIdleTimeout: -1, ServerConnectTimeout: 5 * time.Second, ServerLoginRetry: -1, QueryWaitTimeout: 30 * time.Second}
	if got != want {
		t.Errorf("set: got %+v, want %+v", got, want)
	}
}

// TestStackTransactionMode: a file with pool_mode transaction makes a
// stack whose proxy pools.
func TestStackTransactionMode(t *testing.T) {
	cfg, err := config.Parse([]byte("upstream: 127.0.0.1:1\npool_mode: transaction\nauth_type: trust\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err = newStack(cfg, discardLogger()); err != nil {
		t.Fatalf("newStack: %v", err)
	}
}

// TestStackSessionModePoolingKeys: pooling keys set in session mode are
// accepted, and the log says that they do nothing there.
func TestStackSessionModePoolingKeys(t *testing.T) {
	cfg, err := config.Parse([]byte("upstream: 127.0.0.1:1\nauth_dsn: postgres://auth:secret@db/app\ndefault_pool_size: 5\n"))
	if err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	if _, err := newStack(cfg, slog.New(slog.NewJSONHandler(&logs, nil))); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if !strings.Contains(out, "pool_mode transaction only") || !strings.Contains(out, `"keys":["auth_dsn","default_pool_size"]`) {
		t.Errorf("no warning about the pooling keys:\n%s", out)
	}
	if strings.Contains(out, "secret") {
		t.Errorf("the auth_dsn's password is in the log:\n%s", out)
	}
}

// TestReloadRestartKeysPooling: a reload cannot apply pool_mode nor the
// auth, pool and peer keys (the proxy builds them once), so it names each.
func TestReloadRestartKeysPooling(t *testing.T) {
	old, err := config.Parse([]byte("upstream: db:5432\n"))
	if err != nil {
		t.Fatal(err)
	}
	cur, err := config.Parse([]byte(`upstream: db:5432
pool_mode: transaction
auth_type: md5
auth_query: SELECT 1
auth_dsn: host=db
default_pool_size: 10
min_pool_size: 1
reserve_pool_size: 1
reserve_pool_timeout: 1s
max_db_connections: 50
server_lifetime: 1m
server_idle_timeout: 0s
server_connect_timeout: 1s
server_login_retry: 1s
query_wait_timeout: 1s
max_pinned_connections: 2
peer_id: 1
peers: [{id: 1, host: a}, {id: 2, host: b}]
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"pool_mode", "auth_type", "auth_query", "auth_dsn", "default_pool_size", "min_pool_size", "reserve_pool_size",
		"reserve_pool_timeout", "max_db_connections", "server_lifetime", "server_idle_timeout", "server_connect_timeout",
		"server_login_retry", "query_wait_timeout", "max_pinned_connections", "peer_id", "peers"}
	if got := restartKeys(old, cur); !reflect.DeepEqual(got, want) {
		t.Errorf("restartKeys = %v\nwant %v", got, want)
	}
	fileOnly, err := config.Parse([]byte("upstream: db:5432\nauth_file: /etc/ttl/userlist.txt\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := restartKeys(old, fileOnly); !reflect.DeepEqual(got, []string{"auth_file"}) {
		t.Errorf("restartKeys = %v, want [auth_file]", got)
	}
	if got := restartKeys(cur, cur); got != nil {
		t.Errorf("restartKeys of an unchanged file = %v", got)
	}
}

// TestPeersMapping: the file's peers reach proxy.Config in order, as
// host:port; proxy.New checks what the file could not (peers without a
// peer_id, which serve --peer-id may give), naming the key.
func TestPeersMapping(t *testing.T) {
	cfg, err := config.Parse([]byte("upstream: db:5432\npeers: [{id: 1, host: ttlproxy-1.ttlproxy-peers}, {id: 2, host: '::1', port: 7000}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []proxy.Peer{{ID: 1, Addr: "ttlproxy-1.ttlproxy-peers:6432"}, {ID: 2, Addr: "[::1]:7000"}}
	if got := peers(cfg.Peers); !reflect.DeepEqual(got, want) {
		t.Errorf("peers = %+v, want %+v", got, want)
	}
	if _, err := newStack(cfg, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "peer_id: required with peers") {
		t.Errorf("newStack without peer_id: %v", err)
	}
	cfg.PeerID = 2
	if _, err := newStack(cfg, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
}
