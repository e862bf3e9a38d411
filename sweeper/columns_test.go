package sweeper

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// ordersRule is a row rule on public.<table>'s expires_at with two
// expiring columns: client_ip until ip_exp, note an hour after created_at.
func ordersRule(table string) ttl.Rule {
	return ttl.Rule{Schema: "public", Table: table, Columns: []ttl.ColumnRule{
		{Column: "client_ip", ExpiresAtColumn: "ip_exp"},
		{Column: "note", BaseColumn: "created_at", ExpireAfter: time.Hour},
	}}
}

// createOrders creates public.<table> for ordersRule, an audit table of
// the ids its UPDATE trigger saw, and the rows, by id:
//
//	1-20   row live, client_ip expired               → client_ip, ip_exp nulled
//	21-25  row live, client_ip live                  → kept
//	26-28  row live, ip_exp NULL (never expires)     → kept
//	29-30  row live, ip_exp expired, client_ip NULL  → nothing to null
//	31-35  row expired, client_ip expired            → deleted, never updated
//
// note is set on every row; created_at is two hours ago for ids 1-10
// and 31-35 (note expired), now for the others.
func createOrders(t *testing.T, e *env, table string) {
	t.Helper()
	e.exec(t, "CREATE TABLE "+table+` (id bigint PRIMARY KEY, expires_at timestamptz, created_at timestamptz,
		client_ip text, ip_exp timestamptz, note text)`)
	e.exec(t, "CREATE TABLE "+table+"_audit (id bigint)")
	e.exec(t, "CREATE FUNCTION "+table+"_audit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO "+
		table+"_audit VALUES (NEW.id); RETURN NEW; END $$")
	e.exec(t, "CREATE TRIGGER audit AFTER UPDATE ON "+table+" FOR EACH ROW EXECUTE FUNCTION "+table+"_audit()")
	e.exec(t, `INSERT INTO `+table+` SELECT g,
		CASE WHEN g > 30 THEN now() - interval '1 hour' ELSE now() + interval '1 day' END,
		CASE WHEN g <= 10 OR g > 30 THEN now() - interval '2 hours' ELSE now() END,
		CASE WHEN g IN (29, 30) THEN NULL ELSE '10.0.0.' || g END,
		CASE WHEN g BETWEEN 21 AND 25 THEN now() + interval '1 day' WHEN g BETWEEN 26 AND 28 THEN NULL
		     ELSE now() - interval '1 minute' END,
		'note ' || g
		FROM generate_series(1, 35) AS g`)
}

// idRange returns lo..hi.
func idRange(lo, hi int64) []int64 {
	var out []int64
	for i := lo; i <= hi; i++ {
		out = append(out, i)
	}
	return out
}

