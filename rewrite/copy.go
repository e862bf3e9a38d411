package rewrite

import (
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// COPY: a COPY t TO or COPY (query) TO reads the table; COPY FROM cannot be
// stamped in the stream.

// copyStmt filters COPY … TO: `COPY t [(a, b)] TO` becomes `COPY (SELECT
// a, b FROM t WHERE live) TO` and the query of `COPY (query) TO` is
// rewritten. COPY … FROM writes and passes: a column DEFAULT stamps it.
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
	name := w.sql[ts[i].start:ts[ne-1].end]
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
	w.replace(ts[i].start, ts[last].end,
		"(SELECT "+cols+" FROM "+name+" WHERE "+rule.LiveCondition(ttl.QuoteIdent(rv.Relname), "now()")+")")
}
