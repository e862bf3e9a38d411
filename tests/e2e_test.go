package tests

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/sweeper"
	"github.com/ttlproxy/ttlproxy/ttl"
)

var sessionsSetup = []string{
	`CREATE TABLE users (id int PRIMARY KEY, name text NOT NULL)`,
	`CREATE TABLE sessions (id int PRIMARY KEY, owner int, note text, expires_at timestamptz)`,
	`INSERT INTO users VALUES (1, 'ann'), (2, 'bob'), (3, 'cy'), (4, 'dee')`,
	`INSERT INTO sessions VALUES
		(1, 1, 'live', now() + interval '1 hour'),
		(2, 2, 'expired', now() - interval '1 hour'),
		(3, 3, 'forever', NULL)`,
}

var sessionsRule = ttl.Rule{Table: "sessions", DefaultTTL: time.Hour}

var execModes = []struct {
	name string
	mode pgx.QueryExecMode
}{
	{"simple", pgx.QueryExecModeSimpleProtocol},
	{"extended_prepared", pgx.QueryExecModeCacheStatement},
	{"extended_unnamed", pgx.QueryExecModeExec},
}

// TestExpiredRowsAreInvisible checks the soft TTL contract through the proxy
// with both protocols: an expired row is absent from every read shape, UPDATE
// and DELETE skip it, a live and a never-expiring row are visible.
func TestExpiredRowsAreInvisible(t *testing.T) {
	for _, m := range execModes {
		t.Run(m.name, func(t *testing.T) {
			s := newStack(t, stackOptions{setup: sessionsSetup, rules: []ttl.Rule{sessionsRule}})
			conn := s.connectMode(m.mode)
			direct := s.connect(s.direct)
			ctx := context.Background()

			reads := []struct{ sql, want string }{
				{`SELECT id FROM sessions ORDER BY id`, "1,3"},
				{`SELECT count(*) FROM sessions`, "2"},
				{`SELECT s.id FROM sessions s JOIN users u ON u.id = s.owner ORDER BY 1`, "1,3"},
				{`SELECT u.name || ':' || coalesce(s.note, '-') FROM users u LEFT JOIN sessions s ON s.owner = u.id ORDER BY u.id`,
					"ann:live,bob:-,cy:forever,dee:-"},
				{`SELECT coalesce(s.note, '-') || ':' || u.name FROM sessions s RIGHT JOIN users u ON s.owner = u.id ORDER BY u.id`,
					"live:ann,-:bob,forever:cy,-:dee"},
				{`SELECT name FROM users WHERE id IN (SELECT owner FROM sessions) ORDER BY 1`, "ann,cy"},
				{`SELECT name FROM users u WHERE EXISTS (SELECT 1 FROM sessions s WHERE s.owner = u.id) ORDER BY 1`, "ann,cy"},
				{`SELECT (SELECT count(*) FROM sessions)`, "2"},
				{`WITH live AS (SELECT * FROM sessions) SELECT string_agg(note, ',' ORDER BY id) FROM live`, "live,forever"},
				{`SELECT id FROM sessions UNION ALL SELECT id FROM sessions ORDER BY 1`, "1,1,3,3"},
				{`SELECT note FROM sessions WHERE id = 2`, ""},
			}
			for _, r := range reads {
				if got := ids(t, conn, r.sql); got != r.want {
					t.Errorf("%s\n got %q, want %q", r.sql, got, r.want)
				}
			}
			if got := ids(t, conn, `SELECT note FROM sessions WHERE id = $1`, 2); got != "" {
				t.Errorf("parameterized read of the expired row returned %q", got)
			}
			if got := ids(t, conn, `SELECT note FROM sessions WHERE id = $1`, 1); got != "live" {
				t.Errorf("parameterized read of the live row returned %q", got)
			}

			tag, err := conn.Exec(ctx, `UPDATE sessions SET note = note || '!'`)
			if err != nil || tag.String() != "UPDATE 2" {
				t.Errorf("UPDATE: tag %q, err %v; want UPDATE 2", tag, err)
			}
			if got := ids(t, direct, `SELECT note FROM sessions WHERE id = 2`); got != "expired" {
				t.Errorf("UPDATE touched the expired row: note %q", got)
			}
			tag, err = conn.Exec(ctx, `DELETE FROM sessions WHERE id IN (1, 2)`)
			if err != nil || tag.String() != "DELETE 1" {
				t.Errorf("DELETE: tag %q, err %v; want DELETE 1", tag, err)
			}
			if got := ids(t, direct, `SELECT id FROM sessions ORDER BY id`); got != "2,3" {
				t.Errorf("after DELETE the table holds %q, want 2,3 (expired row untouched)", got)
			}
		})
	}
}

