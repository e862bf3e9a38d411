package proxy

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/ttlproxy/ttlproxy/internal/pgcluster"
	"github.com/ttlproxy/ttlproxy/internal/pgtest"
)

// startPooledProxy runs a proxy in transaction mode with a pool of size
// servers per key; clients log in with SCRAM against an auth_file that
// holds the server's own verifiers of the test roles and the superuser
// (pass-through).
func startPooledProxy(t *testing.T, size int) *testProxy {
	t.Helper()
	return startProxy(t, Config{PoolMode: PoolModeTransaction, Auth: AuthConfig{File: writeServerAuthFile(t)},
		Pool: PoolSettings{DefaultPoolSize: size}})
}

// envPoolMode set to "transaction" runs every test proxy in transaction
// mode (startProxy), with writeServerAuthFile's auth_file.
const envPoolMode = "TTLPROXY_TEST_POOL_MODE"

// sessionModeOnly skips a test of what session mode alone does when the
// suite runs in transaction mode (envPoolMode); why says what differs.
func sessionModeOnly(t *testing.T, why string) {
	t.Helper()
	if os.Getenv(envPoolMode) == PoolModeTransaction {
		t.Skip("session mode only: " + why)
	}
}

// writeServerAuthFile writes an auth_file with the server's own secrets
// (pg_authid) of every role that has one, so that clients log in to the
// proxy as they would to the server and the proxy logs in to the server
// with their SCRAM keys.
func writeServerAuthFile(t testing.TB) string {
	t.Helper()
	return writeAuthFileOf(t, pgtest.Server(t))
}

