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

// TestPoolIsolationStatementNoLongerParses: a client's named statement that
// no longer parses under the client's current search_path is left out when
// the client's statements are parsed again on its next server; the client's
// session goes on, as a dedicated session's does until the statement is
// run. The isolation fuzz test found the session ended ("server refused the
// reset").
func TestPoolIsolationStatementNoLongerParses(t *testing.T) {
	s := newStack(t, stackOptions{
		setup: []string{`CREATE TABLE items (id int, expires_at timestamptz)`, `CREATE SCHEMA s2`,
			`CREATE FUNCTION public.fz_one() RETURNS int LANGUAGE sql AS 'SELECT 1'`},
		rules: []ttl.Rule{{Table: "items", DefaultTTL: time.Hour}},
		pool:  &proxy.PoolSettings{DefaultPoolSize: 1},
	})
	ctx := context.Background()
	a, b := s.connectMode(pgx.QueryExecModeCacheStatement), s.connect(s.proxied)
	// With an argument, so that pgx prepares it (named, cached).
	if _, err := a.Exec(ctx, "SELECT fz_one() + $1::int", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Exec(ctx, "SET search_path = s2"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Exec(ctx, "SELECT 1"); err != nil { // takes the server
		t.Fatal(err)
	}
	if got := ids(t, a, "SELECT 2"); got != "2" {
		t.Errorf("SELECT 2 after the move: %s", got)
	}
	_, err := a.Exec(ctx, "SELECT fz_one() + $1::int", 1)
	// A dedicated session fails the statement when it runs (42883); the
	// proxy left it out, so its Bind fails with 26000 (documented).
	if c := sqlstate(err); c != "42883" && c != "26000" {
		t.Errorf("the statement that no longer parses: %v, want 42883 or 26000", err)
	}
	if got := ids(t, a, "SHOW search_path"); got != "s2" {
		t.Errorf("search_path %s, want s2", got)
	}
}

// TestPoolIsolationDiscardTemp: DISCARD TEMP does not pin, so it runs when
// the pool's clients already hold max_pinned_connections pins, as it runs in
// a dedicated session. The isolation fuzz test found it refused (53000).
func TestPoolIsolationDiscardTemp(t *testing.T) {
	s := newStack(t, stackOptions{
		setup: []string{`CREATE TABLE items (id int, expires_at timestamptz)`},
		rules: []ttl.Rule{{Table: "items", DefaultTTL: time.Hour}},
		pool:  &proxy.PoolSettings{DefaultPoolSize: 2, MaxPinnedConnections: 1},
	})
	ctx := context.Background()
	a, b := s.connect(s.proxied), s.connect(s.proxied)
	if _, err := a.Exec(ctx, "CREATE TEMP TABLE items (id int)"); err != nil { // pins a
		t.Fatal(err)
	}
	for _, q := range []string{"DISCARD TEMP", "DISCARD TEMPORARY", "DISCARD ALL"} {
		if _, err := b.Exec(ctx, q); err != nil {
			t.Errorf("%s while another client is pinned: %v", q, err)
		}
	}
}
