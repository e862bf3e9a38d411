package rewrite

import (
	"fmt"
	"strconv"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/ttlproxy/ttlproxy/internal/sqlstate"
)

// walker collects the edits for one text. It walks each statement with a
// structural view of where a table reference sits (read, write target, DDL
// name); generic expression subtrees are walked reflectively so that every
// subquery in them is found. After the walk a second, purely reflective pass
// checks that every reference to a TTL table was decided on.
type walker struct {
	rw  *Rewriter
	sql string
	s   *Session

	toks    tokens
	scanned bool

	edits   []edit
	handled map[*pg.RangeVar]bool
	err     *Error
	// alias numbers the _ttl_N join aliases, from above any already in the
	// text so that rewriting a rewritten statement stays valid.
	alias int
	// construct names the statement being walked, for error messages.
	construct string
	// cteDepth counts the data-modifying CTEs being walked.
	cteDepth int
	// registered marks INSERTs whose sidecar registration the text already
	// holds.
	registered map[*pg.InsertStmt]bool
	// childRules holds the rules made for children of TTL tables, by
	// "schema.table" (nil: not a TTL table).
	childRules map[string]*Rule
	// pinning is set while the body of a PREPARE is walked; pins holds the
	// schema qualifications it needs, by the offset of the name.
	pinning bool
	pins    map[int]*pinEdit
	// literal is set by whatever reads the value of a literal of the text
	// (a function body): the outcome then depends on it (parsed.literal).
	literal bool
}

// newWalker returns a walker for sql; lits, when known, are its literals.
func newWalker(rw *Rewriter, sql string, s *Session, lits []literal) *walker {
	return &walker{rw: rw, sql: sql, s: s, handled: map[*pg.RangeVar]bool{}, registered: map[*pg.InsertStmt]bool{}, alias: nextAlias(sql, lits)}
}

// nextAlias returns one more than the largest N of a _ttl_N in sql outside
// the literals lits (sorted), which can never hold an alias: the numbering
// does not depend on what literals hold.
func nextAlias(sql string, lits []literal) int {
	next := 0
	for i := 0; ; {
		k := indexFold(sql[i:], "_ttl_")
		if k < 0 {
			return next
		}
		at := i + k
		for len(lits) > 0 && lits[0].end <= at {
			lits = lits[1:]
		}
		i = at + len("_ttl_")
		if len(lits) > 0 && lits[0].start <= at {
			continue
		}
		j := i
		for j < len(sql) && j-i < 9 && '0' <= sql[j] && sql[j] <= '9' {
			j++
		}
		if j > i {
			if n, err := strconv.Atoi(sql[i:j]); err == nil && n >= next {
				next = n + 1
			}
		}
	}
}

func indexFold(s, lowerNeedle string) int {
	for i := 0; i+len(lowerNeedle) <= len(s); i++ {
		if hasPrefixFold(s[i:], lowerNeedle) {
			return i
		}
	}
	return -1
}

// tokens returns the token stream, scanning the text on first use.
func (w *walker) tokens() tokens {
	if !w.scanned {
		w.scanned = true
		ts, err := scanTokens(w.sql)
		if err != nil {
			w.fail(internalError("scanning: " + err.Error()))
		}
		w.toks = ts
	}
	return w.toks
}

func (w *walker) fail(e *Error) {
	if w.err == nil {
		w.err = e
	}
}

func (w *walker) failf(code, format string, args ...any) {
	w.fail(&Error{Code: code, Message: "ttlproxy: " + fmt.Sprintf(format, args...)})
}

func (w *walker) insert(at int, text string) {
	w.edits = append(w.edits, edit{start: at, end: at, text: text, seq: len(w.edits)})
}

func (w *walker) replace(start, end int, text string) {
	w.edits = append(w.edits, edit{start: start, end: end, text: text, seq: len(w.edits)})
}

func (w *walker) mark(rv *pg.RangeVar) {
	if rv != nil {
		w.handled[rv] = true
	}
}

// scope is the chain of CTE names visible at a point of a query.
type scope struct {
	names  []string
	parent *scope
}

func (sc *scope) has(name string) bool {
	for ; sc != nil; sc = sc.parent {
		for _, n := range sc.names {
			if n == name {
				return true
			}
		}
	}
	return false
}

