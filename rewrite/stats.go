package rewrite

import (
	"maps"
	"slices"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// Planner statistics: after ANALYZE, pg_stats lists a column's most common
// values and histogram bounds, pg_stats_ext and pg_stats_ext_exprs those of
// extended statistics, taken from every row, expired ones included, and
// readable by whoever may read the column. PostgreSQL hides them for a
// table under row security (their definitions test row_security_active);
// the proxy hides them for every TTL table and child, at either contract
// level and for tables with expiring columns too, which have no policy: a
// read of one of these views in a FROM item becomes
// `(SELECT * FROM <the reference> WHERE NOT (<a TTL table's row>)) AS
// <alias>`, keeping the reference as the client wrote it. Monitoring tools
// keep working on every other table. pg_statistic and pg_statistic_ext_data
// are readable by superusers only.

// statsViews are the views of planner statistics, each with schemaname and
// tablename columns naming the table.
var statsViews = []string{"pg_stats", "pg_stats_ext", "pg_stats_ext_exprs"}

// statsViewNames finds their names in raw text.
var statsViewNames matcher

func init() {
	for _, name := range statsViews {
		statsViewNames.add(name, 0)
	}
}

// mentionsStatsView reports that sql may read one of statsViews.
func mentionsStatsView(sql string) bool { return statsViewNames.find(sql) >= 0 }

// isStatsView reports whether rv may name one of statsViews: qualified with
// pg_catalog, or unqualified outside a CTE of that name (pg_catalog is
// searched before the path unless the path names it; a relation of the
// name elsewhere gets the same filter, which at worst fails on its
// columns).
func isStatsView(rv *pg.RangeVar, sc *scope) bool {
	if rv == nil || !slices.Contains(statsViews, rv.Relname) || rv.Catalogname != "" {
		return false
	}
	if rv.Schemaname == "" {
		return !sc.has(rv.Relname)
	}
	return rv.Schemaname == "pg_catalog"
}

// statsView filters a read of a statistics view in a FROM item; it reports
// whether rv is one.
func (w *walker) statsView(rv *pg.RangeVar, sc *scope, tableForm bool) bool {
	if !isStatsView(rv, nil) {
		return false
	}
	if w.expanded == nil {
		w.expanded = map[*pg.RangeVar]bool{}
	}
	// Marked for the safety net (rawStmt) also when a CTE of the name is
	// what it reads.
	w.expanded[rv] = true
	if !isStatsView(rv, sc) {
		return false
	}
	cond, ok := w.statsTables()
	if !ok {
		w.fail(errStatsUnknownCatalog(rv.Relname))
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
	nameEnd := ts.nameEnd(ts.at(int(rv.Location)))
	aliasFrom := nameEnd
	if ts.kind(aliasFrom) == pg.Token_ASCII_42 {
		aliasFrom++
	}
	ref := w.span(ts[first].start, ts[nameEnd-1].end)
	alias := " AS " + ttl.QuoteIdent(rv.Relname)
	if aliasFrom < after {
		alias = " " + w.span(ts[aliasFrom].start, ts[after-1].end)
	} else if rv.Schemaname != "" {
		w.unqualified = append(w.unqualified, [2]string{rv.Schemaname, rv.Relname})
	}
	w.replaceItem(ts, first, after, tableForm, "(SELECT * FROM "+ref+" WHERE NOT ("+cond+"))"+alias)
	return true
}

// statsTables returns the condition true for a statistics row of a TTL
// table or child; ok is false when the session's catalog is unknown, so
// that the children are too.
func (w *walker) statsTables() (string, bool) {
	cat := w.s.Catalog
	if cat == nil {
		return "", false
	}
	names := map[[2]string]bool{}
	for i := range w.rw.rules {
		r := &w.rw.rules[i]
		names[[2]string{r.SchemaName(), r.Table}] = true
	}
	for _, child := range cat.childKeys {
		if _, ok := w.rw.byQualified[cat.d.Children[child]]; ok {
			parts := childNames(child)
			names[[2]string{child[:len(child)-len(parts[1])-1], parts[1]}] = true
		}
	}
	keys := slices.SortedFunc(maps.Keys(names), func(a, b [2]string) int {
		return strings.Compare(a[0]+"."+a[1], b[0]+"."+b[1])
	})
	terms := make([]string, len(keys))
	for i, k := range keys {
		terms[i] = "(schemaname OPERATOR(pg_catalog.=) " + ttl.QuoteLiteral(k[0]) + "::pg_catalog.name AND tablename OPERATOR(pg_catalog.=) " +
			ttl.QuoteLiteral(k[1]) + "::pg_catalog.name)"
	}
	return strings.Join(terms, " OR "), true
}
