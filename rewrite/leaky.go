package rewrite

import (
	"regexp"
	"slices"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
	"github.com/ttlproxy/ttlproxy/ttl"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Paths to a TTL table inside the server: views, materialized views and
// functions that read one (CatalogData.Views, CatalogData.Functions). The
// server runs them without the proxy seeing the table, so a statement that
// reads such a view or calls such a function is rejected (SQLSTATE 0A000,
// naming it) instead of being answered with expired rows. A view created
// through the proxy is not such a path: its definition carries the proxy's
// filter (leakyViews). A function the operator lists in
// Options.TrustedFunctions is called as written.

// filterAlias is the alias of the proxy's filter join, `t JOIN (SELECT) AS
// _ttl_N ON <live>` (read.go), as pg_get_viewdef prints it.
var filterAlias = regexp.MustCompile(`^_ttl_[0-9]+$`)

// leakyViews returns the views of views that may return expired rows, each
// with the TTL table or view whose rows make it leak:
//   - a materialized view: its rows were live, at best, at its last refresh;
//   - a view whose definition reads a TTL table (or child) other than as the
//     left side of the proxy's filter join, or that cannot be parsed;
//   - a view that reads such a view, at any depth.
//
// The filter's live condition itself is not compared with the rule's: a
// view that imitates the filter's shape is taken at its word.
func leakyViews(views map[string]View) map[string]string {
	out := map[string]string{}
	for name, v := range views {
		if v.Materialized {
			if len(v.Reads) > 0 {
				out[name] = v.Reads[0]
			} else {
				out[name] = name
			}
			continue
		}
		if r, ok := unfilteredRead(v, views); ok {
			out[name] = r
		}
	}
	for changed := true; changed; {
		changed = false
		for name, v := range views {
			if _, done := out[name]; done {
				continue
			}
			for _, r := range v.Reads {
				if _, ok := out[r]; ok {
					out[name] = r
					changed = true
					break
				}
			}
		}
	}
	return out
}

// unfilteredRead returns the first table v reads directly (a Read that is
// not one of views) that its definition does not read through the proxy's
// filter.
func unfilteredRead(v View, views map[string]View) (string, bool) {
	tables := map[string]string{} // relation name → "schema.name"
	for _, r := range v.Reads {
		if _, isView := views[r]; isView {
			continue
		}
		for _, n := range childNames(r) {
			tables[n] = r
		}
	}
	if len(tables) == 0 {
		return "", false
	}
	tree, err := pg.Parse(v.Definition)
	if err != nil || len(tree.Stmts) != 1 {
		for _, r := range tables {
			return r, true
		}
	}
	filtered := map[*pg.RangeVar]bool{}
	walkMessages(tree.Stmts[0].ProtoReflect(), func(m protoreflect.Message) bool {
		if j, ok := m.Interface().(*pg.JoinExpr); ok {
			if rv := j.Larg.GetRangeVar(); rv != nil && isFilterJoin(j) {
				filtered[rv] = true
			}
		}
		return !isLeaf(m)
	})
	var leak string
	forEachRangeVar(tree.Stmts[0].Stmt, func(rv *pg.RangeVar) {
		if r, ok := tables[rv.Relname]; ok && leak == "" && !filtered[rv] {
			leak = r
		}
	})
	return leak, leak != ""
}

// isFilterJoin reports the proxy's filter join: an inner JOIN of an empty
// SELECT aliased _ttl_N.
func isFilterJoin(j *pg.JoinExpr) bool {
	sub := j.Rarg.GetRangeSubselect()
	if j.Jointype != pg.JoinType_JOIN_INNER || sub == nil || sub.Alias == nil || !filterAlias.MatchString(sub.Alias.Aliasname) {
		return false
	}
	sel := sub.Subquery.GetSelectStmt()
	return sel != nil && len(sel.TargetList) == 0 && len(sel.FromClause) == 0
}

// mentionsCatalogName reports that sql may name a child of a TTL table, a
// leaky view or a function that reads a TTL table known to the session's
// catalog, or, when a rule has expiring columns, any view of the catalog
// (columns.go refuses those that read such a table).
func (rw *Rewriter) mentionsCatalogName(sql string, s *Session) bool {
	cat := s.Catalog
	if cat == nil {
		return false
	}
	return (len(cat.childKeys) > 0 && cat.children.find(sql) >= 0) ||
		((len(cat.leaky) > 0 || len(cat.d.Functions) > 0 || len(cat.d.Ancestors) > 0) && cat.leakyNames.find(sql) >= 0) ||
		(rw.hasColumns && len(cat.viewKeys) > 0 && cat.viewNames.find(sql) >= 0)
}

// leakyKey returns the "schema.name" of the view that may return expired
// rows, or expired values of an expiring column (colviews.go), rv (a
// reference outside the CTEs of sc) names, and what it reads. Under rules
// with expiring columns a table without a row rule makes no view leak rows.
func (w *walker) leakyKey(rv *pg.RangeVar, sc *scope) (key, reads string, ok bool) {
	cat := w.s.Catalog
	columns := w.rw.hasColumns && cat != nil && len(cat.viewKeys) > 0
	if cat == nil || (len(cat.leaky) == 0 && !columns) {
		return "", "", false
	}
	known := cat.leaky
	if columns {
		known = cat.viewKeys
	}
	if rv.Schemaname != "" {
		key = rv.Schemaname + "." + rv.Relname
	} else if !sc.has(rv.Relname) {
		key = w.resolveIn(rv.Relname, known)
	}
	if reads, ok = cat.leaky[key]; !columns {
		return key, reads, ok
	}
	if ok {
		if reads = w.columnViews().rowLeaky(key, reads); reads != "" {
			return key, reads, true
		}
	}
	// A view that shows expired values of an expiring column
	// (colviews.go) is expanded and refused like one that shows expired
	// rows.
	reads, ok = w.columnLeaky(key)
	return key, reads, ok
}

// leakyView resolves rv, a view that may return expired rows in a position
// where it is not expanded (a write target, COPY, an unknown position): a
// simple view over one TTL table is written through like the table, under
// the rule viewRule returns; any other fails the walk. ok reports that rv
// is such a view.
func (w *walker) leakyView(rv *pg.RangeVar, sc *scope) (rule *ttl.Rule, ok bool) {
	if w.expanded[rv] {
		return nil, false
	}
	key, reads, ok := w.leakyKey(rv, sc)
	if !ok {
		return nil, false
	}
	if r := w.viewRule(key); r != nil {
		return r, true
	}
	w.fail(errLeakyView(key, reads, w.s.Catalog.d.Views[key].Materialized))
	return nil, true
}

// viewRule returns the rule a write through the view key follows: the rule
// of the one TTL table (or child) a simple view reads (one table in FROM,
// plain columns in its target list, no DISTINCT, grouping, LIMIT, set
// operation or WITH: what PostgreSQL can update through), with the view's
// name and the view's names for the columns the rule reads, so that the
// filter and the stamp are written on the view and reach the table through
// it. nil for any other view, one that hides a column the rule needs, a
// sidecar rule (the registry is keyed by the table's columns) and a table
// with expiring columns (writes are not read through the view's names).
func (w *walker) viewRule(key string) *ttl.Rule {
	v := w.s.Catalog.d.Views[key]
	if v.Materialized || len(v.Reads) != 1 || v.Definition == "" {
		return nil
	}
	names := childNames(v.Reads[0])
	sch := v.Reads[0][:len(v.Reads[0])-len(names[1])-1]
	r := w.ruleAt(sch, names[1])
	if r == nil || r.RuleKind() == ttl.KindSidecar || !r.HasRowRule() || len(r.Columns) > 0 {
		return nil
	}
	tree, err := pg.Parse(strings.TrimRight(strings.TrimSpace(v.Definition), "; \t\n"))
	if err != nil || len(tree.Stmts) != 1 {
		return nil
	}
	sel := tree.Stmts[0].Stmt.GetSelectStmt()
	if sel == nil || sel.Op != pg.SetOperation_SETOP_NONE || len(sel.FromClause) != 1 || sel.FromClause[0].GetRangeVar() == nil ||
		len(sel.DistinctClause) > 0 || len(sel.GroupClause) > 0 || sel.HavingClause != nil || sel.LimitCount != nil ||
		sel.LimitOffset != nil || sel.WithClause != nil || len(sel.WindowClause) > 0 || len(sel.TargetList) != len(v.Columns) {
		return nil
	}
	rename := map[string]string{} // the table's column → the view's
	for i, t := range sel.TargetList {
		cr := t.GetResTarget().GetVal().GetColumnRef()
		if cr == nil || len(cr.Fields) == 0 {
			continue
		}
		col := cr.Fields[len(cr.Fields)-1].GetString_().GetSval()
		if _, seen := rename[col]; col != "" && !seen {
			rename[col] = v.Columns[i]
		}
	}
	need := []string{r.ExpiryColumn()}
	if r.RuleKind() == ttl.KindDerived {
		need = []string{r.BaseColumn}
		if r.IntervalColumn != "" {
			need = append(need, r.IntervalColumn)
		}
	}
	for _, c := range need {
		if _, ok := rename[c]; !ok {
			return nil
		}
	}
	c := *r
	c.Schema, c.Table = key[:len(key)-len(childNames(key)[1])-1], childNames(key)[1]
	if c.RuleKind() == ttl.KindColumn {
		c.Column = rename[r.ExpiryColumn()]
	} else {
		c.BaseColumn = rename[r.BaseColumn]
		if r.IntervalColumn != "" {
			c.IntervalColumn = rename[r.IntervalColumn]
		}
	}
	return &c
}

// maxViewDepth bounds the expansion of views of views.
const maxViewDepth = 32

// expandView handles a read of a view that may return expired rows in a
// FROM item: the item `v [AS] a [(cols)]` becomes `(<definition>) AS
// a(cols)`, the definition rewritten like any statement (its TTL tables
// filtered, its views expanded), the columns named as the view names them.
// A security_barrier view's definition is wrapped in `SELECT * FROM (…)
// OFFSET 0`, which the planner neither flattens nor pushes conditions into,
// so the view's own conditions still run first. The definition runs with
// the reader's privileges instead of the view owner's: a reader without
// privileges on the tables gets their error, never more rows. What cannot be
// expanded exactly is rejected: a materialized view, and a view reading a
// table with row security (its policies would apply to the reader instead
// of the owner) unless the view is security_invoker. It reports whether rv
// is such a view.
func (w *walker) expandView(rv *pg.RangeVar, sc *scope, tableForm bool) bool {
	key, reads, ok := w.leakyKey(rv, sc)
	if !ok {
		return false
	}
	v := w.s.Catalog.d.Views[key]
	if v.Materialized || v.Definition == "" || len(v.Columns) == 0 ||
		(v.ReadsRowSecurity && !v.SecurityInvoker) || w.viewDepth >= maxViewDepth {
		w.fail(errLeakyView(key, reads, v.Materialized))
		return true
	}
	inner, e := w.rw.rewriteView(v.Definition, w.s, w.viewDepth+1)
	if e != nil {
		w.fail(inView(key, e))
		return true
	}
	ts := w.tokens()
	if w.err != nil {
		return true
	}
	first, after, ok := w.itemSpan(rv)
	if !ok {
		return true
	}
	name, cols := rv.Relname, slices.Clone(v.Columns)
	if rv.Alias != nil {
		name = rv.Alias.Aliasname
		for i, c := range rv.Alias.Colnames {
			if i < len(cols) {
				cols[i] = c.GetString_().GetSval()
			} else {
				cols = append(cols, c.GetString_().GetSval())
			}
		}
	}
	quoted := make([]string, len(cols))
	for i, c := range cols {
		quoted[i] = ttl.QuoteIdent(c)
	}
	if v.SecurityBarrier {
		inner = "SELECT * FROM (" + inner + ") AS _ttl_view OFFSET 0"
	}
	w.replaceItem(ts, first, after, tableForm, "("+inner+") AS "+ttl.QuoteIdent(name)+"("+strings.Join(quoted, ", ")+")")
	if w.err != nil {
		return true
	}
	if p := w.pins[int(rv.Location)]; p != nil {
		// The definition names every relation with its schema.
		p.done = true
	}
	if w.expanded == nil {
		w.expanded = map[*pg.RangeVar]bool{}
	}
	w.expanded[rv] = true
	if rv.Alias == nil {
		// schema.view.column references now name the subquery, which has no
		// schema: unqualify drops it.
		sch, _, _ := strings.Cut(key, ".")
		w.unqualified = append(w.unqualified, [2]string{sch, rv.Relname})
	}
	return true
}

// unqualify drops the schema (and catalog) from a column reference
// schema.view.column or schema.view.* to a view expanded without an alias.
func (w *walker) unqualify(cr *pg.ColumnRef) {
	n := len(cr.Fields)
	if n < 3 {
		return
	}
	rel, sch := cr.Fields[n-2].GetString_().GetSval(), cr.Fields[n-3].GetString_().GetSval()
	if !slices.Contains(w.unqualified, [2]string{sch, rel}) {
		return
	}
	ts := w.tokens()
	if w.err != nil {
		return
	}
	i := ts.at(int(cr.Location))
	// schema . view . column, with a catalog . in front for four fields.
	drop := 2 * (n - 2)
	if i < 0 || i+drop >= len(ts) {
		w.fail(internalError("cannot locate a column reference"))
		return
	}
	w.replace(ts[i].start, ts[i+drop].start, "")
}

// rewriteView rewrites a view's definition (one SELECT, every name
// qualified) for expansion at depth.
func (rw *Rewriter) rewriteView(def string, s *Session, depth int) (string, *Error) {
	def = strings.TrimRight(strings.TrimSpace(def), "; \t\n")
	tree, err := pg.Parse(def)
	if err != nil || len(tree.Stmts) != 1 || tree.Stmts[0].Stmt.GetSelectStmt() == nil {
		return "", internalError("cannot parse a view definition")
	}
	w := newWalker(rw, def, s, nil)
	w.viewDepth = depth
	w.rawStmt(tree.Stmts[0])
	if w.err != nil {
		return "", w.err
	}
	if len(w.edits) == 0 {
		return def, nil
	}
	return splice(def, w.edits, 1)
}

// resolveIn returns the "schema.name" an unqualified relation or function
// name refers to among the keys of known, or "": the catalog's schemas
// holding the name decide when it knows them (a relation of that name
// earlier on the path hides the view), otherwise the first path schema with
// such a key does, which errs toward rejecting.
func (w *walker) resolveIn(name string, known map[string]string) string {
	path := w.s.SearchPath
	if path == nil {
		path = publicPath
	}
	if holders, ok := w.s.Catalog.d.Schemas[name]; ok {
		for _, sch := range path {
			for _, h := range holders {
				if h == sch {
					return sch + "." + name
				}
			}
		}
	}
	for _, sch := range path {
		if _, ok := known[sch+"."+name]; ok {
			return sch + "." + name
		}
	}
	return ""
}

// leakyFunctions fails the walk when n calls a function known to read a TTL
// table inside the server that the operator has not trusted. A call of an
// unqualified name is taken to reach any such function of that name on the
// search path.
func (w *walker) leakyFunctions(n *pg.Node) {
	cat := w.s.Catalog
	if cat == nil || len(cat.d.Functions) == 0 || n == nil || n.Node == nil {
		return
	}
	walkMessages(n.ProtoReflect(), func(m protoreflect.Message) bool {
		if w.err != nil || isLeaf(m) {
			return false
		}
		if f, ok := m.Interface().(*pg.FuncCall); ok {
			w.leakyFunction(f.Funcname)
		}
		return true
	})
}

func (w *walker) leakyFunction(names []*pg.Node) {
	if len(names) == 0 {
		return
	}
	name := names[len(names)-1].GetString_().GetSval()
	schema := ""
	if len(names) >= 2 {
		schema = names[len(names)-2].GetString_().GetSval()
	}
	fns := w.s.Catalog.d.Functions
	key := schema + "." + name
	if schema == "" {
		key = ""
		path := w.s.SearchPath
		if path == nil {
			path = publicPath
		}
		for _, sch := range path {
			if _, ok := fns[sch+"."+name]; ok {
				key = sch + "." + name
				break
			}
		}
	}
	reads, ok := fns[key]
	if !ok || w.rw.trusted[key] || w.rw.trusted[name] {
		if schema == "" {
			// The server may resolve the call elsewhere (qualify.go).
			if other := w.untrustedNamed(name); other != "" {
				w.fail(errUnqualifiedCall(name, other, fns[other]))
			}
		}
		return
	}
	w.fail(errLeakyFunction(key, reads))
}

// trustedSet indexes Options.TrustedFunctions: "schema.name" trusts one
// function, a bare name every function so named.
func trustedSet(names []string) map[string]bool {
	if len(names) == 0 {
		return nil
	}
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[strings.TrimSpace(n)] = true
	}
	return m
}