// TestColumnNulling: a run deletes the expired rows, then sets the
// expired values of each expiring column to NULL (an expiry column of its
// own with them) in the rows left, touching nothing else: not a live or
// never-expiring value, not a value already NULL, not a row the row rule
// expires (row deletion wins, even when the row delete left the row
// behind). The counts, metrics, /status and the dry run agree. Each way
// a batch can run: picks through an index, ranges of blocks, picks in a
// block slice.
func TestColumnNulling(t *testing.T) {
	for _, mode := range []string{"index", "range", "pick"} {
		t.Run(mode, func(t *testing.T) {
			e := setup(t)
			createOrders(t, e, "orders")
			if mode == "index" {
				// Enough live values that the planner finds the expired
				// ones through the index.
				e.exec(t, `INSERT INTO orders SELECT g, NULL, now(), 'x', now() + interval '1 day', NULL
					FROM generate_series(1000, 20999) g`)
				e.exec(t, "CREATE INDEX ON orders (ip_exp)")
			}
			e.exec(t, "ANALYZE orders")
			r := ordersRule("orders")
			s := e.newSweeper(t, Config{Rules: []ttl.Rule{r}, BatchSize: 4})
			s.pickBlocks = mode == "pick"
			ip := columnTargets(&r)[0]
			if sl, err := slicerFor(dialectPostgres, 0).slices(e.ctx, e.conn, ip, e.nowUTC(t)); err != nil {
				t.Fatal(err)
			} else if blocks := sl[0].blocks; blocks != (mode != "index") {
				t.Fatalf("client_ip's slices %v: not the %s mode", sl[0].label, mode)
			}

			// Row 31 is held while the rows are deleted, released before
			// the columns are swept: expired, left by the row delete,
			// and then not updated either.
			tx := e.otherTx(t)
			if _, err := tx.Exec(e.ctx, "SELECT 1 FROM orders WHERE id = 31 FOR UPDATE"); err != nil {
				t.Fatal(err)
			}
			released := false
			var before []string
			s.beforeBatch = func(_ context.Context, name string) {
				before = append(before, name)
				if name != "public.orders" && !released {
					released = true
					if err := tx.Rollback(e.ctx); err != nil {
						t.Error(err)
					}
				}
			}

			plans, err := s.Plan(e.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(plans) != 3 || plans[1].Table != "public.orders" || plans[1].Column != "client_ip" || plans[2].Column != "note" {
				t.Fatalf("plans %+v: want the table, client_ip, note", plans)
			}
			if plans[0].Expired != 5 || plans[1].Expired != 20 || plans[2].Expired != 10 {
				t.Errorf("dry run: %d rows, %d client_ip values, %d notes expired; want 5, 20, 10",
					plans[0].Expired, plans[1].Expired, plans[2].Expired)
			}
			if st := plans[1].Statement; !strings.Contains(st, `UPDATE "public"."orders" AS t SET "client_ip" = NULL, "ip_exp" = NULL WHERE`) ||
				strings.Contains(st, "DELETE") {
				t.Errorf("client_ip's batch statement:\n%s", st)
			}
			if st := plans[2].Statement; !strings.Contains(st, `SET "note" = NULL WHERE`) {
				t.Errorf("note's batch statement:\n%s", st)
			}

			res, err := s.RunOnce(e.ctx)
			if err != nil || len(res.Errors) > 0 {
				t.Fatalf("RunOnce: %v %v", err, res.Errors)
			}
			if !released {
				t.Fatal("no column batch ran")
			}
			if i := slices.Index(before, "public.orders.client_ip"); i < 0 || slices.Contains(before[i:], "public.orders") {
				t.Errorf("batches in order %v: the columns are swept after the rows", before)
			}
			if got := res.Deleted["public.orders"]; got != 4 {
				t.Errorf("deleted %d rows, want 4 (31 was held)", got)
			}
			if got := res.Nulled["public.orders.client_ip"]; got != 20 {
				t.Errorf("nulled %d client_ip values, want 20", got)
			}
			if got := res.Nulled["public.orders.note"]; got != 10 {
				t.Errorf("nulled %d notes, want 10", got)
			}
			if got := e.ids(t, "orders", "s.id < 1000 AND s.client_ip IS NULL AND s.ip_exp IS NULL"); !slices.Equal(got, idRange(1, 20)) {
				t.Errorf("rows with client_ip and ip_exp NULL: %v, want 1-20", got)
			}
			if got := e.ids(t, "orders", "s.id < 1000 AND s.client_ip IS NOT NULL"); !slices.Equal(got, append(idRange(21, 28), 31)) {
				t.Errorf("rows with a client_ip: %v, want 21-28 and 31", got)
			}
			if got := e.ids(t, "orders", "s.id IN (29, 30) AND s.ip_exp IS NOT NULL"); len(got) != 2 {
				t.Errorf("the expiry of a NULL value was changed: %v", got)
			}
			if got := e.ids(t, "orders", "s.id < 1000 AND s.note IS NULL AND s.created_at IS NOT NULL"); !slices.Equal(got, idRange(1, 10)) {
				t.Errorf("rows with note NULL (created_at kept): %v, want 1-10", got)
			}
			// Each of rows 1-20 was updated once per column whose value
			// expired (1-10 twice), and no other row was.
			var audit []int64
			rows, _ := e.conn.Query(e.ctx, "SELECT id FROM orders_audit ORDER BY id")
			if audit, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
				t.Fatal(err)
			}
			want := append(idRange(1, 20), idRange(1, 10)...)
			slices.Sort(want)
			if !slices.Equal(audit, want) {
				t.Errorf("rows updated %v, want %v", audit, want)
			}

			for col, n := range map[string]float64{"client_ip": 20, "note": 10} {
				if got := testutil.ToFloat64(s.m.rowsNulled.WithLabelValues("public.orders", col)); got != n {
					t.Errorf("rows_nulled_total{column=%s} = %v, want %v", col, got, n)
				}
				if got := testutil.ToFloat64(s.m.columnBacklog.WithLabelValues("public.orders", col)); got != 0 {
					t.Errorf("column_backlog_rows{column=%s} = %v, want 0", col, got)
				}
			}
			if got := testutil.ToFloat64(s.m.rowsDeleted.WithLabelValues("public.orders")); got != 4 {
				t.Errorf("rows_deleted_total = %v, want 4: a column's values are not rows deleted", got)
			}
			if got := testutil.ToFloat64(s.m.errors.WithLabelValues("public.orders")); got != 0 {
				t.Errorf("errors_total = %v", got)
			}
			if n, err := testutil.GatherAndCount(e.reg, "ttlproxy_sweeper_rows_nulled_total", "ttlproxy_sweeper_column_backlog_rows"); err != nil || n != 4 {
				t.Errorf("gathered %d column series (err %v), want 4", n, err)
			}
			st := s.Status()
			if len(st) != 1 || len(st[0].Columns) != 2 {
				t.Fatalf("status %+v: want public.orders with two columns", st)
			}
			if c := st[0].Columns[0]; c.Column != "client_ip" || c.Nulled != 20 || c.Backlog != 0 || c.Batches < 1 || c.LastSwept.IsZero() || c.Error != "" {
				t.Errorf("client_ip's status %+v", c)
			}
			if st[0].Deleted != 4 {
				t.Errorf("the table's status %+v: 4 rows deleted", st[0])
			}

			// The next run deletes row 31, and finds no value to null.
			res, err = s.RunOnce(e.ctx)
			if err != nil || len(res.Errors) > 0 {
				t.Fatalf("second run: %v %v", err, res.Errors)
			}
			if res.Deleted["public.orders"] != 1 || res.Nulled["public.orders.client_ip"] != 0 || res.Nulled["public.orders.note"] != 0 {
				t.Errorf("second run: deleted %v, nulled %v; want row 31 deleted, nothing nulled", res.Deleted, res.Nulled)
			}
			if got := e.count(t, "orders_audit"); got != 30 {
				t.Errorf("%d row updates after the second run, want 30", got)
			}
		})
	}
}

