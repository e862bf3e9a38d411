package sweeper

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// TestInflowAndDrain: a run counts the rows that expired since the previous
// run's cutoff (at most a minute back) through the index on the expiry
// column, for each column type the count reads as a range of the index;
// the delete rate and the drain time follow from the sweep.
func TestInflowAndDrain(t *testing.T) {
	e := setup(t)
	cutoff := time.Date(2030, 6, 1, 0, 0, 0, 0, time.UTC)
	type tc struct {
		table, typ, expr string // expr: the column's value for an instant $1 - g seconds
	}
	cases := []tc{
		{"flow_tstz", "", "timestamptz"},
		{"flow_ts", string(ttl.TypeTimestamp), "timestamp"},
		{"flow_unix", string(ttl.TypeUnixSeconds), "bigint"},
	}
	var rules []ttl.Rule
	for _, c := range cases {
		val := "$1::timestamptz - g * interval '1 second'"
		switch c.expr {
		case "timestamp":
			val = "(" + val + ") AT TIME ZONE 'UTC'"
		case "bigint":
			val = "extract(epoch FROM " + val + ")::bigint"
		}
		e.exec(t, "CREATE TABLE "+c.table+" (id bigint PRIMARY KEY, expires_at "+c.expr+")")
		// 30 rows expired in the last 30 s before the cutoff, 100 an hour
		// and more before it, 20 live.
		e.exec(t, "INSERT INTO "+c.table+" SELECT g, "+val+" FROM generate_series(1, 30) g", cutoff)
		e.exec(t, "INSERT INTO "+c.table+" SELECT g, "+val+" FROM generate_series(3600, 3699) g", cutoff)
		e.exec(t, "INSERT INTO "+c.table+" SELECT g, "+val+" FROM generate_series(-20, -1) g", cutoff)
		e.exec(t, "CREATE INDEX ON "+c.table+" (expires_at)")
		e.exec(t, "ANALYZE "+c.table)
		rules = append(rules, ttl.Rule{Schema: "public", Table: c.table, ColumnType: ttl.ColumnType(c.typ)})
	}
	e.exec(t, "CREATE TABLE flow_plain (id bigint PRIMARY KEY, expires_at timestamptz)")
	rules = append(rules, sessionsRule("flow_plain"))
	s := e.newSweeper(t, Config{Rules: rules})
	at := cutoff
	s.cutoffFunc = func() time.Time { return at }
	if _, err := s.RunOnce(e.ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		name := "public." + c.table
		if got := testutil.ToFloat64(s.m.inflow.WithLabelValues(name)); got != 0.5 {
			t.Errorf("%s: inflow %v rows/s, want 0.5 (30 rows in the last minute)", name, got)
		}
		if got := testutil.ToFloat64(s.m.deleteRate.WithLabelValues(name)); got <= 0 {
			t.Errorf("%s: delete rate %v, want > 0", name, got)
		}
		if got := testutil.ToFloat64(s.m.drain.WithLabelValues(name)); got != 0 {
			t.Errorf("%s: drain %v s, want 0 (nothing left)", name, got)
		}
	}
	// No index on flow_plain's expiry column: no inflow series.
	if n, err := testutil.GatherAndCount(e.reg, "ttlproxy_sweeper_inflow_rows_per_second"); err != nil || n != len(cases) {
		t.Errorf("%d inflow series (err %v), want %d", n, err, len(cases))
	}
	// The next run, 20 s later: the window is the 20 s since the previous
	// cutoff, in which 19 of the live rows expired (1 s to 19 s after it).
	at = cutoff.Add(20 * time.Second)
	if _, err := s.RunOnce(e.ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		if got := testutil.ToFloat64(s.m.inflow.WithLabelValues("public." + c.table)); got != 0.95 {
			t.Errorf("%s: inflow %v rows/s after 20 s, want 0.95 (19 rows)", c.table, got)
		}
	}
	// The window's condition is a range of the column: the index reads it
	// (no Filter over the expired rows before the window).
	cond, _, ok := windowCondition(&rules[0], "s")
	if !ok {
		t.Fatal("no window condition for a column rule")
	}
	e.exec(t, "SET enable_seqscan = off")
	rows, err := e.conn.Query(e.ctx, "EXPLAIN SELECT 1 FROM flow_tstz AS s WHERE "+cond, cutoff, cutoff.Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	plan := strings.Join(lines, "\n")
	if !strings.Contains(plan, "Index Cond: ((expires_at IS NOT NULL) AND (expires_at < ") || !strings.Contains(plan, "(expires_at >= ") || strings.Contains(plan, "Filter") {
		t.Errorf("window plan %q: want a lower bound in the index condition", plan)
	}
}

// TestDrainGrowing: a delete rate at or below the inflow never drains.
func TestDrainGrowing(t *testing.T) {
	s := &Sweeper{m: mustMetrics(t)}
	tg := target{name: "public.t"}
	s.setDrain(tg, flowState{rate: 100, inflow: 100}, 5)
	if got := testutil.ToFloat64(s.m.drain.WithLabelValues("public.t")); !math.IsInf(got, 1) {
		t.Errorf("rate = inflow: drain %v, want +Inf", got)
	}
	s.setDrain(tg, flowState{rate: 100, inflow: 50}, 500)
	if got := testutil.ToFloat64(s.m.drain.WithLabelValues("public.t")); got != 10 {
		t.Errorf("500 rows at 100-50 rows/s: drain %v, want 10", got)
	}
}

func mustMetrics(t *testing.T) *metrics {
	t.Helper()
	m, err := newMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