// writeAuthFileOf is writeServerAuthFile for the roles of cluster c.
func writeAuthFileOf(t testing.TB, c *pgcluster.Cluster) string {
	t.Helper()
	conn, err := pgx.Connect(testContext(t), c.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(testContext(t), "SELECT rolname, rolpassword FROM pg_authid WHERE rolpassword IS NOT NULL")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for rows.Next() {
		var name, secret string
		if err := rows.Scan(&name, &secret); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, `"`+name+`" "`+secret+`"`)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "userlist.txt")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func backendOf(t *testing.T, conn *pgx.Conn) int {
	t.Helper()
	var pid int
	if err := conn.QueryRow(testContext(t), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

func TestPooledBasic(t *testing.T) {
	p := startPooledProxy(t, 1)
	a := p.connect(t, "postgres", pgx.QueryExecModeCacheDescribe)
	b := p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
	pa, pb := backendOf(t, a), backendOf(t, b)
	if pa != pb {
		t.Fatalf("two clients on a pool of 1 ran on backends %d and %d", pa, pb)
	}
	ctx := testContext(t)
	var wg sync.WaitGroup
	for _, c := range []*pgx.Conn{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				var n int
				if err := c.QueryRow(ctx, "SELECT $1::int + 1", i).Scan(&n); err != nil || n != i+1 {
					t.Errorf("query %d: %v, %d", i, err, n)
					return
				}
			}
		}()
	}
	wg.Wait()
	tx, err := a.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := b.Exec(context.Background(), "SELECT 2")
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("B ran while A held the only server in a transaction: %v", err)
	default:
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The pool's one server, and a wait observed per acquisition: a
	// client whose next transaction starts before its server is released
	// keeps it without one, so the count is not exact, but two clients
	// alternating on one server acquire it again and again.
	if n := counterValue(t, p.reg, "ttlproxy_proxy_pool_servers"); n != 1 {
		t.Errorf("pool_servers sums to %v, want 1", n)
	}
	if n := counterValue(t, p.reg, "ttlproxy_proxy_pool_wait_seconds"); n < 100 || n > 450 {
		t.Errorf("pool_wait_seconds observed %v waits for about 400 transactions", n)
	}
}

// activeQuery waits until a backend runs a statement starting with prefix
// and returns its pid.
func activeQuery(t *testing.T, prefix string) int {
	t.Helper()
	conn, err := pgx.Connect(testContext(t), pgtest.Server(t).ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var pid int
	waitFor(t, "the statement to run", func() bool {
		err := conn.QueryRow(testContext(t),
			"SELECT pid FROM pg_stat_activity WHERE state = 'active' AND query LIKE $1 || '%' AND pid <> pg_backend_pid()", prefix).Scan(&pid)
		return err == nil
	})
	return pid
}

func TestPooledCancel(t *testing.T) {
	p := startPooledProxy(t, 1)
	a := p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
	b := p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
	ctx := testContext(t)

	// A's own key cancels A's statement.
	done := make(chan error, 1)
	go func() {
		_, err := a.Exec(context.Background(), "SELECT pg_sleep(10) -- a")
		done <- err
	}()
	activeQuery(t, "SELECT pg_sleep(10) -- a")
	if err := a.PgConn().CancelRequest(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; pgCode(err) != codeQueryCanceled {
		t.Fatalf("A after its cancel: %v, want 57014", err)
	}

	// A stale key (A idle) does not cancel B on the server A used.
	go func() {
		_, err := b.Exec(context.Background(), "SELECT pg_sleep(0.3) -- b")
		done <- err
	}()
	activeQuery(t, "SELECT pg_sleep(0.3) -- b")
	if err := a.PgConn().CancelRequest(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("B cancelled through A's stale key: %v", err)
	}

	// A forged key cancels nothing.
	go func() {
		_, err := b.Exec(context.Background(), "SELECT pg_sleep(0.3) -- forged")
		done <- err
	}()
	activeQuery(t, "SELECT pg_sleep(0.3) -- forged")
	forged := pgproto3.CancelRequest{ProcessID: b.PgConn().PID(), SecretKey: []byte{1, 2, 3, 4}}
	sendRawCancel(t, p.addr, &forged)
	if err := <-done; err != nil {
		t.Fatalf("B cancelled through a forged key: %v", err)
	}
}

// TestPooledCancelRace is PgBouncer's test_cancel_race: on a pool of one
// server, A is cancelled again and again while B waits for the server; B
// is never cancelled.
func TestPooledCancelRace(t *testing.T) {
	p := startPooledProxy(t, 1)
	a := p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
	b := p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
	ctx := testContext(t)
	for i := range 100 {
		aDone, bDone := make(chan error, 1), make(chan error, 1)
		go func() {
			_, err := a.Exec(context.Background(), "SELECT pg_sleep(5) -- race a")
			aDone <- err
		}()
		activeQuery(t, "SELECT pg_sleep(5) -- race a")
		go func() {
			_, err := b.Exec(context.Background(), "SELECT 1 FROM pg_sleep(0.001) -- race b")
			bDone <- err
		}()
		waitFor(t, "B to wait for the server", func() bool { return p.srv.pools.stats().waiting == 1 })
		if err := a.PgConn().CancelRequest(ctx); err != nil {
			t.Fatal(err)
		}
		// A second cancel with A's key races B's statement (and is done
		// before the next round, where it would cancel A's next one).
		second := make(chan struct{})
		go func() {
			defer close(second)
			_ = a.PgConn().CancelRequest(context.Background())
		}()
		if err := <-aDone; pgCode(err) != codeQueryCanceled {
			t.Fatalf("round %d: A: %v, want 57014", i, err)
		}
		if err := <-bDone; err != nil {
			t.Fatalf("round %d: B cancelled: %v", i, err)
		}
		<-second
	}
}

func sendRawCancel(t *testing.T, addr string, req *pgproto3.CancelRequest) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	b, _ := req.Encode(nil)
	if _, err := conn.Write(b); err != nil {
		t.Fatal(err)
	}
	var one [1]byte
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, _ = conn.Read(one[:])
}

// TestPooledUnnamedStatement: a client describes its unnamed statement in
// one transaction and binds it in the next, after another client used the
// server (and its reset dropped the statement there).
func TestPooledUnnamedStatement(t *testing.T) {
	p := startPooledProxy(t, 1)
	a := p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
	b := p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
	ctx := testContext(t)
	for i := range 20 {
		sd, err := a.PgConn().Prepare(ctx, "", "SELECT $1::int * 2", nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Exec(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
		_ = sd
		res := a.PgConn().ExecPrepared(ctx, "", [][]byte{[]byte(itoa(i))}, nil, nil).Read()
		if res.Err != nil {
			t.Fatalf("round %d: %v", i, res.Err)
		}
		if got := string(res.Rows[0][0]); got != itoa(2*i) {
			t.Fatalf("round %d: %s", i, got)
		}
	}
}

func TestPooledLargeResult(t *testing.T) {
	p := startPooledProxy(t, 2)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe} {
		conn := p.connect(t, "postgres", mode)
		var n, total int
		rows, err := conn.Query(testContext(t), "SELECT i, repeat('x', 200) FROM generate_series(1, 5000) i")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var i int
			var s string
			if err := rows.Scan(&i, &s); err != nil {
				t.Fatal(err)
			}
			n++
			total += len(s)
		}
		if err := rows.Err(); err != nil || n != 5000 {
			t.Fatalf("mode %v: %d rows, %v", mode, n, err)
		}
	}
}

// startPooledProxyCfg is startPooledProxy with more settings.
func startPooledProxyCfg(t *testing.T, cfg Config) *testProxy {
	t.Helper()
	cfg.PoolMode, cfg.Auth = PoolModeTransaction, AuthConfig{File: writeServerAuthFile(t)}
	return startProxy(t, cfg)
}

// TestPooledPins: on a pool of one server, a client whose statement may
// leave state on the server keeps it, so that the next client waits (and
// times out); other statements release it at their end.
// TestPooledPins: a statement that may leave state a server cannot hand on
// keeps the client on its server (on a pool of one, a second client waits
// in vain) until the server shows the state gone; a reason no query can
// see the end of keeps it until the client leaves.
func TestPooledPins(t *testing.T) {
	ensureRole(t, "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'ttl_pool_reader') THEN CREATE ROLE ttl_pool_reader; END IF; END $$")
	p := startPooledProxyCfg(t, Config{Pool: PoolSettings{DefaultPoolSize: 1, QueryWaitTimeout: 300 * time.Millisecond}})
	cases := []struct {
		sql  string
		mode pgx.QueryExecMode
		pins bool
		// release ends the pin ("" for a pin for life).
		release string
	}{
		{"SELECT 1", pgx.QueryExecModeSimpleProtocol, false, ""},
		{"SELECT 'set' AS x", pgx.QueryExecModeSimpleProtocol, false, ""},
		{"SET LOCAL statement_timeout = 0", pgx.QueryExecModeSimpleProtocol, false, ""},
		{"BEGIN; SET LOCAL statement_timeout = 0; COMMIT", pgx.QueryExecModeSimpleProtocol, false, ""},
		// Settings are read back and carried, not pinned.
		{"SET statement_timeout = 0", pgx.QueryExecModeSimpleProtocol, false, ""},
		{"/* c */ set search_path = public", pgx.QueryExecModeSimpleProtocol, false, ""},
		{"SELECT set_config('app.x', 'y', false)", pgx.QueryExecModeSimpleProtocol, false, ""},
		{"RESET statement_timeout", pgx.QueryExecModeSimpleProtocol, false, ""},
		{"SELECT $1::int", pgx.QueryExecModeCacheDescribe, false, ""},
		{"SELECT $1::int", pgx.QueryExecModeCacheStatement, false, ""}, // a named statement: carried
		// Checked at the end of the transaction: nothing is left.
		{"SET SESSION AUTHORIZATION postgres", pgx.QueryExecModeSimpleProtocol, false, ""}, // the login
		{"BEGIN; CREATE TEMP TABLE pin_x (x int) ON COMMIT DROP; COMMIT", pgx.QueryExecModeSimpleProtocol, false, ""},
		{"BEGIN; CREATE TEMP TABLE pin_x (x int); ROLLBACK", pgx.QueryExecModeSimpleProtocol, false, ""},
		{"SELECT pg_advisory_xact_lock(4242)", pgx.QueryExecModeSimpleProtocol, false, ""},
		{"SELECT pg_advisory_lock(4242); SELECT pg_advisory_unlock(4242)", pgx.QueryExecModeSimpleProtocol, false, ""},
		// Pinned until the state is gone.
		{"SET SESSION AUTHORIZATION ttl_pool_reader", pgx.QueryExecModeSimpleProtocol, true, "RESET SESSION AUTHORIZATION"},
		{"CREATE TEMP TABLE pin_t (x int)", pgx.QueryExecModeSimpleProtocol, true, "DROP TABLE pin_t"},
		{"CREATE TEMP TABLE pin_t (x int)", pgx.QueryExecModeSimpleProtocol, true, "DISCARD ALL"},
		{"CREATE FUNCTION pg_temp.pin_f() RETURNS int LANGUAGE sql AS 'SELECT 1'", pgx.QueryExecModeSimpleProtocol, true, "DISCARD TEMP"},
		{"SELECT pg_advisory_lock(4242)", pgx.QueryExecModeSimpleProtocol, true, "SELECT pg_advisory_unlock_all()"},
		{"LISTEN pin_channel", pgx.QueryExecModeSimpleProtocol, true, "UNLISTEN *"},
		{"BEGIN; DECLARE pin_c CURSOR WITH HOLD FOR SELECT 1; COMMIT", pgx.QueryExecModeSimpleProtocol, true, "CLOSE pin_c"},
		{"PREPARE pin_p AS SELECT 1", pgx.QueryExecModeSimpleProtocol, true, "DEALLOCATE pin_p"},
		// For life: the name of the setting is not known.
		{`SET "app"."quoted" = 1`, pgx.QueryExecModeSimpleProtocol, true, ""},
	}
	waits := func(b *pgx.Conn) bool {
		t.Helper()
		_, err := b.Exec(testContext(t), "SELECT 2")
		if err != nil && pgCode(err) != codeTooManyConnections {
			t.Fatalf("the other client: %v", err)
		}
		return err != nil
	}
	pins := 0
	for _, c := range cases {
		var args []any
		if strings.Contains(c.sql, "$1") {
			args = []any{1}
		}
		a := p.connect(t, "postgres", c.mode)
		if _, err := a.Exec(testContext(t), c.sql, args...); err != nil {
			t.Fatalf("%s: %v", c.sql, err)
		}
		if waits(p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)) != c.pins {
			t.Errorf("%q (%v): pinned %v, want %v", c.sql, c.mode, !c.pins, c.pins)
			continue
		}
		if c.pins {
			pins++
			if n := counterValue(t, p.reg, "ttlproxy_proxy_pool_pinned_clients"); n != 1 {
				t.Errorf("%q: pool_pinned_clients %v, want 1", c.sql, n)
			}
			if c.release != "" {
				mustExec(t, a, "SELECT 3") // a statement that ends nothing: still pinned
				if !waits(p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)) {
					t.Errorf("%q: unpinned by SELECT 3", c.sql)
				}
				mustExec(t, a, c.release)
				if waits(p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)) {
					t.Errorf("%q: still pinned after %q", c.sql, c.release)
				}
			}
		}
		_ = a.Close(context.Background())
		waitFor(t, "the pinned count to return to 0", func() bool {
			return counterValue(t, p.reg, "ttlproxy_proxy_pool_pinned_clients") == 0
		})
	}
	if n := counterValue(t, p.reg, "ttlproxy_proxy_pool_pins_total"); int(n) < pins {
		t.Errorf("pool_pins_total %v, want %d and more", n, pins)
	}

	// Settings changed while pinned move with the client once it is not.
	a := p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
	b := p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
	mustExec(t, a, "CREATE TEMP TABLE pin_s (x int); SET app.pinned = 'a'")
	mustExec(t, a, "SET work_mem = '7MB'")
	mustExec(t, a, "DROP TABLE pin_s")
	mustExec(t, b, "SET app.pinned = 'b'")
	for _, c := range []struct {
		conn *pgx.Conn
		want string
	}{{a, "a 7MB"}, {b, "b 4MB"}, {a, "a 7MB"}} {
		if got := queryString(t, c.conn, "SELECT current_setting('app.pinned') || ' ' || current_setting('work_mem')"); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
}

