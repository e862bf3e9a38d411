package sweeper

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ttlproxy/ttlproxy/ttl"
)

func TestHashColumns(t *testing.T) {
	for _, tc := range []struct {
		def  string
		want []string
	}{
		{`CREATE UNIQUE INDEX t_pkey ON public.t USING lsm (c1 HASH)`, []string{"c1"}},
		{`CREATE UNIQUE INDEX t_pkey ON public.t USING lsm (c1 HASH, c2 ASC)`, []string{"c1"}},
		{`CREATE UNIQUE INDEX t_pkey ON public.t USING lsm ((tenant, id) HASH, ts DESC)`, []string{"tenant", "id"}},
		{`CREATE UNIQUE INDEX t_pkey ON public.t USING lsm (("Tenant", "a""b") HASH)`, []string{`"Tenant"`, `"a""b"`}},
		{`CREATE UNIQUE INDEX t_pkey ON public.t USING lsm ("My Col" HASH, x ASC)`, []string{`"My Col"`}},
		{`CREATE UNIQUE INDEX t_pkey ON public.t USING lsm (c1 ASC, c2 ASC)`, nil},  // range sharded
		{`CREATE UNIQUE INDEX t_pkey ON public.t USING btree (c1)`, nil},            // PostgreSQL
		{`CREATE UNIQUE INDEX t_pkey ON public.t USING lsm ((lower(x)) HASH)`, nil}, // expression
		{`CREATE UNIQUE INDEX t_pkey ON public.t USING lsm (c1 HASH`, nil},          // unbalanced
	} {
		if got := hashColumns(tc.def); !slices.Equal(got, tc.want) {
			t.Errorf("hashColumns(%q) = %q, want %q", tc.def, got, tc.want)
		}
	}
}

func TestHashSlicesCoverTheHashSpace(t *testing.T) {
	sl := hashSlices([]string{"a", `"B"`}, ybHashBuckets)
	if len(sl) != ybHashBuckets {
		t.Fatalf("%d slices", len(sl))
	}
	next := 0
	for _, s := range sl {
		if s.lo != next || s.hi < s.lo {
			t.Fatalf("slice %s does not continue at %d", s.label, next)
		}
		next = s.hi + 1
	}
	if next != ybHashCodeSpace {
		t.Fatalf("slices end at %d, want %d", next, ybHashCodeSpace)
	}
	if got, want := sl[1].cond("s"), `yb_hash_code(s.a, s."B") BETWEEN 4096 AND 8191`; got != want {
		t.Errorf("cond = %s, want %s", got, want)
	}
	if wholeTable.cond("s") != "" {
		t.Errorf("whole table has a condition")
	}
}

// ybHashCodeStandIn creates a test-only yb_hash_code onto 0..65535, for
// running YugabyteDB statements on PostgreSQL.
const ybHashCodeStandIn = `CREATE FUNCTION yb_hash_code(bigint) RETURNS int LANGUAGE sql IMMUTABLE
	AS $$ SELECT (abs(hashint8($1)) % 65536)::int $$`

// TestYugabyteStatement runs the YugabyteDB batch statement on PostgreSQL
// with stand-ins for ybctid (a unique column) and yb_hash_code (a function
// onto 0..65535): it checks the statement's shape and that the slices
// together delete exactly the expired rows, not YugabyteDB's behaviour.
func TestYugabyteStatement(t *testing.T) {
	e := setup(t)
	e.exec(t, ybHashCodeStandIn)
	e.exec(t, `CREATE TABLE yb (id bigint PRIMARY KEY, ybctid uuid UNIQUE DEFAULT gen_random_uuid(), expires_at timestamptz)`)
	e.exec(t, `INSERT INTO yb (id, expires_at) SELECT g, CASE WHEN g % 3 = 0 THEN now() - interval '1 day'
		WHEN g % 3 = 1 THEN now() + interval '1 day' END FROM generate_series(1, 600) g`)
	r := ttl.Rule{Schema: "public", Table: "yb"}
	tg := targets(&r)[0]
	var total int64
	for _, sl := range hashSlices([]string{"id"}, ybHashBuckets) {
		sql := deleteBatchSQL(dialectYugabyte, tg, sl, true)
		if strings.Contains(sql, " t.ctid") || !strings.Contains(sql, "yb_hash_code(s.id) BETWEEN") {
			t.Fatalf("statement does not slice by ybctid and yb_hash_code: %s", sql)
		}
		for {
			tag, err := e.conn.Exec(e.ctx, sql, e.nowUTC(t), int64(7))
			if err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
			total += tag.RowsAffected()
			if tag.RowsAffected() < 7 {
				break
			}
		}
	}
	if total != 200 {
		t.Errorf("deleted %d rows, want 200", total)
	}
	if n := len(e.ids(t, "yb", "s.expires_at < now()")); n != 0 {
		t.Errorf("%d expired rows left", n)
	}
	if n := e.count(t, "yb"); n != 400 {
		t.Errorf("%d rows left, want 400", n)
	}
}

