package rewrite

import (
	"sort"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// tok is one lexical token of the statement text, comments left out.
type tok struct {
	start, end int
	kind       pg.Token
}

// tokens is the token stream of the whole text, ordered by offset. Node
// locations from the parser are byte offsets into the same text, so a node's
// first token is found by its location and the rest of its extent by walking
// the stream.
type tokens []tok

func scanTokens(sql string) (tokens, error) {
	res, err := pg.Scan(sql)
	if err != nil {
		return nil, err
	}
	ts := make(tokens, 0, len(res.Tokens))
	for _, t := range res.Tokens {
		if t.Token == pg.Token_SQL_COMMENT || t.Token == pg.Token_C_COMMENT {
			continue
		}
		ts = append(ts, tok{start: int(t.Start), end: int(t.End), kind: t.Token})
	}
	return ts, nil
}

// at returns the index of the token starting at off, or -1.
func (ts tokens) at(off int) int {
	i := ts.from(off)
	if i < len(ts) && ts[i].start == off {
		return i
	}
	return -1
}

// from returns the index of the first token starting at or after off.
func (ts tokens) from(off int) int {
	return sort.Search(len(ts), func(i int) bool { return ts[i].start >= off })
}

// kind returns the kind of token i, or 0 when i is out of range.
func (ts tokens) kind(i int) pg.Token {
	if i < 0 || i >= len(ts) {
		return 0
	}
	return ts[i].kind
}

// match returns the index of the bracket closing the one at i, or -1.
func (ts tokens) match(i int) int {
	depth := 0
	for j := i; j < len(ts); j++ {
		switch ts[j].kind {
		case pg.Token_ASCII_40, pg.Token_ASCII_91:
			depth++
		case pg.Token_ASCII_41, pg.Token_ASCII_93:
			depth--
			if depth == 0 {
				return j
			}
		}
	}
	return -1
}

// scanTop walks from token i to the first token that starts at or after
// limit, and returns the index of the first token at bracket depth 0 for
// which stop is true, of a closing bracket at depth 0 (the end of an
// enclosing construct), or of the first token at or after limit.
func (ts tokens) scanTop(i, limit int, stop func(j int) bool) int {
	depth := 0
	for ; i < len(ts) && ts[i].start < limit; i++ {
		switch ts[i].kind {
		case pg.Token_ASCII_40, pg.Token_ASCII_91:
			depth++
			continue
		case pg.Token_ASCII_41, pg.Token_ASCII_93:
			if depth == 0 {
				return i
			}
			depth--
			continue
		}
		if depth == 0 && stop != nil && stop(i) {
			return i
		}
	}
	return i
}

// lastBefore returns the index of the last token that ends at or before
// limit and is not a semicolon, searching no further back than lo; -1 if
// none.
func (ts tokens) lastBefore(lo, limit int) int {
	i := ts.from(limit) - 1
	for ; i >= lo && i >= 0; i-- {
		if ts[i].end <= limit && ts[i].kind != pg.Token_ASCII_59 {
			return i
		}
	}
	return -1
}

// nameEnd returns the index after the (possibly qualified) name whose first
// token is i: ident [. ident [. ident]], each ident possibly U&"…" UESCAPE '…'.
func (ts tokens) nameEnd(i int) int {
	i = ts.identEnd(i)
	for ts.kind(i) == pg.Token_ASCII_46 {
		i = ts.identEnd(i + 1)
	}
	return i
}

// identEnd returns the index after the identifier token i.
func (ts tokens) identEnd(i int) int {
	if ts.kind(i) == pg.Token_UIDENT && ts.kind(i+1) == pg.Token_UESCAPE {
		return i + 3
	}
	return i + 1
}

// findTop returns the index of the first token at bracket depth 0 in
// [i, limit) whose kind is one of kinds, or -1.
func (ts tokens) findTop(i, limit int, kinds ...pg.Token) int {
	j := ts.scanTop(i, limit, func(j int) bool {
		for _, k := range kinds {
			if ts[j].kind == k {
				return true
			}
		}
		return false
	})
	if j < len(ts) && ts[j].start < limit {
		for _, k := range kinds {
			if ts[j].kind == k {
				return j
			}
		}
	}
	return -1
}

// insertColumns finds the column list of an INSERT, which starts at token i
// when hasCols, and the OVERRIDING … VALUE after it. It returns the index of
// the list's closing bracket (-1 without a list) and of the token after both;
// ok is false when the list cannot be located.
func (ts tokens) insertColumns(i int, hasCols bool) (colsClose, next int, ok bool) {
	colsClose = -1
	if hasCols {
		if ts.kind(i) != pg.Token_ASCII_40 {
			return -1, i, false
		}
		colsClose = ts.match(i)
		if colsClose < 0 {
			return -1, i, false
		}
		i = colsClose + 1
	}
	if ts.kind(i) == pg.Token_OVERRIDING {
		i += 3
	}
	return colsClose, i, true
}
