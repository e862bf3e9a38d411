package rewrite

import (
	"strings"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// Inheritance children and partitions of TTL tables (Catalog.Children) are
// TTL tables with their ancestor's rule: rows read or written through the
// child directly are the parent's rows too. Their names come from the
// session's catalog, not from the rules, so the cheap identifier check gets a
// second matcher per Catalog, built by NewCatalog.

// childNames returns the table name of a Children key "schema.table" in both
// readings (either name may hold a dot).
func childNames(key string) [2]string {
	return [2]string{key[strings.IndexByte(key, '.')+1:], key[strings.LastIndexByte(key, '.')+1:]}
}

// ruleAt returns the rule of the table schema.rel: its own, or, for a child
// of a TTL table, the ancestor's rule under the child's name.
func (w *walker) ruleAt(schema, rel string) *ttl.Rule {
	if r := w.rw.byKey[relKey{schema, rel}]; r != nil {
		return r
	}
	cat := w.s.Catalog
	if cat == nil || len(cat.d.Children) == 0 {
		return nil
	}
	key := schema + "." + rel
	parent, ok := cat.d.Children[key]
	if !ok {
		return nil
	}
	if r, ok := w.childRules[key]; ok {
		return r
	}
	var r *ttl.Rule
	if b := w.rw.byQualified[parent]; b != nil {
		c := *b
		c.Schema, c.Table = schema, rel
		// The registry stays the ancestor's: it is keyed by the key the
		// child shares.
		c.SidecarSchema = b.SidecarSchemaName()
		r = &c
	}
	if w.childRules == nil {
		w.childRules = map[string]*ttl.Rule{}
	}
	w.childRules[key] = r
	return r
}
