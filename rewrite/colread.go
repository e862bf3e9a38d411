package rewrite

import (
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// Reads of expiring columns at a query level (docs/design/column-ttl.md §2
// and §3): a SELECT, the UPDATE or DELETE of the table (with its FROM or
// USING items, colfrom.go), a MERGE, the DO UPDATE of an INSERT into it,
// and the RETURNING of those writes and of the INSERT. Every reference the
// level's scope resolves to an expiring column (colscope.go), in the
// target list (`*` and `t.*` expanded from the catalog), WHERE, JOIN ON,
// GROUP BY, HAVING, ORDER BY, DISTINCT ON, WINDOW, RETURNING, or the values
// of a SET list, is rewritten; whole rows are colrow.go's. A reference
// left unresolved is refused by the column check.
//
// A value reads V, the value's expression (ttl.ColumnRule.ValueExpr): the
// value while live, NULL once expired. A predicate is rewritten so that an
// index on the column still serves it (§3), by position:
//
//   - In a filter position (WHERE, HAVING, an aggregate's FILTER, a
//     searched CASE's WHEN, and the arguments of AND and OR there, where
//     NULL and FALSE both reject), an atom in which the column stands in a
//     null-rejecting position (strictRoot) becomes `live AND atom`: FALSE
//     once the value has expired, where the atom over V is NULL or FALSE,
//     and the atom itself while the value lives. The live condition goes
//     in front of the atom, binding tighter than the OR around it and
//     looser than anything inside it, so the atom's end need not be found.
//   - `c IS NULL` becomes `(c IS NULL OR expired)` and `c IS NOT NULL`
//     `(c IS NOT NULL AND live)` in any position: both are two-valued, as
//     expired is (ttl.Rule.ExpiredCondition is the negation of a live
//     condition that is never NULL).
//   - Everywhere else (under NOT, IS TRUE, a comparison of booleans, a
//     target list, a non-strict atom: coalesce, IS DISTINCT FROM, unknown
//     functions) the reference becomes V.
//
// Guards. An argument of AND that is the column's live condition, or of OR
// that is its expired condition, decides the whole AND (OR) once the value
// has expired; while it lives the stored value is the value. The column's
// other references among the arguments are therefore left as they are, in
// any position, and so are those of an atom the live condition was put in
// front of. This is what keeps the proxy's own output, rewritten again, as
// it is (idempotence), together with the recognition of V (isValueExpr).
// A guard does not reach into a function call's arguments: an aggregate or
// window function reads them in other rows than the one the guard tests.

// colLevel is one query level: its FROM items and the level it is nested
// in (colscope.go).
type colLevel struct {
	c      *columnCheck
	parent *colLevel
	rels   []*colRel
	// quals are the join conditions of the level's FROM items; merged
	// says a join merges columns (USING, NATURAL) or hides its items
	// behind an alias, so that `*` is not the items' columns in turn.
	quals, fullQuals []*pg.Node
	merged           bool
	// pure makes every reference read V, predicates too: after grouping.
	pure bool
	// wrapped are the references rewritten to V.
	wrapped map[*pg.ColumnRef]bool
	// qualifiedOnly: a column named without the level's qualifier is not
	// this level's (ON CONFLICT DO UPDATE, where EXCLUDED is in scope too).
	qualifiedOnly bool
	// top: a level of no enclosing query (the statement's own query, a
	// CTE's or set operation arm's of it, a derived table's of such a
	// level): its levels are every scope a name in it can reach
	// (colscope.go, lookup).
	top bool
}

// guards are the expiring columns whose references an enclosing guard (or
// the live condition put in front of an atom) covers.
type guards map[guardKey]bool

func (g guards) with(keys ...guardKey) guards {
	if len(keys) == 0 {
		return g
	}
	out := make(guards, len(g)+len(keys))
	for k := range g {
		out[k] = true
	}
	for _, k := range keys {
		out[k] = true
	}
	return out
}

// level returns the level of a write to rv, or nil when rv is no table
// with expiring columns.
func (c *columnCheck) level(rv *pg.RangeVar) *colLevel {
	if c.refs[rv] == nil {
		return nil
	}
	return c.tableLevel(rv)
}

// readSelect rewrites the reads of the query level l of sel (its FROM
// items already in l).
func (c *columnCheck) readSelect(sel *pg.SelectStmt, l *colLevel) {
	l.filter(sel.WhereClause, nil)
	for _, q := range l.quals {
		l.filter(q, nil)
	}
	for _, q := range l.fullQuals {
		l.value(q, nil)
	}
	// After grouping, a column is read only inside the grouped
	// expression: the GROUP BY items read V, and every reference of the
	// levels after it (target list, HAVING, ORDER BY, windows) reads V
	// too, so that PostgreSQL matches it with the GROUP BY's.
	l.pure = len(sel.GroupClause) > 0
	if !isTableForm(sel) || !l.tableStar(sel) {
		l.targets(sel.TargetList)
	}
	for _, n := range sel.GroupClause {
		l.value(n, nil)
	}
	l.filter(sel.HavingClause, nil)
	for _, n := range sel.WindowClause {
		l.children(n.ProtoReflect(), nil)
	}
	// VALUES rows: their names are outer levels' (a VALUES has no FROM).
	for _, row := range sel.ValuesLists {
		l.value(row, nil)
	}
	outputs, known := l.outputNames(sel.TargetList)
	for _, n := range sel.DistinctClause {
		l.sortKey(n, outputs, known)
	}
	for _, n := range sel.SortClause {
		if sb := n.GetSortBy(); sb != nil {
			l.sortKey(sb.Node, outputs, known)
			continue
		}
		l.value(n, nil)
	}
}

// sortKey rewrites an ORDER BY or DISTINCT ON item. A bare name that
// names an output column (outputs, all of them known) is that column,
// whose own reads the target list has rewritten (PostgreSQL's SQL-92 rule
// for these clauses); when some output names are not known it is left to
// be refused. Any other item is an expression over the input columns.
func (l *colLevel) sortKey(n *pg.Node, outputs map[string]bool, known bool) {
	if cr := n.GetColumnRef(); cr != nil && len(cr.Fields) == 1 && cr.Fields[0].GetString_() != nil {
		name := cr.Fields[0].GetString_().GetSval()
		if outputs[name] {
			l.c.read[cr] = true
			return
		}
		if _, col, _ := l.mine(cr); !known && col != nil {
			return
		}
	}
	l.value(n, nil)
}

// outputNames returns the names of the output columns of a target list,
// as PostgreSQL gives them (FigureColname), and whether every name is
// known: a scalar subquery's entry is named by its own level.
func (l *colLevel) outputNames(list []*pg.Node) (map[string]bool, bool) {
	out, known := map[string]bool{}, true
	for _, n := range list {
		rt := n.GetResTarget()
		if rt == nil {
			continue
		}
		if rt.Name != "" {
			out[rt.Name] = true
			continue
		}
		if cr := rt.Val.GetColumnRef(); cr != nil && len(cr.Fields) > 0 && cr.Fields[len(cr.Fields)-1].GetAStar() != nil {
			rels := l.starRels(cr.Fields)
			if len(cr.Fields) > 1 && len(rels) == 0 {
				known = false
			}
			for _, rel := range rels {
				known = known && (rel.known || rel.filter)
				for _, col := range rel.cols {
					out[col.Name] = true
				}
			}
			continue
		}
		name, ok := figureName(rt.Val)
		if !ok {
			known = false
		}
		out[name] = true
	}
	return out, known
}

// figureName ports PostgreSQL's FigureColname
// (src/backend/parser/parse_target.c): the name of a target entry without
// AS, and false when it is a scalar subquery's (named by its own first
// entry).
func figureName(n *pg.Node) (string, bool) {
	name, strength, ok := figureNameInternal(n)
	if strength == 0 {
		return "?column?", ok
	}
	return name, ok
}

func figureNameInternal(n *pg.Node) (string, int, bool) {
	switch x := n.GetNode().(type) {
	case nil:
		return "", 0, true // a CASE without ELSE
	case *pg.Node_ColumnRef:
		// The last field name, `*` ignored: `t.*` is named "t".
		if name := lastName(x.ColumnRef); name != "" {
			return name, 2, true
		}
	case *pg.Node_AIndirection:
		// The last field name among the subscripts: (c).f[1] is "f".
		name := ""
		for _, i := range x.AIndirection.Indirection {
			if i.GetString_() != nil {
				name = i.GetString_().GetSval()
			}
		}
		if name != "" {
			return name, 2, true
		}
		return figureNameInternal(x.AIndirection.Arg)
	case *pg.Node_FuncCall:
		f := x.FuncCall.Funcname
		if len(f) > 0 {
			return f[len(f)-1].GetString_().GetSval(), 2, true
		}
	case *pg.Node_AExpr:
		if x.AExpr.Kind == pg.A_Expr_Kind_AEXPR_NULLIF {
			return "nullif", 2, true
		}
		return "", 0, true
	case *pg.Node_TypeCast:
		if name, s, ok := figureNameInternal(x.TypeCast.Arg); s > 1 || !ok {
			return name, s, ok
		}
		if tn := x.TypeCast.TypeName; tn != nil && len(tn.Names) > 0 {
			return tn.Names[len(tn.Names)-1].GetString_().GetSval(), 1, true
		}
	case *pg.Node_CollateClause:
		return figureNameInternal(x.CollateClause.Arg)
	case *pg.Node_CaseExpr:
		if name, s, ok := figureNameInternal(x.CaseExpr.Defresult); s > 1 || !ok {
			return name, s, ok
		}
		return "case", 1, true
	case *pg.Node_AArrayExpr:
		return "array", 2, true
	case *pg.Node_RowExpr:
		return "row", 2, true
	case *pg.Node_CoalesceExpr:
		return "coalesce", 2, true
	case *pg.Node_MinMaxExpr:
		if x.MinMaxExpr.Op == pg.MinMaxOp_IS_GREATEST {
			return "greatest", 2, true
		}
		return "least", 2, true
	case *pg.Node_SubLink:
		switch x.SubLink.SubLinkType {
		case pg.SubLinkType_EXISTS_SUBLINK:
			return "exists", 2, true
		case pg.SubLinkType_ARRAY_SUBLINK:
			return "array", 2, true
		case pg.SubLinkType_EXPR_SUBLINK, pg.SubLinkType_MULTIEXPR_SUBLINK:
			return "", 0, false
		}
		return "", 0, true
	case *pg.Node_GroupingFunc:
		return "grouping", 2, true
	case *pg.Node_AConst, *pg.Node_ParamRef, *pg.Node_BoolExpr, *pg.Node_NullTest, *pg.Node_BooleanTest:
		return "", 0, true // "?column?"
	}
	// Named after a keyword (CURRENT_DATE, XMLELEMENT, JSON_OBJECT, …): not
	// ported, the name is unknown.
	return "", 0, false
}

// readWrite rewrites the reads of an UPDATE (set holds its SET list) or
// DELETE of rv with no other FROM item: WHERE and the values of SET.
func (c *columnCheck) readWrite(rv *pg.RangeVar, set []*pg.Node, where *pg.Node) {
	c.readWriteLevel(c.level(rv), set, where)
}

// readWriteLevel is readWrite over the level l (nil: nothing to read).
func (c *columnCheck) readWriteLevel(l *colLevel, set []*pg.Node, where *pg.Node) {
	if l == nil {
		return
	}
	for _, n := range set {
		rt := n.GetResTarget()
		if m := rt.GetVal().GetMultiAssignRef(); m != nil {
			if !isRepeatedSource(m) {
				l.value(m.Source, nil)
			}
			continue
		}
		l.value(rt.GetVal(), nil)
		for _, ind := range rt.GetIndirection() {
			l.value(ind, nil)
		}
		c.subLevels(rt.GetVal(), l, nil)
	}
	l.filter(where, nil)
	c.subLevels(where, l, nil)
}

// returning rewrites the RETURNING list of an INSERT into rv, or of an
// UPDATE or DELETE of rv with no other FROM item, as a target list: its
// references read the new row (the old one for DELETE), whose expiry is
// the one the row holds after the write, stamped or not.
func (c *columnCheck) returning(rv *pg.RangeVar, list []*pg.Node) {
	if len(list) == 0 {
		return
	}
	if l := c.level(rv); l != nil {
		l.targets(list)
	}
}

// targets rewrites a target list. An entry without a name of its own whose
// name PostgreSQL would take from a reference now rewritten to V (`c`,
// `c::text`, `c[1]`, a CASE whose ELSE is `c`) gets `AS "c"`: V alone
// would be named "case".
func (l *colLevel) targets(list []*pg.Node) {
	for _, n := range list {
		rt := n.GetResTarget()
		if rt == nil || rt.Val == nil {
			continue
		}
		if cr := rt.Val.GetColumnRef(); cr != nil && l.star(cr) {
			continue
		}
		l.value(rt.Val, nil)
		if rt.Name != "" || l.c.w.err != nil {
			continue
		}
		ref, _ := nameSource(rt.Val)
		name := ""
		switch fc := funcSource(rt.Val); {
		case ref != nil && l.wrapped[ref]:
			name = lastName(ref)
		case fc != nil && l.c.funcs[fc]:
			name = fc.Funcname[0].GetString_().GetSval()
		default:
			continue
		}
		ts := l.c.w.tokens()
		i := ts.at(int(rt.Location))
		if i < 0 {
			l.c.w.fail(internalError("cannot locate a target list entry"))
			return
		}
		stop := ts.scanTop(i, len(l.c.w.sql), func(j int) bool {
			return ts[j].kind == pg.Token_ASCII_44 || endsTargetList(ts, j)
		})
		limit := len(l.c.w.sql)
		if stop < len(ts) {
			limit = ts[stop].start
		}
		last := ts.lastBefore(i, limit)
		if last < 0 {
			l.c.w.fail(internalError("cannot locate the end of a target list entry"))
			return
		}
		l.c.w.insert(ts[last].end, " AS "+ttl.QuoteIdent(name))
	}
}

// star expands `*` or `q.*` in a target or RETURNING list when it
// carries a table with expiring columns: `q.*` of such a table into the
// catalog's columns, in their order, each expiring column as `V AS "c"`
// and the others as `q."a"`; `*` into each FROM item's columns in turn (a
// table with expiring columns so, any other as `x.*`). It reports whether
// cr was such a `*`; one that cannot be expanded (no catalog, an item
// without a name, a join merging columns) is left to be refused.
func (l *colLevel) star(cr *pg.ColumnRef) bool {
	f := cr.Fields
	if len(f) == 0 || f[len(f)-1].GetAStar() == nil || len(f) > 3 {
		return false
	}
	rels := l.starRels(f)
	expiring := false
	for _, rel := range rels {
		expiring = expiring || rel.r != nil || rel.tainted
	}
	if !expiring {
		return false
	}
	if len(f) == 1 && l.merged {
		return true
	}
	ts := l.c.w.tokens()
	i := ts.at(int(cr.Location))
	if i < 0 || ts.kind(ts.nameEnd(i)-1) != pg.Token_ASCII_42 {
		return false // TABLE t: no `*` in the text, refused
	}
	end := ts.nameEnd(i)
	var b strings.Builder
	for _, rel := range rels {
		item := ""
		switch {
		case rel.filter:
			continue
		case rel.r == nil && (rel.name == "" || rel.tainted):
			return true
		case rel.r == nil:
			item = rel.qual + ".*"
		default:
			if item = rel.columnList(true); item == "" {
				return true
			}
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(item)
	}
	l.c.w.replace(ts[i].start, ts[end-1].end, b.String())
	l.c.read[cr] = true
	return true
}

// starRels returns the FROM items of this level that `*` (every item),
// `q.*` or `schema.table.*` (f, the fields of the reference) carries.
func (l *colLevel) starRels(f []*pg.Node) []*colRel {
	switch len(f) {
	case 1:
		return l.rels
	case 2:
		for _, rel := range l.rels {
			if rel.name == f[0].GetString_().GetSval() {
				return []*colRel{rel}
			}
		}
	case 3:
		if rel, lv := l.qualified(f[0].GetString_().GetSval(), f[1].GetString_().GetSval()); lv == l {
			return []*colRel{rel}
		}
	}
	return nil
}

// tableStar reads the statement `TABLE t` (sel, isTableForm) of a table
// with expiring columns as star does `SELECT * FROM t`: TABLE becomes
// `SELECT <columns> FROM`. It reports whether sel was such a statement;
// one that cannot be expanded is left to be refused.
func (l *colLevel) tableStar(sel *pg.SelectStmt) bool {
	cr := sel.TargetList[0].GetResTarget().GetVal().GetColumnRef()
	rv := sel.FromClause[0].GetRangeVar()
	if cr == nil || len(l.rels) != 1 || l.rels[0].r == nil {
		return false
	}
	text := l.rels[0].columnList(true)
	w := l.c.w
	first, _, ok := w.itemSpan(rv)
	if text == "" || !ok {
		return true
	}
	ts := w.tokens()
	if ts.kind(first-1) != pg.Token_TABLE {
		return true
	}
	w.replace(ts[first-1].start, ts[first-1].end, "SELECT "+text+" FROM")
	w.tableDone[ts[first-1].start] = true
	l.c.read[cr] = true
	return true
}

// nameSource ports the part of PostgreSQL's FigureColnameInternal
// (src/backend/parser/parse_target.c) that decides whether an entry is
// named after a column: it returns that column reference, or nil, and the
// strength of the name (2: a column, function or keyword; 1: a type name
// or "case"; 0: none).
func nameSource(n *pg.Node) (*pg.ColumnRef, int) {
	switch x := n.GetNode().(type) {
	case *pg.Node_ColumnRef:
		if lastName(x.ColumnRef) != "" {
			return x.ColumnRef, 2
		}
	case *pg.Node_AIndirection:
		// Named after the last field name among the subscripts: (c).f[1]
		// is "f".
		for _, i := range x.AIndirection.Indirection {
			if i.GetString_() != nil {
				return nil, 2
			}
		}
		return nameSource(x.AIndirection.Arg)
	case *pg.Node_TypeCast:
		if ref, s := nameSource(x.TypeCast.Arg); s > 1 {
			return ref, s
		}
		return nil, 1
	case *pg.Node_CollateClause:
		return nameSource(x.CollateClause.Arg)
	case *pg.Node_CaseExpr:
		if ref, s := nameSource(x.CaseExpr.Defresult); s > 1 {
			return ref, s
		}
		return nil, 1
	case *pg.Node_AExpr:
		if x.AExpr.Kind == pg.A_Expr_Kind_AEXPR_NULLIF {
			return nil, 2
		}
	case *pg.Node_FuncCall, *pg.Node_GroupingFunc, *pg.Node_SubLink, *pg.Node_AArrayExpr, *pg.Node_RowExpr,
		*pg.Node_CoalesceExpr, *pg.Node_MinMaxExpr, *pg.Node_SqlvalueFunction, *pg.Node_XmlExpr, *pg.Node_XmlSerialize:
		// Named after the function or keyword (a subquery after its own
		// first entry, whose name its own level keeps).
		return nil, 2
	}
	return nil, 0
}

// filter rewrites an expression in a filter position under the guards g.
func (l *colLevel) filter(n *pg.Node, g guards) {
	if n == nil || n.Node == nil || l.c.w.err != nil {
		return
	}
	if l.pure {
		l.value(n, g)
		return
	}
	switch x := n.Node.(type) {
	case *pg.Node_BoolExpr:
		if x.BoolExpr.Boolop != pg.BoolExprType_NOT_EXPR {
			l.boolArgs(x.BoolExpr, g, true)
			return
		}
	case *pg.Node_NullTest:
		if l.nullTest(x.NullTest, g) {
			return
		}
	}
	// An atom.
	var keys []guardKey
	seen := map[guardKey]bool{}
	l.strictRoot(n, func(rel *colRel, col *ttl.ColumnRule) {
		k := guardKey{rel, col.Column}
		if !g[k] && !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	})
	if len(keys) > 0 {
		start := l.atomStart(n)
		if start < 0 {
			return
		}
		var b strings.Builder
		for _, k := range keys {
			b.WriteString(k.rel.live(k.rel.r.ExpiringColumn(k.col)))
			b.WriteString(" AND ")
		}
		l.c.w.insertLast(l.c.w.tokens()[start].start, b.String())
		g = g.with(keys...)
	}
	l.value(n, g)
}

// boolArgs rewrites the arguments of AND or OR, in a filter position when
// filter is set, recognising the guards among them.
func (l *colLevel) boolArgs(b *pg.BoolExpr, g guards, filter bool) {
	guard := map[*pg.Node]bool{}
	var keys []guardKey
	for _, arg := range b.Args {
		if k, ok := l.guardOf(arg, b.Boolop); ok {
			guard[arg] = true
			keys = append(keys, k)
		}
	}
	g = g.with(keys...)
	for _, arg := range b.Args {
		switch {
		case guard[arg]:
			// The expiry columns it reads are not expiring columns
			// (ttl.Rule.Validate); walked only to resolve their names
			// (a column alias list may give them any).
			l.value(arg, g)
		case filter:
			l.filter(arg, g)
		default:
			l.value(arg, g)
		}
	}
}

// guardOf returns the expiring column whose live condition (op AND) or
// expired condition (op OR) arg is.
func (l *colLevel) guardOf(arg *pg.Node, op pg.BoolExprType) (guardKey, bool) {
	// A live condition is an OR, an expired condition its NOT.
	shape := pg.BoolExprType_OR_EXPR
	if op == pg.BoolExprType_OR_EXPR {
		shape = pg.BoolExprType_NOT_EXPR
	}
	if be := arg.GetBoolExpr(); be == nil || be.Boolop != shape {
		return guardKey{}, false
	}
	lo, hi := locRange(arg)
	ts := l.c.w.tokens()
	s := ts.at(lo)
	if s < 1 || ts[s-1].kind != pg.Token_ASCII_40 {
		return guardKey{}, false
	}
	at := ts[s-1].start
	var found guardKey
	ok := false
	l.expiringRels(func(rel *colRel) {
		if ok {
			return
		}
		if near, _ := l.named(rel.name); near != rel {
			return
		}
		for i := range rel.r.Columns {
			want := rel.live(&rel.r.Columns[i])
			if op == pg.BoolExprType_OR_EXPR {
				want = rel.expired(&rel.r.Columns[i])
			}
			if hi < at+len(want) && l.c.w.matchText(at, want) {
				found, ok = guardKey{rel, rel.r.Columns[i].Column}, true
				return
			}
		}
	})
	return found, ok
}

// nullTest rewrites `c IS [NOT] NULL` of a column of this level and
// reports whether nt was one.
func (l *colLevel) nullTest(nt *pg.NullTest, g guards) bool {
	cr := nt.Arg.GetColumnRef()
	if cr == nil || nt.Argisrow {
		return false
	}
	rel, col, owner := l.mine(cr)
	if col == nil || owner.pure {
		return false
	}
	l.c.read[cr] = true
	if g[guardKey{rel, col.Column}] {
		return true
	}
	ts := l.c.w.tokens()
	start, end := ts.at(int(cr.Location)), ts.at(int(nt.Location))
	switch ts.kind(end) {
	case pg.Token_IS:
		end++
		if ts.kind(end) == pg.Token_NOT {
			end++
		}
		if ts.kind(end) != pg.Token_NULL_P {
			end = -1
		}
	case pg.Token_ISNULL, pg.Token_NOTNULL:
	default:
		end = -1
	}
	if start < 0 || end < 0 {
		l.c.w.fail(internalError("cannot locate IS NULL"))
		return true
	}
	tail := " OR " + rel.expired(col) + ")"
	if nt.Nulltesttype == pg.NullTestType_IS_NOT_NULL {
		tail = " AND " + rel.live(col) + ")"
	}
	l.c.w.insert(ts[start].start, "(")
	l.c.w.insert(ts[end].end, tail)
	return true
}

// value rewrites an expression in a value position under the guards g.
func (l *colLevel) value(n *pg.Node, g guards) {
	if n == nil || n.Node == nil || l.c.w.err != nil {
		return
	}
	switch x := n.Node.(type) {
	case *pg.Node_ColumnRef:
		l.ref(x.ColumnRef, g)
		return
	case *pg.Node_SelectStmt:
		return // a level of its own
	case *pg.Node_BoolExpr:
		if x.BoolExpr.Boolop != pg.BoolExprType_NOT_EXPR {
			l.boolArgs(x.BoolExpr, g, false)
			return
		}
	case *pg.Node_NullTest:
		if l.nullTest(x.NullTest, g) {
			return
		}
	case *pg.Node_CaseExpr:
		ce := x.CaseExpr
		if l.c.isValueExpr(ce) {
			return
		}
		l.value(ce.Arg, g)
		for _, w := range ce.Args {
			cw := w.GetCaseWhen()
			if ce.Arg != nil {
				l.value(cw.GetExpr(), g) // CASE x WHEN v: a value compared with x
			} else {
				l.filter(cw.GetExpr(), g)
			}
			l.value(cw.GetResult(), g)
		}
		l.value(ce.Defresult, g)
		return
	case *pg.Node_XmlExpr:
		// xmlforest(c) and xmlattributes(c) name an element or attribute
		// after a column reference without AS: V keeps the name with it.
		l.children(n.ProtoReflect(), g)
		for _, a := range x.XmlExpr.NamedArgs {
			rt := a.GetResTarget()
			cr := rt.GetVal().GetColumnRef()
			if rt == nil || rt.Name != "" || cr == nil || !l.wrapped[cr] {
				continue
			}
			ts := l.c.w.tokens()
			if i := ts.at(int(cr.Location)); i >= 0 {
				l.c.w.insert(ts[ts.nameEnd(i)-1].end, " AS "+ttl.QuoteIdent(lastName(cr)))
			}
		}
		return
	case *pg.Node_RowExpr:
		done := l.rowStars(x.RowExpr.Args)
		for _, a := range x.RowExpr.Args {
			if !done[a] {
				l.value(a, g)
			}
		}
		return
	case *pg.Node_FuncCall:
		fc := x.FuncCall
		if l.funcColumn(fc) {
			return
		}
		if !caseFold(fc) {
			// An aggregate's or a window function's arguments are read in
			// other rows than the one a guard tests (first_value(c) OVER
			// …), and the raw tree does not tell aggregates from other
			// functions.
			g = nil
		}
		for _, a := range fc.Args {
			l.value(a, g)
		}
		for _, a := range fc.AggOrder {
			l.value(a, g)
		}
		if fc.Over != nil {
			l.children(fc.Over.ProtoReflect(), g)
		}
		l.filter(fc.AggFilter, g)
		return
	}
	l.children(n.ProtoReflect(), g)
}

// children rewrites the expressions directly below m as values.
func (l *colLevel) children(m protoreflect.Message, g guards) {
	root := m.Interface()
	walkMessages(m, func(c protoreflect.Message) bool {
		v := c.Interface()
		if v == root {
			return true
		}
		if n, ok := v.(*pg.Node); ok {
			l.value(n, g)
			return false
		}
		return true
	})
}

// ref rewrites a reference of this level to an expiring column to V,
// unless a guard covers it. Without the column's type from the catalog it
// is left to be refused.
func (l *colLevel) ref(cr *pg.ColumnRef, g guards) {
	if l.wholeRow(cr) {
		return
	}
	rel, col, owner := l.mine(cr)
	if col == nil {
		// Another FROM item's column: read at its own level.
		if rel != nil && !rel.tainted {
			l.c.read[cr] = true
		}
		return
	}
	if g[guardKey{rel, col.Column}] {
		l.c.read[cr] = true
		return
	}
	if owner != l && owner.pure {
		// PostgreSQL matches a grouped expression at its own level only:
		// V of an outer grouped level's column would be ungrouped here.
		return
	}
	typ := rel.typeOf(col)
	if typ == "" {
		return
	}
	ts := l.c.w.tokens()
	i := ts.at(int(cr.Location))
	if i < 0 {
		return
	}
	end := ts.nameEnd(i)
	text := rel.value(col, typ)
	if ts.kind(end) == pg.Token_ASCII_91 {
		text = "(" + text + ")" // CASE … END[1] does not parse
	}
	l.c.w.replace(ts[i].start, ts[end-1].end, text)
	l.c.read[cr] = true
	l.wrapped[cr] = true
}

// strictOps are the operators taken as strict (a NULL operand makes them
// NULL): the comparisons, pattern matches and containment operators of the
// built-in types. An operator of a user's type that is not strict makes
// the rewrite reject rows the V form would keep, never the other way.
var strictOps = map[string]bool{
	"=": true, "<>": true, "<": true, ">": true, "<=": true, ">=": true,
	"~~": true, "!~~": true, "~~*": true, "!~~*": true, "~": true, "!~": true, "~*": true, "!~*": true,
	"@>": true, "<@": true, "&&": true, "<<": true, ">>": true, "<<=": true, ">>=": true,
}

// strictOp reports an operator name of strictOps, unqualified or in
// pg_catalog.
func strictOp(name []*pg.Node) bool {
	switch len(name) {
	case 1:
		return strictOps[name[0].GetString_().GetSval()]
	case 2:
		return name[0].GetString_().GetSval() == "pg_catalog" && strictOps[name[1].GetString_().GetSval()]
	}
	return false
}

// strictRoot calls fn for each expiring column of this level that stands
// in a null-rejecting position of the atom n: a NULL there makes n NULL or
// FALSE, never TRUE.
func (l *colLevel) strictRoot(n *pg.Node, fn func(*colRel, *ttl.ColumnRule)) {
	switch x := n.GetNode().(type) {
	case *pg.Node_ColumnRef:
		l.strictChain(n, fn) // a boolean column
	case *pg.Node_AExpr:
		a := x.AExpr
		switch a.Kind {
		case pg.A_Expr_Kind_AEXPR_OP:
			if strictOp(a.Name) {
				l.strictChain(a.Lexpr, fn)
				l.strictChain(a.Rexpr, fn)
			}
		case pg.A_Expr_Kind_AEXPR_LIKE, pg.A_Expr_Kind_AEXPR_ILIKE:
			l.strictChain(a.Lexpr, fn)
			l.strictChain(a.Rexpr, fn)
		case pg.A_Expr_Kind_AEXPR_OP_ANY:
			// Over an empty array the result is FALSE, which rejects too.
			if strictOp(a.Name) {
				l.strictChain(a.Lexpr, fn)
			}
		case pg.A_Expr_Kind_AEXPR_IN, pg.A_Expr_Kind_AEXPR_SIMILAR,
			pg.A_Expr_Kind_AEXPR_BETWEEN, pg.A_Expr_Kind_AEXPR_NOT_BETWEEN,
			pg.A_Expr_Kind_AEXPR_BETWEEN_SYM, pg.A_Expr_Kind_AEXPR_NOT_BETWEEN_SYM:
			// Strict in the tested value only: `2 IN (c, 2)` is TRUE and
			// `10 BETWEEN c AND 5` FALSE with c NULL.
			l.strictChain(a.Lexpr, fn)
		}
		// AEXPR_OP_ALL is TRUE over an empty array; DISTINCT, NOT
		// DISTINCT and NULLIF are not strict.
	case *pg.Node_SubLink:
		// `IN (SELECT …)` has no operator name until parse analysis.
		if sl := x.SubLink; sl.SubLinkType == pg.SubLinkType_ANY_SUBLINK && (len(sl.OperName) == 0 || strictOp(sl.OperName)) {
			l.strictChain(sl.Testexpr, fn)
		}
	}
}

// strictChain calls fn for the expiring column of this level that n is,
// or that n reaches through expressions NULL on a NULL input: COLLATE and
// lower() and upper(), which an expression index may serve.
func (l *colLevel) strictChain(n *pg.Node, fn func(*colRel, *ttl.ColumnRule)) {
	switch x := n.GetNode().(type) {
	case *pg.Node_ColumnRef:
		if rel, col, owner := l.mine(x.ColumnRef); col != nil && !owner.pure {
			fn(rel, col)
		}
	case *pg.Node_CollateClause:
		l.strictChain(x.CollateClause.Arg, fn)
	case *pg.Node_FuncCall:
		if caseFold(x.FuncCall) {
			l.strictChain(x.FuncCall.Args[0], fn)
		}
	}
}

// caseFold reports a plain call of lower() or upper() on one argument.
func caseFold(fc *pg.FuncCall) bool {
	if len(fc.Args) != 1 || len(fc.Funcname) != 1 || fc.AggFilter != nil || fc.Over != nil || fc.AggStar ||
		fc.AggDistinct || fc.FuncVariadic || len(fc.AggOrder) != 0 || fc.AggWithinGroup {
		return false
	}
	switch fc.Funcname[0].GetString_().GetSval() {
	case "lower", "upper":
		return true
	}
	return false
}

// atomStart returns the index of the first token of the atom n, or -1
// after failing. The tree has no node for brackets: a "(" just before the
// atom's first node belongs to the atom when a node of the atom follows
// its ")" (`(c) = 1`), and encloses it otherwise.
func (l *colLevel) atomStart(n *pg.Node) int {
	lo, hi := locRange(n)
	ts := l.c.w.tokens()
	s := ts.at(lo)
	if lo < 0 || s < 0 {
		l.c.w.fail(internalError("cannot locate a predicate"))
		return -1
	}
	for s > 0 && ts[s-1].kind == pg.Token_ASCII_40 {
		q := ts.match(s - 1)
		if q < 0 {
			l.c.w.fail(internalError("unbalanced brackets"))
			return -1
		}
		if ts[q].start > hi {
			break
		}
		s--
	}
	return s
}

// locRange returns the smallest and the largest location of the nodes
// under n (-1, -1 without any).
func locRange(n *pg.Node) (lo, hi int) {
	lo, hi = -1, -1
	walkMessages(n.ProtoReflect(), func(m protoreflect.Message) bool {
		if fd := m.Descriptor().Fields().ByName("location"); fd != nil && fd.Kind() == protoreflect.Int32Kind {
			if at := int(m.Get(fd).Int()); at >= 0 {
				if lo < 0 || at < lo {
					lo = at
				}
				if at > hi {
					hi = at
				}
			}
		}
		return true
	})
	return lo, hi
}

// lastName returns the last field name of a column reference, `*`
// ignored, as PostgreSQL's FigureColname takes it; "" without one.
func lastName(cr *pg.ColumnRef) string {
	name := ""
	for _, f := range cr.Fields {
		if f.GetString_() != nil {
			name = f.GetString_().GetSval()
		}
	}
	return name
}