// TestPooledPinLimit: at max_pinned_connections a statement that would pin
// one more client is refused with 53000 and does not run; once a pin ends
// it runs.
func TestPooledPinLimit(t *testing.T) {
	p := startPooledProxyCfg(t, Config{Pool: PoolSettings{DefaultPoolSize: 2, MaxPinnedConnections: 1}})
	a := p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
	b := p.connect(t, "postgres", pgx.QueryExecModeCacheDescribe)
	// A transaction that drops its own state takes no slot beyond it.
	mustExec(t, b, "BEGIN; CREATE TEMP TABLE pin_x (x int) ON COMMIT DROP; INSERT INTO pin_x VALUES (1); COMMIT")
	mustExec(t, a, "CREATE TEMP TABLE pin_a (x int)")
	// The pin counts once the end of A's transaction shows its table left.
	waitFor(t, "A's pin to be confirmed", func() bool { return counterValue(t, p.reg, "ttlproxy_proxy_pool_pinned_clients") == 1 })
	// A transaction-level advisory lock never pins: not refused at the bound.
	mustExec(t, b, "SELECT pg_advisory_xact_lock(78)")
	_, err := b.Exec(testContext(t), "CREATE TEMP TABLE pin_b (x int)")
	requireCode(t, err, codeInsufficientResources)
	_, err = b.Exec(testContext(t), "SELECT pg_advisory_lock(77)")
	requireCode(t, err, codeInsufficientResources)
	if n := queryString(t, directConn(t, "postgres"), "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 77"); n != "0" {
		t.Fatalf("the refused statement ran: %s advisory locks", n)
	}
	mustExec(t, b, "SELECT 1") // b is served
	// Words in literals, comments and quoted names, and columns named like
	// keywords, pin nothing: served at the bound.
	for _, sql := range []string{
		"SELECT 'on hold', 'temporary', 'pg_advisory_lock(1)' /* CREATE TEMP TABLE x */",
		`SELECT 1 AS "temp", 2 AS hold, 3 AS advisory_note`,
		"SELECT 'x; LISTEN ch; PREPARE p AS SELECT 1'",
	} {
		mustExec(t, b, sql)
	}
	if n := counterValue(t, p.reg, "ttlproxy_proxy_pool_pin_refusals_total"); n != 2 {
		t.Errorf("pool_pin_refusals_total %v, want 2", n)
	}
	mustExec(t, a, "DROP TABLE pin_a")
	// The server is checked after the ReadyForQuery that ends A's DROP.
	waitFor(t, "A's pin to end", func() bool { return counterValue(t, p.reg, "ttlproxy_proxy_pool_pinned_clients") == 0 })
	mustExec(t, b, "CREATE TEMP TABLE pin_b (x int)")
	mustExec(t, b, "INSERT INTO pin_b VALUES (1)")
	if n := counterValue(t, p.reg, "ttlproxy_proxy_pool_pinned_clients"); n != 1 {
		t.Errorf("pool_pinned_clients %v, want 1", n)
	}
}

