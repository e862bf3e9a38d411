package rewrite

import (
	"strings"
	"sync"
)

// The shape cache.
//
// Legacy clients write literals into the text of simple-protocol queries,
// so the same statement arrives with a new text each time: `… WHERE aid =
// 48213`, then `… WHERE aid = 7`. A cache keyed by text misses every time and
// each miss costs a parse. The rewrite cache is therefore keyed by the
// statement's shape (shape_lex.go): its text with every literal masked to its
// kind, plus the fingerprint of the session facts (State.Fingerprint).
//
// Why a shape can share one rewrite: the rewrite of a single SELECT, INSERT,
// UPDATE, DELETE or MERGE statement never depends on the value of a literal
// in it. The walker reads names, clause structure and node locations, never
// an A_Const's value; where the rewriter does read a literal (the
// ttlproxy.ttl checks of set_config and SET, function bodies, SHOW), the
// statement is not one of those kinds or the reader says so (parsed.literal).
// Two statements of one shape therefore get the same edits at the same token
// boundaries, and the rewrite of the second is the first's output with the
// second's literals pasted where the first's stood. That output is what
// rewriteParsed would produce for the second, byte for byte; FuzzShapeCache
// checks it.
//
// Each entry is trusted only once a second statement of its shape, with other
// literal values, has been rewritten in full and given exactly the template's
// output (as Supavisor's shape cache inserts only after a real parse agrees).
// Until then the entry serves only the text it was made from. Rejections,
// and rewrites whose edits touch a literal, are cached by exact text only.
// A disagreement marks the shape literal-dependent for good, so its
// statements are cached by their exact text, and is counted in
// Stats().ShapeMismatches: it means the rewriter read a literal without
// saying so, which is a bug.

// shapeState is how far a shape entry is trusted.
type shapeState uint8

const (
	// shapeCandidate: rewritten once; serves only its own text.
	shapeCandidate shapeState = iota
	// shapeConfirmed: a second rewrite with other literals agreed; serves
	// every statement of the shape.
	shapeConfirmed
	// shapeLiteral: the rewrite depends on literal values (or the template
	// could not be anchored); statements of the shape use exact entries.
	shapeLiteral
)

// cached is one cache value, never modified once stored.
type cached struct {
	res Result
	// err is an exact entry's rejection; shape entries never hold one.
	err *Error

	// Shape entries only.
	state shapeState
	// orig is the text the entry was made from.
	orig string
	// slots are the spans of res.SQL holding orig's literals, in order; for
	// a result that is not Rewritten res.SQL is orig itself.
	slots []span
}

type span struct{ start, end int }

// scratch holds the per-call buffers of a cached rewrite.
type scratch struct {
	key  []byte
	lits []literal
}

var scratchPool = sync.Pool{New: func() any {
	return &scratch{key: make([]byte, 0, 512), lits: make([]literal, 0, 32)}
}}

// Cache key prefixes: a shape key and an exact-text key never collide.
const (
	keyShape = 's'
	keyExact = 'e'
)

