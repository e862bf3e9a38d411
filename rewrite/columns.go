package rewrite

import (
	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// Expiring columns (ttl.Rule.Columns, docs/design/column-ttl.md): a
// statement that names an expiring column of a table it references, in any
// way the reads of colread.go do not rewrite, is refused (SQLSTATE 0A000)
// instead of being served the expired value. The check is blind to scope,
// which errs toward refusing: a column reference of that name is refused
// whatever relation it belongs to, a name that is the table's or its alias
// is taken for a whole-row reference, unless the reads resolved it
// (colscope.go: read, or another FROM item's column). It reads names and structure only,
// never literals (the recognition of the proxy's own expressions says when
// it does, walker.matchText), so shapes share its outcome.
//
// What counts as naming the column:
//   - a column reference whose last name is the column (`c`, `t.c`,
//     `EXCLUDED.c`), or a call in functional notation `c(t)`;
//   - `*` over a FROM list, RETURNING list or join that holds the table
//     directly, and `t.*` or a whole-row reference `t` (any qualifier whose
//     last name is the table's name or alias, or the alias of a join over
//     it): they carry every column;
//   - NATURAL and USING joins of the column; a column alias list over the
//     table (it renames the column);
//   - writes other than those colwrite.go stamps (INSERT with ON CONFLICT
//     DO UPDATE, UPDATE without FROM): MERGE INSERT or COPY without a
//     column list, a MERGE, COPY or UPDATE … FROM column or SET target, ON
//     CONFLICT inference naming the column, an INSERT without a column
//     list whose columns the catalog cannot give, a COPY TO of a table
//     whose columns the catalog cannot give (copy.go reads the values
//     when it can);
//
// A view over the table is not checked here: colviews.go decides whether
// its definition reads the values as the reads do, and leaky.go expands or
// refuses it when it does not.
//
// DDL that names the column without reading or writing its values
// (CREATE TABLE, ALTER TABLE, CREATE INDEX, COMMENT, …) is not checked.

// expiringRef is one reference to a table with expiring columns.
type expiringRef struct {
	rule *ttl.Rule
	rv   *pg.RangeVar
}

// expiringColumns fails the walk when stmt names an expiring column of a
// table it references (see above).
func (w *walker) expiringColumns(stmt *pg.Node) {
	if !w.rw.hasColumns || stmt == nil || isColumnBlindDDL(stmt) {
		return
	}
	// The name a statement creates is not a read of it.
	var created *pg.RangeVar
	switch x := stmt.GetNode().(type) {
	case *pg.Node_ViewStmt:
		created = x.ViewStmt.View
	case *pg.Node_CreateTableAsStmt:
		created = x.CreateTableAsStmt.GetInto().GetRel()
	}
	refs := map[*pg.RangeVar]*ttl.Rule{}
	var order []expiringRef
	forEachRangeVar(stmt, func(rv *pg.RangeVar) {
		if w.err != nil || rv == created {
			return
		}
		if r := w.peekRule(rv); r != nil && len(r.Columns) > 0 {
			refs[rv] = r
			order = append(order, expiringRef{r, rv})
		}
	})
	if w.err != nil || len(order) == 0 {
		return
	}
	c := &columnCheck{w: w, refs: refs, columns: map[string]*ttl.Rule{}, names: map[string]*ttl.Rule{}}
	for _, ref := range order {
		r, rv := ref.rule, ref.rv
		for i := range r.Columns {
			if _, ok := c.columns[r.Columns[i].Column]; !ok {
				c.columns[r.Columns[i].Column] = r
			}
		}
		c.names[rv.Relname] = r
		if rv.Alias != nil {
			c.names[rv.Alias.Aliasname] = r
			// A column alias list may rename an expiring column: each of
			// its names may be one (colscope.go resolves them by position,
			// from the catalog's columns).
			if cols := w.columns(r); len(rv.Alias.Colnames) > 0 && len(cols) < len(rv.Alias.Colnames) {
				w.fail(errExpiringColumn(r, r.Columns[0].Column, "the column alias list of "+ttl.QuoteIdent(rv.Alias.Aliasname)))
				return
			}
			for _, n := range rv.Alias.Colnames {
				if name := n.GetString_().GetSval(); c.columns[name] == nil {
					c.columns[name] = r
				}
			}
		}
	}
	c.run(stmt)
}

// isColumnBlindDDL reports the statement kinds that name columns without
// reading or writing their values.
func isColumnBlindDDL(n *pg.Node) bool {
	switch n.GetNode().(type) {
	case *pg.Node_CreateStmt, *pg.Node_AlterTableStmt, *pg.Node_IndexStmt, *pg.Node_CreateStatsStmt,
		*pg.Node_CommentStmt, *pg.Node_RenameStmt, *pg.Node_DropStmt, *pg.Node_CreateTrigStmt,
		*pg.Node_CreatePolicyStmt, *pg.Node_AlterPolicyStmt, *pg.Node_GrantStmt, *pg.Node_VacuumStmt,
		*pg.Node_TruncateStmt, *pg.Node_LockStmt:
		return true
	}
	return false
}

// peekRule is ruleFor without its side effects (pins, view rejections): the
// rule of the table rv names, or nil. CTE names are not consulted, which
// errs toward refusing.
func (w *walker) peekRule(rv *pg.RangeVar) *ttl.Rule {
	if rv.Schemaname != "" {
		return w.ruleAt(rv.Schemaname, rv.Relname)
	}
	cat := w.s.Catalog
	if len(w.rw.byName[rv.Relname]) == 0 && (cat == nil || len(cat.d.Children) == 0) {
		return nil
	}
	if sch, ok := w.resolve(rv.Relname); ok {
		return w.ruleAt(sch, rv.Relname)
	}
	return nil
}

// columnCheck is the walk of one statement for expiring columns.
type columnCheck struct {
	w *walker
	// refs are the statement's references to tables with expiring
	// columns; columns maps each expiring column name to (the first) such
	// table; names maps the tables' names and aliases, and the aliases of
	// joins over them, to their table.
	refs    map[*pg.RangeVar]*ttl.Rule
	columns map[string]*ttl.Rule
	names   map[string]*ttl.Rule
	// stars are the unqualified `*` of target and RETURNING lists over
	// FROM items without such a table: they carry no expiring column.
	stars map[*pg.ColumnRef]bool
	// read are the references the reads of colread.go rewrote to the
	// value's expression or left under a live or expired condition, and
	// those that name a column of another FROM item (colscope.go).
	read map[*pg.ColumnRef]bool
	// unqualified are the references left unresolved because a FROM item
	// in scope has columns the proxy does not know.
	unqualified map[*pg.ColumnRef]bool
	// done are the query levels read; outputs the output columns of those
	// whose every `*` the level's FROM items give (colscope.go).
	done    map[*pg.SelectStmt]bool
	outputs map[*pg.SelectStmt]levelOutput
	// tops are the queries of no enclosing query level (colLevel.top).
	tops map[*pg.SelectStmt]bool
	// funcs are the calls in functional notation read as columns.
	funcs map[*pg.FuncCall]bool
	// natural are the NATURAL joins whose merged columns are known and
	// none of them an expiring column (colscope.go).
	natural map[*pg.JoinExpr]bool
	// rowNull are whole-row references tested with `IS [NOT] DISTINCT FROM
	// NULL` (colrow.go): the test sees whether there is a row, not its
	// values, and is left as it is.
	rowNull map[*pg.ColumnRef]bool
}

func (c *columnCheck) fail(r *ttl.Rule, column, how string) {
	c.w.fail(errExpiringColumn(r, column, how))
}

// direct returns the first table with expiring columns among the FROM
// items ns at their own query level (joins and TABLESAMPLE looked into,
// subqueries and functions not: their own levels are checked on their
// own), or nil.
func (c *columnCheck) direct(ns ...*pg.Node) *ttl.Rule {
	for _, n := range ns {
		switch x := n.GetNode().(type) {
		case *pg.Node_RangeVar:
			if r := c.refs[x.RangeVar]; r != nil {
				return r
			}
		case *pg.Node_JoinExpr:
			if r := c.direct(x.JoinExpr.Larg, x.JoinExpr.Rarg); r != nil {
				return r
			}
		case *pg.Node_RangeTableSample:
			if r := c.direct(x.RangeTableSample.Relation); r != nil {
				return r
			}
		}
	}
	return nil
}

// allowStars records the unqualified `*` of list as harmless when the
// FROM items from hold no table with expiring columns.
func (c *columnCheck) allowStars(list []*pg.Node, from ...*pg.Node) {
	if c.direct(from...) != nil {
		return
	}
	for _, n := range list {
		val := n
		if rt := n.GetResTarget(); rt != nil {
			val = rt.Val
		}
		if cr := val.GetColumnRef(); cr != nil && len(cr.Fields) == 1 && cr.Fields[0].GetAStar() != nil {
			c.stars[cr] = true
		}
	}
}

func (c *columnCheck) run(stmt *pg.Node) {
	c.stars, c.read, c.unqualified = map[*pg.ColumnRef]bool{}, map[*pg.ColumnRef]bool{}, map[*pg.ColumnRef]bool{}
	c.done, c.funcs, c.natural = map[*pg.SelectStmt]bool{}, map[*pg.FuncCall]bool{}, map[*pg.JoinExpr]bool{}
	c.outputs, c.tops = map[*pg.SelectStmt]levelOutput{}, map[*pg.SelectStmt]bool{}
	if sel := topQuery(stmt); sel != nil {
		c.tops[sel] = true
	}
	c.rowNull = map[*pg.ColumnRef]bool{}
	// A join's alias may be named (`j.*`) before the walk reaches the join
	// (the target list comes before FROM).
	walkMessages(stmt.ProtoReflect(), func(m protoreflect.Message) bool {
		switch x := m.Interface().(type) {
		case *pg.JoinExpr:
			if x.Alias != nil {
				if r := c.direct(x.Larg, x.Rarg); r != nil {
					c.names[x.Alias.Aliasname] = r
				}
			}
		case *pg.A_Expr:
			if cr := rowNullTest(x); cr != nil {
				c.rowNull[cr] = true
			}
		}
		return !isLeaf(m)
	})
	walkMessages(stmt.ProtoReflect(), func(m protoreflect.Message) bool {
		if c.w.err != nil {
			return false
		}
		v := m.Interface()
		if n, ok := v.(*pg.Node); ok {
			// isLeaf stops at a ColumnRef's wrapper: check it here.
			if cr := n.GetColumnRef(); cr != nil {
				c.columnRef(cr)
				return false
			}
			if ce := n.GetCaseExpr(); ce != nil && c.isValueExpr(ce) {
				return false
			}
		} else {
			c.visit(v)
		}
		return !isLeaf(m)
	})
}

// visit checks one node of the statement. Parents are visited before their
// children (walkMessages), so the `*` a level allows is recorded before the
// walk reaches it.
func (c *columnCheck) visit(n any) {
	switch x := n.(type) {
	case *pg.SelectStmt:
		c.allowStars(x.TargetList, x.FromClause...)
		c.selectLevel(x, nil, nil)
	case *pg.InsertStmt:
		c.allowStars(x.ReturningList, &pg.Node{Node: &pg.Node_RangeVar{RangeVar: x.Relation}})
		if src := x.SelectStmt.GetSelectStmt(); src != nil {
			c.tops[src] = true // the target is not in its scope
		}
		r := c.refs[x.Relation]
		if r == nil {
			if oc := x.OnConflictClause; oc == nil || oc.Action != pg.OnConflictAction_ONCONFLICT_UPDATE {
				c.readPlainWrite(x.Relation, x.WithClause, nil, nil, x.ReturningList)
			}
			return
		}
		if oc := x.OnConflictClause; oc != nil {
			if oc.Infer != nil {
				for _, e := range oc.Infer.IndexElems {
					if name := e.GetIndexElem().GetName(); c.expiring(r, name) {
						c.fail(r, name, "ON CONFLICT ("+ttl.QuoteIdent(name)+")")
						return
					}
				}
			}
		}
		c.writeInsert(r, x)
		c.writeConflict(r, x)
		c.returning(x.Relation, x.ReturningList)
	case *pg.UpdateStmt:
		c.allowStars(x.ReturningList, append([]*pg.Node{{Node: &pg.Node_RangeVar{RangeVar: x.Relation}}}, x.FromClause...)...)
		if len(x.FromClause) > 0 {
			if r := c.refs[x.Relation]; r != nil {
				c.targets(r, x.TargetList, "UPDATE … SET … FROM")
			}
			if c.w.err == nil {
				c.readJoinedWrite(x.Relation, x.FromClause, x.WithClause, x.TargetList, x.WhereClause, x.ReturningList)
			}
			return
		}
		if r := c.refs[x.Relation]; r != nil {
			c.readWrite(x.Relation, x.TargetList, x.WhereClause)
			c.writeUpdate(r, x)
			c.returning(x.Relation, x.ReturningList)
			return
		}
		c.readPlainWrite(x.Relation, x.WithClause, x.TargetList, x.WhereClause, x.ReturningList)
	case *pg.DeleteStmt:
		c.allowStars(x.ReturningList, append([]*pg.Node{{Node: &pg.Node_RangeVar{RangeVar: x.Relation}}}, x.UsingClause...)...)
		if len(x.UsingClause) == 0 {
			if c.refs[x.Relation] == nil {
				c.readPlainWrite(x.Relation, x.WithClause, nil, x.WhereClause, x.ReturningList)
				return
			}
			c.readWrite(x.Relation, nil, x.WhereClause)
			c.returning(x.Relation, x.ReturningList)
			return
		}
		c.readJoinedWrite(x.Relation, x.UsingClause, x.WithClause, nil, x.WhereClause, x.ReturningList)
	case *pg.MergeStmt:
		if r := c.refs[x.Relation]; r != nil {
			for _, wc := range x.MergeWhenClauses {
				mw := wc.GetMergeWhenClause()
				if mw.GetCommandType() == pg.CmdType_CMD_INSERT && len(mw.TargetList) == 0 && len(mw.Values) > 0 {
					c.fail(r, r.Columns[0].Column, "MERGE … INSERT without a column list")
					return
				}
				c.targets(r, mw.GetTargetList(), "MERGE")
			}
		}
		if c.w.err == nil {
			c.readMerge(x)
		}
	case *pg.CopyStmt:
		r := c.refs[x.Relation]
		if r == nil || x.Query != nil {
			return
		}
		if cols := c.w.columns(r); !x.IsFrom && cols != nil {
			// copyStmt writes the query, expiring columns read V: it
			// needs their types.
			for _, a := range x.Attlist {
				if name := a.GetString_().GetSval(); c.expiring(r, name) && columnType(cols, name) == "" {
					c.fail(r, name, "the column list of COPY")
					return
				}
			}
			return
		}
		if len(x.Attlist) == 0 {
			c.fail(r, r.Columns[0].Column, "COPY "+ttl.QuoteIdent(x.Relation.Relname)+" without a column list")
			return
		}
		for _, a := range x.Attlist {
			if name := a.GetString_().GetSval(); c.expiring(r, name) {
				c.fail(r, name, "the column list of COPY")
				return
			}
		}
	case *pg.JoinExpr:
		r := c.direct(x.Larg, x.Rarg)
		if r == nil {
			return
		}
		if x.IsNatural && !c.natural[x] {
			c.fail(r, r.Columns[0].Column, "NATURAL JOIN")
			return
		}
		for _, u := range x.UsingClause {
			if name := u.GetString_().GetSval(); c.columns[name] != nil {
				c.fail(c.columns[name], name, "JOIN … USING")
				return
			}
		}
	case *pg.FuncCall:
		if len(x.Funcname) > 0 && len(x.Args) == 1 && !c.funcs[x] {
			if name := x.Funcname[len(x.Funcname)-1].GetString_().GetSval(); c.columns[name] != nil {
				c.fail(c.columns[name], name, "the functional notation "+ttl.QuoteIdent(name)+"(…)")
			}
		}
	case *pg.ColumnRef:
		c.columnRef(x)
	}
}

// columnRef checks one column reference.
func (c *columnCheck) columnRef(cr *pg.ColumnRef) {
	f := cr.Fields
	if len(f) == 0 {
		return
	}
	if c.read[cr] {
		return
	}
	if f[len(f)-1].GetAStar() != nil {
		if len(f) == 1 {
			if !c.stars[cr] {
				r := c.anyRule()
				c.fail(r, r.Columns[0].Column, "*")
			}
			return
		}
		if q := f[len(f)-2].GetString_().GetSval(); c.names[q] != nil {
			r := c.names[q]
			c.fail(r, r.Columns[0].Column, ttl.QuoteIdent(q)+".*")
		}
		return
	}
	// Any of the names: `c.f` and `t.c.f` may select a field of the
	// column.
	for _, n := range f {
		if r := c.columns[n.GetString_().GetSval()]; r != nil {
			if c.unqualified[cr] {
				c.w.fail(errUnqualifiedColumn(r, n.GetString_().GetSval()))
				return
			}
			c.fail(r, n.GetString_().GetSval(), "the reference "+columnRefText(f))
			return
		}
	}
	name := f[len(f)-1].GetString_().GetSval()
	if r := c.names[name]; r != nil {
		c.fail(r, r.Columns[0].Column, "the whole-row reference "+columnRefText(f))
	}
}

// topQuery returns the query of stmt that no other query level encloses:
// a SELECT, or the one an EXPLAIN, DECLARE, CREATE TABLE AS, CREATE VIEW
// or PREPARE of a SELECT holds; nil for any other statement.
func topQuery(stmt *pg.Node) *pg.SelectStmt {
	for {
		switch x := stmt.GetNode().(type) {
		case *pg.Node_SelectStmt:
			return x.SelectStmt
		case *pg.Node_ExplainStmt:
			stmt = x.ExplainStmt.Query
		case *pg.Node_DeclareCursorStmt:
			stmt = x.DeclareCursorStmt.Query
		case *pg.Node_CreateTableAsStmt:
			stmt = x.CreateTableAsStmt.Query
		case *pg.Node_ViewStmt:
			stmt = x.ViewStmt.Query
		case *pg.Node_PrepareStmt:
			stmt = x.PrepareStmt.Query
		default:
			return nil
		}
	}
}

// anyRule returns a rule of the statement's tables with expiring columns,
// the same one for the same statement.
func (c *columnCheck) anyRule() *ttl.Rule {
	var best *ttl.Rule
	for _, r := range c.refs {
		if best == nil || r.QualifiedName() < best.QualifiedName() {
			best = r
		}
	}
	return best
}

// expiring reports that name is an expiring column of r.
func (c *columnCheck) expiring(r *ttl.Rule, name string) bool {
	return name != "" && r.ExpiringColumn(name) != nil
}

// targets fails the walk when a ResTarget of list (a column list or SET
// list of a write to r's table) names an expiring column.
func (c *columnCheck) targets(r *ttl.Rule, list []*pg.Node, where string) {
	for _, n := range list {
		name := n.GetResTarget().GetName()
		if c.expiring(r, name) {
			c.fail(r, name, where)
			return
		}
		// Its clock moved alone would bring an expired value back; the
		// value's guard (reviveGuards) is not built for these writes.
		for i := range r.Columns {
			if col := &r.Columns[i]; name != "" && col.Clock() == name {
				c.fail(r, col.Column, where+" of its clock "+ttl.QuoteIdent(name))
				return
			}
		}
	}
}

// columnRefText spells a column reference's names for a message.
func columnRefText(f []*pg.Node) string {
	s := ""
	for i, n := range f {
		if i > 0 {
			s += "."
		}
		if n.GetAStar() != nil {
			s += "*"
			continue
		}
		s += ttl.QuoteIdent(n.GetString_().GetSval())
	}
	return s
}

// columnType returns the type of the column name among cols, or "".
func columnType(cols []Column, name string) string {
	for _, col := range cols {
		if col.Name == name {
			return col.Type
		}
	}
	return ""
}

// isValueExpr reports that ce is, byte for byte, the value's expression
// the reads write (colread.go) for an expiring column of a table the statement
// references, so that rewriting a rewritten statement keeps it.
func (c *columnCheck) isValueExpr(ce *pg.CaseExpr) bool {
	at := int(ce.Location)
	if at < 0 || at >= len(c.w.sql) {
		return false
	}
	for rv, r := range c.refs {
		cols := c.w.columns(r)
		qual := rv.Relname
		if rv.Alias != nil {
			qual = rv.Alias.Aliasname
		}
		for i := range r.Columns {
			typ := columnType(cols, r.Columns[i].Column)
			if typ != "" && c.w.matchText(at, r.Columns[i].ValueExpr(r, ttl.QuoteIdent(qual), typ)) {
				return true
			}
		}
	}
	return false
}
