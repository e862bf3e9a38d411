package rewrite

import (
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// mergeStmt walks MERGE. The source is a FROM item (a read). An expired
// target row must behave as absent, so the target's live condition joins the
// ON condition: the row then matches nothing, and a source row that met only
// expired rows takes the NOT MATCHED [BY TARGET] branch, as it would after
// the sweeper. WHEN NOT MATCHED BY SOURCE (PostgreSQL 17) acts on target rows
// that match nothing, expired ones included, so its condition gets the live
// condition too. INSERT actions are stamped like INSERT and UPDATE actions
// refreshed like UPDATE.
func (w *walker) mergeStmt(m *pg.MergeStmt, sc *scope, end int) {
	rv := m.Relation
	sc, rule := w.writeTarget(m.WithClause, rv, sc)
	w.fromItem(m.SourceRelation, sc, false)
	w.generic(m.JoinCondition, sc)
	for _, n := range m.MergeWhenClauses {
		c := n.GetMergeWhenClause()
		w.generic(c.Condition, sc)
		w.genericList(c.TargetList, sc)
		w.genericList(c.Values, sc)
	}
	w.genericList(m.ReturningList, sc)
	ts, after, ok := w.targetSpan(rule, rv)
	if !ok {
		return
	}
	if ts.kind(after) != pg.Token_USING {
		w.fail(internalError("cannot locate MERGE … USING"))
		return
	}
	body := w.bodyEnd(after, end)
	whens, on := mergeClauses(ts, after+1, body)
	if len(whens) != len(m.MergeWhenClauses) || on < 0 || on+1 >= whens[0] {
		w.fail(internalError("cannot locate the MERGE join condition"))
		return
	}
	qual := qualifier(rv)
	live := rule.LiveCondition(qual, ttl.Now)
	w.insert(ts[on+1].start, "(")
	w.insert(ts[whens[0]-1].end, ") AND "+live)
	if w.sidecarTTL(rule) {
		for _, n := range m.MergeWhenClauses {
			if n.GetMergeWhenClause().CommandType == pg.CmdType_CMD_INSERT {
				w.rejectSidecarRegistration(rule, "MERGE … THEN INSERT")
				return
			}
		}
	}
	for k, n := range m.MergeWhenClauses {
		c := n.GetMergeWhenClause()
		lim := body
		if k+1 < len(whens) {
			lim = ts[whens[k+1]].start
		}
		w.mergeWhen(c, rule, qual, live, whens[k], lim)
		if w.err != nil {
			return
		}
	}
}

// mergeClauses returns the indices of the WHEN tokens that start MERGE's
// WHEN clauses in tokens [i, limit) and of the ON before the first of them,
// skipping brackets and CASE … END (whose WHEN belongs to the expression).
func mergeClauses(ts tokens, i, limit int) (whens []int, on int) {
	on = -1
	var n clauseNesting
	for ; i < len(ts) && ts[i].start < limit; i++ {
		if !n.top(ts[i].kind) {
			continue
		}
		switch ts[i].kind {
		case pg.Token_ON:
			if len(whens) == 0 {
				on = i
			}
		case pg.Token_WHEN:
			whens = append(whens, i)
		}
	}
	return whens, on
}

// clauseNesting follows brackets and CASE … END through a run of tokens, so
// that a scan can tell a clause keyword from one inside an expression.
type clauseNesting struct {
	depth, cases int
}

// top takes the next token's kind and reports whether the scan is then
// outside all brackets and CASE … END.
func (n *clauseNesting) top(k pg.Token) bool {
	switch k {
	case pg.Token_ASCII_40, pg.Token_ASCII_91:
		n.depth++
	case pg.Token_ASCII_41, pg.Token_ASCII_93:
		n.depth--
	case pg.Token_CASE:
		n.cases++
	case pg.Token_END_P:
		if n.cases > 0 {
			n.cases--
		}
	}
	return n.depth == 0 && n.cases == 0
}

// thenOf returns the index of the THEN that ends the header of the WHEN
// clause starting at token i, or -1.
func thenOf(ts tokens, i, limit int) int {
	var n clauseNesting
	for ; i < len(ts) && ts[i].start < limit; i++ {
		if n.top(ts[i].kind) && ts[i].kind == pg.Token_THEN {
			return i
		}
	}
	return -1
}

// mergeWhen edits one WHEN clause whose tokens start at when and whose text
// ends before the offset limit; qual is the target's qualifier, live its
// live condition.
func (w *walker) mergeWhen(c *pg.MergeWhenClause, rule *ttl.Rule, qual, live string, when, limit int) {
	ts := w.tokens()
	then := thenOf(ts, when+1, limit)
	if then < 0 {
		w.fail(internalError("cannot locate THEN in MERGE"))
		return
	}
	if c.MatchKind == pg.MergeMatchKind_MERGE_WHEN_NOT_MATCHED_BY_SOURCE {
		// WHEN NOT MATCHED BY SOURCE [AND cond] THEN
		h := when + 1
		if ts.kind(h) == pg.Token_NOT {
			h++
		}
		h++ // MATCHED
		if ts.kind(h) == pg.Token_BY {
			h += 2
		}
		switch {
		case c.Condition == nil:
			w.insert(ts[then-1].end, " AND "+live)
		case ts.kind(h) == pg.Token_AND && h+1 < then:
			w.insert(ts[h+1].start, "(")
			w.insert(ts[then-1].end, ") AND "+live)
		default:
			w.fail(internalError("cannot locate the condition of WHEN NOT MATCHED BY SOURCE"))
			return
		}
	}
	last := ts.lastBefore(then+1, limit)
	if last <= then {
		w.fail(internalError("cannot locate the MERGE action"))
		return
	}
	col := rule.StampColumn()
	switch c.CommandType {
	case pg.CmdType_CMD_UPDATE:
		if lifetime, ok := refreshFor(rule, w.s); ok && !setsClock(c.TargetList, rule) && w.sessionTTLUsable(rule) {
			w.insert(ts[last].end, ", "+ttl.QuoteIdent(col)+" = "+rule.RefreshValue(qual, lifetime))
		}
	case pg.CmdType_CMD_INSERT:
		if lifetime, ok := ttlFor(rule, w.s); ok && !setsColumn(c.TargetList, col) && w.sessionTTLUsable(rule) {
			w.mergeInsert(c, rule, col, rule.StampValue(lifetime), then+1, last)
		}
	}
}

// mergeInsert stamps `INSERT [(cols)] [OVERRIDING … VALUE] {VALUES (…) |
// DEFAULT VALUES}` whose INSERT token is i and last token last.
func (w *walker) mergeInsert(c *pg.MergeWhenClause, rule *ttl.Rule, col, value string, i, last int) {
	ts := w.tokens()
	if ts.kind(i) != pg.Token_INSERT {
		w.fail(internalError("cannot locate INSERT in MERGE"))
		return
	}
	colsClose, j, ok := ts.insertColumns(i+1, len(c.TargetList) > 0)
	if !ok {
		w.fail(internalError("cannot locate the column list in MERGE"))
		return
	}
	if ts.kind(j) == pg.Token_DEFAULT && ts.kind(j+1) == pg.Token_VALUES && j+1 == last {
		w.replace(ts[j].start, ts[j+1].end, "("+ttl.QuoteIdent(col)+") VALUES ("+value+")")
		return
	}
	if ts.kind(j) != pg.Token_VALUES || ts.kind(j+1) != pg.Token_ASCII_40 || ts.match(j+1) != last {
		w.fail(internalError("cannot locate VALUES in MERGE"))
		return
	}
	if w.stampColumn(rule, col, colsClose, i, len(c.Values), "MERGE … INSERT", false) {
		w.insert(ts[last-1].end, ", "+value)
	}
}

// implicitColumns returns the column list ` (a, b, col)` that an INSERT
// without one, giving width values per row, needs to take the stamp column
// too; given reports that the values already reach the stamp column. It
// fails when the catalog does not know the table's columns.
func (w *walker) implicitColumns(rule *ttl.Rule, col string, width int, form string) (list string, given bool) {
	cols := w.columns(rule)
	switch {
	case cols == nil:
		w.fail(errStampWithoutColumnList(rule, form, "and the proxy does not know the table's columns"))
		return "", false
	case width < 0:
		w.fail(errStampWithoutColumnList(rule, form, "from a query whose width the proxy does not know"))
		return "", false
	}
	pos := -1
	for k, c := range cols {
		if c.Name == col {
			pos = k
		}
	}
	if pos < 0 {
		w.fail(errStampNoColumn(rule, form, col))
		return "", false
	}
	if width > pos {
		return "", true
	}
	var b strings.Builder
	b.WriteString(" (")
	for k := 0; k < width; k++ {
		b.WriteString(ttl.QuoteIdent(cols[k].Name))
		b.WriteString(", ")
	}
	b.WriteString(ttl.QuoteIdent(col))
	b.WriteString(")")
	return b.String(), false
}