var publicPath = []string{"public"}

// ruleFor resolves a table reference to its rule, or nil when it is not a
// TTL table. For a read, sc holds the CTE names that shadow unqualified
// table names; write targets are never CTEs (pass sc nil).
//
// Unqualified names follow the search path: with catalog knowledge of the
// schemas holding the name, the first such schema on the path decides;
// without it, the first path schema with a rule for the name does, which
// errs toward filtering (a wrong filter fails loudly, a missing one leaks).
// pg_catalog and pg_temp never hold TTL tables.
func (w *walker) ruleFor(rv *pg.RangeVar, sc *scope) *Rule {
	if rv == nil {
		return nil
	}
	if rv.Schemaname != "" {
		return w.ruleAt(rv.Schemaname, rv.Relname)
	}
	cat := w.s.Catalog
	if sc.has(rv.Relname) || (len(w.rw.byName[rv.Relname]) == 0 && (cat == nil || len(cat.Children) == 0)) {
		return nil
	}
	if w.pinning {
		w.pin(rv)
	}
	if sch, ok := w.resolve(rv.Relname); ok {
		return w.ruleAt(sch, rv.Relname)
	}
	return nil
}

// resolve returns the schema an unqualified table name refers to in the
// session, as ruleFor decides it; ok is false when neither the catalog nor
// the rules place the name on the search path.
func (w *walker) resolve(rel string) (string, bool) {
	path := w.s.SearchPath
	if path == nil {
		path = publicPath
	}
	if cat := w.s.Catalog; cat != nil {
		if holders, ok := cat.Schemas[rel]; ok {
			for _, sch := range path {
				for _, h := range holders {
					if h == sch {
						return sch, true
					}
				}
			}
		}
	}
	for _, sch := range path {
		if w.ruleAt(sch, rel) != nil {
			return sch, true
		}
	}
	return "", false
}

// rawStmt walks one top-level statement and then runs the safety net on it.
func (w *walker) rawStmt(raw *pg.RawStmt) {
	start := int(raw.StmtLocation)
	end := len(w.sql)
	if raw.StmtLen > 0 {
		end = start + int(raw.StmtLen)
	}
	if e, ok := showTTLEdit(w.sql, raw); ok {
		w.replace(e.start, e.end, e.text)
		return
	}
	w.construct = constructName(raw.Stmt)
	w.stmt(raw.Stmt, nil, start, end)
	if w.err != nil {
		return
	}
	top := constructName(raw.Stmt)
	forEachRangeVar(raw.Stmt, func(rv *pg.RangeVar) {
		if w.handled[rv] {
			return
		}
		if r := w.ruleFor(rv, nil); r != nil {
			w.failf(sqlstate.FeatureNotSupported, "cannot filter TTL table %s in %s: the proxy does not handle this position", r.QualifiedName(), top)
		}
	})
}

