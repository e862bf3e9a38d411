package sweeper

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// TestMetricsSurviveNewSweeper: a sweeper built with the Metrics of the one
// before it (a reload) goes on counting from where that one stopped and
// keeps the time of its last run, which an alert on a sweeper that stopped
// running reads; before, every reload began again from zero and reported
// no run at all until the new sweeper's first ended.
func TestMetricsSurviveNewSweeper(t *testing.T) {
	e := setup(t)
	createSessions(t, e, "shared", 300, 0, 0)
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	first := e.newSweeper(t, Config{Rules: []ttl.Rule{sessionsRule("shared")}, Metrics: m})
	if _, err := first.RunOnce(e.ctx); err != nil {
		t.Fatal(err)
	}
	first.Stop()
	deleted := testutil.ToFloat64(m.m.rowsDeleted.WithLabelValues("public.shared"))
	lastRun := testutil.ToFloat64(m.m.lastRun)
	if deleted != 300 || lastRun == 0 {
		t.Fatalf("after the first sweeper: rows deleted %v (want 300), last run %v", deleted, lastRun)
	}

	createSessions(t, e, "other", 200, 0, 0)
	second := e.newSweeper(t, Config{Rules: []ttl.Rule{sessionsRule("other")}, Metrics: m})
	if got := testutil.ToFloat64(m.m.lastRun); got != lastRun {
		t.Errorf("last run after the sweeper was replaced: %v, want %v", got, lastRun)
	}
	if n := testutil.CollectAndCount(m.m.backlog); n != 0 {
		t.Errorf("%d backlog series kept for tables of the replaced sweeper", n)
	}
	if _, err := second.RunOnce(e.ctx); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.m.rowsDeleted.WithLabelValues("public.shared")); got != 300 {
		t.Errorf("rows deleted from the first sweeper's table: %v, want 300 kept", got)
	}
	if got := testutil.ToFloat64(m.m.rowsDeleted.WithLabelValues("public.other")); got != 200 {
		t.Errorf("rows deleted by the second sweeper: %v, want 200", got)
	}
	if got := testutil.ToFloat64(m.m.lastRun); got < lastRun {
		t.Errorf("last run went back from %v to %v", lastRun, got)
	}
	// The registry holds one set of collectors, whichever sweeper reports.
	if _, err := reg.Gather(); err != nil {
		t.Errorf("gathering: %v", err)
	}
}
