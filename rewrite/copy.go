package rewrite

import (
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// COPY: a COPY t TO or COPY (query) TO reads the table; COPY FROM cannot be
// stamped in the stream.

// copyStmt filters COPY … TO: `COPY t [(a, b)] TO` becomes `COPY (SELECT
// a, b FROM t WHERE live) TO` (for a table with expiring columns, the
// columns listed or the catalog's, each expiring one read through its
// value's expression) and the query of `COPY (query) TO` is rewritten. COPY … FROM writes and passes: a column DEFAULT stamps it.
func (w *walker) copyStmt(c *pg.CopyStmt, start, end int) {
	if c.Query != nil {
		ts := w.tokens()
		i := ts.from(start)
		if ts.kind(i) != pg.Token_COPY || ts.kind(i+1) != pg.Token_ASCII_40 {
			w.fail(internalError("cannot locate the COPY query"))
			return
		}
		rparen := ts.match(i + 1)
		if rparen < 0 {
			w.fail(internalError("cannot locate the COPY query"))
			return
		}
		w.stmt(c.Query, nil, ts[i+1].end, ts[rparen].start)
		return
	}
	rv := c.Relation
	w.mark(rv)
	if c.IsFrom {
		if w.pinning && rv.Schemaname == "" {
			w.pin(rv)
		}
		return
	}
	rule := w.ruleFor(rv, nil)
	if rule == nil {
		return
	}
	ts := w.tokens()
	i := ts.at(int(rv.Location))
	if i < 0 {
		w.fail(internalError("cannot locate the COPY table"))
		return
	}
	ne := ts.nameEnd(i)
	name := w.span(ts[i].start, ts[ne-1].end)
	cols, last := "*", ne-1
	if len(c.Attlist) > 0 {
		rparen := ts.match(ne)
		if ts.kind(ne) != pg.Token_ASCII_40 || rparen < 0 {
			w.fail(internalError("cannot locate the COPY column list"))
			return
		}
		cols = strings.TrimSpace(w.sql[ts[ne].end:ts[rparen].start])
		last = rparen
	}
	qual := ttl.QuoteIdent(rv.Relname)
	expiring := namesExpiring(rule, c.Attlist)
	if expiring {
		cols = w.copyColumns(rule, qual, c.Attlist)
	}
	// A table with expiring columns only keeps every row: the query reads
	// the values, or the COPY stays as it is.
	where := ""
	if rule.HasRowRule() {
		where = " WHERE " + rule.LiveCondition(qual, ttl.Now)
	} else if !expiring {
		return
	}
	w.replace(ts[i].start, ts[last].end, "(SELECT "+cols+" FROM "+name+where+")")
}

// namesExpiring reports that a COPY of rule's table with the column list
// attlist names an expiring column: every column when the list is empty.
func namesExpiring(rule *ttl.Rule, attlist []*pg.Node) bool {
	if len(rule.Columns) == 0 {
		return false
	}
	if len(attlist) == 0 {
		return true
	}
	for _, a := range attlist {
		if rule.ExpiringColumn(a.GetString_().GetSval()) != nil {
			return true
		}
	}
	return false
}

// copyColumns returns the target list of the query a COPY TO of rule's
// table with expiring columns becomes: the columns of attlist, or the
// catalog's when it is empty, each expiring column as its value's
// expression named after it (a HEADER line shows the names), the others
// as qual."a". The column check has refused the statement when the
// catalog does not hold the table's columns.
func (w *walker) copyColumns(rule *ttl.Rule, qual string, attlist []*pg.Node) string {
	cols := w.columns(rule)
	names := make([]string, 0, len(cols))
	if len(attlist) == 0 {
		for _, col := range cols {
			names = append(names, col.Name)
		}
	}
	for _, a := range attlist {
		names = append(names, a.GetString_().GetSval())
	}
	var b strings.Builder
	for k, name := range names {
		if k > 0 {
			b.WriteString(", ")
		}
		if e := rule.ExpiringColumn(name); e != nil {
			if typ := columnType(cols, name); typ != "" {
				b.WriteString(e.ValueExpr(rule, qual, typ) + " AS " + ttl.QuoteIdent(name))
				continue
			}
		}
		b.WriteString(qual + "." + ttl.QuoteIdent(name))
	}
	return b.String()
}
