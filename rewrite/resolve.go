package rewrite

import (
	"slices"

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
		return w.guarded(r)
	}
	if w.ancestorRead(rv, sc) {
		return nil
	}
	if rv.Schemaname != "" {
		return w.guarded(w.ruleAt(rv.Schemaname, rv.Relname))
	}
	if sc.has(rv.Relname) {
		return nil
	}
	if cat := w.s.Catalog; len(w.rw.byName[rv.Relname]) == 0 && (cat == nil || len(cat.d.Children) == 0) {
		return nil
	}
	if sch, ok := w.resolve(rv.Relname); ok {
		return w.guarded(w.ruleAt(sch, rv.Relname))
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

// searched reports whether the server looks for relation rel in schema sch
// of the search path: not in a schema the role has no USAGE on; after a
// change of role whose USAGE is not known, only where a rule names rel.
func (w *walker) searched(sch, rel string) bool {
	if slices.Contains(w.s.NoUsage, sch) {
		return false
	}
	return !w.s.UsageUnknown || w.ruleAt(sch, rel) != nil
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
				if !w.searched(sch, rel) {
					continue
				}
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

// ancestorRead fails the walk when rv names, without ONLY, an inheritance
// parent of a TTL table that is not one itself (CatalogData.Ancestors):
// the server reads, updates and deletes its descendants' rows through it,
// and the parent may not even hold their expiry column, so no condition on
// it can hide them. It is refused rather than rewritten into a union of its
// own rows and its descendants' filtered ones, which no UPDATE, DELETE or
// MERGE target can be. With ONLY the parent's own rows are read as written.
func (w *walker) ancestorRead(rv *pg.RangeVar, sc *scope) bool {
	cat := w.s.Catalog
	if cat == nil || len(cat.d.Ancestors) == 0 || !rv.Inh {
		return false
	}
	key := ""
	if rv.Schemaname != "" {
		key = rv.Schemaname + "." + rv.Relname
	} else if !sc.has(rv.Relname) {
		key = w.resolveIn(rv.Relname, cat.d.Ancestors)
	}
	desc, ok := cat.d.Ancestors[key]
	if !ok {
		return false
	}
	w.fail(errAncestor(key, desc))
	return true
}
