package sweeper

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// decodedDeletes returns the DELETE lines of table public.<table> that
// fn (pg_logical_slot_peek_changes or _get_changes on slot, with options)
// decodes.
func (e *env) decodedDeletes(t *testing.T, fn, slot, table string, options ...string) []string {
	t.Helper()
	// Decoding reads the WAL flushed so far, and the test cluster commits
	// asynchronously: a synchronous commit that wrote WAL flushes every
	// commit before it.
	e.exec(t, "SET synchronous_commit = on")
	e.exec(t, "SELECT pg_catalog.pg_logical_emit_message(true, 'ttlproxy_test', 'flush')")
	args := []any{slot}
	sql := "SELECT data FROM pg_catalog." + fn + "($1, NULL, NULL"
	for i, o := range options {
		sql += ", $" + string(rune('2'+i))
		args = append(args, o)
	}
	rows, err := e.conn.Query(e.ctx, sql+")", args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range lines {
		if strings.HasPrefix(l, "table public."+table+": DELETE:") {
			out = append(out, l)
		}
	}
	return out
}

// TestCDCOrigin: with CDCOrigin the sweeper's deletes carry a replication
// origin, so that a logical decoding consumer that wants local changes only
// (test_decoding's only-local, as a subscription with origin = none) sees
// the application's delete and none of the sweeper's. While another
// session has the origin active, the sweeper waits for it instead of
// failing.
func TestCDCOrigin(t *testing.T) {
	e := setupLogical(t)
	createSessions(t, e, "cdc", 30, 5, 0)
	e.exec(t, "SELECT pg_catalog.pg_create_logical_replication_slot('ttl_cdc', 'test_decoding')")
	t.Cleanup(func() {
		_, _ = e.conn.Exec(context.Background(), "SELECT pg_catalog.pg_drop_replication_slot('ttl_cdc')")
	})
	e.exec(t, "DELETE FROM cdc WHERE id = 1") // the application's

	const origin = "ttlproxy_sweeper"
	s := e.newSweeper(t, Config{Rules: []ttl.Rule{sessionsRule("cdc")}, BatchSize: 10, CDCOrigin: origin,
		DSN: e.dsn + "&application_name=cdc_sweeper"})
	// The origin exists once a run starts; the test's session holds it
	// while the run begins.
	if _, err := s.RunOnce(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.exec(t, "SELECT pg_catalog.pg_replication_origin_session_setup($1)", origin)
	e.exec(t, "UPDATE cdc SET expires_at = now() - interval '1 minute' WHERE id > 30")
	var completed atomic.Int64
	s.afterBatch = func(string, int64) { completed.Add(1) }
	done := make(chan error, 1)
	var res RunResult
	go func() {
		var err error
		res, err = s.RunOnce(e.ctx)
		done <- err
	}()
	// Wait until the sweeper has tried to set the origin up.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var tried bool
		if err := e.conn.QueryRow(e.ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity
			WHERE application_name = 'cdc_sweeper' AND query LIKE '%pg_replication_origin_session_setup%')`).Scan(&tried); err != nil {
			t.Fatal(err)
		}
		if tried {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the sweeper did not try to set up the origin")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := completed.Load(); n != 0 {
		t.Errorf("%d batches completed while another session had the origin active", n)
	}
	e.exec(t, "SELECT pg_catalog.pg_replication_origin_session_reset()")
	select {
	case err := <-done:
		if err != nil || len(res.Errors) > 0 {
			t.Fatalf("RunOnce: %v %v", err, res.Errors)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the run did not end after the origin was released")
	}
	if got := e.count(t, "cdc"); got != 0 {
		t.Errorf("%d rows left, want 0", got)
	}

	// The first run deleted 29 rows, the second 5: all 35 decoded, and
	// only the application's one is local.
	if all := e.decodedDeletes(t, "pg_logical_slot_peek_changes", "ttl_cdc", "cdc"); len(all) != 35 {
		t.Errorf("%d deletes decoded, want 35", len(all))
	}
	local := e.decodedDeletes(t, "pg_logical_slot_get_changes", "ttl_cdc", "cdc", "only-local", "1")
	if len(local) != 1 || !strings.Contains(local[0], "id[bigint]:1 ") && !strings.HasSuffix(local[0], "id[bigint]:1") {
		t.Errorf("local deletes %q, want the application's delete of id 1 only", local)
	}
}
