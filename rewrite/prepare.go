package rewrite

import (
	"sort"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// PREPARE name AS <statement> is rewritten once, under the search path of
// the moment, but the server analyses the statement again at EXECUTE when
// the search path has changed since (plan cache invalidation), where the
// proxy does not see it: an unqualified name could then reach another
// schema's table of the same name, unfiltered. So inside a PREPARE body every
// unqualified reference to a name that is a TTL table's or a child's, in any
// schema, is qualified with the schema it resolves to now: FROM notes becomes
// FROM "public".notes, which still exposes the name notes to the rest of the
// statement. A name that resolves to no schema is rejected. CREATE VIEW
// stores the relations it resolved, and DECLARE and CREATE TABLE AS run at
// once, so they need nothing.

// pinEdit is the qualification of one name; done once it is part of an edit.
type pinEdit struct {
	text string
	done bool
}

// pin records the qualification of rv, an unqualified table reference that
// is not a CTE, when its name is a TTL table's or a child's.
func (w *walker) pin(rv *pg.RangeVar) {
	loc := int(rv.Location)
	if _, ok := w.pins[loc]; ok || w.expanded[rv] {
		return
	}
	sch, known, ok := w.pinSchema(rv.Relname)
	if !known {
		return
	}
	if !ok {
		if w.construct == "PREPARE" {
			w.fail(errPrepareUnresolved(rv.Relname))
		} else {
			w.fail(errUnresolvedName(rv.Relname))
		}
		return
	}
	if ts := w.tokens(); w.err == nil && ts.at(loc) < 0 {
		w.fail(internalError("cannot locate table " + rv.Relname))
		return
	}
	if w.pins == nil {
		w.pins = map[int]*pinEdit{}
	}
	w.pins[loc] = &pinEdit{text: ttl.QuoteIdent(sch) + "."}
}

// isTTLName reports whether rel is the name of a TTL table or of a child of
// one in any schema.
func (w *walker) isTTLName(rel string) bool {
	if len(w.rw.byName[rel]) > 0 {
		return true
	}
	cat := w.s.Catalog
	if cat == nil || len(cat.d.Children) == 0 {
		return false
	}
	for key := range cat.d.Children {
		if n := childNames(key); n[0] == rel || n[1] == rel {
			return true
		}
	}
	return false
}

// span returns sql[from:to] with the pending qualifications inside it
// applied; they are then done. An edit that replaces text with text built
// from the original must take the original through span.
func (w *walker) span(from, to int) string {
	var at []int
	for off, p := range w.pins {
		if !p.done && from <= off && off < to {
			at = append(at, off)
		}
	}
	if len(at) == 0 {
		return w.sql[from:to]
	}
	sort.Ints(at)
	var b strings.Builder
	cur := from
	for _, off := range at {
		b.WriteString(w.sql[cur:off])
		b.WriteString(w.pins[off].text)
		w.pins[off].done = true
		cur = off
	}
	b.WriteString(w.sql[cur:to])
	return b.String()
}

// flushPins turns the pending qualifications into insertions.
func (w *walker) flushPins() {
	var at []int
	for off, p := range w.pins {
		if !p.done {
			at = append(at, off)
		}
	}
	sort.Ints(at)
	for _, off := range at {
		w.insert(off, w.pins[off].text)
		w.pins[off].done = true
	}
}