// cachedRewrite is Rewrite through the cache, for a text that passed the
// cheap check and the parse limits.
func (rw *Rewriter) cachedRewrite(sql string, st *State) (Result, error) {
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	s, fp := &st.s, st.fp

	key := appendKeyHeader(sc.key[:0], keyShape, fp)
	key, lits, lexed := appendShape(key, sc.lits[:0], sql)
	if lexed {
		sc.key, sc.lits = key[:0], lits[:0]
	}
	// useShape: the shape entry decides; otherwise the exact entry does.
	useShape := lexed
	var shaped *cached
	if useShape {
		if c := rw.cache.get(key); c != nil {
			switch {
			case c.state == shapeConfirmed, c.state == shapeCandidate && c.orig == sql:
				rw.stats.shapeHits.Add(1)
				res := c.fill(sql, lits)
				res.CacheHit = true
				return res, nil
			case c.state == shapeCandidate:
				shaped = c
			default:
				useShape = false
			}
		}
	}

	var exact []byte
	if !useShape {
		// The shape key is no longer needed: its buffer takes the exact key.
		exact = appendExactKey(sc.key[:0], fp, sql)
		sc.key = exact[:0]
		if c := rw.cache.get(exact); c != nil {
			return c.exact()
		}
	}

	if e := rw.checkNesting(sql); e != nil {
		return Result{}, e
	}
	p := rw.rewriteParsed(sql, s, lits, lexed)
	switch {
	case !useShape:
		rw.cache.put(exact, &cached{res: p.res, err: p.err})
	case p.literal || !p.anchored:
		// Statements of this shape look up their exact entries from now on.
		rw.cache.replace(key, &cached{state: shapeLiteral})
		rw.cache.put(appendExactKey(key[:0], fp, sql), &cached{res: p.res, err: p.err})
	default:
		// An anchored result is never a rejection: rewriteParsed maps the
		// literals only for a text it rewrote or passed.
		c := &cached{res: p.res, orig: sql, slots: p.slots}
		if shaped != nil {
			// A second statement of the shape: confirm the template or
			// give up on it.
			if want := shaped.fill(sql, lits); want.SQL == p.res.SQL && want.Rewritten == p.res.Rewritten {
				c.state = shapeConfirmed
			} else {
				rw.stats.shapeMismatches.Add(1)
				c = &cached{state: shapeLiteral}
			}
			rw.cache.replace(key, c)
		} else {
			rw.cache.put(key, c)
		}
	}
	return p.res, toError(p.err)
}

// appendExactKey appends the key of an exact-text entry.
func appendExactKey(dst []byte, fp uint64, sql string) []byte {
	return append(appendKeyHeader(dst, keyExact, fp), sql...)
}

// exact returns an exact entry's result, as a cache hit.
func (c *cached) exact() (Result, error) {
	res := c.res
	res.CacheHit = true
	return res, toError(c.err.clone())
}

// fill returns the entry's result for sql, a statement of the entry's shape
// whose literals are lits: the template with lits in its slots. It allocates
// only the output text.
func (c *cached) fill(sql string, lits []literal) Result {
	res := c.res
	if !res.Rewritten {
		res.SQL = sql
		return res
	}
	if sql == c.orig {
		return res
	}
	tmpl := c.res.SQL
	n := len(tmpl)
	for i, sl := range c.slots {
		n += (lits[i].end - lits[i].start) - (sl.end - sl.start)
	}
	var b strings.Builder
	b.Grow(n)
	cur := 0
	for i, sl := range c.slots {
		b.WriteString(tmpl[cur:sl.start])
		b.WriteString(sql[lits[i].start:lits[i].end])
		cur = sl.end
	}
	b.WriteString(tmpl[cur:])
	res.SQL = b.String()
	return res
}

// mapLiterals returns where each literal of lits (spans of the input, in
// order) stands in the output of edits, which must be sorted as applyEdits
// leaves them. ok is false when an edit touches a literal's text: an
// insertion strictly inside it, or a replacement overlapping it.
func mapLiterals(edits []edit, lits []literal) (slots []span, ok bool) {
	slots = make([]span, len(lits))
	delta, j := 0, 0
	for i, l := range lits {
		for ; j < len(edits); j++ {
			e := edits[j]
			before := e.end <= l.start
			if e.start == e.end {
				before = e.start <= l.start
			}
			if !before {
				break
			}
			delta += len(e.text) - (e.end - e.start)
		}
		if j < len(edits) && edits[j].start < l.end {
			return nil, false
		}
		slots[i] = span{l.start + delta, l.end + delta}
	}
	return slots, true
}

// clone returns a copy of e, so that a caller may keep or change it; nil
// stays nil.
func (e *Error) clone() *Error {
	if e == nil {
		return nil
	}
	cp := *e
	return &cp
}

// toError returns e as an error, nil when e is nil.
func toError(e *Error) error {
	if e == nil {
		return nil
	}
	return e
}