// TestColumnMovedExpiryLeftAlone: a value whose expiry a foreground
// transaction moves into the future while a batch is under way is not
// nulled. A range batch (an UPDATE of the expired values of a range of
// blocks, run with a long lock_timeout here) waits for that transaction
// and re-checks the value's expiry on the newest row version, which a HOT
// update leaves in the same range; a batch of rows picked without SKIP
// LOCKED waits too, and finds a row version that is not the one picked;
// with SKIP LOCKED (the default) the held row is skipped.
func TestColumnMovedExpiryLeftAlone(t *testing.T) {
	for _, mode := range []string{"range waits", "pick waits", "pick skips"} {
		t.Run(strings.ReplaceAll(mode, " ", "_"), func(t *testing.T) {
			e := setup(t)
			createOrders(t, e, "orders")
			tx := e.otherTx(t)
			if _, err := tx.Exec(e.ctx, "UPDATE orders SET ip_exp = now() + interval '1 day' WHERE id = 5"); err != nil {
				t.Fatal(err)
			}
			r := ordersRule("orders")
			r.Columns = r.Columns[:1]
			cfg := Config{Rules: []ttl.Rule{r}, BatchSize: 50, BatchTimeout: 20 * time.Second}
			if mode == "range waits" {
				cfg.TargetBatchDuration = 15 * time.Second // the range's lock_timeout
			}
			s := e.newSweeper(t, cfg)
			s.pickBlocks = mode != "range waits"
			s.lockRows = mode == "pick skips"
			wait := mode != "pick skips"
			done := make(chan RunResult, 1)
			errc := make(chan error, 1)
			go func() {
				res, err := s.RunOnce(e.ctx)
				done <- res
				errc <- err
			}()
			if wait {
				if !waitLockWait(e.ctx, e.conn, 15*time.Second) {
					t.Fatal("the sweeper's UPDATE never waited for the row lock")
				}
				if err := tx.Commit(e.ctx); err != nil {
					t.Fatal(err)
				}
			}
			res, err := <-done, <-errc
			if err != nil || len(res.Errors) > 0 {
				t.Fatalf("RunOnce: %v %v", err, res.Errors)
			}
			if !wait {
				if err := tx.Commit(e.ctx); err != nil {
					t.Fatal(err)
				}
			}
			if got := res.Nulled["public.orders.client_ip"]; got != 19 {
				t.Errorf("nulled %d values, want 19 (all expired ones but row 5's)", got)
			}
			if got := e.ids(t, "orders", "s.id = 5 AND s.client_ip IS NOT NULL AND s.ip_exp > now()"); len(got) != 1 {
				t.Errorf("row 5's value or its moved expiry is gone")
			}
			if got := e.ids(t, "orders", "s.client_ip IS NULL AND s.id < 29"); !slices.Equal(got, slices.DeleteFunc(idRange(1, 20), func(i int64) bool { return i == 5 })) {
				t.Errorf("values nulled in rows %v", got)
			}
			res, err = s.RunOnce(e.ctx)
			if err != nil || res.Nulled["public.orders.client_ip"] != 0 {
				t.Errorf("second run nulled %v (%v), want nothing", res.Nulled, err)
			}
		})
	}
}

