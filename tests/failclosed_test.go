package tests

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// TestFailClosed sends statements the proxy cannot make safe through both
// protocols: each is rejected with its SQLSTATE and a message naming the
// table or the limit, is never forwarded (the expired row stays untouched and
// unseen), and the session and the proxy go on serving.
func TestFailClosed(t *testing.T) {
	deep := strings.Repeat("(", 5000) + "1" + strings.Repeat(")", 5000)
	cases := []struct {
		name, sql, code, msg string
	}{
		{"do block", `DO $$ BEGIN PERFORM * FROM sessions; END $$`, "0A000", "sessions"},
		{"function body", `CREATE FUNCTION f() RETURNS bigint LANGUAGE sql AS 'SELECT count(*) FROM sessions'`, "0A000", "sessions"},
		{"rule", `CREATE RULE r AS ON INSERT TO sessions DO ALSO NOTIFY x`, "0A000", "CREATE RULE"},
		{"unparseable", `SELECT * FROM sessions WHERE`, "42601", ""},
		{"nesting", `SELECT ` + deep + ` FROM sessions`, "54001", ""},
		{"size", `SELECT '` + strings.Repeat("x", 2<<20) + `' FROM sessions`, "54000", ""},
	}
	for _, m := range execModes {
		t.Run(m.name, func(t *testing.T) {
			s := newStack(t, stackOptions{setup: sessionsSetup, rules: []ttl.Rule{sessionsRule}})
			conn := s.connectMode(m.mode)
			direct := s.connect(s.direct)
			ctx := context.Background()
			for _, c := range cases {
				_, err := conn.Exec(ctx, c.sql)
				if code := sqlstate(err); code != c.code {
					t.Errorf("%s: err %v (SQLSTATE %q), want SQLSTATE %s", c.name, err, code, c.code)
					continue
				}
				if !strings.Contains(err.Error(), "ttlproxy") && c.code != "42601" {
					t.Errorf("%s: message %q does not say the proxy rejected it", c.name, err)
				}
				if c.msg != "" && !strings.Contains(err.Error(), c.msg) {
					t.Errorf("%s: message %q does not name %q", c.name, err, c.msg)
				}
				// The session still works after each rejection.
				if got := ids(t, conn, `SELECT count(*) FROM sessions`); got != "2" {
					t.Fatalf("%s: after the rejection the session sees %q rows, want 2", c.name, got)
				}
			}
			// Inside a transaction a rejection aborts it, as a server error would.
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, `DO $$ BEGIN PERFORM * FROM sessions; END $$`); sqlstate(err) != "0A000" {
				t.Fatalf("rejection in a transaction: %v", err)
			}
			if _, err := tx.Exec(ctx, `SELECT 1`); sqlstate(err) != "25P02" {
				t.Fatalf("after a rejection in a transaction: err %v, want 25P02", err)
			}
			if err := tx.Rollback(ctx); err != nil {
				t.Fatalf("ROLLBACK after a rejection: %v", err)
			}
			// Nothing was forwarded: no function was created.
			if got := ids(t, direct, `SELECT count(*) FROM pg_proc WHERE proname = 'f'`); got != "0" {
				t.Errorf("a rejected CREATE FUNCTION reached the server")
			}
			// Other clients were never affected.
			other := s.connectMode(pgx.QueryExecModeSimpleProtocol)
			if got := ids(t, other, `SELECT count(*) FROM sessions`); got != "2" {
				t.Errorf("another client sees %q rows", got)
			}
		})
	}
}

// TestPipelineWithRejection sends a batch whose middle statement is
// rejected: the statements before it run, the rest of the batch is skipped
// as after any server error, and the connection stays in sync.
func TestPipelineWithRejection(t *testing.T) {
	s := newStack(t, stackOptions{setup: sessionsSetup, rules: []ttl.Rule{sessionsRule}})
	conn := s.connect(s.proxied)
	direct := s.connect(s.direct)
	ctx := context.Background()
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO users VALUES (10, 'before')`)
	b.Queue(`CREATE RULE r AS ON INSERT TO sessions DO ALSO NOTIFY x`)
	b.Queue(`INSERT INTO users VALUES (11, 'after')`)
	err := conn.SendBatch(ctx, b).Close()
	if sqlstate(err) != "0A000" {
		t.Fatalf("batch: err %v, want 0A000", err)
	}
	// The batch is one implicit transaction: the error rolls it all back.
	if got := ids(t, direct, `SELECT count(*) FROM users WHERE id >= 10`); got != "0" {
		t.Errorf("rows from the failed batch were committed: %s", got)
	}
	if got := ids(t, conn, `SELECT count(*) FROM sessions`); got != "2" {
		t.Errorf("after the batch: %q", got)
	}
}
