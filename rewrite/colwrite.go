package rewrite

import (
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// Writes of expiring columns (docs/design/column-ttl.md §4). An INSERT
// with a column list (or, from the catalog, one of VALUES rows without),
// its ON CONFLICT DO UPDATE, and an UPDATE without FROM may write an
// expiring column. For a column
// with an expiry column of its own and a default_ttl, a statement that
// writes the value and not its expiry gets the expiry stamped:
// now() + default_ttl in the expiry column's type, or NULL where the value
// written is the literal NULL (a cleared value has no expiry). Any other
// value is stamped unconditionally: a NULL with an expiry reads NULL
// either way, and testing the value would evaluate it twice. With
// refresh_on_update, an UPDATE (or DO UPDATE) that writes neither moves a
// live, non-NULL value's expiry. Derived columns and columns without default_ttl are
// written as they are: the application gives the expiry.

// stampValue is the expiry stamped for a value of col written now.
func stampValue(r *ttl.Rule, col *ttl.ColumnRule) string {
	e := col.Expiry(r)
	return e.ExpiryValue(col.DefaultTTL)
}

// isNullConst reports the literal NULL, cast or not.
func isNullConst(n *pg.Node) bool {
	for n.GetTypeCast() != nil {
		n = n.GetTypeCast().Arg
	}
	ac := n.GetAConst()
	return ac != nil && ac.Isnull
}

// colStamp is one expiry an INSERT stamps: the column rule and the
// position of its value among the values written.
type colStamp struct {
	col *ttl.ColumnRule
	at  int
}

// writeInsert checks and stamps the INSERT x into r's table.
func (c *columnCheck) writeInsert(r *ttl.Rule, x *pg.InsertStmt) {
	sel := x.SelectStmt.GetSelectStmt()
	if x.SelectStmt == nil {
		return // DEFAULT VALUES
	}
	var written []string
	if len(x.Cols) > 0 {
		for _, n := range x.Cols {
			written = append(written, n.GetResTarget().GetName())
		}
	} else {
		// Positional values: the catalog's columns, as many as a row
		// holds.
		cols := c.w.columns(r)
		width := insertWidth(sel)
		if cols == nil || width < 0 || width > len(cols) {
			c.fail(r, r.Columns[0].Column, "INSERT without a column list")
			return
		}
		for _, col := range cols[:width] {
			written = append(written, col.Name)
		}
	}
	var stamps []colStamp
	for i := range r.Columns {
		col := &r.Columns[i]
		at := indexOf(written, col.Column)
		if at < 0 || col.ExpiresAtColumn == "" || col.DefaultTTL <= 0 {
			continue
		}
		if e := indexOf(written, col.ExpiresAtColumn); e >= 0 {
			// Its expiry written as DEFAULT: stamped, as the row's.
			c.w.stampDefaults(sel, e, stampValue(r, col))
			continue
		}
		stamps = append(stamps, colStamp{col, at})
	}
	if len(stamps) == 0 {
		return
	}
	w := c.w
	ts := w.tokens()
	after := w.targetEnd(x.Relation)
	if w.err != nil {
		return
	}
	colsClose, i, ok := ts.insertColumns(after, len(x.Cols) > 0)
	if !ok || sel == nil {
		w.fail(internalError("cannot locate the column list"))
		return
	}
	var names strings.Builder
	for _, s := range stamps {
		names.WriteString(", " + ttl.QuoteIdent(s.col.ExpiresAtColumn))
	}
	if colsClose >= 0 {
		w.insert(ts[colsClose-1].end, names.String())
	} else {
		// The list goes where the row stamp's would (stampColumn), which
		// adds its column inside it.
		at := ts[after-1].end
		quoted := make([]string, len(written))
		for k, name := range written {
			quoted[k] = ttl.QuoteIdent(name)
		}
		w.insert(at, " ("+strings.Join(quoted, ", ")+names.String())
		w.insertLast(at, ")")
		w.listed[x] = true
	}
	plan := w.planSource(sel, i, w.stmtEnd)
	if w.err != nil {
		return
	}
	if plan.wrapFrom >= 0 {
		var vals strings.Builder
		for _, s := range stamps {
			vals.WriteString(", " + stampValue(r, s.col))
		}
		// Inside the row stamp's wrap, if any: its value comes after these
		// in the column list too.
		w.insertLast(plan.wrapFrom, "SELECT *"+vals.String()+" FROM (")
		w.insert(plan.wrapTo, ") AS _ttl_src")
		return
	}
	for k, at := range plan.appendAt {
		var vals strings.Builder
		for _, s := range stamps {
			v := stampValue(r, s.col)
			if isPlainValues(sel) && k < len(sel.ValuesLists) {
				if items := sel.ValuesLists[k].GetList().GetItems(); s.at < len(items) && isNullConst(items[s.at]) {
					v = "NULL"
				}
			}
			vals.WriteString(", " + v)
		}
		w.insert(at, vals.String())
	}
}

// insertWidth returns the number of values in each row of an INSERT's
// source, or -1 when the text does not say (`*`, no source).
func insertWidth(sel *pg.SelectStmt) int {
	if sel == nil {
		return -1
	}
	leaves := selectLeaves(sel, nil)
	if len(leaves) == 0 {
		return -1
	}
	l := leaves[0]
	if len(l.ValuesLists) > 0 {
		return len(l.ValuesLists[0].GetList().GetItems())
	}
	for _, t := range l.TargetList {
		if hasStar(t.GetResTarget()) {
			return -1
		}
	}
	if len(l.TargetList) == 0 {
		return -1
	}
	return len(l.TargetList)
}

// isPlainValues reports a VALUES list planSource appends to row by row.
func isPlainValues(sel *pg.SelectStmt) bool {
	return len(sel.ValuesLists) > 0 && sel.Op == pg.SetOperation_SETOP_NONE && sel.WithClause == nil &&
		len(sel.SortClause) == 0 && sel.LimitCount == nil && sel.LimitOffset == nil && len(sel.LockingClause) == 0
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

// writeUpdate stamps or refreshes the expiries of the UPDATE x of r's
// table, whose reads readWrite has rewritten.
func (c *columnCheck) writeUpdate(r *ttl.Rule, x *pg.UpdateStmt) {
	add := setStamps(r, x.TargetList, qualifier(x.Relation)) + c.reviveGuards(r, x.TargetList, qualifier(x.Relation))
	if add == "" || c.w.err != nil {
		return
	}
	w := c.w
	set := w.targetEnd(x.Relation)
	if w.err != nil {
		return
	}
	if w.tokens().kind(set) != pg.Token_SET {
		w.fail(internalError("cannot locate SET"))
		return
	}
	c.appendSet(set, add)
}

// setStamps returns what a SET list targets of a write to r's table
// (visible under qual) gets appended: for a value written and not its
// expiry, `, c_exp = <stamp>` (NULL for the literal NULL written once
// without a subscript); for neither, with refresh_on_update, `, c_exp =
// CASE WHEN <c IS NOT NULL AND live> THEN <stamp> ELSE c_exp END` (the old
// row's value and expiry).
func setStamps(r *ttl.Rule, targets []*pg.Node, qual string) string {
	var add strings.Builder
	for i := range r.Columns {
		col := &r.Columns[i]
		if col.ExpiresAtColumn == "" || col.DefaultTTL <= 0 || setsColumn(targets, col.ExpiresAtColumn) {
			continue
		}
		exp := ttl.QuoteIdent(col.ExpiresAtColumn)
		var sets []*pg.ResTarget
		for _, n := range targets {
			if rt := n.GetResTarget(); rt.GetName() == col.Column {
				sets = append(sets, rt)
			}
		}
		switch {
		case len(sets) == 1 && len(sets[0].Indirection) == 0 && isNullConst(sets[0].Val):
			add.WriteString(", " + exp + " = NULL")
		case len(sets) > 0:
			add.WriteString(", " + exp + " = " + stampValue(r, col))
		case col.RefreshOnUpdate:
			e := col.Expiry(r)
			add.WriteString(", " + exp + " = CASE WHEN " + qual + "." + ttl.QuoteIdent(col.Column) + " IS NOT NULL AND " +
				e.LiveCondition(qual, ttl.Now) + " THEN " + stampValue(r, col) + " ELSE " + qual + "." + exp + " END")
		}
	}
	return add.String()
}

// reviveGuards returns what a SET list targets of a write to r's table
// (visible under qual) gets appended so that no write brings an expired
// value back: for each expiring column whose clock (ttl.ColumnRule.Clock)
// the list writes and the value not, `, c = V(c)`, the value as it reads
// in the row before the write, NULL once expired. A live value stays as it
// is under its new clock; an expired one is cleared, as the sweeper would.
// Every other read of the value in the statement is V already (colread.go).
func (c *columnCheck) reviveGuards(r *ttl.Rule, targets []*pg.Node, qual string) string {
	var add strings.Builder
	for i := range r.Columns {
		col := &r.Columns[i]
		if !setsColumn(targets, col.Clock()) || setsColumn(targets, col.Column) {
			continue
		}
		typ := columnType(c.w.columns(r), col.Column)
		if typ == "" {
			c.fail(r, col.Column, "a write of its clock "+ttl.QuoteIdent(col.Clock())+" while the proxy does not know its type")
			return ""
		}
		add.WriteString(", " + ttl.QuoteIdent(col.Column) + " = " + col.ValueExpr(r, qual, typ))
	}
	return add.String()
}

// appendSet appends text to the SET list whose SET is token set: before a
// WHERE, FROM or RETURNING at its level, or the end of the statement or of
// the brackets around it.
func (c *columnCheck) appendSet(set int, text string) {
	w := c.w
	ts := w.tokens()
	stop := ts.scanTop(set+1, len(w.sql), func(j int) bool {
		switch k := ts[j].kind; k {
		case pg.Token_WHERE, pg.Token_RETURNING, pg.Token_ASCII_59:
			return true
		case pg.Token_FROM:
			return ts.kind(j-1) != pg.Token_DISTINCT
		}
		return false
	})
	limit := len(w.sql)
	if stop < len(ts) {
		limit = ts[stop].start
	}
	last := ts.lastBefore(set+1, limit)
	if last <= set {
		w.fail(internalError("cannot locate the SET list"))
		return
	}
	w.insert(ts[last].end, text)
}

// writeConflict reads and stamps the DO UPDATE of the INSERT x into r's
// table: its SET values and WHERE read the stored value (the target's
// name or alias) as an UPDATE's do, EXCLUDED's is the value proposed and
// is left as it is; the SET list is stamped or refreshed as an UPDATE's.
// A column named without a qualifier is left as it is too: there it is
// ambiguous between the target and EXCLUDED, and the server says so
// (42702) rather than the proxy's V resolving it to the target.
func (c *columnCheck) writeConflict(r *ttl.Rule, x *pg.InsertStmt) {
	oc := x.OnConflictClause
	if oc == nil || oc.Action != pg.OnConflictAction_ONCONFLICT_UPDATE {
		return
	}
	for _, n := range append(append([]*pg.Node(nil), oc.TargetList...), oc.WhereClause) {
		if n == nil {
			continue
		}
		walkMessages(n.ProtoReflect(), func(m protoreflect.Message) bool {
			if cr, ok := m.Interface().(*pg.ColumnRef); ok && len(cr.Fields) == 2 && cr.Fields[0].GetString_().GetSval() == "excluded" {
				c.read[cr] = true
			}
			return true
		})
		var unqualified func(m protoreflect.Message) bool
		unqualified = func(m protoreflect.Message) bool {
			switch v := m.Interface().(type) {
			case *pg.SubLink:
				// The subquery's own FROM items are in scope there; the
				// tested value (`c = ANY (SELECT …)`) is of this level.
				if v.Testexpr != nil {
					walkMessages(v.Testexpr.ProtoReflect(), unqualified)
				}
				return false
			case *pg.ColumnRef:
				if f := v.Fields; len(f) == 1 && r.ExpiringColumn(f[0].GetString_().GetSval()) != nil {
					c.read[v] = true
				}
			}
			return true
		}
		walkMessages(n.ProtoReflect(), unqualified)
	}
	if l := c.level(x.Relation); l != nil {
		l.qualifiedOnly = true
		c.readWriteLevel(l, oc.TargetList, oc.WhereClause)
	}
	add := setStamps(r, oc.TargetList, qualifier(x.Relation)) + c.reviveGuards(r, oc.TargetList, qualifier(x.Relation))
	if add == "" || c.w.err != nil {
		return
	}
	set := c.w.doUpdateSet(oc, len(c.w.sql))
	if set < 0 {
		return
	}
	c.appendSet(set, add)
}