// TestInsertStamping checks that an INSERT without the expiry column is
// stamped now() + default_ttl, and that a value the client gives (NULL too)
// is kept.
func TestInsertStamping(t *testing.T) {
	for _, m := range execModes {
		t.Run(m.name, func(t *testing.T) {
			s := newStack(t, stackOptions{setup: sessionsSetup, rules: []ttl.Rule{sessionsRule}})
			conn := s.connectMode(m.mode)
			direct := s.connect(s.direct)
			ctx := context.Background()

			stmts := []struct {
				sql  string
				args []any
			}{
				{`INSERT INTO sessions (id, owner, note) VALUES (10, 1, 'stamped')`, nil},
				{`INSERT INTO sessions (id, owner, note) VALUES ($1, $2, $3), ($4, $5, $6)`, []any{11, 1, "stamped", 12, 2, "stamped"}},
				{`INSERT INTO sessions (id, owner, note, expires_at) VALUES (20, 1, 'explicit', '2001-02-03 04:05:06+00')`, nil},
				{`INSERT INTO sessions (id, owner, note, expires_at) VALUES (21, 1, 'null', NULL)`, nil},
				{`INSERT INTO sessions (id, owner, note, expires_at) VALUES ($1, 1, 'param', $2)`, []any{22, time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)}},
				{`INSERT INTO sessions (id, owner, note) SELECT id + 100, id, 'from users' FROM users WHERE id <= 2`, nil},
			}
			for _, st := range stmts {
				if _, err := conn.Exec(ctx, st.sql, st.args...); err != nil {
					t.Fatalf("%s: %v", st.sql, err)
				}
			}
			// Stamped rows expire one hour from the statement's now().
			if got := ids(t, direct, `SELECT id FROM sessions
				WHERE id >= 10 AND expires_at BETWEEN now() + interval '59 minutes' AND now() + interval '1 hour' ORDER BY id`); got != "10,11,12,101,102" {
				t.Errorf("stamped rows: %q, want 10,11,12,101,102", got)
			}
			if got := ids(t, direct, `SELECT expires_at = '2001-02-03 04:05:06+00' FROM sessions WHERE id = 20`); got != "true" {
				t.Errorf("explicit expiry was not kept: %q", got)
			}
			if got := ids(t, direct, `SELECT expires_at IS NULL FROM sessions WHERE id = 21`); got != "true" {
				t.Errorf("explicit NULL expiry was not kept: %q", got)
			}
			if got := ids(t, direct, `SELECT extract(year FROM expires_at AT TIME ZONE 'UTC')::int FROM sessions WHERE id = 22`); got != "2100" {
				t.Errorf("parameter expiry was not kept: %q", got)
			}
			// Fresh rows are visible, the one inserted already expired is not.
			if got := ids(t, conn, `SELECT id FROM sessions WHERE id >= 10 ORDER BY id`); got != "10,11,12,21,22,101,102" {
				t.Errorf("visible inserted rows: %q", got)
			}
		})
	}
}

// TestRefreshOnUpdate checks sliding expiry: an UPDATE of a live row pushes
// its expiry to now() + default_ttl unless the UPDATE sets it itself.
func TestRefreshOnUpdate(t *testing.T) {
	rule := sessionsRule
	rule.RefreshOnUpdate = true
	s := newStack(t, stackOptions{setup: sessionsSetup, rules: []ttl.Rule{rule}})
	conn := s.connect(s.proxied)
	direct := s.connect(s.direct)
	ctx := context.Background()
	if _, err := direct.Exec(ctx, `UPDATE sessions SET expires_at = now() + interval '1 minute' WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `UPDATE sessions SET note = 'touched' WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	if got := ids(t, direct, `SELECT expires_at > now() + interval '59 minutes' FROM sessions WHERE id = 1`); got != "true" {
		t.Errorf("UPDATE did not refresh the expiry: %q", got)
	}
	if _, err := conn.Exec(ctx, `UPDATE sessions SET note = 'pinned', expires_at = '2100-01-01' WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	if got := ids(t, direct, `SELECT extract(year FROM expires_at AT TIME ZONE 'UTC')::int FROM sessions WHERE id = 1`); got != "2100" {
		t.Errorf("UPDATE that sets the expiry was overridden: %q", got)
	}
	if got := ids(t, direct, `SELECT note FROM sessions WHERE id = 2`); got != "expired" {
		t.Errorf("expired row changed: %q", got)
	}
}

// TestCancelThroughProxy checks that a CancelRequest sent to the proxy
// reaches the client's own backend.
func TestCancelThroughProxy(t *testing.T) {
	s := newStack(t, stackOptions{rules: []ttl.Rule{sessionsRule}})
	conn := s.connect(s.proxied)
	direct := s.connect(s.direct)
	ctx := context.Background()
	pid := conn.PgConn().PID()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// Cancel only once the backend is running the statement: a cancel
		// that reaches an idle backend is ignored by the server.
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			var active bool
			err := direct.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
				WHERE pid = $1 AND state = 'active' AND query LIKE '%pg_sleep%')`, pid).Scan(&active)
			if err != nil {
				t.Errorf("pg_stat_activity: %v", err)
				return
			}
			if active {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := conn.PgConn().CancelRequest(cctx); err != nil {
			t.Errorf("CancelRequest: %v", err)
		}
	}()
	start := time.Now()
	_, err := conn.Exec(ctx, `SELECT pg_sleep(10)`)
	wg.Wait()
	if code := sqlstate(err); code != "57014" {
		t.Fatalf("pg_sleep(10) through the proxy: err %v (SQLSTATE %q), want 57014 query_canceled", err, code)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Fatalf("cancel took %v", d)
	}
	// The session survives the cancel.
	if got := ids(t, conn, `SELECT 1`); got != "1" {
		t.Fatalf("after cancel: %q", got)
	}
}

// TestSCRAMLogin checks that a SCRAM-SHA-256 login is relayed, and that a
// wrong password is refused with the server's own SQLSTATE.
func TestSCRAMLogin(t *testing.T) {
	s := newStack(t, stackOptions{setup: []string{
		`SET password_encryption = 'scram-sha-256'`,
		`DROP ROLE IF EXISTS ttl_scram_user`,
		`CREATE ROLE ttl_scram_user LOGIN PASSWORD 'c0rrect horse'`,
	}})
	t.Cleanup(func() {
		c := s.connect(s.direct)
		_, _ = c.Exec(context.Background(), `DROP OWNED BY ttl_scram_user`)
	})
	cfg, err := pgx.ParseConfig(s.proxied)
	if err != nil {
		t.Fatal(err)
	}
	cfg.User, cfg.Password = "ttl_scram_user", "c0rrect horse"
	ctx := context.Background()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("SCRAM login through the proxy: %v", err)
	}
	var user string
	if err := conn.QueryRow(ctx, `SELECT current_user`).Scan(&user); err != nil || user != "ttl_scram_user" {
		t.Fatalf("current_user %q, err %v", user, err)
	}
	conn.Close(ctx)
	cfg.Password = "wrong"
	_, err = pgx.ConnectConfig(ctx, cfg)
	if code := sqlstate(err); code != "28P01" {
		t.Fatalf("wrong password: err %v, want SQLSTATE 28P01", err)
	}
}

