package sweeper

// Backlog you can see coming: how fast rows expire (the inflow), how fast
// the sweeper deletes them while it sweeps (its rate), and from the two
// the time the backlog takes to drain. A sweeper whose rate is at or below
// the inflow never catches up: the backlog grows at every run, however
// long the interval.
//
// The inflow is counted, not estimated from the planner: at the start of a
// table's sweep, the rows that expired in the window since the previous
// run's cutoff (at most inflowWindow back), through the btree index on the
// expiry column, up to inflowCap rows. That reads one range of the index per
// run, where the rows are the newest expired ones and the index pages are
// in memory, and only for rules whose expiry is a column's order (a column
// rule, a derived rule with a fixed lifetime: the rules observeOldest
// measures) on a table with such an index; others have no inflow series.
// Rows another instance deleted in the window are missed: with several
// instances the inflow is a lower bound.

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/ttlproxy/ttlproxy/ttl"
)

const (
	// inflowWindow is the longest window the inflow is counted over.
	inflowWindow = time.Minute
	// inflowCap bounds the count: above it the inflow is a lower bound
	// (inflowCap per window: over 3,000 rows/s for a full minute).
	inflowCap = 200_000
	// windowStartParam is the start of the inflow's window, $2.
	windowStartParam = "$2::pg_catalog.timestamptz"
)

// flowState is what the inflow and the drain time of one target carry from
// one run to the next.
type flowState struct {
	cutoff time.Time // the previous run's cutoff
	rate   float64   // rows deleted per second of the last sweep that deleted any; 0: none yet
	inflow float64   // the last inflow counted; -1: none
}

// windowCondition returns the condition, over the row visible as q, of a
// row that expired in the window [$2, $1): expired at the cutoff $1 and live
// at $2, written as a range of the expiry column that its index reads. ok is
// false for a rule whose expiry is not a column's order, or whose live
// condition is not the column's "IS NULL OR >=" form.
func windowCondition(r *ttl.Rule, q string) (cond, col string, ok bool) {
	col, ok = orderColumn(r)
	if !ok {
		return "", "", false
	}
	// LiveCondition is "(q.col IS NULL OR q.col >= threshold)": the
	// comparison alone bounds the index range from below.
	live := r.LiveCondition(q, windowStartParam)
	cmp, ok := strings.CutPrefix(live, "("+q+"."+ttl.QuoteIdent(col)+" IS NULL OR ")
	if !ok || !strings.HasSuffix(cmp, ")") {
		return "", "", false
	}
	return r.ExpiredCondition(q, cutoffParam) + " AND (" + strings.TrimSuffix(cmp, ")") + ")", col, true
}

// observeInflow counts t's rows that expired since the previous run's cutoff
// and sets t's inflow gauge; it returns the inflow in rows per second, -1
// when not measured. backlog is t's count of doomed rows at cutoff: when it
// is 0, so is the count, without a query.
func (s *Sweeper) observeInflow(ctx context.Context, t target, cutoff time.Time, backlog int64) (float64, error) {
	s.flowMu.Lock()
	fs := s.flows[t.name]
	s.flowMu.Unlock()
	if t.rule == nil || t.column != nil {
		return -1, nil
	}
	cond, col, ok := windowCondition(t.rule, "s")
	if !ok {
		return -1, nil
	}
	indexed, err := s.btreeIndexed(ctx, t.rule, col)
	if err != nil || !indexed {
		s.m.inflow.DeleteLabelValues(t.name)
		return -1, err
	}
	if backlog == 0 {
		s.m.inflow.WithLabelValues(t.name).Set(0)
		return 0, nil
	}
	start := cutoff.Add(-inflowWindow)
	if fs.cutoff.After(start) && fs.cutoff.Before(cutoff) {
		start = fs.cutoff
	}
	var n int64
	q := fmt.Sprintf("SELECT count(*) FROM (SELECT 1 FROM %s AS s WHERE %s LIMIT %d) AS x", t.quoted, cond, inflowCap)
	if err := s.pool.QueryRow(ctx, q, cutoff, start).Scan(&n); err != nil {
		return -1, fmt.Errorf("counting the rows of %s expired since %s: %w", t.name, start.Format(time.RFC3339), err)
	}
	inflow := float64(n) / cutoff.Sub(start).Seconds()
	s.m.inflow.WithLabelValues(t.name).Set(inflow)
	return inflow, nil
}

// observeFlow records, after a sweep of t at cutoff that deleted deleted
// rows in elapsed, its rate, and sets the drain time of the backlog left
// (left rows) at that rate against inflow (rows per second, -1: unknown).
// The rate is only learnt from a sweep that deleted rows.
func (s *Sweeper) observeFlow(t target, cutoff time.Time, deleted int64, elapsed time.Duration, inflow float64, left int64) {
	if t.column != nil {
		return
	}
	s.flowMu.Lock()
	fs := s.flows[t.name]
	fs.cutoff, fs.inflow = cutoff, inflow
	if deleted > 0 && elapsed > 0 {
		fs.rate = float64(deleted) / elapsed.Seconds()
	}
	s.flows[t.name] = fs
	s.flowMu.Unlock()
	if fs.rate > 0 {
		s.m.deleteRate.WithLabelValues(t.name).Set(fs.rate)
	}
	s.setDrain(t, fs, left)
}

// setDrain sets t's drain time for a backlog of left rows: left over the
// rate less the inflow (unknown: counted as 0), +Inf when the rate is at or
// below the inflow and rows are left; no series before a rate is known.
func (s *Sweeper) setDrain(t target, fs flowState, left int64) {
	if t.column != nil || fs.rate <= 0 {
		return
	}
	net := fs.rate - max(fs.inflow, 0)
	drain := 0.0
	switch {
	case left <= 0:
	case net <= 0:
		drain = math.Inf(1)
	default:
		drain = float64(left) / net
	}
	s.m.drain.WithLabelValues(t.name).Set(drain)
}

// flowOf returns t's flow state.
func (s *Sweeper) flowOf(t target) flowState {
	s.flowMu.Lock()
	defer s.flowMu.Unlock()
	return s.flows[t.name]
}
