package rewrite

import (
	pg "github.com/pganalyze/pg_query_go/v6"
)

// Reads of expiring columns in writes that join other FROM items
// (docs/design/column-ttl.md §2 and §4): UPDATE … FROM, DELETE … USING and
// MERGE. The written table and the other items are one query level
// (colscope.go): WHERE, a join's ON and MERGE's ON and WHEN conditions are
// filter positions, SET values, MERGE's action values and RETURNING value
// positions. RETURNING of the written table reads the row written (the
// one deleted). Writes of an expiring column there stay refused
// (columns.go): they are not stamped.

// writeLevel is the level of a write to rv joined with the FROM items
// from, under the CTEs of with.
func (c *columnCheck) writeLevel(rv *pg.RangeVar, from []*pg.Node, with *pg.WithClause) (*colLevel, *cteScope) {
	// The write's level encloses no other; its CTEs see none of it.
	if with != nil {
		for _, n := range with.Ctes {
			if q := n.GetCommonTableExpr().GetCtequery().GetSelectStmt(); q != nil {
				c.tops[q] = true
			}
		}
	}
	ctes := c.withLevel(with, nil, nil)
	l := &colLevel{c: c, wrapped: map[*pg.ColumnRef]bool{}, top: true}
	l.rels = []*colRel{c.rangeRel(rv, ctes)}
	for _, f := range from {
		c.fromItem(l, f, ctes)
	}
	for _, q := range l.quals {
		l.filter(q, nil)
	}
	for _, q := range l.fullQuals {
		l.value(q, nil)
	}
	return l, ctes
}

// readJoinedWrite reads an UPDATE … FROM (set its SET list) or a DELETE …
// USING.
func (c *columnCheck) readJoinedWrite(rv *pg.RangeVar, from []*pg.Node, with *pg.WithClause, set []*pg.Node, where *pg.Node, returning []*pg.Node) {
	l, ctes := c.writeLevel(rv, from, with)
	c.readWriteLevel(l, set, where)
	if len(returning) > 0 {
		l.targets(returning)
	}
	for _, q := range append(append(append([]*pg.Node(nil), l.quals...), l.fullQuals...), returning...) {
		c.subLevels(q, l, ctes)
	}
}

// readPlainWrite reads an INSERT, UPDATE or DELETE of rv, a table without
// expiring columns, with no other FROM item: its SET list, WHERE and
// RETURNING see the target alone, their subqueries nested in its level.
func (c *columnCheck) readPlainWrite(rv *pg.RangeVar, with *pg.WithClause, set []*pg.Node, where *pg.Node, returning []*pg.Node) {
	l, ctes := c.writeLevel(rv, nil, with)
	c.readWriteLevel(l, set, where)
	if len(returning) > 0 {
		l.targets(returning)
	}
	for _, n := range returning {
		c.subLevels(n, l, ctes)
	}
}

// readMerge reads a MERGE: its ON, its WHEN conditions and its actions'
// values.
func (c *columnCheck) readMerge(m *pg.MergeStmt) {
	l, ctes := c.writeLevel(m.Relation, []*pg.Node{m.SourceRelation}, m.WithClause)
	// Both NULL and FALSE leave a source row unmatched.
	l.filter(m.JoinCondition, nil)
	c.subLevels(m.JoinCondition, l, ctes)
	for _, n := range m.MergeWhenClauses {
		wc := n.GetMergeWhenClause()
		l.filter(wc.Condition, nil)
		c.subLevels(wc.Condition, l, ctes)
		c.readWriteLevel(l, wc.TargetList, nil)
		for _, v := range wc.Values {
			l.value(v, nil)
			c.subLevels(v, l, ctes)
		}
	}
}
