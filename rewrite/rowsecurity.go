package rewrite

import (
	"maps"
	"slices"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// row_security required: the server's policies are the second layer, for
// what no rewriter sees (a client's leaky predicate evaluated before the
// filter, dynamic SQL in a function). A TTL table whose policy is missing,
// not forced or stale is refused, so that a client never gets the first
// layer alone where the contract promised both.

// guarded returns r, after refusing the statement when the rewriter
// requires row security and r's table does not have it.
func (w *walker) guarded(r *ttl.Rule) *ttl.Rule {
	if r == nil || !w.rw.opts.RequireRowSecurity || w.s.Bypass || !r.HasRowRule() {
		return r
	}
	name := r.QualifiedName()
	if why := w.rw.unprotected(w.s.Catalog, r); why != "" {
		w.fail(errRowSecurityMissing(name, why))
	}
	return r
}

// unprotected returns why r's table (r names a TTL table or one of its
// children) lacks the live policy in cat, "" when it has it.
func (rw *Rewriter) unprotected(cat *Catalog, r *ttl.Rule) string {
	if cat == nil {
		return "the catalog is unknown"
	}
	name := r.QualifiedName()
	if t := cat.d.Tables[name]; t != nil {
		return t.RowSecurity.Protects(r)
	}
	// A write through a simple view over one TTL table (viewRule) is
	// protected by the table's policy: the view's rule renames the
	// columns, so the table's own rule is the one its policy holds.
	if v, ok := cat.d.Views[name]; ok && len(v.Reads) == 1 {
		base := v.Reads[0]
		rule := rw.byQualified[base]
		if rule == nil {
			rule = rw.byQualified[cat.d.Children[base]]
		}
		if t := cat.d.Tables[base]; t != nil && rule != nil {
			return t.RowSecurity.Protects(rule)
		}
	}
	return "the table is not in the catalog"
}

// Unprotected lists the TTL tables with a row rule and their children
// ("schema.table") that cat shows without the live policy of their rule,
// each with what is missing, for logs, /status and ttlproxy check. A nil
// cat lists every TTL table.
func (rw *Rewriter) Unprotected(cat *Catalog) map[string]string {
	out := map[string]string{}
	for i := range rw.rules {
		r := &rw.rules[i]
		if !r.HasRowRule() {
			continue
		}
		if why := rw.unprotected(cat, r); why != "" {
			out[r.QualifiedName()] = why
		}
	}
	if cat == nil {
		return out
	}
	for _, child := range slices.Sorted(maps.Keys(cat.d.Children)) {
		parent := rw.byQualified[cat.d.Children[child]]
		if parent == nil || !parent.HasRowRule() {
			continue
		}
		t := cat.d.Tables[child]
		if t == nil {
			out[child] = "the table is not in the catalog"
		} else if why := t.RowSecurity.Protects(parent); why != "" {
			out[child] = why
		}
	}
	return out
}

// RequiresRowSecurity reports Options.RequireRowSecurity.
func (rw *Rewriter) RequiresRowSecurity() bool { return rw.opts.RequireRowSecurity }

// Covers reports whether the table schema.table is a TTL table of the rules
// (any kind, expiring columns included) or, in cat (nil: unknown), one of
// their children: a constraint error naming it must not print the values
// of an existing row (the proxy strips its DETAIL, as PostgreSQL does under
// row security).
func (rw *Rewriter) Covers(cat *Catalog, schema, table string) bool {
	if rw == nil {
		return false
	}
	if rw.byKey[relKey{schema, table}] != nil {
		return true
	}
	if cat == nil {
		return false
	}
	_, ok := cat.d.Children[schema+"."+table]
	return ok
}
