package rewrite

import (
	"strconv"

	pg "github.com/pganalyze/pg_query_go/v6"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// walker collects the edits for one text. It walks each statement with a
// structural view of where a table reference sits (read, write target, DDL
// name); generic expression subtrees are walked reflectively so that every
// subquery in them is found. After the walk a second, purely reflective pass
// checks that every reference to a TTL table was decided on.
type walker struct {
	rw  *Rewriter
	sql string
	s   *Session

	toks    tokens
	scanned bool

	edits   []edit
	handled map[*pg.RangeVar]bool
	err     *Error
	// alias numbers the _ttl_N join aliases, from above any already in the
	// text so that rewriting a rewritten statement stays valid.
	alias int
	// construct names the statement being walked, for error messages.
	construct string
	// cteDepth counts the data-modifying CTEs being walked.
	cteDepth int
	// registered marks INSERTs whose sidecar registration the text already
	// holds.
	registered map[*pg.InsertStmt]bool
	// refreshed marks the UPDATEs whose sidecar refresh the text already
	// holds (markRegistered).
	refreshed map[*pg.UpdateStmt]bool
	// tableDone marks the TABLE keywords (by offset) of `TABLE t` that the
	// reads of expiring columns replaced with `SELECT <columns> FROM`.
	tableDone map[int]bool
	// ownRegistry holds the registry references of the statement in
	// rawStmt's safety net that are the proxy's own text (protect.go).
	ownRegistry map[*pg.RangeVar]bool
	// childRules holds the rules made for children of TTL tables, by
	// "schema.table" (nil: not a TTL table).
	childRules map[string]*ttl.Rule
	// pinning is set while the body of a PREPARE is walked; pins holds the
	// schema qualifications it needs, by the offset of the name.
	pinning bool
	pins    map[int]*pinEdit
	// viewDepth counts the view definitions this walk is inside
	// (expandView); expanded marks the references it expanded.
	viewDepth int
	expanded  map[*pg.RangeVar]bool
	// unqualified lists the (schema, view) of views expanded without an
	// alias, whose schema-qualified column references unqualify edits.
	unqualified [][2]string
	// literal: the walk read the text of a literal (matchText).
	literal bool
	// stmtEnd is the offset where the top-level statement being walked
	// ends.
	stmtEnd int
	// listed marks INSERTs without a column list that the stamps of
	// expiring columns gave one (colwrite.go).
	listed map[*pg.InsertStmt]bool
	// colViews decides which views show expired values of expiring
	// columns (colviews.go), made on first use.
	colViews *columnViews
}

// newWalker returns a walker for sql; lits, when known, are its literals.
func newWalker(rw *Rewriter, sql string, s *Session, lits []literal) *walker {
	return &walker{rw: rw, sql: sql, s: s, handled: map[*pg.RangeVar]bool{}, registered: map[*pg.InsertStmt]bool{}, refreshed: map[*pg.UpdateStmt]bool{}, tableDone: map[int]bool{}, listed: map[*pg.InsertStmt]bool{}, alias: nextAlias(sql, lits)}
}

// nextAlias returns one more than the largest N of a _ttl_N in sql outside
// the literals lits (sorted), which can never hold an alias: the numbering
// does not depend on what literals hold.
func nextAlias(sql string, lits []literal) int {
	next := 0
	for i := 0; ; {
		k := indexFold(sql[i:], "_ttl_")
		if k < 0 {
			return next
		}
		at := i + k
		for len(lits) > 0 && lits[0].end <= at {
			lits = lits[1:]
		}
		i = at + len("_ttl_")
		if len(lits) > 0 && lits[0].start <= at {
			continue
		}
		j := i
		for j < len(sql) && j-i < 9 && '0' <= sql[j] && sql[j] <= '9' {
			j++
		}
		if j > i {
			if n, err := strconv.Atoi(sql[i:j]); err == nil && n >= next {
				next = n + 1
			}
		}
	}
}

func indexFold(s, lowerNeedle string) int {
	for i := 0; i+len(lowerNeedle) <= len(s); i++ {
		if hasPrefixFold(s[i:], lowerNeedle) {
			return i
		}
	}
	return -1
}

// tokens returns the token stream, scanning the text on first use.
func (w *walker) tokens() tokens {
	if !w.scanned {
		w.scanned = true
		ts, err := scanTokens(w.sql)
		if err != nil {
			w.fail(internalError("scanning: " + err.Error()))
		}
		w.toks = ts
	}
	return w.toks
}

func (w *walker) fail(e *Error) {
	if w.err == nil {
		w.err = e
	}
}

func (w *walker) insert(at int, text string) {
	w.edits = append(w.edits, edit{start: at, end: at, text: text, seq: len(w.edits)})
}

// insertLast inserts text at at after every insertion made there by
// insert, before or after it: the live condition put in front of a
// predicate goes inside the bracket the walk opens at the same offset
// around the whole WHERE clause (whereLive).
func (w *walker) insertLast(at int, text string) {
	w.edits = append(w.edits, edit{start: at, end: at, text: text, seq: lateSeq + len(w.edits)})
}

// lateSeq orders insertLast's edits after insert's at one offset.
const lateSeq = 1 << 30

// matchText reports whether the text at offset at starts with want, text
// the proxy writes (a value's expression or condition). When want holds a
// literal (an interval, a Unix time constant) and the text matches up to
// it, the outcome depends on a literal of the text, and the walk says so
// (walker.literal): statements of the same shape may differ there.
func (w *walker) matchText(at int, want string) bool {
	got := w.sql[at:]
	k := 0
	for k < len(got) && k < len(want) && got[k] == want[k] {
		k++
	}
	if lits, _ := lexLiterals(want); len(lits) > 0 && k >= lits[0].start {
		w.literal = true
	}
	return k == len(want)
}

func (w *walker) replace(start, end int, text string) {
	w.edits = append(w.edits, edit{start: start, end: end, text: text, seq: len(w.edits)})
}

func (w *walker) mark(rv *pg.RangeVar) {
	if rv != nil {
		w.handled[rv] = true
	}
}

// scope is the chain of CTE names visible at a point of a query.
type scope struct {
	names  []string
	parent *scope
}

func (sc *scope) has(name string) bool {
	for ; sc != nil; sc = sc.parent {
		for _, n := range sc.names {
			if n == name {
				return true
			}
		}
	}
	return false
}

var publicPath = []string{"public"}
