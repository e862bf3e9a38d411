package rewrite

import (
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// Views over tables with expiring columns (docs/design/column-ttl.md §5).
// A view's definition (pg_get_viewdef's text) runs inside the server, where
// the proxy cannot hide an expired value. A view created through the proxy
// stores the reads colread.go writes, so it reads every expiring column as
// the value's expression V(t.c), `CASE WHEN <t.c live> THEN t.c ELSE
// NULL::<type> END`, or under the value's live condition (`<t.c live> AND
// P`, `t.c IS NULL OR NOT <t.c live>`): such a view is read as it is. Any
// other view that names an expiring column of a table it reads (created
// directly, or through the proxy before the column rule was configured)
// "shows expired values": leakyKey then treats it as a view that may return
// expired rows, so that a read of it is expanded into its rewritten
// definition (where the column check refuses what the reads cannot rewrite)
// and every other use of it is refused. So is a view that reads such a view.
//
// The recognition compares parse trees, not text: pg_get_viewdef prints
// the proxy's expressions in its own way (parentheses, `'UTC'::text`,
// `(1000000)::numeric`, `'720:00:00'::interval` for `interval '2592000
// seconds'`). What it does not recognise is expanded, never read as it is.

// columnViews decides which views show expired values, for one rule set
// and catalog. Its results are kept for the walk (or check) that made it.
type columnViews struct {
	// ruleAt returns the rule of a table or child, nil for other relations.
	ruleAt func(schema, rel string) *ttl.Rule
	views  map[string]View
	// memo holds each decided view's answer: what makes it show expired
	// values, "" when nothing does.
	memo map[string]string
	// busy marks the views being decided (a cycle reads nothing more).
	busy map[string]bool
	// rowMemo and rowBusy are memo and busy for rowLeaky.
	rowMemo map[string]string
	rowBusy map[string]bool
}

// columnViews returns the walk's columnViews, made on first use.
func (w *walker) columnViews() *columnViews {
	if w.colViews == nil {
		w.colViews = &columnViews{ruleAt: w.ruleAt, views: w.s.Catalog.d.Views, memo: map[string]string{}, busy: map[string]bool{}, rowMemo: map[string]string{}, rowBusy: map[string]bool{}}
	}
	return w.colViews
}

// columnLeaky reports that the view key ("schema.name" of the catalog's
// Views) shows expired values of an expiring column, with the table or view
// that makes it.
func (w *walker) columnLeaky(key string) (string, bool) {
	if !w.rw.hasColumns || w.s.Catalog == nil {
		return "", false
	}
	r := w.columnViews().leaky(key)
	return r, r != ""
}

// ColumnLeakyViews returns the views of c that may show an expired value of
// an expiring column under rw's rules, each with the table (or view) whose
// values make it (see colviews.go). Views it does not list read every
// expiring column of the tables they read as the proxy's reads do, or do
// not name one. Materialized views are listed when they read such a table
// at any depth; Catalog.Leaky lists them all anyway.
func (rw *Rewriter) ColumnLeakyViews(c *Catalog) map[string]string {
	out := map[string]string{}
	if !rw.hasColumns || c == nil {
		return out
	}
	w := newWalker(rw, "", &Session{Catalog: c}, nil)
	cv := w.columnViews()
	for key := range c.d.Views {
		if r := cv.leaky(key); r != "" {
			out[key] = r
		}
	}
	return out
}

// leaky returns what makes the view key show expired values, or "".
func (cv *columnViews) leaky(key string) string {
	if r, ok := cv.memo[key]; ok {
		return r
	}
	v, ok := cv.views[key]
	if !ok || cv.busy[key] {
		return ""
	}
	cv.busy[key] = true
	defer delete(cv.busy, key)
	r := ""
	if v.Materialized {
		// No definition: whatever it reads at any depth counts.
		for _, read := range v.Reads {
			if _, isView := cv.views[read]; isView {
				if cv.leaky(read) != "" || cv.readsExpiring(read) {
					r = read
				}
			} else if cv.expiringRule(read) != nil {
				r = read
			}
			if r != "" {
				break
			}
		}
	} else {
		r = cv.unguarded(v)
		for _, read := range v.Reads {
			if r != "" {
				break
			}
			if _, isView := cv.views[read]; isView && cv.leaky(read) != "" {
				r = read
			}
		}
	}
	cv.memo[key] = r
	return r
}

// inView returns e, a rejection of the definition of the view key being
// expanded, with the view named in its message.
func inView(key string, e *Error) *Error {
	c := *e
	c.Message += " (in the definition of view " + key + ")"
	return &c
}

// rowLeaky returns what makes the view key, one of Catalog.leaky (which
// knows no rules), show expired rows under the rules, or "": the
// catalog's reasons, less the tables without a row rule (ttl.KindNone),
// whose rows never expire, so that a view of such a table created through
// the proxy (no filter join, the values read as V) is read as it is.
func (cv *columnViews) rowLeaky(key, reason string) string {
	if r, ok := cv.rowMemo[key]; ok {
		return r
	}
	v, ok := cv.views[key]
	if !ok || v.Materialized || cv.rowBusy[key] {
		return reason
	}
	cv.rowBusy[key] = true
	defer delete(cv.rowBusy, key)
	kept := v
	kept.Reads = nil
	for _, r := range v.Reads {
		if _, isView := cv.views[r]; !isView && strings.Contains(r, ".") {
			names := childNames(r)
			if rule := cv.ruleAt(r[:len(r)-len(names[1])-1], names[1]); rule != nil && !rule.HasRowRule() {
				continue
			}
		}
		kept.Reads = append(kept.Reads, r)
	}
	out, _ := unfilteredRead(kept, cv.views)
	for _, r := range v.Reads {
		if out != "" {
			break
		}
		if _, isView := cv.views[r]; isView && cv.rowLeaky(r, r) != "" {
			out = r
		}
	}
	cv.rowMemo[key] = out
	return out
}

// readsExpiring reports that the view key reads a table with expiring
// columns at any depth.
func (cv *columnViews) readsExpiring(key string) bool {
	seen := map[string]bool{}
	var reads func(string, int) bool
	reads = func(name string, depth int) bool {
		if seen[name] || depth > maxViewDepth {
			return false
		}
		seen[name] = true
		v, isView := cv.views[name]
		if !isView {
			return cv.expiringRule(name) != nil
		}
		for _, r := range v.Reads {
			if reads(r, depth+1) {
				return true
			}
		}
		return false
	}
	return reads(key, 0)
}

// expiringRule returns the rule of the table "schema.name" when it has
// expiring columns, or nil.
func (cv *columnViews) expiringRule(key string) *ttl.Rule {
	if !strings.Contains(key, ".") {
		return nil
	}
	names := childNames(key)
	if r := cv.ruleAt(key[:len(key)-len(names[1])-1], names[1]); r != nil && len(r.Columns) > 0 {
		return r
	}
	return nil
}

// valueRef is one (qualifier, expiring column) of a view's definition.
type valueRef struct{ qual, column string }

// viewCheck is the check of one view definition.
type viewCheck struct {
	// refs maps each name a table with expiring columns is visible under
	// (its alias or its name) to the rules of the tables so named.
	refs map[string][]*ttl.Rule
	// columns holds the expiring columns of those tables.
	columns map[string]bool
	// live holds each (qualifier, column)'s live conditions, normalised.
	live map[valueRef][]*pg.Node
	leak bool
}

// unguarded returns the first table with expiring columns v reads directly
// whose expiring columns its definition names other than through the
// value's expression or under its live condition (see above), or "".
func (cv *columnViews) unguarded(v View) string {
	tables := map[string]string{} // relation name → "schema.name"
	rules := map[string]*ttl.Rule{}
	first := ""
	for _, r := range v.Reads {
		if _, isView := cv.views[r]; isView {
			continue
		}
		rule := cv.expiringRule(r)
		if rule == nil {
			continue
		}
		if first == "" {
			first = r
		}
		tables[childNames(r)[1]] = r
		rules[r] = rule
	}
	if first == "" {
		return ""
	}
	tree, err := pg.Parse(strings.TrimRight(strings.TrimSpace(v.Definition), "; \t\n"))
	if err != nil || len(tree.Stmts) != 1 {
		return first
	}
	c := &viewCheck{refs: map[string][]*ttl.Rule{}, columns: map[string]bool{}, live: map[valueRef][]*pg.Node{}}
	forEachRangeVar(tree.Stmts[0].Stmt, func(rv *pg.RangeVar) {
		key, ok := tables[rv.Relname]
		if !ok || (rv.Schemaname != "" && rv.Schemaname+"."+rv.Relname != key) {
			return
		}
		if rv.Alias != nil && len(rv.Alias.Colnames) > 0 {
			c.leak = true // renamed columns are not recognised
		}
		name := rv.Relname
		if rv.Alias != nil {
			name = rv.Alias.Aliasname
		}
		c.refs[name] = append(c.refs[name], rules[key])
	})
	for q, rs := range c.refs {
		for _, r := range rs {
			for i := range r.Columns {
				cr := &r.Columns[i]
				c.columns[cr.Column] = true
				e := cr.Expiry(r)
				n := parseExpr(e.LiveCondition(ttl.QuoteIdent(q), ttl.Now))
				if n == nil {
					c.leak = true
					continue
				}
				ref := valueRef{q, cr.Column}
				c.live[ref] = append(c.live[ref], n)
			}
		}
	}
	c.node(tree.Stmts[0].Stmt, nil)
	if c.leak {
		return first
	}
	return ""
}

// parseExpr returns the normalised parse tree of the SQL expression e, or
// nil.
func parseExpr(e string) *pg.Node {
	tree, err := pg.Parse("SELECT " + e)
	if err != nil || len(tree.Stmts) != 1 {
		return nil
	}
	sel := tree.Stmts[0].Stmt.GetSelectStmt()
	if sel == nil || len(sel.TargetList) != 1 {
		return nil
	}
	return normalise(sel.TargetList[0].GetResTarget().GetVal())
}

// node checks n, whose enclosing expressions guard the values of guards:
// their value is decided by the guards' live conditions once expired.
func (c *viewCheck) node(n *pg.Node, guards []valueRef) {
	if n == nil || n.Node == nil || c.leak {
		return
	}
	switch x := n.Node.(type) {
	case *pg.Node_ColumnRef:
		c.columnRef(x.ColumnRef, guards)
		return
	case *pg.Node_CaseExpr:
		if c.isValueExpr(x.CaseExpr) {
			return
		}
	case *pg.Node_BoolExpr:
		b := x.BoolExpr
		inner := guards
		for _, a := range b.Args {
			switch b.Boolop {
			case pg.BoolExprType_AND_EXPR:
				inner = append(inner, c.liveOf(a)...)
			case pg.BoolExprType_OR_EXPR:
				if not := a.GetBoolExpr(); not != nil && not.Boolop == pg.BoolExprType_NOT_EXPR && len(not.Args) == 1 {
					inner = append(inner, c.liveOf(not.Args[0])...)
				}
			}
		}
		for _, a := range b.Args {
			c.node(a, inner)
		}
		return
	case *pg.Node_JoinExpr:
		if x.JoinExpr.IsNatural || len(x.JoinExpr.UsingClause) > 0 {
			c.leak = true // a merged column is read by its bare name
			return
		}
	case *pg.Node_FuncCall:
		f := x.FuncCall
		if len(f.Funcname) > 0 && len(f.Args) == 1 && c.columns[f.Funcname[len(f.Funcname)-1].GetString_().GetSval()] {
			c.leak = true // functional notation c(t)
			return
		}
	}
	// Strict pieces of an atom keep its guards; anything else (a function
	// call, whose arguments may be other rows' values, a subquery, a CASE)
	// does not.
	if !keepsGuards(n) {
		guards = nil
	}
	n.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		c.field(fd, v, guards)
		return !c.leak
	})
}

