package proxy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ttlproxy/ttlproxy/proxy/internal/auth"
)

// TestConfigTransactionMode: New in transaction mode sets up the proxy's
// own authentication and the pools; session mode has neither.
func TestConfigTransactionMode(t *testing.T) {
	srv, err := New(Config{Upstream: "127.0.0.1:1", Rewriter: testRewriter(t), PoolMode: PoolModeTransaction, Auth: AuthConfig{Type: auth.Trust}})
	if err != nil || srv.auth == nil || srv.pools == nil || srv.cancelKeys == nil {
		t.Fatalf("New in transaction mode: %v", err)
	}
	srv, err = New(Config{Upstream: "127.0.0.1:1", Rewriter: testRewriter(t)})
	if err != nil || srv.auth != nil || srv.pools != nil {
		t.Fatalf("New in session mode: %v", err)
	}
}

// TestConfigPoolDefaults: zero pool settings take PgBouncer's defaults, and
// negative durations reach the pool as its "disabled".
func TestConfigPoolDefaults(t *testing.T) {
	c := Config{Upstream: "x:1", Rewriter: testRewriter(t)}
	if err := c.setDefaults(); err != nil {
		t.Fatal(err)
	}
	if c.PoolMode != PoolModeSession {
		t.Errorf("PoolMode = %q, want session", c.PoolMode)
	}
	want := poolConfig{size: 20, reserveTimeout: 5 * time.Second, lifetime: time.Hour, idleTimeout: 10 * time.Minute,
		connectTimeout: 15 * time.Second, loginRetry: 15 * time.Second, waitTimeout: 120 * time.Second, maxPinned: 10}
	if got := c.poolConfig(); got != want {
		t.Errorf("poolConfig() = %+v, want %+v", got, want)
	}
	if c.Pool.MaxDBConnections != 0 {
		t.Errorf("MaxDBConnections = %d, want 0 (no limit)", c.Pool.MaxDBConnections)
	}

	c = Config{Upstream: "x:1", Rewriter: testRewriter(t), Pool: PoolSettings{
		DefaultPoolSize: 5, MinPoolSize: 5, ReservePoolSize: 2, ReservePoolTimeout: -1, MaxDBConnections: 9,
		ServerLifetime: -1, ServerIdleTimeout: -1, ServerConnectTimeout: time.Second, ServerLoginRetry: -1, QueryWaitTimeout: -1, MaxPinnedConnections: -1,
	}}
	if err := c.setDefaults(); err != nil {
		t.Fatal(err)
	}
	want = poolConfig{size: 5, minSize: 5, reserveSize: 2, connectTimeout: time.Second, maxPinned: -1}
	if got := c.poolConfig(); got != want {
		t.Errorf("poolConfig() = %+v, want %+v", got, want)
	}
	c = Config{Upstream: "x:1", Rewriter: testRewriter(t), Pool: PoolSettings{DefaultPoolSize: 1}}
	if err := c.setDefaults(); err != nil {
		t.Fatal(err)
	}
	if got := c.poolConfig().maxPinned; got != 1 {
		t.Errorf("max_pinned_connections of a pool of 1 = %d, want 1", got)
	}
}

// TestConfigPoolErrors: bad pooling settings are refused by New, naming the
// configuration file's key, in either mode where the key is checked.
func TestConfigPoolErrors(t *testing.T) {
	userlist := filepath.Join(t.TempDir(), "userlist.txt")
	if err := os.WriteFile(userlist, []byte(`"u" "p"`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"unknown mode", Config{PoolMode: "statement"}, `pool_mode: "statement" is not one of session, transaction`},
		{"negative size", Config{Pool: PoolSettings{DefaultPoolSize: -1}}, "default_pool_size: must not be negative"},
		{"negative min", Config{Pool: PoolSettings{MinPoolSize: -1}}, "min_pool_size: must not be negative"},
		{"negative reserve", Config{Pool: PoolSettings{ReservePoolSize: -1}}, "reserve_pool_size: must not be negative"},
		{"negative db", Config{Pool: PoolSettings{MaxDBConnections: -1}}, "max_db_connections: must not be negative"},
		{"negative connect", Config{Pool: PoolSettings{ServerConnectTimeout: -1}}, "server_connect_timeout: must not be negative"},
		{"min above size", Config{Pool: PoolSettings{DefaultPoolSize: 3, MinPoolSize: 4}}, "min_pool_size: 4 is larger than default_pool_size (3)"},
		{"min above default size", Config{Pool: PoolSettings{MinPoolSize: 21}}, "min_pool_size: 21 is larger than default_pool_size (20)"},
		{"auth type", Config{PoolMode: PoolModeTransaction, Auth: AuthConfig{Type: "cert", File: userlist}}, `auth_type: "cert" is not one of`},
		{"no source", Config{PoolMode: PoolModeTransaction}, "auth_file or auth_dsn: one is required"},
		{"no source md5", Config{PoolMode: PoolModeTransaction, Auth: AuthConfig{Type: auth.MD5}}, "auth_file or auth_dsn: one is required"},
		{"both sources", Config{PoolMode: PoolModeTransaction, Auth: AuthConfig{File: userlist, DSN: "host=x"}}, "auth_file and auth_dsn: set one of them, not both"},
		{"query without dsn", Config{PoolMode: PoolModeTransaction, Auth: AuthConfig{File: userlist, Query: "SELECT 1"}}, "auth_query: needs auth_dsn"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Upstream, tc.cfg.Rewriter = "127.0.0.1:1", testRewriter(t)
			_, err := New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("New: %v, want %q", err, tc.wantErr)
			}
		})
	}
	// Session mode ignores the auth keys: they take effect in transaction
	// mode only.
	c := Config{Upstream: "x:1", Rewriter: testRewriter(t), Auth: AuthConfig{Type: "cert"}}
	if err := c.setDefaults(); err != nil {
		t.Fatalf("session mode with a bad auth_type: %v", err)
	}
}

// TestConfigAuthConfig: the auth settings reach auth.New as given,
// with the proxy's logger, and a valid one builds.
func TestConfigAuthConfig(t *testing.T) {
	userlist := filepath.Join(t.TempDir(), "userlist.txt")
	if err := os.WriteFile(userlist, []byte(`"u" "p"`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := Config{Upstream: "x:1", Rewriter: testRewriter(t), Auth: AuthConfig{Type: auth.MD5, File: userlist}}
	if err := c.setDefaults(); err != nil {
		t.Fatal(err)
	}
	ac := c.authConfig()
	if ac.Type != auth.MD5 || ac.File != userlist || ac.DSN != "" || ac.Query != "" || ac.Logger != c.Logger {
		t.Fatalf("auth.Config() = %+v", ac)
	}
	a, err := auth.New(ac)
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	c.Auth = AuthConfig{DSN: "host=db user=auth", Query: "SELECT 1"}
	if ac := c.authConfig(); ac.DSN != c.Auth.DSN || ac.Query != c.Auth.Query || ac.Type != "" {
		t.Fatalf("auth.Config() = %+v", ac)
	}
}
