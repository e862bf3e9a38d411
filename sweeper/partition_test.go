package sweeper

import (
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// createEvents creates public.events, range-partitioned on expires_at:
// two partitions wholly before now (old1, old2, 10 rows each), one across
// now (cur: 10 expired and 10 live rows), one after (next: 10 live rows),
// and, with withDefault, a default partition with 5 rows of NULL expiry.
func createEvents(t *testing.T, e *env, withDefault bool) {
	t.Helper()
	e.exec(t, "CREATE TABLE events (id bigint, expires_at timestamptz) PARTITION BY RANGE (expires_at)")
	for _, p := range []struct{ name, from, to string }{
		{"events_old1", "now() - interval '3 days'", "now() - interval '2 days'"},
		{"events_old2", "now() - interval '2 days'", "now() - interval '1 day'"},
		{"events_cur", "now() - interval '1 day'", "now() + interval '1 day'"},
		{"events_next", "now() + interval '1 day'", "now() + interval '2 days'"},
	} {
		e.exec(t, "DO $$ BEGIN EXECUTE format('CREATE TABLE "+p.name+" PARTITION OF events FOR VALUES FROM (%L) TO (%L)', "+p.from+", "+p.to+"); END $$")
	}
	e.exec(t, `INSERT INTO events SELECT g, now() - interval '2 days 12 hours' FROM generate_series(1, 10) g`)
	e.exec(t, `INSERT INTO events SELECT g, now() - interval '1 day 12 hours' FROM generate_series(11, 20) g`)
	e.exec(t, `INSERT INTO events SELECT g, now() - interval '1 hour' FROM generate_series(21, 30) g`)
	e.exec(t, `INSERT INTO events SELECT g, now() + interval '1 hour' FROM generate_series(31, 40) g`)
	e.exec(t, `INSERT INTO events SELECT g, now() + interval '36 hours' FROM generate_series(41, 50) g`)
	if withDefault {
		e.exec(t, "CREATE TABLE events_default PARTITION OF events DEFAULT")
		e.exec(t, `INSERT INTO events SELECT g, NULL FROM generate_series(51, 55) g`)
	}
}

// TestDropExpiredPartitions: partitions whose upper bound is before the
// cutoff are detached and dropped (concurrently, or plainly when a default
// partition forbids that), the expired rows of the partition across the
// cutoff are deleted row by row, and every live row stays.
func TestDropExpiredPartitions(t *testing.T) {
	for _, withDefault := range []bool{false, true} {
		name := "concurrently"
		if withDefault {
			name = "default partition"
		}
		t.Run(name, func(t *testing.T) {
			e := setup(t)
			createEvents(t, e, withDefault)
			s := e.newSweeper(t, Config{Rules: []ttl.Rule{{Schema: "public", Table: "events"}}, DropExpiredPartitions: true})
			// The dry run names them first and drops nothing.
			plans, err := s.Plan(e.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(plans) != 1 || !slices.Equal(plans[0].PartitionsToDrop, []string{"events_old1", "events_old2"}) ||
				plans[0].DetachConcurrently == withDefault {
				t.Errorf("plan %+v, want events_old1 and events_old2 to drop, concurrently %v", plans, !withDefault)
			}
			res, err := s.RunOnce(e.ctx)
			if err != nil || len(res.Errors) > 0 {
				t.Fatalf("RunOnce: %v %v", err, res.Errors)
			}
			if got := res.PartitionsDropped["public.events"]; got != 2 {
				t.Errorf("dropped %d partitions, want 2", got)
			}
			if got := testutil.ToFloat64(s.m.partitionsDropped.WithLabelValues("public.events")); got != 2 {
				t.Errorf("partitions_dropped_total = %v, want 2", got)
			}
			if got := res.Deleted["public.events"]; got != 10 {
				t.Errorf("deleted %d rows, want the 10 expired rows of events_cur", got)
			}
			var left []string
			rows, err := e.conn.Query(e.ctx, "SELECT c.relname FROM pg_class c WHERE c.relname LIKE 'events_%' AND c.relkind = 'r' ORDER BY 1")
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var n string
				if err := rows.Scan(&n); err != nil {
					t.Fatal(err)
				}
				left = append(left, n)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			want := []string{"events_cur", "events_next"}
			if withDefault {
				want = []string{"events_cur", "events_default", "events_next"}
			}
			if !equalStrings(left, want) {
				t.Errorf("tables left %v, want %v", left, want)
			}
			wantRows := int64(20)
			if withDefault {
				wantRows = 25
			}
			if got := e.count(t, "events"); got != wantRows {
				t.Errorf("%d rows left, want %d", got, wantRows)
			}
			if ids := e.ids(t, "events", "s.expires_at < now()"); len(ids) != 0 {
				t.Errorf("expired rows left: %v", ids)
			}
		})
	}
}

// Without DropExpiredPartitions the partitions stay and their expired rows
// are deleted row by row.
func TestPartitionsKeptByDefault(t *testing.T) {
	e := setup(t)
	createEvents(t, e, false)
	s := e.newSweeper(t, Config{Rules: []ttl.Rule{{Schema: "public", Table: "events"}}})
	res, err := s.RunOnce(e.ctx)
	if err != nil || len(res.Errors) > 0 {
		t.Fatalf("RunOnce: %v %v", err, res.Errors)
	}
	if got := res.Deleted["public.events"]; got != 30 || res.PartitionsDropped["public.events"] != 0 {
		t.Errorf("deleted %d rows and dropped %d partitions, want 30 and 0", got, res.PartitionsDropped["public.events"])
	}
	var n int
	if err := e.conn.QueryRow(e.ctx, "SELECT count(*) FROM pg_inherits WHERE inhparent = 'events'::regclass").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 4 {
		t.Errorf("%d partitions left, want 4", n)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestBusyPartitionLeftToNextRun: a plain DETACH (the table has a default
// partition) that cannot get its lock within the lock timeout leaves the
// partition to the next run; meanwhile its rows are swept row by row.
func TestBusyPartitionLeftToNextRun(t *testing.T) {
	e := setup(t)
	createEvents(t, e, true)
	tx := e.otherTx(t)
	if _, err := tx.Exec(e.ctx, "SELECT count(*) FROM events"); err != nil {
		t.Fatal(err)
	}
	s := e.newSweeper(t, Config{Rules: []ttl.Rule{{Schema: "public", Table: "events"}}, DropExpiredPartitions: true,
		TargetBatchDuration: 20 * time.Millisecond})
	res, err := s.RunOnce(e.ctx)
	if err != nil || len(res.Errors) > 0 {
		t.Fatalf("RunOnce: %v %v", err, res.Errors)
	}
	if got := res.PartitionsDropped["public.events"]; got != 0 {
		t.Errorf("dropped %d partitions of a busy table", got)
	}
	if got := res.Deleted["public.events"]; got != 30 {
		t.Errorf("deleted %d rows, want all 30 expired ones, row by row", got)
	}
	if err := tx.Rollback(e.ctx); err != nil {
		t.Fatal(err)
	}
	res, err = s.RunOnce(e.ctx)
	if err != nil || len(res.Errors) > 0 || res.PartitionsDropped["public.events"] != 2 {
		t.Errorf("next run: dropped %v (%v %v), want 2", res.PartitionsDropped, err, res.Errors)
	}
}