// field checks the nodes one field of a message holds.
func (c *viewCheck) field(fd protoreflect.FieldDescriptor, v protoreflect.Value, guards []valueRef) {
	if fd.Message() == nil || fd.IsMap() {
		return
	}
	each := func(m protoreflect.Message) {
		if n, ok := m.Interface().(*pg.Node); ok {
			c.node(n, guards)
			return
		}
		if _, ok := m.Interface().(*pg.RangeVar); ok {
			return
		}
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			c.field(fd, v, guards)
			return !c.leak
		})
	}
	if fd.IsList() {
		l := v.List()
		for i := 0; i < l.Len() && !c.leak; i++ {
			each(l.Get(i).Message())
		}
		return
	}
	each(v.Message())
}

// keepsGuards reports the nodes through which a live condition beside an
// atom still decides the atom: operators, IS [NOT] NULL and its kin, casts,
// COLLATE, lists, and lower() and upper() (as colread.go writes them).
func keepsGuards(n *pg.Node) bool {
	switch x := n.Node.(type) {
	case *pg.Node_AExpr, *pg.Node_NullTest, *pg.Node_BooleanTest, *pg.Node_TypeCast, *pg.Node_CollateClause,
		*pg.Node_List, *pg.Node_BoolExpr:
		return true
	case *pg.Node_FuncCall:
		f := x.FuncCall
		if f.Over != nil || f.AggStar || f.AggDistinct || f.AggFilter != nil || len(f.AggOrder) > 0 || len(f.Args) != 1 {
			return false
		}
		switch strings.Join(funcName(f.Funcname), ".") {
		case "lower", "upper", "pg_catalog.lower", "pg_catalog.upper":
			return true
		}
	}
	return false
}

