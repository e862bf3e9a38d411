package tests

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/proxy"
	"github.com/ttlproxy/ttlproxy/ttl"
)

// TestPoolIsolationBoundSettings: a statement that changes a setting,
// prepared in one transaction and bound in a later one (pgx's statement
// cache prepares in a round trip of its own, then binds; a cached statement
// is only bound), must have its setting read back at the end of the
// transaction that runs it, or the client loses it at its next server. The
// isolation fuzz test found it; this is its smallest form: two clients on
// a pool of one server.
func TestPoolIsolationBoundSettings(t *testing.T) {
	s := newStack(t, stackOptions{
		setup: []string{`CREATE TABLE items (id int, expires_at timestamptz)`},
		rules: []ttl.Rule{{Table: "items", DefaultTTL: time.Hour}},
		pool:  &proxy.PoolSettings{DefaultPoolSize: 1},
	})
	ctx := context.Background()
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec} {
		a, b := s.connectMode(mode), s.connectMode(mode)
		for i, v := range []string{"4227kB", "5123kB", "6001kB"} {
			if _, err := a.Exec(ctx, "SELECT set_config('work_mem', $1, false)", v); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Exec(ctx, "SELECT 1"); err != nil { // takes the server: a reset
				t.Fatal(err)
			}
			if got := ids(t, a, "SHOW work_mem"); got != v {
				t.Errorf("%s, change %d: work_mem %s after another client used the server, want %s", mode, i, got, v)
			}
		}
	}
}
