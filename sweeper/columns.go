package sweeper

import (
	"github.com/ttlproxy/ttlproxy/ttl"
)

// Expiring columns (docs/design/column-ttl.md, §6). A value of an expiring
// column c expires while its row lives on; the sweeper then sets it to
// NULL, with its expiry column when it has one of its own (a derived
// value's clock is a column the row keeps). Each column is a target of its
// own, swept after the table's row deletes in the same run, at the same
// cutoff, with the same slices, batches, pacing, advisory locks and CDC
// origin: the statements of target.go with
//
//	UPDATE tbl AS t SET c = NULL, c_exp = NULL WHERE … AND <doomed>
//
// in place of DELETE FROM tbl AS t WHERE … AND <doomed>, where doomed is
//
//	<c expired at cutoff> AND c IS NOT NULL AND <row live at cutoff>
//
// evaluated on the pick and again on the row the UPDATE writes: under READ
// COMMITTED that is the newest version, so a value whose expiry moved
// after the pick is left alone. A row the row rule expires at the cutoff
// is left to the row deletes (row deletion wins: such a row is never
// updated and then deleted), and `c IS NOT NULL` keeps a nulled row from
// being picked again (a derived value's expiry stays in its base column).
// The row rule's live condition has no NULL case, so it is exactly NOT
// <row expired>. A table with no row rule (rule none) has no row deletes
// and no row condition: doomed is the value's two conditions alone.
//
// A sidecar rule's row expiry lives in its registry, which the UPDATE
// reads in its snapshot without locking: a registry change racing the
// batch can only make it skip a value (the row looked expired) or null a
// value of a row expired since (which the next run deletes), never null a
// live row's live value, so the base rows alone are locked.

// columnRef names an expiring column of a target's table.
type columnRef struct {
	// table is the table's "schema.table"; name the column, unquoted: the
	// labels of the column's metrics.
	table, name string
	// set is the UPDATE's SET list: `"c" = NULL`, and `, "c_exp" = NULL`
	// for a column with an expiry column of its own.
	set string
}

// columnTargets returns the expiring columns of r's table as targets, in
// configuration order. A column's target name, the key of its RunResult
// entries, its batch size and its advisory locks, is "schema.table.column".
func columnTargets(r *ttl.Rule) []target {
	out := make([]target, 0, len(r.Columns))
	for i := range r.Columns {
		c := &r.Columns[i]
		expiry := c.Expiry(r)
		col := ttl.QuoteIdent(c.Column)
		set := col + " = NULL"
		if c.Kind() == ttl.KindColumn {
			set += ", " + ttl.QuoteIdent(c.ExpiresAtColumn) + " = NULL"
		}
		out = append(out, target{
			name:     r.QualifiedName() + "." + c.Column,
			quoted:   r.QuotedName(),
			regclass: r.QuotedName(),
			// The value's expiry and the row's, each by the one
			// definition the read side uses (ttl/predicate.go).
			doomed: func(q string) string {
				if !r.HasRowRule() {
					return "(" + expiry.ExpiredCondition(q, cutoffParam) + " AND " + q + "." + col + " IS NOT NULL)"
				}
				return "(" + expiry.ExpiredCondition(q, cutoffParam) + " AND " + q + "." + col + " IS NOT NULL AND " +
					r.LiveCondition(q, cutoffParam) + ")"
			},
			column: &columnRef{table: r.QualifiedName(), name: c.Column, set: set},
		})
	}
	return out
}

// sweepTargets returns everything a run sweeps for r, in order: the row
// targets (targets), then the expiring columns.
func sweepTargets(r *ttl.Rule) []target {
	return append(targets(r), columnTargets(r)...)
}

// setBacklog sets t's backlog gauge: ttlproxy_sweeper_backlog_rows for a
// table's rows, ttlproxy_sweeper_column_backlog_rows for a column's values.
func (s *Sweeper) setBacklog(t target, n int64) {
	if t.column != nil {
		s.m.columnBacklog.WithLabelValues(t.column.table, t.column.name).Set(float64(n))
		return
	}
	s.m.backlog.WithLabelValues(t.name).Set(float64(n))
}
