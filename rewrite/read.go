package rewrite

import (
	"strconv"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// Reads: FROM items, CTEs and set operations of a query, where a TTL table
// gets its live-row filter.

// selectStmt walks a query: its FROM items are reads, every other clause is
// searched for subqueries.
func (w *walker) selectStmt(sel *pg.SelectStmt, sc *scope) {
	if sel == nil || w.err != nil {
		return
	}
	sc = w.with(sel.WithClause, sc)
	if sel.Op != pg.SetOperation_SETOP_NONE {
		w.selectStmt(sel.Larg, sc)
		w.selectStmt(sel.Rarg, sc)
	}
	tableForm := isTableForm(sel)
	for _, f := range sel.FromClause {
		w.fromItem(f, sc, tableForm)
	}
	if len(sel.FromClause) == 1 {
		if rv := sel.FromClause[0].GetRangeVar(); rv != nil && !tableForm && w.rowRuleFor(rv, sc) != nil {
			w.qualifySystemColumns(sel, rv)
		}
	}
	w.genericList(sel.DistinctClause, sc)
	w.genericList(sel.TargetList, sc)
	w.generic(sel.WhereClause, sc)
	w.genericList(sel.GroupClause, sc)
	w.generic(sel.HavingClause, sc)
	w.genericList(sel.WindowClause, sc)
	for _, row := range sel.ValuesLists {
		w.generic(row, sc)
	}
	w.genericList(sel.SortClause, sc)
	w.generic(sel.LimitOffset, sc)
	w.generic(sel.LimitCount, sc)
	if sel.IntoClause != nil {
		w.mark(sel.IntoClause.Rel)
	}
	// FOR UPDATE OF a names range table entries, not tables.
	for _, lc := range sel.LockingClause {
		for _, r := range lc.GetLockingClause().GetLockedRels() {
			w.mark(r.GetRangeVar())
		}
	}
}

// systemColumns are the names of PostgreSQL's system columns.
var systemColumns = map[string]bool{"ctid": true, "xmin": true, "xmax": true, "cmin": true, "cmax": true, "tableoid": true}

// qualifySystemColumns qualifies unqualified system column references (ctid,
// xmin, …) of a query whose only FROM item is the filtered table rv. Under
// the filter's join the table's columns are reached through the join, which
// has no system columns, so `ctid` alone would no longer resolve; `s.ctid`
// does. References in subqueries are left alone.
func (w *walker) qualifySystemColumns(sel *pg.SelectStmt, rv *pg.RangeVar) {
	qual := qualifier(rv)
	visit := func(m protoreflect.Message) bool {
		switch v := m.Interface().(type) {
		case *pg.SelectStmt:
			return false
		case *pg.ColumnRef:
			if len(v.Fields) == 1 && systemColumns[v.Fields[0].GetString_().GetSval()] && v.Location >= 0 {
				if ts := w.tokens(); ts.at(int(v.Location)) >= 0 {
					w.insert(int(v.Location), qual+".")
				}
			}
			return false
		}
		return true
	}
	for _, list := range [][]*pg.Node{sel.TargetList, sel.DistinctClause, sel.GroupClause, sel.WindowClause, sel.SortClause,
		{sel.WhereClause, sel.HavingClause}} {
		for _, n := range list {
			if n != nil && n.Node != nil {
				walkMessages(n.ProtoReflect(), visit)
			}
		}
	}
}

// isTableForm reports the SELECT * FROM t the grammar builds for TABLE t:
// its star has no location.
func isTableForm(sel *pg.SelectStmt) bool {
	if len(sel.FromClause) != 1 || len(sel.TargetList) != 1 || sel.FromClause[0].GetRangeVar() == nil {
		return false
	}
	rt := sel.TargetList[0].GetResTarget()
	return rt != nil && rt.Location < 0
}

// with walks the CTEs of a WITH clause and returns the scope the query sees.
// A non-recursive CTE sees the ones before it; with RECURSIVE every CTE sees
// all of them.
func (w *walker) with(wc *pg.WithClause, sc *scope) *scope {
	if wc == nil {
		return sc
	}
	if wc.Recursive {
		all := &scope{parent: sc}
		for _, c := range wc.Ctes {
			all.names = append(all.names, c.GetCommonTableExpr().GetCtename())
		}
		for _, c := range wc.Ctes {
			w.cte(c.GetCommonTableExpr(), all)
		}
		return all
	}
	cur := sc
	for _, c := range wc.Ctes {
		cte := c.GetCommonTableExpr()
		w.cte(cte, cur)
		cur = &scope{names: []string{cte.GetCtename()}, parent: cur}
	}
	return cur
}

func (w *walker) cte(c *pg.CommonTableExpr, sc *scope) {
	if c == nil || w.err != nil {
		return
	}
	q := c.Ctequery
	if q.GetSelectStmt() != nil {
		w.selectStmt(q.GetSelectStmt(), sc)
		return
	}
	// A data-modifying CTE: its statement ends at the body's closing paren.
	start, end := w.cteBody(c)
	if w.err != nil {
		return
	}
	w.cteDepth++
	w.stmt(q, sc, start, end)
	w.cteDepth--
}

// cteBody returns the offsets just inside the parentheses of a CTE body:
// name [(cols)] AS [NOT] [MATERIALIZED] ( body ).
func (w *walker) cteBody(c *pg.CommonTableExpr) (int, int) {
	ts := w.tokens()
	i := ts.at(int(c.Location))
	if i < 0 {
		w.fail(internalError("cannot locate a CTE"))
		return 0, 0
	}
	i = ts.identEnd(i)
	if ts.kind(i) == pg.Token_ASCII_40 {
		i = ts.match(i) + 1
	}
	if ts.kind(i) == pg.Token_AS {
		i++
	}
	if ts.kind(i) == pg.Token_NOT {
		i++
	}
	if ts.kind(i) == pg.Token_MATERIALIZED {
		i++
	}
	if ts.kind(i) != pg.Token_ASCII_40 {
		w.fail(internalError("cannot locate a CTE body"))
		return 0, 0
	}
	rparen := ts.match(i)
	if rparen < 0 {
		w.fail(internalError("cannot locate a CTE body"))
		return 0, 0
	}
	return ts[i].end, ts[rparen].start
}

// fromItem walks one FROM (or JOIN, USING, UPDATE … FROM) item.
func (w *walker) fromItem(n *pg.Node, sc *scope, tableForm bool) {
	if n == nil || w.err != nil {
		return
	}
	switch x := n.Node.(type) {
	case *pg.Node_RangeVar:
		w.readRangeVar(x.RangeVar, sc, tableForm)
	case *pg.Node_JoinExpr:
		w.fromItem(x.JoinExpr.Larg, sc, false)
		w.fromItem(x.JoinExpr.Rarg, sc, false)
		w.generic(x.JoinExpr.Quals, sc)
	case *pg.Node_RangeTableSample:
		ts := x.RangeTableSample
		if rv := ts.Relation.GetRangeVar(); rv != nil {
			w.mark(rv)
			if r := w.rowRuleFor(rv, sc); r != nil {
				w.sampleRangeVar(rv, r, ts, sc)
				return
			}
			// No row rule (a table of expiring columns only, read in
			// its query level): the sample is the table's; the method's
			// arguments are expressions.
			w.genericList(ts.Args, sc)
			w.generic(ts.Repeatable, sc)
			return
		}
		w.generic(n, sc)
	default:
		// Subqueries, functions, XMLTABLE, JSON_TABLE: any table reference
		// inside is a subquery's.
		w.generic(n, sc)
	}
}

// readRangeVar filters a TTL table read in a FROM item: the item's text
// `t [AS] a [(cols)]` becomes `(t [AS] a [(cols)] JOIN (SELECT) AS _ttl_N ON
// live(a))`. The planner flattens the join into a filter on the base scan, so
// the item keeps its whole-row type, system columns, row locking, NATURAL and
// USING columns and outer-join semantics.
func (w *walker) readRangeVar(rv *pg.RangeVar, sc *scope, tableForm bool) {
	w.mark(rv)
	if w.expandView(rv, sc, tableForm) || w.statsView(rv, sc, tableForm) {
		return
	}
	rule := w.rowRuleFor(rv, sc)
	if rule == nil {
		return
	}
	ts := w.tokens()
	if w.err != nil {
		return
	}
	first, after, ok := w.itemSpan(rv)
	if !ok {
		return
	}
	join, ok := w.filterJoin(rule, rv)
	if !ok {
		return
	}
	w.replaceItem(ts, first, after, tableForm, "("+w.span(ts[first].start, ts[after-1].end)+join+")")
}

// replaceItem replaces the FROM item of tokens [first, after) by text, a
// FROM item too; in the statement form `TABLE t` (tableForm) TABLE becomes
// `SELECT * FROM`, unless the reads of expiring columns have written it
// with the table's columns (colLevel.tableStar).
func (w *walker) replaceItem(ts tokens, first, after int, tableForm bool, text string) {
	if tableForm {
		if ts.kind(first-1) != pg.Token_TABLE {
			w.fail(internalError("cannot locate TABLE"))
			return
		}
		if !w.tableDone[ts[first-1].start] {
			w.replace(ts[first-1].start, ts[first-1].end, "SELECT * FROM")
		}
	}
	w.replace(ts[first].start, ts[after-1].end, text)
}

// filterJoin returns ` JOIN (SELECT) AS _ttl_N ON <live>` for a TTL table
// reference: the filter that wraps the FROM item, qualified by its alias
// (with its column aliases) or its name.
func (w *walker) filterJoin(rule *ttl.Rule, rv *pg.RangeVar) (string, bool) {
	live, ok := w.itemLive(rule, rv)
	if !ok {
		return "", false
	}
	text := " JOIN (SELECT) AS _ttl_" + strconv.Itoa(w.alias) + " ON " + live
	w.alias++
	return text, true
}

// itemLive returns the live condition of the FROM item rv under rule,
// qualified by its alias (with its column aliases) or its name.
func (w *walker) itemLive(rule *ttl.Rule, rv *pg.RangeVar) (string, bool) {
	qual := ttl.QuoteIdent(rv.Relname)
	var rename map[string]string
	if rv.Alias != nil {
		qual = ttl.QuoteIdent(rv.Alias.Aliasname)
		if len(rv.Alias.Colnames) > 0 {
			if rename = w.renamed(rule, rv); rename == nil {
				return "", false
			}
		}
	}
	return rule.LiveConditionRenamed(qual, ttl.Now, rename), true
}

// sampleRangeVar filters `t [alias] TABLESAMPLE method (args) [REPEATABLE
// (seed)]` by wrapping the whole item: the sample is drawn from the table and
// its expired rows are then dropped, so the result holds only live rows (a
// sample of the live rows, not the rows a table without the expired ones would
// have given for the same seed). Parentheses are inserted rather than the
// item replaced, so subqueries in the arguments keep their own edits.
func (w *walker) sampleRangeVar(rv *pg.RangeVar, rule *ttl.Rule, sample *pg.RangeTableSample, sc *scope) {
	ts := w.tokens()
	if w.err != nil {
		return
	}
	first, after, ok := w.itemSpan(rv)
	if !ok {
		return
	}
	if ts.kind(after) != pg.Token_TABLESAMPLE {
		w.fail(internalError("cannot locate TABLESAMPLE"))
		return
	}
	open := after + 1
	for open < len(ts) && ts[open].kind != pg.Token_ASCII_40 {
		open++
	}
	end := ts.match(open)
	if end < 0 || end >= len(ts) {
		w.fail(internalError("cannot locate the TABLESAMPLE arguments"))
		return
	}
	if ts.kind(end+1) == pg.Token_REPEATABLE {
		if ts.kind(end+2) != pg.Token_ASCII_40 {
			w.fail(internalError("cannot locate REPEATABLE"))
			return
		}
		if end = ts.match(end + 2); end < 0 || end >= len(ts) {
			w.fail(internalError("cannot locate the REPEATABLE seed"))
			return
		}
	}
	join, ok := w.filterJoin(rule, rv)
	if !ok {
		return
	}
	w.insert(ts[first].start, "(")
	w.insert(ts[end].end, join+")")
	w.genericList(sample.Args, sc)
	w.generic(sample.Repeatable, sc)
}

// itemSpan returns the token range [first, after) of a table reference with
// its ONLY, * and alias: [ONLY] name [*] [[AS] alias [(cols)]], or
// ONLY ( name ) ….
func (w *walker) itemSpan(rv *pg.RangeVar) (first, after int, ok bool) {
	ts := w.tokens()
	i := ts.at(int(rv.Location))
	if i < 0 {
		w.fail(internalError("cannot locate table " + rv.Relname))
		return 0, 0, false
	}
	first = i
	after = ts.nameEnd(i)
	if !rv.Inh {
		switch {
		case ts.kind(i-1) == pg.Token_ONLY:
			first = i - 1
		case ts.kind(i-1) == pg.Token_ASCII_40 && ts.kind(i-2) == pg.Token_ONLY:
			first = i - 2
			if ts.kind(after) != pg.Token_ASCII_41 {
				w.fail(internalError("cannot locate ONLY (…)"))
				return 0, 0, false
			}
			after++
		}
	}
	if ts.kind(after) == pg.Token_ASCII_42 {
		after++
	}
	if rv.Alias != nil {
		if ts.kind(after) == pg.Token_AS {
			after++
		}
		after = ts.identEnd(after)
		if len(rv.Alias.Colnames) > 0 {
			if ts.kind(after) != pg.Token_ASCII_40 {
				w.fail(internalError("cannot locate the column aliases of " + rv.Relname))
				return 0, 0, false
			}
			after = ts.match(after) + 1
		}
	}
	if after > len(ts) || after <= first {
		w.fail(internalError("cannot locate table " + rv.Relname))
		return 0, 0, false
	}
	return first, after, true
}

// renamed maps the table's columns to the names the column alias list of
// rv gives them, which needs the table's column order from the catalog; nil
// after a rejection.
func (w *walker) renamed(rule *ttl.Rule, rv *pg.RangeVar) map[string]string {
	cols := w.columns(rule)
	if cols == nil {
		w.fail(errAliasColumnsUnknown(rule, rv.Alias.Aliasname))
		return nil
	}
	names := map[string]string{}
	for i, c := range rv.Alias.Colnames {
		if i < len(cols) {
			names[cols[i].Name] = c.GetString_().GetSval()
		}
	}
	return names
}

// columns returns the catalog's columns of the rule's table, or nil.
func (w *walker) columns(r *ttl.Rule) []Column {
	if w.s.Catalog == nil {
		return nil
	}
	if t := w.s.Catalog.d.Tables[r.QualifiedName()]; t != nil && len(t.Columns) > 0 {
		return t.Columns
	}
	return nil
}
