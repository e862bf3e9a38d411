package rewrite

import (
	"reflect"
	"sort"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// Inheritance children and partitions of TTL tables (Catalog.Children) are
// TTL tables with their ancestor's rule: rows read or written through the
// child directly are the parent's rows too. Their names come from the
// session's catalog, not from the rules, so the cheap identifier check gets a
// second matcher per Children map, built on first use.

// childIndexSlots bounds the Children maps whose matchers are kept.
const childIndexSlots = 16

// childIndex is the matcher for one Children map and its keys, sorted (for
// the cache key).
type childIndex struct {
	// m is the indexed map, held so that its address is not reused while
	// the entry lives.
	m     map[string]string
	ptr   unsafe.Pointer
	n     int
	quick matcher
	keys  []string
}

// childIndexes is an immutable list swapped whole (copy on write), so that
// lookups take no lock and do not allocate.
type childIndexes struct {
	list atomic.Pointer[[]*childIndex]
}

func (ci *childIndexes) get(m map[string]string) *childIndex {
	p := reflect.ValueOf(m).UnsafePointer()
	if l := ci.list.Load(); l != nil {
		for _, x := range *l {
			if x.ptr == p && x.n == len(m) {
				return x
			}
		}
	}
	x := newChildIndex(m, p)
	for {
		old := ci.list.Load()
		var next []*childIndex
		if old != nil {
			for _, y := range *old {
				if y.ptr != p {
					next = append(next, y)
				}
			}
		}
		if len(next) >= childIndexSlots {
			next = next[1:]
		}
		next = append(next, x)
		if ci.list.CompareAndSwap(old, &next) {
			return x
		}
	}
}

func newChildIndex(m map[string]string, p unsafe.Pointer) *childIndex {
	x := &childIndex{m: m, ptr: p, n: len(m)}
	for k := range m {
		x.keys = append(x.keys, k)
		// "schema.table": either name may hold a dot; both readings are
		// needles, which can only make the check parse more often.
		for _, name := range childNames(k) {
			x.quick.add(name, 0)
			if strings.Contains(name, `"`) {
				x.quick.add(strings.ReplaceAll(name, `"`, `""`), 0)
			}
		}
	}
	sort.Strings(x.keys)
	return x
}

// childNames returns the table name of a Children key "schema.table" in both
// readings (either name may hold a dot).
func childNames(key string) [2]string {
	return [2]string{key[strings.IndexByte(key, '.')+1:], key[strings.LastIndexByte(key, '.')+1:]}
}

// mentionsChild reports that sql may name a child of a TTL table known to
// the session's catalog.
func (rw *Rewriter) mentionsChild(sql string, s *Session) bool {
	cat := s.Catalog
	if cat == nil || len(cat.Children) == 0 {
		return false
	}
	return rw.children.get(cat.Children).quick.find(sql) >= 0
}

// ruleAt returns the rule of the table schema.rel: its own, or, for a child
// of a TTL table, the ancestor's rule under the child's name.
func (w *walker) ruleAt(schema, rel string) *ttl.Rule {
	if r := w.rw.byKey[relKey{schema, rel}]; r != nil {
		return r
	}
	cat := w.s.Catalog
	if cat == nil || len(cat.Children) == 0 {
		return nil
	}
	key := schema + "." + rel
	parent, ok := cat.Children[key]
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