// stmt walks a statement that spans the text [start, end) at most; for a
// statement nested in another (EXPLAIN, PREPARE, a CTE body) the span is
// where it ends, which is where a WHERE clause may be added.
func (w *walker) stmt(n *pg.Node, sc *scope, start, end int) {
	if n == nil || w.err != nil {
		return
	}
	switch x := n.Node.(type) {
	case *pg.Node_SelectStmt:
		w.selectStmt(x.SelectStmt, sc)
	case *pg.Node_InsertStmt:
		w.insertStmt(x.InsertStmt, sc, end)
	case *pg.Node_UpdateStmt:
		w.updateStmt(x.UpdateStmt, sc, end)
	case *pg.Node_DeleteStmt:
		w.deleteStmt(x.DeleteStmt, sc, end)
	case *pg.Node_ExplainStmt:
		w.stmt(x.ExplainStmt.Query, sc, start, end)
	case *pg.Node_PrepareStmt:
		w.pinning = true
		w.stmt(x.PrepareStmt.Query, sc, start, end)
		w.pinning = false
		w.flushPins()
	case *pg.Node_DeclareCursorStmt:
		w.stmt(x.DeclareCursorStmt.Query, sc, start, end)
	case *pg.Node_CreateTableAsStmt:
		if x.CreateTableAsStmt.Into != nil {
			w.mark(x.CreateTableAsStmt.Into.Rel)
		}
		w.stmt(x.CreateTableAsStmt.Query, sc, start, end)
	case *pg.Node_ViewStmt:
		w.mark(x.ViewStmt.View)
		w.stmt(x.ViewStmt.Query, sc, start, end)
	case *pg.Node_CopyStmt:
		w.copyStmt(x.CopyStmt, start, end)
	case *pg.Node_DoStmt:
		w.functionBody(n, x.DoStmt.Args, nil, "a DO block")
	case *pg.Node_CreateFunctionStmt:
		what := "CREATE FUNCTION"
		if x.CreateFunctionStmt.IsProcedure {
			what = "CREATE PROCEDURE"
		}
		w.functionBody(n, x.CreateFunctionStmt.Options, x.CreateFunctionStmt.SqlBody, what)
	case *pg.Node_MergeStmt:
		w.mergeStmt(x.MergeStmt, sc, end)
	default:
		if isUtility(n) {
			w.utility(n)
		} else {
			w.rejectAny(n, constructName(n))
		}
	}
}

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
		if rv := sel.FromClause[0].GetRangeVar(); rv != nil && !tableForm && w.ruleFor(rv, sc) != nil {
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
	close := ts.match(i)
	if close < 0 {
		w.fail(internalError("cannot locate a CTE body"))
		return 0, 0
	}
	return ts[i].end, ts[close].start
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
			if r := w.ruleFor(rv, sc); r != nil {
				w.sampleRangeVar(rv, r, ts, sc)
				return
			}
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
	rule := w.ruleFor(rv, sc)
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
	from, to := ts[first].start, ts[after-1].end
	text := "(" + w.span(from, to) + join + ")"
	if tableForm {
		if ts.kind(first-1) != pg.Token_TABLE {
			w.fail(internalError("cannot locate TABLE"))
			return
		}
		from = ts[first-1].start
		text = "SELECT * FROM " + text
	}
	w.replace(from, to, text)
}

// filterJoin returns ` JOIN (SELECT) AS _ttl_N ON <live>` for a TTL table
// reference: the filter that wraps the FROM item, qualified by its alias
// (with its column aliases) or its name.
func (w *walker) filterJoin(rule *Rule, rv *pg.RangeVar) (string, bool) {
	qual := QuoteIdent(rv.Relname)
	var rename map[string]string
	if rv.Alias != nil {
		qual = QuoteIdent(rv.Alias.Aliasname)
		if len(rv.Alias.Colnames) > 0 {
			if rename = w.renamed(rule, rv); rename == nil {
				return "", false
			}
		}
	}
	text := " JOIN (SELECT) AS _ttl_" + strconv.Itoa(w.alias) + " ON " + rule.liveCondition(qual, "now()", rename)
	w.alias++
	return text, true
}