func TestBlockSlices(t *testing.T) {
	sl := blockSlices(2500, 1024)
	if len(sl) != 3 {
		t.Fatalf("%d slices of 2500 blocks, want 3", len(sl))
	}
	for i, s := range sl {
		if !s.blocks || s.firstBlock != uint32(i)*1024 || s.endBlock != uint32(i+1)*1024 {
			t.Errorf("slice %d: %+v", i, s)
		}
	}
	if got, want := sl[2].label, "blocks 2048-3071"; got != want {
		t.Errorf("label %q, want %q", got, want)
	}
	if got, want := sl[0].cond("s"), "s.ctid OPERATOR(pg_catalog.>=) $3::pg_catalog.tid AND s.ctid OPERATOR(pg_catalog.<) $4::pg_catalog.tid"; got != want {
		t.Errorf("cond %q, want %q", got, want)
	}
	if n := len(blockSlices(0, 1024)); n != 1 {
		t.Errorf("an empty table has %d slices, want 1", n)
	}
}

// TestSlicerChoosesScan: on PostgreSQL a table whose doomed rows the planner
// finds through an index is one slice; a table it would read sequentially
// is cut into block slices, and so is one where most rows are expired.
func TestSlicerChoosesScan(t *testing.T) {
	e := setup(t)
	createSessions(t, e, "indexed", 50, 20_000, 0)
	e.exec(t, "CREATE INDEX ON indexed (expires_at)")
	createSessions(t, e, "plain", 50, 20_000, 0)
	e.exec(t, "ANALYZE indexed")
	e.exec(t, "ANALYZE plain")
	cutoff := e.nowUTC(t)
	sl := slicerFor(dialectPostgres, 16)
	for _, tc := range []struct {
		table  string
		blocks bool
	}{{"indexed", false}, {"plain", true}} {
		r := sessionsRule(tc.table)
		got, err := sl.slices(e.ctx, e.conn, targets(&r)[0], cutoff)
		if err != nil {
			t.Fatal(err)
		}
		var pages int64
		if err := e.conn.QueryRow(e.ctx, "SELECT pg_relation_size($1) / 8192", tc.table).Scan(&pages); err != nil {
			t.Fatal(err)
		}
		if tc.blocks {
			if want := int((pages + 15) / 16); len(got) != want || !got[0].blocks {
				t.Errorf("%s (%d blocks): %d slices %v, want %d block slices", tc.table, pages, len(got), got[0].label, want)
			}
		} else if len(got) != 1 || got[0].blocks {
			t.Errorf("%s: slices %+v, want the whole table", tc.table, got)
		}
	}
}

