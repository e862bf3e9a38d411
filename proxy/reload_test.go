package proxy

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/rewrite"
	"github.com/ttlproxy/ttlproxy/ttl"
)

// TestReload: a reload changes the rules for every open session's next
// statement without dropping it, prepared statements included, and the
// limits for new clients; an invalid reload changes nothing.
func TestReload(t *testing.T) {
	p, db := startStateProxy(t, Config{})
	conns := map[string]*pgx.Conn{}
	for _, m := range modes {
		conns[m.name] = p.connect(t, db, m.mode)
		requireCount(t, conns[m.name], countPublic, m.name+": before")
	}
	prepared := p.connect(t, db, pgx.QueryExecModeCacheStatement)
	requireCount(t, prepared, countPublic, "prepared: before")

	reload := func(rules []ttl.Rule, bypass ...string) {
		t.Helper()
		rw, err := rewrite.New(rules, rewrite.Options{BypassRoles: bypass})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.srv.Reload(Reload{Rewriter: rw, BypassRoles: bypass}); err != nil {
			t.Fatal(err)
		}
	}
	// No rules: every row.
	reload(nil)
	for name, conn := range conns {
		requireCount(t, conn, 2, name+": after a reload without rules")
	}
	requireCount(t, prepared, 2, "prepared: after a reload without rules")
	// The rules again: live rows only.
	reload(stateRules)
	for name, conn := range conns {
		requireCount(t, conn, countPublic, name+": after the rules came back")
	}
	requireCount(t, prepared, countPublic, "prepared: after the rules came back")
	// A bypass role added by a reload applies to open sessions.
	reload(stateRules, "postgres")
	for name, conn := range conns {
		requireCount(t, conn, 2, name+": after postgres became a bypass role")
	}
	// A new session works under the newest set.
	requireCount(t, p.connect(t, db, pgx.QueryExecModeSimpleProtocol), 2, "new session, bypass")

	// An invalid reload is refused and changes nothing.
	gen := p.srv.set.Load().gen
	rw, _ := rewrite.New(stateRules, rewrite.Options{MaxStatementBytes: 1 << 20})
	if err := p.srv.Reload(Reload{Rewriter: rw, MaxMessageBytes: 1 << 10}); err == nil {
		t.Error("a reload with max message bytes below max statement bytes was accepted")
	}
	if err := p.srv.Reload(Reload{Rewriter: rw, BypassRoles: []string{"someone"}}); err == nil {
		t.Error("a reload whose bypass roles differ from the rewriter's was accepted")
	}
	if p.srv.set.Load().gen != gen {
		t.Error("a refused reload changed the rule set")
	}

	// Limits apply to new clients.
	reload(stateRules, "postgres")
	rw2, _ := rewrite.New(stateRules, rewrite.Options{})
	if err := p.srv.Reload(Reload{Rewriter: rw2, MaxClientConnections: 1, IdleSessionTimeout: time.Hour}); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(p.connString(t, db))
	if err != nil {
		t.Fatal(err)
	}
	if c, err := pgx.ConnectConfig(testContext(t), cfg); err == nil || pgCode(err) != codeTooManyConnections {
		if c != nil {
			c.Close(testContext(t))
		}
		t.Fatalf("new client after max_client_connections 1 was reloaded: %v", err)
	}
}

// TestServerReloadReadsAuthFile: Server.Reload reads the auth_file again
// and fails, changing nothing, when it does not load.
func TestServerReloadReadsAuthFile(t *testing.T) {
	path := writeServerAuthFile(t)
	p := startProxy(t, Config{PoolMode: PoolModeTransaction, Auth: AuthConfig{File: path}})
	conn := p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
	mustExec(t, conn, "SELECT 1")
	good, err := os.ReadFile(path) //nolint:gosec // G304: the test's own temporary file
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("not a userlist\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.srv.Reload(Reload{Rewriter: testRewriter(t)}); err == nil || !strings.HasPrefix(err.Error(), "auth_file: ") {
		t.Fatalf("reload with a broken auth_file: %v", err)
	}
	p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol) // the users loaded before
	if err := os.WriteFile(path, good, 0o600); err != nil {   //nolint:gosec // G703: the test's own temporary file
		t.Fatal(err)
	}
	if err := p.srv.Reload(Reload{Rewriter: testRewriter(t)}); err != nil {
		t.Fatal(err)
	}
}