// sampleRangeVar filters `t [alias] TABLESAMPLE method (args) [REPEATABLE
// (seed)]` by wrapping the whole item: the sample is drawn from the table and
// its expired rows are then dropped, so the result holds only live rows (a
// sample of the live rows, not the rows a table without the expired ones would
// have given for the same seed). Parentheses are inserted rather than the
// item replaced, so subqueries in the arguments keep their own edits.
func (w *walker) sampleRangeVar(rv *pg.RangeVar, rule *Rule, sample *pg.RangeTableSample, sc *scope) {
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
func (w *walker) renamed(rule *Rule, rv *pg.RangeVar) map[string]string {
	cols := w.columns(rule)
	if cols == nil {
		w.fail(&Error{
			Code:    sqlstate.FeatureNotSupported,
			Message: fmt.Sprintf("ttlproxy: cannot filter TTL table %s under the column alias list of %q: the proxy does not know the table's columns", rule.QualifiedName(), rv.Alias.Aliasname),
			Hint:    "Refer to the table without a column alias list.",
		})
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
func (w *walker) columns(r *Rule) []Column {
	if w.s.Catalog == nil {
		return nil
	}
	if t := w.s.Catalog.Tables[r.QualifiedName()]; t != nil && len(t.Columns) > 0 {
		return t.Columns
	}
	return nil
}

func (w *walker) genericList(ns []*pg.Node, sc *scope) {
	for _, n := range ns {
		w.generic(n, sc)
	}
}

// generic walks an expression (or any subtree) and treats each query found
// in it as a read. A table reference met outside a query is in a position
// the walker does not understand.
func (w *walker) generic(n *pg.Node, sc *scope) {
	if n == nil || n.Node == nil || w.err != nil {
		return
	}
	w.genericMsg(n.ProtoReflect(), sc, false)
}

// genericMsg walks m; with names set, table references outside queries are
// DDL names (allowed) instead of unknown positions.
func (w *walker) genericMsg(m protoreflect.Message, sc *scope, names bool) {
	walkMessages(m, func(m protoreflect.Message) bool {
		if w.err != nil || isLeaf(m) {
			return false
		}
		switch v := m.Interface().(type) {
		case *pg.SelectStmt:
			w.selectStmt(v, sc)
			return false
		case *pg.MultiAssignRef:
			if isRepeatedSource(v) {
				return false
			}
		case *pg.RangeVar:
			w.mark(v)
			if names {
				return false
			}
			if r := w.ruleFor(v, sc); r != nil {
				w.failf(sqlstate.FeatureNotSupported, "cannot filter TTL table %s in %s: the proxy does not handle this position", r.QualifiedName(), w.construct)
			}
			return false
		}
		return true
	})
}

// walkMessages calls visit on m and then, depth first in Range order, on the
// messages below it, map fields aside. Where visit returns false, the
// messages below that one are skipped.
func walkMessages(m protoreflect.Message, visit func(protoreflect.Message) bool) {
	// One Range callback serves the whole walk rather than a new closure
	// per message: every parsed statement is walked this way.
	var walk func(protoreflect.Message)
	field := func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Message() == nil || fd.IsMap() {
			return true
		}
		if fd.IsList() {
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				walk(l.Get(i).Message())
			}
			return true
		}
		walk(v.Message())
		return true
	}
	walk = func(m protoreflect.Message) {
		if visit(m) {
			m.Range(field)
		}
	}
	walk(m)
}

// isLeaf reports nodes that by their schema hold no table reference and no
// query, so walks skip them without reflection.
func isLeaf(m protoreflect.Message) bool {
	switch v := m.Interface().(type) {
	case *pg.Node:
		switch v.Node.(type) {
		case *pg.Node_ColumnRef, *pg.Node_AConst, *pg.Node_ParamRef, *pg.Node_String_, *pg.Node_Integer,
			*pg.Node_Float, *pg.Node_Boolean, *pg.Node_AStar, *pg.Node_BitString, nil:
			return true
		}
	case *pg.ColumnRef, *pg.A_Const, *pg.ParamRef, *pg.String, *pg.Integer, *pg.Float, *pg.Boolean, *pg.A_Star, *pg.BitString:
		return true
	}
	return false
}

// isRepeatedSource reports the second and later columns of a multi-column
// assignment, SET (a, b) = (SELECT …): the parse tree repeats the source
// under each column, and only the first copy has the text's locations to
// itself.
func isRepeatedSource(m *pg.MultiAssignRef) bool {
	return m.Colno > 1
}

// forEachRangeVar calls fn for every table reference under n.
func forEachRangeVar(n *pg.Node, fn func(*pg.RangeVar)) {
	if n == nil || n.Node == nil {
		return
	}
	walkMessages(n.ProtoReflect(), func(m protoreflect.Message) bool {
		if isLeaf(m) {
			return false
		}
		switch v := m.Interface().(type) {
		case *pg.RangeVar:
			fn(v)
			return false
		case *pg.MultiAssignRef:
			if isRepeatedSource(v) {
				return false
			}
		}
		return true
	})
}

// utility walks a DDL or utility statement: the tables it names are objects,
// not reads, and pass; a query inside one (a policy's USING (EXISTS …)) is
// still filtered.
func (w *walker) utility(n *pg.Node) {
	w.genericMsg(n.ProtoReflect(), nil, true)
}

// rejectAny rejects a statement the rewriter cannot make safe if it refers to
// a TTL table anywhere.
func (w *walker) rejectAny(n *pg.Node, what string) {
	forEachRangeVar(n, func(rv *pg.RangeVar) {
		w.mark(rv)
		if r := w.ruleFor(rv, nil); r != nil {
			w.failf(sqlstate.FeatureNotSupported, "cannot filter TTL table %s in %s", r.QualifiedName(), what)
		}
	})
}

// functionBody rejects a DO block or function whose body mentions a TTL
// table: the body runs inside the server where the proxy cannot filter it.
func (w *walker) functionBody(n *pg.Node, opts []*pg.Node, sqlBody *pg.Node, what string) {
	check := func(body string) {
		w.literal = true
		if k := w.rw.tables.find(body); k >= 0 {
			w.fail(&Error{
				Code:    sqlstate.FeatureNotSupported,
				Message: fmt.Sprintf("ttlproxy: cannot filter TTL table %s in %s: the proxy cannot see inside function bodies", w.rw.rules[w.rw.tables.owner[k]].QualifiedName(), what),
				Hint:    "Run the statements of the body through the proxy one by one, or connect directly for maintenance.",
			})
		}
	}
	for _, o := range opts {
		d := o.GetDefElem()
		if d == nil || d.Defname != "as" {
			continue
		}
		if s := d.Arg.GetString_(); s != nil {
			check(s.Sval)
		}
		for _, item := range d.Arg.GetList().GetItems() {
			check(item.GetString_().GetSval())
		}
	}
	if sqlBody != nil {
		w.rejectAny(sqlBody, what)
	}
	// Everything else in the statement (argument types, names) is DDL.
	forEachRangeVar(n, w.mark)
}

// isUtility reports statements that name tables as objects without reading
// their rows.
func isUtility(n *pg.Node) bool {
	switch n.Node.(type) {
	case *pg.Node_AlterTableStmt, *pg.Node_AlterObjectDependsStmt, *pg.Node_AlterObjectSchemaStmt,
		*pg.Node_AlterOwnerStmt, *pg.Node_AlterPolicyStmt, *pg.Node_AlterSeqStmt, *pg.Node_ClusterStmt,
		*pg.Node_CompositeTypeStmt, *pg.Node_CreatePolicyStmt, *pg.Node_CreateSeqStmt, *pg.Node_CreateStmt,
		*pg.Node_CreateForeignTableStmt, *pg.Node_CreateTrigStmt, *pg.Node_IndexStmt, *pg.Node_RefreshMatViewStmt,
		*pg.Node_ReindexStmt, *pg.Node_RenameStmt, *pg.Node_TruncateStmt, *pg.Node_LockStmt, *pg.Node_GrantStmt,
		*pg.Node_CreateStatsStmt, *pg.Node_AlterStatsStmt, *pg.Node_CommentStmt, *pg.Node_SecLabelStmt,
		*pg.Node_VacuumStmt, *pg.Node_CreatePublicationStmt, *pg.Node_AlterPublicationStmt, *pg.Node_DropStmt,
		*pg.Node_AlterTableMoveAllStmt, *pg.Node_ImportForeignSchemaStmt:
		return true
	}
	return false
}

// constructName names a statement for messages.
func constructName(n *pg.Node) string {
	switch x := n.GetNode().(type) {
	case *pg.Node_SelectStmt:
		return "SELECT"
	case *pg.Node_InsertStmt:
		return "INSERT"
	case *pg.Node_UpdateStmt:
		return "UPDATE"
	case *pg.Node_DeleteStmt:
		return "DELETE"
	case *pg.Node_MergeStmt:
		return "MERGE"
	case *pg.Node_CopyStmt:
		return "COPY"
	case *pg.Node_ExplainStmt:
		return "EXPLAIN"
	case *pg.Node_PrepareStmt:
		return "PREPARE"
	case *pg.Node_DeclareCursorStmt:
		return "DECLARE CURSOR"
	case *pg.Node_CreateTableAsStmt:
		if x.CreateTableAsStmt.Objtype == pg.ObjectType_OBJECT_MATVIEW {
			return "CREATE MATERIALIZED VIEW"
		}
		return "CREATE TABLE AS"
	case *pg.Node_ViewStmt:
		return "CREATE VIEW"
	case *pg.Node_RuleStmt:
		return "CREATE RULE"
	case *pg.Node_DoStmt:
		return "DO"
	case *pg.Node_CreateFunctionStmt:
		return "CREATE FUNCTION"
	case nil:
		return "statement"
	}
	name := fmt.Sprintf("%T", n.Node)
	name = strings.TrimPrefix(name, "*pg_query.Node_")
	return name
}