// TestBlockSliceReadsOnce: in a block slice each batch starts past the rows
// the previous one picked, so a run reads the slice once. A doomed row at
// the start of the table, locked while the first batch runs and released
// after it, lies behind the cursor: the run leaves it (a scan from the
// slice's start would have taken it) and the next run deletes it.
func TestBlockSliceReadsOnce(t *testing.T) {
	e := setup(t)
	createSessions(t, e, "noindex", 3000, 100, 0)
	e.exec(t, "VACUUM ANALYZE noindex")
	var pages int64
	if err := e.conn.QueryRow(e.ctx, "SELECT pg_relation_size('noindex') / 8192").Scan(&pages); err != nil {
		t.Fatal(err)
	}
	tx := e.otherTx(t)
	if _, err := tx.Exec(e.ctx, "SELECT 1 FROM noindex WHERE id = 1 FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	s := e.newSweeper(t, Config{Rules: []ttl.Rule{sessionsRule("noindex")}, BatchSize: 200})
	s.blocksPerSlice = 8
	released := false
	s.afterBatch = func(string, int64) {
		if !released {
			released = true
			if err := tx.Rollback(e.ctx); err != nil {
				t.Error(err)
			}
		}
	}
	res, err := s.RunOnce(e.ctx)
	if err != nil || len(res.Errors) > 0 {
		t.Fatalf("RunOnce: %v %v", err, res.Errors)
	}
	if got := res.Deleted["public.noindex"]; got != 2999 {
		t.Errorf("first run deleted %d, want 2999 (all but the row behind the cursor)", got)
	}
	if ids := e.ids(t, "noindex", "s.expires_at < now()"); len(ids) != 1 || ids[0] != 1 {
		t.Errorf("expired rows left %v, want [1]", ids)
	}
	// 3000 doomed rows in batches of 200 over slices of 8 blocks: a batch
	// ends at its slice's end, so the batches are 15 full ones plus at most
	// one short one per slice.
	slices := int((pages + 7) / 8)
	if b := res.Batches["public.noindex"]; b < 15 || b > 15+slices {
		t.Errorf("%d batches over %d slices, want 15 to %d", b, slices, 15+slices)
	}
	res, err = s.RunOnce(e.ctx)
	if err != nil || res.Deleted["public.noindex"] != 1 {
		t.Errorf("second run deleted %v (%v), want the one row", res.Deleted, err)
	}
	if got := e.count(t, "noindex"); got != 100 {
		t.Errorf("%d rows left, want the 100 live ones", got)
	}
}

// TestWorkers: Workers sweep that many slices of a table at once (each of
// the first three batches waits until all three run), and together delete
// every doomed row once.
func TestWorkers(t *testing.T) {
	e := setup(t)
	createSessions(t, e, "wide", 6000, 500, 0)
	s := e.newSweeper(t, Config{Rules: []ttl.Rule{sessionsRule("wide")}, BatchSize: 100, Workers: 3})
	s.blocksPerSlice = 4
	var (
		mu      sync.Mutex
		arrived int
		all     = make(chan struct{})
		maxHeld float64
	)
	s.beforeBatch = func(context.Context, string) {
		mu.Lock()
		arrived++
		if arrived == 3 {
			close(all)
		}
		first := arrived <= 3
		maxHeld = max(maxHeld, testutil.ToFloat64(s.m.slicesHeld.WithLabelValues("public.wide")))
		mu.Unlock()
		if first {
			select {
			case <-all:
			case <-time.After(20 * time.Second):
				t.Error("three workers did not run at once")
			}
		}
	}
	res, err := s.RunOnce(e.ctx)
	if err != nil || len(res.Errors) > 0 {
		t.Fatalf("RunOnce: %v %v", err, res.Errors)
	}
	if got := res.Deleted["public.wide"]; got != 6000 {
		t.Errorf("deleted %d, want 6000", got)
	}
	if maxHeld != 3 {
		t.Errorf("at most %v slices held at once, want 3", maxHeld)
	}
	if got := testutil.ToFloat64(s.m.slicesHeld.WithLabelValues("public.wide")); got != 0 {
		t.Errorf("%v slices held after the run", got)
	}
	if got := e.count(t, "wide"); got != 500 {
		t.Errorf("%d rows left, want 500", got)
	}
}

// TestRangeBatches: a table read sequentially is swept by DELETEs of ranges
// of blocks that hold about BatchSize rows (by its density): every doomed
// row goes, each batch deletes at most BatchSize rows, the batches step
// through the table once, and a row a foreground transaction refreshes
// while a batch waits for its lock is kept (the DELETE re-checks it, or the
// range falls back to picks that skip it).
func TestRangeBatches(t *testing.T) {
	e := setup(t)
	e.exec(t, "CREATE TABLE ranged (id bigint PRIMARY KEY, expires_at timestamptz, note text)")
	e.exec(t, `INSERT INTO ranged SELECT g, CASE WHEN g % 2 = 0 THEN now() - interval '1 hour' ELSE now() + interval '1 hour' END
		FROM generate_series(1, 40000) AS g`)
	e.exec(t, "VACUUM ANALYZE ranged")
	tx := e.otherTx(t)
	// Row 2 is expired; the foreground refreshes it while holding its lock.
	if _, err := tx.Exec(e.ctx, "UPDATE ranged SET expires_at = now() + interval '1 hour' WHERE id = 2"); err != nil {
		t.Fatal(err)
	}
	s := e.newSweeper(t, Config{Rules: []ttl.Rule{sessionsRule("ranged")}, BatchSize: 1000})
	var sizes []int64
	started := false
	committed := make(chan struct{})
	s.beforeBatch = func(context.Context, string) {
		if !started {
			started = true
			go func() {
				defer close(committed)
				// Commit once the first batch waits for row 2's lock (or
				// gave up on it under its lock_timeout): either way the
				// refreshed row must survive.
				if !waitLockWait(e.ctx, e.conn, 2*time.Second) {
					t.Log("the first batch was not seen waiting for row 2's lock")
				}
				if err := tx.Commit(e.ctx); err != nil {
					t.Error(err)
				}
			}()
		}
	}
	s.afterBatch = func(_ string, n int64) { sizes = append(sizes, n) }
	res, err := s.RunOnce(e.ctx)
	<-committed
	if err != nil || len(res.Errors) > 0 {
		t.Fatalf("RunOnce: %v %v", err, res.Errors)
	}
	if got := res.Deleted["public.ranged"]; got != 19_999 {
		t.Errorf("deleted %d, want 19999 (every expired row but the refreshed one)", got)
	}
	if ids := e.ids(t, "ranged", "s.id = 2 AND s.expires_at > now()"); len(ids) != 1 {
		t.Errorf("the refreshed row is gone or expired: %v", ids)
	}
	if got := e.count(t, "ranged"); got != 20_001 {
		t.Errorf("%d rows left, want 20001", got)
	}
	var most int64
	for _, n := range sizes {
		most = max(most, n)
	}
	// 40,000 rows in ranges of about 1,000 rows, half of them expired:
	// about 40 batches of about 500 rows; a run that read the table again
	// per batch would take no more batches, so the bound is on each
	// batch's size and on the batches' count together.
	if most > 1000 || len(sizes) < 35 || len(sizes) > 60 {
		t.Errorf("%d batches, the largest %d rows: want about 40 of at most 1000 (%v)", len(sizes), most, sizes)
	}
}

// waitLockWait polls until a backend of conn's database waits for a lock,
// or until timeout; it reports whether it saw one.
func waitLockWait(ctx context.Context, conn *pgx.Conn, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
		if err != nil || n > 0 {
			return err == nil
		}
		time.Sleep(time.Millisecond)
	}
	return false
}