// TestColumnsOfEveryRowKind: the row rule's expiry, whatever its kind,
// keeps the rows it expires from being updated, and a value's expiry
// column of any type is read as the row rule's would be: on a sidecar
// table whose registry expires row 2, and on a derived rule whose base
// column expires row 3, with values that expire in Unix seconds (row 4's
// is live).
func TestColumnsOfEveryRowKind(t *testing.T) {
	e := setup(t)
	columns := []ttl.ColumnRule{{Column: "secret", ExpiresAtColumn: "secret_exp", ColumnType: ttl.TypeUnixSeconds}}
	for _, tc := range []struct {
		rule   ttl.Rule
		nulled []int64
	}{
		{ttl.Rule{Schema: "public", Table: "sc", Kind: ttl.KindSidecar, SidecarTable: "sc_ttl", KeyColumns: []string{"id"}, Columns: columns},
			[]int64{1, 3}},
		{ttl.Rule{Schema: "public", Table: "dv", Kind: ttl.KindDerived, BaseColumn: "created_at", ExpireAfter: 24 * time.Hour, Columns: columns},
			[]int64{1, 2}},
	} {
		table := tc.rule.Table
		e.exec(t, "CREATE TABLE "+table+" (id bigint PRIMARY KEY, created_at timestamptz, secret text, secret_exp bigint)")
		e.exec(t, "CREATE TABLE "+table+"_ttl (id bigint PRIMARY KEY, expires_at timestamptz NOT NULL)")
		e.exec(t, `INSERT INTO `+table+` SELECT g, now() - CASE WHEN g = 3 THEN interval '2 days' ELSE interval '1 minute' END,
			's' || g, extract(epoch FROM now())::bigint + CASE WHEN g = 4 THEN 3600 ELSE -60 END FROM generate_series(1, 4) g`)
		e.exec(t, "INSERT INTO "+table+"_ttl VALUES (2, now() - interval '1 hour'), (1, now() + interval '1 hour')")
		sql := deleteBatchSQL(dialectPostgres, columnTargets(&tc.rule)[0], wholeTable, true)
		if _, err := e.conn.Exec(e.ctx, sql, e.nowUTC(t), int64(10)); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		if got := e.ids(t, table, "s.secret IS NULL AND s.secret_exp IS NULL"); !slices.Equal(got, tc.nulled) {
			t.Errorf("%s rule: values nulled in rows %v, want %v", tc.rule.RuleKind(), got, tc.nulled)
		}
	}
}