// funcName spells a function's names.
func funcName(names []*pg.Node) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = n.GetString_().GetSval()
	}
	return out
}

// liveOf returns the values whose live condition n is.
func (c *viewCheck) liveOf(n *pg.Node) []valueRef {
	var out []valueRef
	norm := normalise(n)
	for ref, conds := range c.live {
		if matchesAll(norm, conds) {
			out = append(out, ref)
		}
	}
	return out
}

// matchesAll reports that n equals every one of conds (a qualifier may
// name tables of different rules at different levels).
func matchesAll(n *pg.Node, conds []*pg.Node) bool {
	for _, cond := range conds {
		if !proto.Equal(n, cond) {
			return false
		}
	}
	return len(conds) > 0
}

// columnRef checks one column reference under guards.
func (c *viewCheck) columnRef(cr *pg.ColumnRef, guards []valueRef) {
	f := cr.Fields
	if len(f) == 0 {
		return
	}
	if f[len(f)-1].GetAStar() != nil {
		// `*` (pg_get_viewdef writes its columns out) or `t.*` of such
		// a table: every column.
		if len(f) == 1 || c.refs[f[len(f)-2].GetString_().GetSval()] != nil {
			c.leak = true
		}
		return
	}
	names := funcName(f)
	if len(f) == 1 && c.refs[names[0]] != nil {
		c.leak = true // a whole-row reference
		return
	}
	for i, name := range names {
		if !c.columns[name] {
			continue
		}
		if i != len(names)-1 || len(names) != 2 {
			c.leak = true
			return
		}
		if c.refs[names[0]] == nil {
			// pg_get_viewdef qualifies every column with the name of its
			// FROM item: this one is not such a table (a subquery's output,
			// a view's column, another table's column).
			return
		}
		for _, g := range guards {
			if g == (valueRef{names[0], name}) {
				return
			}
		}
		c.leak = true
		return
	}
}

// isValueExpr reports that ce is the value's expression V(q.c) of an
// expiring column c of a table visible as q: one WHEN, whose condition is
// the value's live condition, THEN q.c, ELSE NULL (of any type) or none.
func (c *viewCheck) isValueExpr(ce *pg.CaseExpr) bool {
	if ce.Arg != nil || len(ce.Args) != 1 {
		return false
	}
	when := ce.Args[0].GetCaseWhen()
	if when == nil {
		return false
	}
	cr := when.Result.GetColumnRef()
	if cr == nil || len(cr.Fields) != 2 {
		return false
	}
	ref := valueRef{cr.Fields[0].GetString_().GetSval(), cr.Fields[1].GetString_().GetSval()}
	if d := ce.Defresult; d != nil {
		if tc := d.GetTypeCast(); tc != nil {
			d = tc.Arg
		}
		if k := d.GetAConst(); k == nil || !k.Isnull {
			return false
		}
	}
	return matchesAll(normalise(when.Expr), c.live[ref])
}
