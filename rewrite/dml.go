package rewrite

import (
	pg "github.com/pganalyze/pg_query_go/v6"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// qualifier is how the statement's own clauses refer to a target table.
func qualifier(rv *pg.RangeVar) string {
	if rv.Alias != nil {
		return ttl.QuoteIdent(rv.Alias.Aliasname)
	}
	return ttl.QuoteIdent(rv.Relname)
}

func setsColumn(targets []*pg.Node, col string) bool { return columnIndex(targets, col) >= 0 }

// setsDefault returns the DEFAULT a SET list assigns to col (`col =
// DEFAULT`, not in a multi-column assignment), or nil.
func setsDefault(targets []*pg.Node, col string) *pg.SetToDefault {
	for _, t := range targets {
		if rt := t.GetResTarget(); rt.GetName() == col {
			return rt.GetVal().GetSetToDefault()
		}
	}
	return nil
}

// setsClock reports that a SET list writes the row's expiry itself: the
// stamp column, or a derived rule's base column (the row's lifetime
// counts from it), which refresh then leaves as written.
func setsClock(targets []*pg.Node, rule *ttl.Rule) bool {
	return setsColumn(targets, rule.StampColumn()) || (rule.RuleKind() == ttl.KindDerived && setsColumn(targets, rule.BaseColumn))
}

// writeTarget is the prologue of every write (INSERT, UPDATE, DELETE,
// MERGE): the scope of its WITH clause and the rule of its target rv (nil
// when rv is no TTL table, or is a CTE of sc). The caller then walks the
// statement's other parts and calls targetSpan.
func (w *walker) writeTarget(with *pg.WithClause, rv *pg.RangeVar, sc *scope) (*scope, *ttl.Rule) {
	sc = w.with(with, sc)
	w.mark(rv)
	return sc, w.rowRuleFor(rv, nil)
}

// targetSpan returns, for a write whose target has rule, the statement's
// tokens and the index of the first token after the target; ok is false
// when there is nothing to edit (no rule) or the walk has failed.
func (w *walker) targetSpan(rule *ttl.Rule, rv *pg.RangeVar) (ts tokens, after int, ok bool) {
	if rule == nil || w.err != nil {
		return nil, 0, false
	}
	ts = w.tokens()
	after = w.targetEnd(rv)
	return ts, after, w.err == nil
}

// targetEnd returns the index of the first token after a write target
// `[ONLY] name [*] [[AS] alias]`.
func (w *walker) targetEnd(rv *pg.RangeVar) int {
	_, after, ok := w.itemSpan(rv)
	if !ok {
		return -1
	}
	return after
}

// bodyEnd returns the offset where the part of a DML statement before a
// top-level RETURNING ends (the statement's end without one).
func (w *walker) bodyEnd(after, end int) int {
	ts := w.tokens()
	if r := ts.findTop(after, end, pg.Token_RETURNING); r >= 0 {
		return ts[r].start
	}
	return end
}

// updateStmt filters the target of an UPDATE in its WHERE clause (its FROM
// items are reads) and refreshes the expiry when the rule asks for it.
func (w *walker) updateStmt(u *pg.UpdateStmt, sc *scope, end int) {
	rv := u.Relation
	sc, rule := w.writeTarget(u.WithClause, rv, sc)
	w.genericList(u.TargetList, sc)
	for _, f := range u.FromClause {
		w.fromItem(f, sc, false)
	}
	w.generic(u.WhereClause, sc)
	w.genericList(u.ReturningList, sc)
	ts, after, ok := w.targetSpan(rule, rv)
	if !ok {
		return
	}
	body := w.bodyEnd(after, end)
	if d := setsDefault(u.TargetList, rule.StampColumn()); d != nil {
		if lifetime, ok := ttlFor(rule, w.s); ok && w.sessionTTLUsable(rule) {
			// SET expires_at = DEFAULT: the stamp, as an INSERT's DEFAULT.
			if !w.stampDefault(d, rule.StampValue(lifetime)) {
				return
			}
		}
	}
	if lifetime, ok := refreshFor(rule, w.s); ok && !setsClock(u.TargetList, rule) && w.sessionTTLUsable(rule) {
		set := ts.findTop(after, body, pg.Token_SET)
		if set < 0 {
			w.fail(internalError("cannot locate SET"))
			return
		}
		stop := ts.scanTop(set+1, body, func(j int) bool {
			k := ts[j].kind
			return k == pg.Token_WHERE || (k == pg.Token_FROM && ts.kind(j-1) != pg.Token_DISTINCT)
		})
		lim := body
		if stop < len(ts) && ts[stop].start < body {
			lim = ts[stop].start
		}
		last := ts.lastBefore(set+1, lim)
		if last < 0 {
			w.fail(internalError("cannot locate the SET list"))
			return
		}
		w.insert(ts[last].end, ", "+ttl.QuoteIdent(rule.StampColumn())+" = "+rule.RefreshValue(qualifier(rv), lifetime))
	}
	w.whereLive(u.WhereClause, rule, qualifier(rv), after, body)
	w.refreshSidecar(u, rule, end)
}

// deleteStmt filters the target of a DELETE in its WHERE clause; its USING
// items are reads.
func (w *walker) deleteStmt(d *pg.DeleteStmt, sc *scope, end int) {
	rv := d.Relation
	sc, rule := w.writeTarget(d.WithClause, rv, sc)
	for _, f := range d.UsingClause {
		w.fromItem(f, sc, false)
	}
	w.generic(d.WhereClause, sc)
	w.genericList(d.ReturningList, sc)
	_, after, ok := w.targetSpan(rule, rv)
	if !ok {
		return
	}
	w.whereLive(d.WhereClause, rule, qualifier(rv), after, w.bodyEnd(after, end))
}

// whereLive adds the live condition of the target to the WHERE clause of an
// UPDATE or DELETE whose text after the target runs from token after to
// offset body: `WHERE (orig) AND live`, or `WHERE live`. WHERE CURRENT OF
// stays: the cursor's query was filtered.
func (w *walker) whereLive(where *pg.Node, rule *ttl.Rule, qual string, after, body int) {
	if where.GetCurrentOfExpr() != nil {
		return
	}
	ts := w.tokens()
	live := rule.LiveCondition(qual, ttl.Now)
	last := ts.lastBefore(after-1, body)
	if last < 0 {
		w.fail(internalError("cannot locate the end of the statement"))
		return
	}
	wi := ts.findTop(after, body, pg.Token_WHERE)
	if where == nil {
		if wi >= 0 {
			w.fail(internalError("unexpected WHERE"))
			return
		}
		w.insert(ts[last].end, " WHERE "+live)
		return
	}
	if wi < 0 || wi+1 > last {
		w.fail(internalError("cannot locate WHERE"))
		return
	}
	w.insert(ts[wi+1].start, "(")
	w.insert(ts[last].end, ") AND "+live)
}

// insertStmt walks an INSERT: its source query and RETURNING are reads; the
// expiry is stamped and ON CONFLICT DO UPDATE refreshes it.
func (w *walker) insertStmt(ins *pg.InsertStmt, sc *scope, end int) {
	w.markRegistered(ins)
	rv := ins.Relation
	sc, rule := w.writeTarget(ins.WithClause, rv, sc)
	sel := ins.SelectStmt.GetSelectStmt()
	if ins.SelectStmt != nil && sel == nil {
		w.generic(ins.SelectStmt, sc)
	}
	w.selectStmt(sel, sc)
	oc := ins.OnConflictClause
	if oc != nil {
		// An expired row still conflicts: the unique index does not know
		// about expiry. DO UPDATE gets the target's live condition in its
		// WHERE, so such a row is neither updated nor (by the refresh)
		// brought back with its old data; the INSERT then affects no row
		// for it. DO NOTHING skips it. The collision triggers of package
		// install delete the expired row first, so that the new row goes
		// in and the guard never fires.
		if oc.Infer != nil {
			w.genericList(oc.Infer.IndexElems, sc)
			w.generic(oc.Infer.WhereClause, sc)
		}
		w.genericList(oc.TargetList, sc)
		w.generic(oc.WhereClause, sc)
	}
	w.genericList(ins.ReturningList, sc)
	if rule == nil || w.err != nil {
		return
	}
	col := rule.StampColumn()
	if lifetime, ok := ttlFor(rule, w.s); ok {
		n := len(w.edits)
		w.stampInsert(ins, sel, rule, col, rule.StampValue(lifetime), end)
		if len(w.edits) > n && !w.sessionTTLUsable(rule) {
			return
		}
	}
	if oc != nil && oc.Action == pg.OnConflictAction_ONCONFLICT_UPDATE {
		if lifetime, ok := refreshFor(rule, w.s); ok && !setsClock(oc.TargetList, rule) && w.sessionTTLUsable(rule) {
			w.refreshConflict(oc, col, rule.RefreshValue(qualifier(rv), lifetime), end)
		}
		w.conflictLive(oc, rule, qualifier(rv), end)
	}
	w.registerSidecar(ins, rule, end)
}

// conflictLive adds the live condition of the target (visible under qual)
// to the WHERE of ON CONFLICT DO UPDATE: `WHERE (orig) AND live`, or
// `WHERE live`.
func (w *walker) conflictLive(oc *pg.OnConflictClause, rule *ttl.Rule, qual string, end int) {
	if w.err != nil {
		return
	}
	ts := w.tokens()
	set := w.doUpdateSet(oc, end)
	if set < 0 {
		return
	}
	live := rule.LiveCondition(qual, ttl.Now)
	lim := end
	if r := ts.findTop(set+1, end, pg.Token_RETURNING); r >= 0 {
		lim = ts[r].start
	}
	wi := ts.findTop(set+1, lim, pg.Token_WHERE)
	last := ts.lastBefore(set+1, lim)
	switch {
	case oc.WhereClause == nil && wi < 0 && last > set:
		w.insert(ts[last].end, " WHERE "+live)
	case oc.WhereClause != nil && wi >= 0 && last > wi:
		w.insert(ts[wi+1].start, "(")
		w.insert(ts[last].end, ") AND "+live)
	default:
		w.fail(internalError("cannot locate the WHERE of DO UPDATE"))
	}
}

// stampInsert adds the stamp column and its value to an INSERT that does not
// give it. A value the client gives (NULL included) wins, but DEFAULT,
// which asks for the column's default: the stamp stands in for it as for
// an omitted column (ORMs write DEFAULT for every column a model leaves
// unset).
func (w *walker) stampInsert(ins *pg.InsertStmt, sel *pg.SelectStmt, rule *ttl.Rule, col, value string, end int) {
	if at := columnIndex(ins.Cols, col); at >= 0 {
		w.stampDefaults(sel, at, value)
		return
	}
	ts := w.tokens()
	after := w.targetEnd(ins.Relation)
	if w.err != nil {
		return
	}
	colsClose, i, ok := ts.insertColumns(after, len(ins.Cols) > 0)
	if !ok {
		w.fail(internalError("cannot locate the column list"))
		return
	}
	if sel == nil {
		// DEFAULT VALUES
		if ts.kind(i) != pg.Token_DEFAULT || ts.kind(i+1) != pg.Token_VALUES {
			w.fail(internalError("cannot locate DEFAULT VALUES"))
			return
		}
		w.replace(ts[i].start, ts[i+1].end, "("+ttl.QuoteIdent(col)+") VALUES ("+value+")")
		return
	}
	plan := w.planSource(sel, i, end)
	if w.err != nil {
		return
	}
	if !w.stampColumn(rule, col, colsClose, after-1, plan.width, "INSERT", w.listed[ins]) {
		return
	}
	for _, at := range plan.appendAt {
		w.insert(at, ", "+value)
	}
	if plan.wrapFrom >= 0 {
		w.insert(plan.wrapFrom, "SELECT *, "+value+" FROM (")
		w.insert(plan.wrapTo, ") AS _ttl_src")
	}
}

// columnIndex returns the position of col in an INSERT's column list, or -1.
func columnIndex(cols []*pg.Node, col string) int {
	for i, t := range cols {
		if t.GetResTarget().GetName() == col {
			return i
		}
	}
	return -1
}

// stampDefaults replaces with value each DEFAULT written at position at of
// the rows of a plain VALUES list (isPlainValues).
func (w *walker) stampDefaults(sel *pg.SelectStmt, at int, value string) {
	if sel == nil || !isPlainValues(sel) {
		return
	}
	for _, row := range sel.ValuesLists {
		items := row.GetList().GetItems()
		if at < len(items) && items[at].GetSetToDefault() != nil && !w.stampDefault(items[at].GetSetToDefault(), value) {
			return
		}
	}
}

// stampDefault replaces the DEFAULT d with value; false when its token
// is not found (the walk has failed).
func (w *walker) stampDefault(d *pg.SetToDefault, value string) bool {
	ts := w.tokens()
	k := ts.at(int(d.Location))
	if k < 0 || ts.kind(k) != pg.Token_DEFAULT {
		w.fail(internalError("cannot locate DEFAULT"))
		return false
	}
	w.replace(ts[k].start, ts[k].end, value)
	return true
}

// stampColumn adds the stamp column col to an INSERT's column list whose
// closing bracket is token colsClose or, without a list (colsClose -1),
// inserts the list implicitColumns gives for width values per row after token
// before; when listed, the stamps of expiring columns have inserted that
// list already (colwrite.go), and col goes into it. It reports whether the
// stamp value is still to be added to the values: false when they already
// reach the stamp column, or on failure.
func (w *walker) stampColumn(rule *ttl.Rule, col string, colsClose, before, width int, form string, listed bool) bool {
	ts := w.tokens()
	if colsClose >= 0 {
		w.insert(ts[colsClose-1].end, ", "+ttl.QuoteIdent(col))
		return true
	}
	list, given := w.implicitColumns(rule, col, width, form)
	if w.err != nil || given {
		return false
	}
	if listed {
		w.insert(ts[before].end, ", "+ttl.QuoteIdent(col))
		return true
	}
	w.insert(ts[before].end, list)
	return true
}

// sourcePlan says where an INSERT's source gets the stamp value: appended to
// each VALUES row or to each leaf query's target list (keeping the types the
// target columns give to literals and parameters), or, when neither can be
// done, by wrapping the query: SELECT *, value FROM (query) AS _ttl_src.
type sourcePlan struct {
	appendAt         []int
	wrapFrom, wrapTo int
	// width is the number of values per row, -1 when unknown (SELECT *).
	width int
}

func (w *walker) planSource(sel *pg.SelectStmt, i, end int) sourcePlan {
	ts := w.tokens()
	plan := sourcePlan{wrapFrom: -1, width: -1}
	if len(sel.ValuesLists) > 0 && sel.Op == pg.SetOperation_SETOP_NONE && sel.WithClause == nil &&
		len(sel.SortClause) == 0 && sel.LimitCount == nil && sel.LimitOffset == nil && len(sel.LockingClause) == 0 {
		j := i
		for ts.kind(j) == pg.Token_ASCII_40 {
			j++
		}
		if ts.kind(j) != pg.Token_VALUES {
			w.fail(internalError("cannot locate VALUES"))
			return plan
		}
		j++
		for range sel.ValuesLists {
			if ts.kind(j) != pg.Token_ASCII_40 {
				w.fail(internalError("cannot locate a VALUES row"))
				return plan
			}
			rparen := ts.match(j)
			if rparen < 0 {
				w.fail(internalError("cannot locate a VALUES row"))
				return plan
			}
			plan.appendAt = append(plan.appendAt, ts[rparen-1].end)
			j = rparen + 1
			if ts.kind(j) == pg.Token_ASCII_44 {
				j++
			}
		}
		plan.width = len(sel.ValuesLists[0].GetList().GetItems())
		return plan
	}
	leaves := selectLeaves(sel, nil)
	appendable := true
	for _, l := range leaves {
		if len(l.ValuesLists) > 0 || len(l.TargetList) == 0 || l.TargetList[0].GetResTarget().GetLocation() < 0 {
			appendable = false
		}
	}
	if appendable {
		plan.width = len(leaves[0].TargetList)
		for _, l := range leaves {
			for _, t := range l.TargetList {
				if hasStar(t.GetResTarget()) {
					plan.width = -1
				}
			}
			last := l.TargetList[len(l.TargetList)-1].GetResTarget()
			j := ts.at(int(last.Location))
			if j < 0 {
				w.fail(internalError("cannot locate a target list"))
				return plan
			}
			stop := ts.scanTop(j, end, func(k int) bool { return endsTargetList(ts, k) })
			plan.appendAt = append(plan.appendAt, ts[stop-1].end)
		}
		return plan
	}
	// Wrap the source query: it ends before a top-level ON CONFLICT or
	// RETURNING, or with the statement.
	stop := ts.scanTop(i, end, func(k int) bool {
		return ts[k].kind == pg.Token_RETURNING || (ts[k].kind == pg.Token_ON && ts.kind(k+1) == pg.Token_CONFLICT)
	})
	lim := end
	if stop < len(ts) && ts[stop].start < end {
		lim = ts[stop].start
	}
	last := ts.lastBefore(i, lim)
	if i >= len(ts) || last < i {
		w.fail(internalError("cannot locate the INSERT source"))
		return plan
	}
	plan.wrapFrom, plan.wrapTo = ts[i].start, ts[last].end
	return plan
}

// selectLeaves returns the non-set-operation queries of a set operation tree.
func selectLeaves(sel *pg.SelectStmt, out []*pg.SelectStmt) []*pg.SelectStmt {
	if sel == nil {
		return out
	}
	if sel.Op == pg.SetOperation_SETOP_NONE {
		return append(out, sel)
	}
	out = selectLeaves(sel.Larg, out)
	return selectLeaves(sel.Rarg, out)
}

func hasStar(rt *pg.ResTarget) bool {
	for _, f := range rt.GetVal().GetColumnRef().GetFields() {
		if f.GetAStar() != nil {
			return true
		}
	}
	return false
}

// endsTargetList reports a token that ends a SELECT target list at depth 0.
// After AS any keyword is a column label; FROM after DISTINCT belongs to IS
// [NOT] DISTINCT FROM.
func endsTargetList(ts tokens, k int) bool {
	if ts.kind(k-1) == pg.Token_AS {
		return false
	}
	switch ts[k].kind {
	case pg.Token_FROM:
		return ts.kind(k-1) != pg.Token_DISTINCT
	case pg.Token_INTO, pg.Token_WHERE, pg.Token_GROUP_P, pg.Token_HAVING, pg.Token_WINDOW,
		pg.Token_ORDER, pg.Token_LIMIT, pg.Token_OFFSET, pg.Token_FETCH, pg.Token_FOR,
		pg.Token_UNION, pg.Token_INTERSECT, pg.Token_EXCEPT, pg.Token_ON, pg.Token_RETURNING,
		pg.Token_ASCII_59:
		return true
	}
	return false
}

// doUpdateSet returns the index of the SET token of ON CONFLICT DO UPDATE
// SET, or -1 after failing when it cannot be located.
func (w *walker) doUpdateSet(oc *pg.OnConflictClause, end int) int {
	ts := w.tokens()
	i := ts.at(int(oc.Location))
	if i < 0 {
		w.fail(internalError("cannot locate ON CONFLICT"))
		return -1
	}
	do := ts.findTop(i, end, pg.Token_DO)
	if do < 0 || ts.kind(do+1) != pg.Token_UPDATE || ts.kind(do+2) != pg.Token_SET {
		w.fail(internalError("cannot locate DO UPDATE SET"))
		return -1
	}
	return do + 2
}

// refreshConflict appends `col = value` to the SET list of ON CONFLICT DO
// UPDATE.
func (w *walker) refreshConflict(oc *pg.OnConflictClause, col, value string, end int) {
	ts := w.tokens()
	set := w.doUpdateSet(oc, end)
	if set < 0 {
		return
	}
	stop := ts.findTop(set+1, end, pg.Token_WHERE, pg.Token_RETURNING)
	lim := end
	if stop >= 0 {
		lim = ts[stop].start
	}
	last := ts.lastBefore(set+1, lim)
	if last < 0 {
		w.fail(internalError("cannot locate the DO UPDATE SET list"))
		return
	}
	w.insert(ts[last].end, ", "+ttl.QuoteIdent(col)+" = "+value)
}