// TestYugabyteColumnStatement runs the YugabyteDB batch of an expiring
// column on PostgreSQL with stand-ins for ybctid and yb_hash_code, as
// TestYugabyteStatement does for rows: over all hash slices it nulls
// exactly the expired values of the rows the row rule keeps.
func TestYugabyteColumnStatement(t *testing.T) {
	e := setup(t)
	e.exec(t, ybHashCodeStandIn)
	e.exec(t, `CREATE TABLE yb (id bigint PRIMARY KEY, ybctid uuid UNIQUE DEFAULT gen_random_uuid(), expires_at timestamptz,
		v text, v_exp timestamptz)`)
	// Every third row expired; of the others every second value.
	e.exec(t, `INSERT INTO yb (id, expires_at, v, v_exp) SELECT g,
		CASE WHEN g % 3 = 0 THEN now() - interval '1 day' END, 'v',
		CASE WHEN g % 2 = 0 THEN now() - interval '1 day' ELSE now() + interval '1 day' END
		FROM generate_series(1, 600) g`)
	r := ttl.Rule{Schema: "public", Table: "yb", Columns: []ttl.ColumnRule{{Column: "v", ExpiresAtColumn: "v_exp"}}}
	tg := columnTargets(&r)[0]
	var total int64
	for _, sl := range hashSlices([]string{"id"}, ybHashBuckets) {
		sql := deleteBatchSQL(dialectYugabyte, tg, sl, true)
		if strings.Contains(sql, " t.ctid") || strings.Contains(sql, "s.ctid") || !strings.Contains(sql, "yb_hash_code(s.id) BETWEEN") ||
			!strings.Contains(sql, `UPDATE "public"."yb" AS t SET "v" = NULL, "v_exp" = NULL FROM doomed AS d WHERE t.ybctid OPERATOR(pg_catalog.=) d.id`) {
			t.Fatalf("statement does not null by ybctid per yb_hash_code slice: %s", sql)
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
	// Even ids not divisible by 3: 300 - 100.
	if total != 200 {
		t.Errorf("nulled %d values, want 200", total)
	}
	if n := len(e.ids(t, "yb", "s.v IS NULL AND (s.id % 2 <> 0 OR s.id % 3 = 0)")); n != 0 {
		t.Errorf("%d values nulled that are live or in expired rows", n)
	}
	if n := len(e.ids(t, "yb", "s.v IS NOT NULL AND s.v_exp < now() AND s.id % 3 <> 0")); n != 0 {
		t.Errorf("%d expired values left in live rows", n)
	}
}

// TestColumnCDCOrigin: with CDCOrigin the sweeper's UPDATEs of expiring
// columns carry the replication origin, as its deletes do.
func TestColumnCDCOrigin(t *testing.T) {
	e := setupLogical(t)
	createOrders(t, e, "cdcorders")
	e.exec(t, "SELECT pg_catalog.pg_create_logical_replication_slot('ttl_cdc_col', 'test_decoding')")
	t.Cleanup(func() {
		_, _ = e.conn.Exec(context.Background(), "SELECT pg_catalog.pg_drop_replication_slot('ttl_cdc_col')")
	})
	e.exec(t, "UPDATE cdcorders SET note = 'app' WHERE id = 22") // the application's
	r := ordersRule("cdcorders")
	r.Columns = r.Columns[:1]
	s := e.newSweeper(t, Config{Rules: []ttl.Rule{r}, CDCOrigin: "ttlproxy_sweeper_col"})
	res, err := s.RunOnce(e.ctx)
	if err != nil || len(res.Errors) > 0 || res.Nulled["public.cdcorders.client_ip"] != 20 {
		t.Fatalf("RunOnce: %v %v, nulled %v", err, res.Errors, res.Nulled)
	}
	updates := func(options ...string) []string {
		e.exec(t, "SET synchronous_commit = on")
		e.exec(t, "SELECT pg_catalog.pg_logical_emit_message(true, 'ttlproxy_test', 'flush')")
		sql := "SELECT data FROM pg_catalog.pg_logical_slot_peek_changes('ttl_cdc_col', NULL, NULL"
		var args []any
		for i, o := range options {
			sql += ", $" + string(rune('1'+i))
			args = append(args, o)
		}
		rows, err := e.conn.Query(e.ctx, sql+")", args...)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return slices.DeleteFunc(lines, func(l string) bool { return !strings.HasPrefix(l, "table public.cdcorders: UPDATE:") })
	}
	if all := updates(); len(all) != 21 {
		t.Errorf("%d updates decoded, want 21", len(all))
	}
	if local := updates("only-local", "1"); len(local) != 1 || !strings.Contains(local[0], "note[text]:'app'") {
		t.Errorf("local updates %q, want the application's only", local)
	}
}

// TestColumnsOnlyTable: a table with no row rule (rule none) has no row
// deletes, its expired values are nulled in every row, the rows a row rule
// would have expired included; the dry run plans the columns alone.
func TestColumnsOnlyTable(t *testing.T) {
	e := setup(t)
	createOrders(t, e, "orders")
	e.exec(t, "ANALYZE orders")
	r := ordersRule("orders")
	r.Kind = ttl.KindNone
	s := e.newSweeper(t, Config{Rules: []ttl.Rule{r}, BatchSize: 4})
	if n := len(targets(&r)); n != 0 {
		t.Errorf("%d row targets, want none", n)
	}
	if d := columnTargets(&r)[0].doomed("s"); strings.Contains(d, "expires_at") || strings.Contains(d, "true") {
		t.Errorf("client_ip's doomed condition reads a row rule: %s", d)
	}
	plans, err := s.Plan(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(plans) != 2 || plans[0].Column != "client_ip" || plans[1].Column != "note" {
		t.Fatalf("plans %+v: want client_ip, note", plans)
	}
	if plans[0].Expired != 25 || plans[1].Expired != 15 {
		t.Errorf("dry run: %d client_ip values, %d notes expired; want 25, 15", plans[0].Expired, plans[1].Expired)
	}
	res, err := s.RunOnce(e.ctx)
	if err != nil || len(res.Errors) > 0 {
		t.Fatalf("RunOnce: %v %v", err, res.Errors)
	}
	if len(res.Deleted) != 0 {
		t.Errorf("deleted %v, want no row deletes", res.Deleted)
	}
	if got := e.count(t, "orders"); got != 35 {
		t.Errorf("%d rows left, want all 35", got)
	}
	if got := res.Nulled["public.orders.client_ip"]; got != 25 {
		t.Errorf("nulled %d client_ip values, want 25", got)
	}
	if got := res.Nulled["public.orders.note"]; got != 15 {
		t.Errorf("nulled %d notes, want 15", got)
	}
	want := append(idRange(1, 20), idRange(31, 35)...)
	if got := e.ids(t, "orders", "s.client_ip IS NULL AND s.ip_exp IS NULL"); !slices.Equal(got, want) {
		t.Errorf("rows with client_ip and ip_exp NULL: %v, want %v", got, want)
	}
	if got := e.ids(t, "orders", "s.client_ip IS NOT NULL"); !slices.Equal(got, idRange(21, 28)) {
		t.Errorf("rows with a client_ip: %v, want 21-28", got)
	}
	want = append(idRange(1, 10), idRange(31, 35)...)
	if got := e.ids(t, "orders", "s.note IS NULL"); !slices.Equal(got, want) {
		t.Errorf("rows with note NULL: %v, want %v", got, want)
	}
	st := s.Status()
	if len(st) != 1 || len(st[0].Columns) != 2 || st[0].Deleted != 0 {
		t.Errorf("status %+v: want public.orders, no rows deleted, two columns", st)
	}
}