// TestPooledStateIsolation: no session state reaches another client.
func TestPooledStateIsolation(t *testing.T) {
	fn := fmt.Sprintf("pooled_hidden_%d", os.Getpid())
	execDirect(t, "postgres", "CREATE OR REPLACE FUNCTION "+fn+"() RETURNS text LANGUAGE sql AS $$ SELECT pg_catalog.set_config('app.leak', 'leaked', false) $$")
	t.Cleanup(func() { execDirect(t, "postgres", "DROP FUNCTION IF EXISTS "+fn+"()") })

	t.Run("pinned state stays with its client", func(t *testing.T) {
		p := startPooledProxy(t, 2)
		a := p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
		mustExec(t, a, "SET statement_timeout = '1234s'")
		mustExec(t, a, "SET search_path = pg_catalog, public")
		mustExec(t, a, "CREATE TEMP TABLE pooled_pin (x int)") // pins
		pinned := backendOf(t, a)
		b := p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
		for range 20 {
			if backendOf(t, b) == pinned {
				t.Fatal("another client ran on the pinned server")
			}
			if got := queryString(t, b, "SHOW statement_timeout"); got != "0" {
				t.Fatalf("statement_timeout %q reached another client", got)
			}
		}
		if got := queryString(t, a, "SHOW statement_timeout"); got != "1234s" {
			t.Fatalf("the pinned client lost its setting: %q", got)
		}
		// Gone, the pinned client's server is closed, not handed on.
		_ = a.Close(context.Background())
		direct := directConn(t, "postgres")
		waitFor(t, "the pinned server to close", func() bool {
			var n int
			_ = direct.QueryRow(testContext(t), "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pinned).Scan(&n)
			return n == 0
		})
	})

	t.Run("a change the proxy cannot see is reset", func(t *testing.T) {
		p := startPooledProxy(t, 1)
		a := p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
		b := p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
		mustExec(t, a, "SELECT "+fn+"()")
		for range 3 {
			var got *string
			if err := b.QueryRow(testContext(t), "SELECT current_setting('app.leak', true)").Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != nil && *got == "leaked" {
				t.Fatal("a setting changed inside a function reached another client")
			}
		}
	})

	t.Run("SET LOCAL ends with its transaction", func(t *testing.T) {
		p := startPooledProxy(t, 1)
		a := p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
		b := p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
		mustExec(t, a, "BEGIN; SET LOCAL statement_timeout = '77s'; COMMIT")
		if got := queryString(t, b, "SHOW statement_timeout"); got != "0" {
			t.Fatalf("statement_timeout %q after another client's SET LOCAL", got)
		}
	})
}

// TestPooledClientVanishes: a client gone mid-transaction takes its server
// with it: its uncommitted work and its locks are gone, and the next
// client is served by a new server.
func TestPooledClientVanishes(t *testing.T) {
	p := startPooledProxy(t, 1)
	table := fmt.Sprintf("pooled_vanish_%d", os.Getpid())
	execDirect(t, "postgres", "CREATE TABLE "+table+" (id int PRIMARY KEY)", "INSERT INTO "+table+" VALUES (1)")
	t.Cleanup(func() { execDirect(t, "postgres", "DROP TABLE IF EXISTS "+table) })
	a := p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
	mustExec(t, a, "BEGIN")
	mustExec(t, a, "SELECT * FROM "+table+" WHERE id = 1 FOR UPDATE")
	mustExec(t, a, "INSERT INTO "+table+" VALUES (2)")
	_ = a.PgConn().Conn().Close()
	b := p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
	mustExec(t, b, "SET lock_timeout = '5s'") // pins b; the pool has a server again
	mustExec(t, b, "SELECT * FROM "+table+" WHERE id = 1 FOR UPDATE")
	if got := queryString(t, b, "SELECT count(*)::text FROM "+table); got != "1" {
		t.Fatalf("%s rows: the vanished client's insert survived", got)
	}
}

// TestPooledServerLost: a server that dies while idle in the pool is
// replaced unnoticed; one that dies while a client holds it ends that
// client's session only.
func TestPooledServerLost(t *testing.T) {
	p := startPooledProxy(t, 1)
	a := p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
	idle := backendOf(t, a)
	execDirect(t, "postgres", fmt.Sprintf("SELECT pg_terminate_backend(%d)", idle))
	waitFor(t, "the idle server to leave the pool", func() bool { return p.srv.pools.stats().idle == 0 })
	if got := backendOf(t, a); got == idle {
		t.Fatal("served by the terminated backend")
	}

	b := p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
	mustExec(t, a, "BEGIN")
	held := backendOf(t, a)
	done := make(chan error, 1)
	go func() {
		_, err := b.Exec(context.Background(), "SELECT 1")
		done <- err
	}()
	execDirect(t, "postgres", fmt.Sprintf("SELECT pg_terminate_backend(%d)", held))
	_, err := a.Exec(testContext(t), "SELECT 1")
	if code := pgCode(err); code != "57P01" && code != codeConnectionFailure {
		t.Fatalf("the client whose server died: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the waiting client: %v", err)
	}
}

func TestPooledCopy(t *testing.T) {
	p := startPooledProxy(t, 1)
	table := fmt.Sprintf("pooled_copy_%d", os.Getpid())
	execDirect(t, "postgres", "CREATE TABLE "+table+" (id int, v text)")
	t.Cleanup(func() { execDirect(t, "postgres", "DROP TABLE IF EXISTS "+table) })
	a := p.connect(t, "postgres", pgx.QueryExecModeCacheDescribe)
	b := p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
	var wg sync.WaitGroup
	for i, c := range []*pgx.Conn{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 20 {
				rows := make([][]any, 100)
				for j := range rows {
					rows[j] = []any{i*1000 + j, strings.Repeat("v", round)}
				}
				n, err := c.CopyFrom(context.Background(), pgx.Identifier{table}, []string{"id", "v"}, pgx.CopyFromRows(rows))
				if err != nil || n != 100 {
					t.Errorf("COPY FROM: %d, %v", n, err)
					return
				}
				var buf strings.Builder
				tag, err := c.PgConn().CopyTo(context.Background(), &buf, "COPY (SELECT * FROM "+table+" WHERE id / 1000 = "+itoa(i)+") TO STDOUT")
				if err != nil || tag.RowsAffected() != int64(100*(round+1)) {
					t.Errorf("COPY TO: %v, %v", tag, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestPooledErrorInBlock(t *testing.T) {
	p := startPooledProxy(t, 1)
	a := p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
	b := p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
	mustExec(t, a, "BEGIN")
	if _, err := a.Exec(testContext(t), "SELECT 1/0"); pgCode(err) != "22012" {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := b.Exec(context.Background(), "SELECT 1")
		done <- err
	}()
	waitFor(t, "B to wait for the server", func() bool { return p.srv.pools.stats().waiting == 1 })
	if _, err := a.Exec(testContext(t), "SELECT 1"); pgCode(err) != "25P02" {
		t.Fatalf("in the failed block: %v", err)
	}
	mustExec(t, a, "ROLLBACK")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestPooledIdleSessionTimeout(t *testing.T) {
	p := startPooledProxyCfg(t, Config{IdleSessionTimeout: 200 * time.Millisecond, Pool: PoolSettings{DefaultPoolSize: 2}})
	for _, setup := range []string{"SELECT 1", "SET statement_timeout = 0"} { // released, pinned
		conn := p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
		mustExec(t, conn, setup)
		time.Sleep(600 * time.Millisecond)
		_, err := conn.Exec(testContext(t), "SELECT 1")
		requireCode(t, err, codeIdleSessionTimeout)
	}
}

// TestPooledSettings: on a pool of one server shared by two clients, each
// keeps the settings it made (built-in, placeholders, role, ttlproxy.ttl)
// and never sees the other's, though neither is pinned.
func TestPooledSettings(t *testing.T) {
	ensureRole(t, "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'ttl_pool_reader') THEN CREATE ROLE ttl_pool_reader; END IF; END $$")
	p := startPooledProxy(t, 1)
	a := p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
	b := p.connect(t, "postgres", pgx.QueryExecModeCacheDescribe)
	mustExec(t, a, "SET statement_timeout = '1234s'")
	mustExec(t, a, "SET search_path = pg_catalog, public")
	mustExec(t, a, "SELECT set_config('app.tenant', 'a', false)")
	mustExec(t, a, "SET ROLE ttl_pool_reader")
	mustExec(t, a, "SET TimeZone = 'Asia/Tokyo'")
	mustExec(t, b, "SET app.tenant = 'b'")
	check := func(c *pgx.Conn, who string, want [5]string) {
		t.Helper()
		var got [5]string
		err := c.QueryRow(testContext(t), `SELECT current_setting('statement_timeout'), current_setting('search_path'),
			coalesce(current_setting('app.tenant', true), '<null>'), current_user::text, current_setting('TimeZone')`).
			Scan(&got[0], &got[1], &got[2], &got[3], &got[4])
		if err != nil {
			t.Fatalf("%s: %v", who, err)
		}
		if got != want {
			t.Fatalf("%s sees %q, want %q", who, got, want)
		}
	}
	tz := queryString(t, directConn(t, "postgres"), "SHOW TimeZone")
	for range 10 {
		check(a, "A", [5]string{"1234s", "pg_catalog, public", "a", "ttl_pool_reader", "Asia/Tokyo"})
		check(b, "B", [5]string{"0", `"$user", public`, "b", "postgres", tz})
	}
	if backendOf(t, a) != backendOf(t, b) {
		t.Fatal("the two clients are not sharing the pool's one server")
	}
	if n := counterValue(t, p.reg, "ttlproxy_proxy_pool_settings_readbacks_total"); n < 2 {
		t.Errorf("%v settings read back, want 2 and more", n)
	}
	if n := counterValue(t, p.reg, "ttlproxy_proxy_pool_settings_applies_total"); n < 10 {
		t.Errorf("%v settings applied, want one per switch (10 and more)", n)
	}
	if n := counterValue(t, p.reg, "ttlproxy_proxy_pool_pins_total"); n != 0 {
		t.Errorf("%v clients pinned by settings", n)
	}
	mustExec(t, a, "RESET ALL")
	mustExec(t, a, "RESET ROLE")
	check(a, "A after RESET", [5]string{"0", `"$user", public`, "", "postgres", tz})
	check(b, "B", [5]string{"0", `"$user", public`, "b", "postgres", tz})
}

// TestPooledSettingsNotRestored: a client whose role was revoked while it
// held no server gets the server's error, and its statement does not run
// as its login.
func TestPooledSettingsNotRestored(t *testing.T) {
	table := fmt.Sprintf("pooled_revoke_%d", os.Getpid())
	ensureRole(t, "SET password_encryption = 'scram-sha-256'; "+roleSQL("ttl_scram", "scram-secret"),
		"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'ttl_pool_target') THEN CREATE ROLE ttl_pool_target; END IF; END $$",
		"GRANT ttl_pool_target TO ttl_scram",
		"CREATE TABLE "+table+" (who text)",
		"GRANT INSERT ON "+table+" TO ttl_scram, ttl_pool_target")
	t.Cleanup(func() { execDirect(t, "postgres", "DROP TABLE IF EXISTS "+table) })
	p := startPooledProxy(t, 1)
	connect := func() *pgx.Conn {
		u, _ := url.Parse(p.connString(t, "postgres"))
		u.User = url.UserPassword("ttl_scram", "scram-secret")
		cfg, err := pgx.ParseConfig(u.String())
		if err != nil {
			t.Fatal(err)
		}
		cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
		return connectConfig(t, cfg)
	}
	a, other := connect(), connect()
	mustExec(t, a, "SET ROLE ttl_pool_target")
	execDirect(t, "postgres", "REVOKE ttl_pool_target FROM ttl_scram")
	mustExec(t, other, "SELECT 1") // takes the server: A's settings go
	_, err := a.Exec(testContext(t), "INSERT INTO "+table+" VALUES (current_user)")
	pe := requireCode(t, err, "42501")
	if pe.Severity != "FATAL" || !strings.Contains(pe.Message, "could not restore this session's settings") {
		t.Fatalf("got %s %q", pe.Severity, pe.Message)
	}
	if got := queryString(t, directConn(t, "postgres"), "SELECT count(*)::text FROM "+table); got != "0" {
		t.Fatalf("%s rows inserted", got)
	}
	mustExec(t, other, "SELECT 1") // the pool serves on
	if n := counterValue(t, p.reg, "ttlproxy_proxy_pool_settings_applies_total"); n != 1 {
		t.Errorf("%v applies counted, want the failed one", n)
	}
}

// TestPooledPreparedStatements: clients with statement caches (named
// prepared statements, pgx's default) share one server: each switch gives
// the server the client's own statements, under the client's names, and
// none of another's.
func TestPooledPreparedStatements(t *testing.T) {
	p := startPooledProxyCfg(t, Config{Pool: PoolSettings{DefaultPoolSize: 1, QueryWaitTimeout: 10 * time.Second}})
	var conns []*pgx.Conn
	for range 3 {
		conns = append(conns, p.connect(t, "postgres", pgx.QueryExecModeCacheStatement))
	}
	ctx := testContext(t)
	for round := range 30 {
		for i, c := range conns {
			// The same text for every client (the same statement name in
			// pgx's cache), and one of the client's own.
			var n, m int
			if err := c.QueryRow(ctx, "SELECT $1::int + 1", round).Scan(&n); err != nil || n != round+1 {
				t.Fatalf("round %d client %d: %v, %d", round, i, err, n)
			}
			if err := c.QueryRow(ctx, fmt.Sprintf("SELECT $1::int * %d", i+2), round).Scan(&m); err != nil || m != round*(i+2) {
				t.Fatalf("round %d client %d: %v, %d", round, i, err, m)
			}
		}
	}
	// A statement the client closed is gone on whichever server it lands.
	c := conns[0]
	sd, err := c.Prepare(ctx, "pooled_named", "SELECT 42")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Deallocate(ctx, sd.Name); err != nil {
		t.Fatal(err)
	}
	mustExec(t, conns[1], "SELECT 1")
	res := c.PgConn().ExecPrepared(ctx, "pooled_named", nil, nil, nil).Read()
	if pgCode(res.Err) != "26000" {
		t.Fatalf("a closed statement: %v", res.Err)
	}
}