// TestSweeperDeletesOnlyExpired runs the sweeper against rows around the
// expiry boundary and checks the metrics move.
func TestSweeperDeletesOnlyExpired(t *testing.T) {
	s := newStack(t, stackOptions{
		setup: append(append([]string{}, sessionsSetup...),
			`INSERT INTO sessions SELECT g, 1, 'bulk-expired', now() - interval '1 minute' FROM generate_series(100, 2599) g`),
		rules: []ttl.Rule{sessionsRule},
		sweep: &sweeper.Config{BatchSize: 1000, BatchPause: time.Millisecond, Interval: time.Hour},
	})
	direct := s.connect(s.direct)
	res, err := s.sweeper.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n := res.Deleted["public.sessions"]; n != 2501 {
		t.Errorf("RunOnce deleted %d rows of public.sessions, want 2501", n)
	}
	if got := ids(t, direct, `SELECT id FROM sessions ORDER BY id`); got != "1,3" {
		t.Errorf("after sweeping the table holds %q, want 1,3", got)
	}
	if v := s.metric("ttlproxy_sweeper_rows_deleted_total", map[string]string{"table": "public.sessions"}); v != 2501 {
		t.Errorf("ttlproxy_sweeper_rows_deleted_total = %v, want 2501", v)
	}
	if v := s.metric("ttlproxy_sweeper_batches_total", map[string]string{"table": "public.sessions"}); v < 3 {
		t.Errorf("ttlproxy_sweeper_batches_total = %v, want at least 3", v)
	}
}

// TestProxyMetricsMove checks the statement counters by outcome.
func TestProxyMetricsMove(t *testing.T) {
	s := newStack(t, stackOptions{setup: sessionsSetup, rules: []ttl.Rule{sessionsRule}})
	conn := s.connectMode(pgx.QueryExecModeSimpleProtocol)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `SELECT 1`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SELECT * FROM sessions`); err != nil {
		t.Fatal(err)
	}
	_, err := conn.Exec(ctx, `DO $$ BEGIN PERFORM * FROM sessions; END $$`)
	if code := sqlstate(err); code != "0A000" || !strings.Contains(err.Error(), "sessions") {
		t.Errorf("DO block reading a TTL table: err %v, want 0A000 naming the table", err)
	}
	if got := ids(t, conn, `SELECT 2`); got != "2" {
		t.Errorf("session unusable after a rejection: %q", got)
	}
	for outcome, min := range map[string]float64{"passthrough": 2, "rewritten": 1, "rejected": 1} {
		if v := s.metric("ttlproxy_proxy_statements_total", map[string]string{"outcome": outcome}); v < min {
			t.Errorf("statements_total{outcome=%q} = %v, want >= %v", outcome, v, min)
		}
	}
	if v := s.metric("ttlproxy_proxy_client_connections_total", nil); v < 1 {
		t.Errorf("client_connections_total = %v", v)
	}
}
