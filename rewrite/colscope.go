package rewrite

import (
	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// Scope resolution for the reads of expiring columns
// (docs/design/column-ttl.md §2, "Scope resolution"). Each query level is a
// colLevel holding its FROM items (colRel) and the level it is nested in.
// A column reference is resolved as PostgreSQL resolves it, nearest level
// first:
//
//   - `x.c` names the FROM item the nearest level calls x (its alias, else
//     its table's name);
//   - `c` names the one FROM item of the nearest level whose columns
//     include it. Where a FROM item of that level has columns the proxy
//     does not know (a table without a rule, a function, an aliased join)
//     the reference is left unresolved, and so refused with the hint to
//     qualify it: guessing wrong would leak or break the statement.
//
// A reference resolved to a table with expiring columns reads as in
// colread.go; one resolved to any other FROM item (a derived table's or a
// CTE's output, already read at its own level) is left as it is. Anything
// left unresolved that names an expiring column is refused by the column
// check.

// colRel is one FROM item of a query level.
type colRel struct {
	// name is how the level names the item (its alias, else its table's
	// or CTE's name; "" for none), qual the same quoted.
	name, qual string
	// r is the rule of a table with expiring columns, else nil.
	r *ttl.Rule
	// cols are the item's columns in order (the catalog's for a TTL table,
	// the output names of a derived table or CTE); known says they are all
	// of them.
	cols  []Column
	known bool
	// orig are the table's own names of cols when a column alias list
	// renames them (nil otherwise).
	orig []string
	// tainted: an aliased join over a table with expiring columns; its
	// columns carry the stored values and cannot be read through it.
	tainted bool
	// filter: the proxy's own filter join (`_ttl_N`), which adds no column.
	filter bool
	// schema and table name the table of an item without an alias whose
	// schema is known (a TTL table's, or one written schema-qualified):
	// `schema.table.c` names it ("" otherwise).
	schema, table string
}

// has reports that the item holds a column name: an expiring column of its
// rule or one of its known columns.
func (rel *colRel) has(name string) bool {
	return rel.expiring(name) != nil || hasColumn(rel.cols, name)
}

// expiring returns the expiring column the item shows under name, or nil.
func (rel *colRel) expiring(name string) *ttl.ColumnRule {
	if rel.r == nil {
		return nil
	}
	if rel.orig != nil {
		for i, col := range rel.cols {
			if col.Name == name {
				return rel.r.ExpiringColumn(rel.orig[i])
			}
		}
		return nil
	}
	return rel.r.ExpiringColumn(name)
}

// shown returns the name the item shows the table's column under.
func (rel *colRel) shown(column string) string {
	for i, o := range rel.orig {
		if o == column {
			return rel.cols[i].Name
		}
	}
	return column
}

// typeOf returns the catalog's type of an expiring column, or "".
func (rel *colRel) typeOf(col *ttl.ColumnRule) string {
	return columnType(rel.cols, rel.shown(col.Column))
}

// renames maps the table's column names to the item's, nil when the item
// keeps them.
func (rel *colRel) renames() map[string]string {
	if rel.orig == nil {
		return nil
	}
	m := make(map[string]string, len(rel.orig))
	for i, o := range rel.orig {
		m[o] = rel.cols[i].Name
	}
	return m
}

// live is the live condition of an expiring column under the item's
// qualifier and names.
func (rel *colRel) live(col *ttl.ColumnRule) string {
	e := col.Expiry(rel.r)
	return e.LiveConditionRenamed(rel.qual, ttl.Now, rel.renames())
}

// expired is its negation (ttl.Rule.ExpiredCondition).
func (rel *colRel) expired(col *ttl.ColumnRule) string {
	if rel.orig == nil {
		e := col.Expiry(rel.r)
		return e.ExpiredCondition(rel.qual, ttl.Now)
	}
	return "(NOT " + rel.live(col) + ")"
}

// value is V of an expiring column of type typ (ttl.ColumnRule.ValueExpr).
func (rel *colRel) value(col *ttl.ColumnRule, typ string) string {
	if rel.orig == nil {
		return col.ValueExpr(rel.r, rel.qual, typ)
	}
	return "CASE WHEN " + rel.live(col) + " THEN " + rel.qual + "." + ttl.QuoteIdent(rel.shown(col.Column)) + " ELSE NULL::" + typ + " END"
}

// hasColumn reports that cols holds a column name.
func hasColumn(cols []Column, name string) bool {
	for _, col := range cols {
		if col.Name == name {
			return true
		}
	}
	return false
}

// cteScope is one CTE name visible to a query level and the ones before it.
type cteScope struct {
	name   string
	rel    colRel
	parent *cteScope
}

func (sc *cteScope) find(name string) *cteScope {
	for ; sc != nil; sc = sc.parent {
		if sc.name == name {
			return sc
		}
	}
	return nil
}

// guardKey names an expiring column of one FROM item.
type guardKey struct {
	rel *colRel
	col string
}

// selectLevel reads the query level sel, nested in parent (nil at the
// top), and its subqueries, each in its own scope. ctes are the CTE names
// visible to it.
func (c *columnCheck) selectLevel(sel *pg.SelectStmt, parent *colLevel, ctes *cteScope) {
	if sel == nil || c.done[sel] || c.w.err != nil {
		return
	}
	c.done[sel] = true
	top := parent == nil && c.tops[sel]
	if top && sel.WithClause != nil {
		for _, n := range sel.WithClause.Ctes {
			if q := n.GetCommonTableExpr().GetCtequery().GetSelectStmt(); q != nil {
				c.tops[q] = true
			}
		}
	}
	ctes = c.withLevel(sel.WithClause, parent, ctes)
	if sel.Op != pg.SetOperation_SETOP_NONE {
		if top {
			c.tops[sel.Larg], c.tops[sel.Rarg] = true, true
		}
		c.selectLevel(sel.Larg, parent, ctes)
		c.selectLevel(sel.Rarg, parent, ctes)
		// ORDER BY of a set operation names output columns only; any
		// other name PostgreSQL refuses, so where every output name is
		// known it reads nothing either way.
		outputs, known := c.selectOutputs(sel)
		for _, n := range sel.SortClause {
			if cr := n.GetSortBy().GetNode().GetColumnRef(); cr != nil && len(cr.Fields) == 1 && (known || hasColumn(outputs, cr.Fields[0].GetString_().GetSval())) {
				c.read[cr] = true
			}
		}
		return
	}
	l := &colLevel{c: c, parent: parent, wrapped: map[*pg.ColumnRef]bool{}, top: top}
	for _, f := range sel.FromClause {
		c.fromItem(l, f, ctes)
	}
	cols, known := l.outputColumns(sel.TargetList)
	c.outputs[sel] = levelOutput{cols, known}
	c.readSelect(sel, l)
	for _, list := range [][]*pg.Node{sel.TargetList, sel.GroupClause, sel.WindowClause, sel.SortClause, sel.DistinctClause, l.quals, l.fullQuals,
		{sel.WhereClause, sel.HavingClause, sel.LimitCount, sel.LimitOffset}} {
		for _, n := range list {
			c.subLevels(n, l, ctes)
		}
	}
	for _, row := range sel.ValuesLists {
		c.subLevels(row, l, ctes)
	}
}

// subLevels reads the subqueries of the expression n, nested in l.
func (c *columnCheck) subLevels(n *pg.Node, l *colLevel, ctes *cteScope) {
	if n == nil || n.Node == nil {
		return
	}
	walkMessages(n.ProtoReflect(), func(m protoreflect.Message) bool {
		if sel, ok := m.Interface().(*pg.SelectStmt); ok {
			c.selectLevel(sel, l, ctes)
			return false
		}
		return !isLeaf(m)
	})
}

// withLevel reads the CTEs of wc, nested in parent, and returns the CTE
// names the query sees: a CTE sees the ones before it, with RECURSIVE all
// of them.
func (c *columnCheck) withLevel(wc *pg.WithClause, parent *colLevel, ctes *cteScope) *cteScope {
	if wc == nil {
		return ctes
	}
	all := ctes
	for _, n := range wc.Ctes {
		cte := n.GetCommonTableExpr()
		all = &cteScope{name: cte.GetCtename(), rel: c.cteRel(cte), parent: all}
	}
	cur := ctes
	for _, n := range wc.Ctes {
		cte := n.GetCommonTableExpr()
		seen := cur
		if wc.Recursive {
			seen = all
		}
		if sel := cte.GetCtequery().GetSelectStmt(); sel != nil {
			c.selectLevel(sel, parent, seen)
		}
		cur = &cteScope{name: cte.GetCtename(), rel: c.cteRel(cte), parent: cur}
	}
	if !wc.Recursive {
		return cur
	}
	// The query after a recursive WITH sees the CTEs' outputs as read.
	all = ctes
	for _, n := range wc.Ctes {
		cte := n.GetCommonTableExpr()
		all = &cteScope{name: cte.GetCtename(), rel: c.cteRel(cte), parent: all}
	}
	return all
}

// cteRel is a CTE's FROM item: its column alias list, else the output
// names of its query.
func (c *columnCheck) cteRel(cte *pg.CommonTableExpr) colRel {
	var out []*pg.Node
	var cols []Column
	known := false
	switch q := cte.GetCtequery().GetNode().(type) {
	case *pg.Node_SelectStmt:
		cols, known = c.selectOutputs(q.SelectStmt)
	case *pg.Node_InsertStmt:
		out = q.InsertStmt.ReturningList
	case *pg.Node_UpdateStmt:
		out = q.UpdateStmt.ReturningList
	case *pg.Node_DeleteStmt:
		out = q.DeleteStmt.ReturningList
	}
	if out != nil {
		cols, known = outputColumns(out)
	}
	cols, known = renameColumns(cols, known, cte.Aliascolnames)
	return colRel{name: cte.GetCtename(), qual: ttl.QuoteIdent(cte.GetCtename()), cols: cols, known: known}
}

// levelOutput is the output columns of a query level and whether all of
// them are known.
type levelOutput struct {
	cols  []Column
	known bool
}

// selectOutputs returns the output columns of the query sel (its leftmost
// arm's): `*` as its level's FROM items give it once the level is read,
// else as outputColumns.
func (c *columnCheck) selectOutputs(sel *pg.SelectStmt) ([]Column, bool) {
	arm := firstArm(sel)
	if out, ok := c.outputs[arm]; ok {
		return out.cols, out.known
	}
	return outputColumns(arm.GetTargetList())
}

// outputColumns is outputColumns at the level l, whose FROM items give
// `*` and `q.*` their columns where they are all known (not over a join
// merging columns).
func (l *colLevel) outputColumns(list []*pg.Node) ([]Column, bool) {
	var cols []Column
	known := true
	for _, n := range list {
		rt := n.GetResTarget()
		if rt == nil {
			return nil, false
		}
		cr := rt.Val.GetColumnRef()
		if rt.Name != "" || cr == nil || len(cr.Fields) == 0 || cr.Fields[len(cr.Fields)-1].GetAStar() == nil {
			one, ok := outputColumns([]*pg.Node{n})
			cols, known = append(cols, one...), known && ok
			continue
		}
		rels := l.starRels(cr.Fields)
		if len(rels) == 0 || (len(cr.Fields) == 1 && l.merged) {
			known = false
			continue
		}
		for _, rel := range rels {
			switch {
			case rel.filter:
			case rel.tainted || !rel.known:
				known = false
			default:
				cols = append(cols, rel.cols...)
			}
		}
	}
	return cols, known
}

// firstArm returns the leftmost SELECT of a set operation, which names its
// output columns.
func firstArm(sel *pg.SelectStmt) *pg.SelectStmt {
	for sel != nil && sel.Op != pg.SetOperation_SETOP_NONE {
		sel = sel.Larg
	}
	return sel
}

// outputColumns returns the names of a target list's entries and whether
// all are known (no `*`, no name PostgreSQL takes from a subquery).
func outputColumns(list []*pg.Node) ([]Column, bool) {
	var cols []Column
	known := true
	for _, n := range list {
		rt := n.GetResTarget()
		if rt == nil {
			return nil, false
		}
		if rt.Name != "" {
			cols = append(cols, Column{Name: rt.Name})
			continue
		}
		if cr := rt.Val.GetColumnRef(); cr != nil && len(cr.Fields) > 0 && cr.Fields[len(cr.Fields)-1].GetAStar() != nil {
			known = false
			continue
		}
		name, ok := figureName(rt.Val)
		known = known && ok
		cols = append(cols, Column{Name: name})
	}
	return cols, known
}

// renameColumns applies a column alias list to cols by position.
func renameColumns(cols []Column, known bool, names []*pg.Node) ([]Column, bool) {
	if len(names) == 0 {
		return cols, known
	}
	out := make([]Column, 0, max(len(cols), len(names)))
	for i, n := range names {
		col := Column{Name: n.GetString_().GetSval()}
		if i < len(cols) {
			col.Type = cols[i].Type
		}
		out = append(out, col)
	}
	if len(cols) > len(names) {
		out = append(out, cols[len(names):]...)
	}
	return out, known
}

// fromItem adds the FROM item n to the level l, reading its subqueries
// (a LATERAL one nested in l, seeing the items before it) and keeping its
// join conditions for l.
func (c *columnCheck) fromItem(l *colLevel, n *pg.Node, ctes *cteScope) {
	switch x := n.GetNode().(type) {
	case *pg.Node_RangeVar:
		l.rels = append(l.rels, c.rangeRel(x.RangeVar, ctes))
	case *pg.Node_JoinExpr:
		j := x.JoinExpr
		if isFilterJoin(j) {
			c.fromItem(l, j.Larg, ctes)
			name := j.Rarg.GetRangeSubselect().GetAlias().GetAliasname()
			l.rels = append(l.rels, &colRel{name: name, qual: ttl.QuoteIdent(name), known: true, filter: true})
			return
		}
		if j.Alias != nil {
			// The items inside are hidden behind the join's name; their
			// subqueries are read on their own.
			cols, known := renameColumns(nil, false, j.Alias.Colnames)
			l.rels = append(l.rels, &colRel{name: j.Alias.Aliasname, qual: ttl.QuoteIdent(j.Alias.Aliasname), cols: cols, known: known,
				tainted: c.direct(j.Larg, j.Rarg) != nil})
			l.merged = true
			return
		}
		first := len(l.rels)
		c.fromItem(l, j.Larg, ctes)
		mid := len(l.rels)
		c.fromItem(l, j.Rarg, ctes)
		if j.IsNatural || len(j.UsingClause) > 0 {
			l.merged = true
		}
		if j.IsNatural && naturalKeepsValues(l.rels[first:mid], l.rels[mid:]) {
			c.natural[j] = true
		}
		switch {
		case j.Quals == nil:
		case j.Jointype == pg.JoinType_JOIN_FULL:
			// A FULL JOIN needs merge- or hash-joinable conditions:
			// `V(a.c) = V(b.c)` is one, `live AND a.c = b.c` is not.
			l.fullQuals = append(l.fullQuals, j.Quals)
		default:
			l.quals = append(l.quals, j.Quals)
		}
	case *pg.Node_RangeSubselect:
		sub := x.RangeSubselect
		sel := sub.Subquery.GetSelectStmt()
		if sub.Lateral {
			seen := *l
			seen.rels = append([]*colRel(nil), l.rels...)
			seen.wrapped = map[*pg.ColumnRef]bool{}
			c.selectLevel(sel, &seen, ctes)
		} else {
			if l.parent == nil && l.top {
				c.tops[sel] = true
			}
			c.selectLevel(sel, l.parent, ctes)
		}
		cols, known := c.selectOutputs(sel)
		name := sub.GetAlias().GetAliasname()
		cols, known = renameColumns(cols, known, sub.GetAlias().GetColnames())
		l.rels = append(l.rels, &colRel{name: name, qual: ttl.QuoteIdent(name), cols: cols, known: known && name != ""})
	case *pg.Node_RangeTableSample:
		c.fromItem(l, x.RangeTableSample.Relation, ctes)
	case *pg.Node_RangeFunction:
		// A function in FROM sees the items before it (it is LATERAL
		// whether written so or not): its arguments are read there.
		seen := *l
		seen.rels = append([]*colRel(nil), l.rels...)
		seen.wrapped = map[*pg.ColumnRef]bool{}
		for _, fn := range x.RangeFunction.Functions {
			items := fn.GetList().GetItems()
			if len(items) == 0 {
				continue
			}
			// The call itself is a function, never a column in
			// functional notation read here (the column check refuses
			// one named like an expiring column).
			args := items[:1]
			if fc := items[0].GetFuncCall(); fc != nil {
				args = fc.Args
			}
			for _, a := range args {
				seen.value(a, nil)
				c.subLevels(a, &seen, ctes)
			}
		}
		name := x.RangeFunction.GetAlias().GetAliasname()
		if fs := x.RangeFunction.Functions; name == "" && len(fs) == 1 {
			if fc := fs[0].GetList().GetItems(); len(fc) > 0 {
				if f := fc[0].GetFuncCall().GetFuncname(); len(f) > 0 {
					name = f[len(f)-1].GetString_().GetSval()
				}
			}
		}
		l.rels = append(l.rels, &colRel{name: name, qual: ttl.QuoteIdent(name)})
	default:
		// XMLTABLE, JSON_TABLE: columns not modelled.
		l.rels = append(l.rels, &colRel{})
	}
}

// naturalKeepsValues reports that a NATURAL join of the items left and
// right merges no expiring column: every item's columns are known and no
// name common to both sides is an expiring column of either.
func naturalKeepsValues(left, right []*colRel) bool {
	names := func(rels []*colRel) (map[string]bool, bool) {
		out := map[string]bool{}
		for _, rel := range rels {
			if rel.tainted || (!rel.known && !rel.filter) {
				return nil, false
			}
			for _, col := range rel.cols {
				out[col.Name] = true
			}
		}
		return out, true
	}
	l, lok := names(left)
	r, rok := names(right)
	if !lok || !rok {
		return false
	}
	for name := range l {
		if !r[name] {
			continue
		}
		for _, rel := range append(append([]*colRel(nil), left...), right...) {
			if rel.expiring(name) != nil {
				return false
			}
		}
	}
	return true
}

// rangeRel is the FROM item of a table or CTE reference.
func (c *columnCheck) rangeRel(rv *pg.RangeVar, ctes *cteScope) *colRel {
	name := rv.Relname
	if rv.Alias != nil {
		name = rv.Alias.Aliasname
	}
	rel := &colRel{name: name, qual: ttl.QuoteIdent(name)}
	var colnames []*pg.Node
	if rv.Alias != nil {
		colnames = rv.Alias.Colnames
	}
	if cte := ctes.find(rv.Relname); cte != nil && rv.Schemaname == "" {
		rel.cols, rel.known = renameColumns(cte.rel.cols, cte.rel.known, colnames)
		return rel
	}
	if rv.Alias == nil {
		rel.schema, rel.table = rv.Schemaname, rv.Relname
	}
	if r := c.refs[rv]; r != nil {
		if rv.Alias == nil {
			rel.schema, rel.table = r.SchemaName(), r.Table
		}
		rel.r, rel.cols = r, c.w.columns(r)
		rel.known = rel.cols != nil
		if len(colnames) > 0 {
			// Resolved by position from the catalog; without it the
			// item's names are not known and nothing is read through it.
			if !rel.known || len(colnames) > len(rel.cols) {
				rel.r, rel.cols, rel.known, rel.tainted = nil, nil, false, true
				return rel
			}
			for _, col := range rel.cols {
				rel.orig = append(rel.orig, col.Name)
			}
			rel.cols, _ = renameColumns(rel.cols, true, colnames)
		}
		return rel
	}
	if r := c.w.peekRule(rv); r != nil {
		if rv.Alias == nil {
			rel.schema, rel.table = r.SchemaName(), r.Table
		}
		cols := c.w.columns(r)
		rel.cols, rel.known = renameColumns(cols, cols != nil, colnames)
	}
	return rel
}

// tableLevel is the level of a write to rv: the table alone.
func (c *columnCheck) tableLevel(rv *pg.RangeVar) *colLevel {
	l := &colLevel{c: c, wrapped: map[*pg.ColumnRef]bool{}}
	l.rels = []*colRel{c.rangeRel(rv, nil)}
	return l
}

// mine resolves cr: the FROM item it names, the expiring column it reads
// there (nil when it reads none) and the level that holds the item. A
// reference that cannot be resolved gives nil for all three; one that
// names no expiring column of the statement is not resolved.
func (l *colLevel) mine(cr *pg.ColumnRef) (*colRel, *ttl.ColumnRule, *colLevel) {
	var rel *colRel
	var owner *colLevel
	var name string
	switch f := cr.Fields; len(f) {
	case 1:
		name = f[0].GetString_().GetSval()
		if l.qualifiedOnly || name == "" || l.c.columns[name] == nil {
			return nil, nil, nil
		}
		rel, owner = l.lookup(cr, name)
	case 2:
		name = f[1].GetString_().GetSval()
		if name == "" {
			return nil, nil, nil
		}
		rel, owner = l.named(f[0].GetString_().GetSval())
		if rel == nil && l.closed() {
			// No item of the name in reach: another relation's (a
			// composite column's field) or none.
			return &colRel{}, nil, nil
		}
	case 3:
		name = f[2].GetString_().GetSval()
		if name == "" {
			return nil, nil, nil
		}
		rel, owner = l.qualified(f[0].GetString_().GetSval(), f[1].GetString_().GetSval())
	default:
		return nil, nil, nil
	}
	if rel == nil || rel.r == nil {
		return rel, nil, owner
	}
	return rel, rel.expiring(name), owner
}

// named returns the FROM item the nearest level names q, and that level.
func (l *colLevel) named(q string) (*colRel, *colLevel) {
	if q == "" {
		return nil, nil
	}
	for lv := l; lv != nil; lv = lv.parent {
		for _, rel := range lv.rels {
			if rel.name == q {
				return rel, lv
			}
		}
	}
	return nil, nil
}

// qualified returns the FROM item `schema.table` names, and its level:
// as PostgreSQL resolves a schema-qualified reference, the nearest item
// without an alias that is that table. The reads write its qualifier as
// the item's name alone, so it must be the one item the name reaches
// from l (no other of that name at its level or nearer): else nil, and
// the reference is left to be refused.
func (l *colLevel) qualified(schema, table string) (*colRel, *colLevel) {
	if schema == "" || table == "" {
		return nil, nil
	}
	for lv := l; lv != nil; lv = lv.parent {
		for _, rel := range lv.rels {
			if rel.schema != schema || rel.table != table {
				continue
			}
			if near, _ := l.named(rel.name); near != rel {
				return nil, nil
			}
			for _, other := range lv.rels {
				if other != rel && other.name == rel.name {
					return nil, nil
				}
			}
			return rel, lv
		}
	}
	return nil, nil
}

// lookup returns the one FROM item of the nearest level that holds the
// column name, and that level; nil when a FROM item of the level searched
// has unknown columns (the reference is then marked for the hint to
// qualify it), when two hold it, or when the item found is hidden behind
// another of the same name nearer. Where no item the name can reach reads
// a table with expiring columns (closed), it returns an item of no rule:
// the name is another relation's column, or none.
func (l *colLevel) lookup(cr *pg.ColumnRef, name string) (*colRel, *colLevel) {
	for lv := l; lv != nil; lv = lv.parent {
		if lv.qualifiedOnly {
			return nil, nil // EXCLUDED's columns are in scope too
		}
		var found *colRel
		n, unknown := 0, false
		for _, rel := range lv.rels {
			switch {
			case rel.tainted || (!rel.known && !rel.has(name)):
				unknown = true
			case rel.has(name):
				found = rel
				n++
			}
		}
		if unknown {
			if l.closed() {
				return &colRel{}, lv
			}
			l.c.unqualified[cr] = true
			return nil, nil
		}
		if n > 1 {
			return nil, nil
		}
		if n == 1 {
			if found.name == "" {
				return nil, nil
			}
			if near, _ := l.named(found.name); near != found {
				return nil, nil
			}
			return found, lv
		}
	}
	if l.closed() {
		return &colRel{}, nil
	}
	return nil, nil
}

// closed reports that no FROM item of l or the levels around it reads a
// table with expiring columns (directly or through an aliased join), and
// that these levels are every scope a name in l can reach (top): a name
// there, whatever it resolves to, is no expiring column's stored value.
func (l *colLevel) closed() bool {
	for lv := l; lv != nil; lv = lv.parent {
		for _, rel := range lv.rels {
			if rel.r != nil || rel.tainted {
				return false
			}
		}
		if lv.parent == nil && !lv.top {
			return false
		}
	}
	return true
}

// expiringRels calls fn for each FROM item with expiring columns visible at
// l.
func (l *colLevel) expiringRels(fn func(*colRel)) {
	for lv := l; lv != nil; lv = lv.parent {
		for _, rel := range lv.rels {
			if rel.r != nil {
				fn(rel)
			}
		}
	}
}
