package rewrite

import (
	pg "github.com/pganalyze/pg_query_go/v6"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// Name resolution: which rule, if any, a table reference names in the
// session (search path, catalog, CTE names).

// ruleFor resolves a table reference to its rule, or nil when it is not a
// TTL table. For a read, sc holds the CTE names that shadow unqualified
// table names; write targets are never CTEs (pass sc nil).
//
// Unqualified names follow the search path: with catalog knowledge of the
// schemas holding the name, the first such schema on the path decides;
// without it, the first path schema with a rule for the name does, which
// errs toward filtering (a wrong filter fails loudly, a missing one leaks).
// pg_catalog and pg_temp never hold TTL tables.
func (w *walker) ruleFor(rv *pg.RangeVar, sc *scope) *ttl.Rule {
	if rv == nil {
		return nil
	}
	if w.pinning && rv.Schemaname == "" && !sc.has(rv.Relname) {
		w.pin(rv)
	}
	if r, ok := w.leakyView(rv, sc); ok {
		return r
	}
	if rv.Schemaname != "" {
		return w.ruleAt(rv.Schemaname, rv.Relname)
	}
	if sc.has(rv.Relname) {
		return nil
	}
	if cat := w.s.Catalog; len(w.rw.byName[rv.Relname]) == 0 && (cat == nil || len(cat.d.Children) == 0) {
		return nil
	}
	if sch, ok := w.resolve(rv.Relname); ok {
		return w.ruleAt(sch, rv.Relname)
	}
	return nil
}

// rowRuleFor is ruleFor for the places that apply the row rule (the read
// filter, the write's live condition and stamp): nil also for a table with
// expiring columns only (ttl.Rule.HasRowRule), whose rows all stay visible.
// Its columns are the column check's (columns.go), and the refusals of
// positions the rewriter does not handle keep ruleFor: they err toward
// refusing.
func (w *walker) rowRuleFor(rv *pg.RangeVar, sc *scope) *ttl.Rule {
	if r := w.ruleFor(rv, sc); r != nil && r.HasRowRule() {
		return r
	}
	return nil
}

// resolve returns the schema an unqualified table name refers to in the
// session, as ruleFor decides it; ok is false when neither the catalog nor
// the rules place the name on the search path.
func (w *walker) resolve(rel string) (string, bool) {
	path := w.s.SearchPath
	if path == nil {
		path = publicPath
	}
	if cat := w.s.Catalog; cat != nil {
		if holders, ok := cat.d.Schemas[rel]; ok {
			for _, sch := range path {
				for _, h := range holders {
					if h == sch {
						return sch, true
					}
				}
			}
		}
	}
	for _, sch := range path {
		if w.ruleAt(sch, rel) != nil {
			return sch, true
		}
	}
	return "", false
}
