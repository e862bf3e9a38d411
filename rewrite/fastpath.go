package rewrite

import (
	"unicode/utf8"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// matcher is the cheap identifier check run before any parsing: a
// case-insensitive (ASCII) search for a set of lower-case needles.
// PostgreSQL folds only ASCII letters of unquoted identifiers, so a statement
// that names a table in any spelling other than a Unicode escape contains the
// table's name under ASCII case folding; U&" forces the parse for the rest.
// A name only counts where it is not part of a longer identifier: the bytes
// around it are not letters, _, $ or non-ASCII (digits before it are allowed,
// as the lexer splits 1abc into a number and a name).
type matcher struct {
	// first marks the (lower-case) first bytes of the needles.
	first   [256]bool
	needles []string
	// owner[i] is the rule index needle i belongs to, -1 for U&".
	owner []int
}

func (m *matcher) add(needle string, owner int) {
	n := ttl.FoldIdent(needle)
	if n == "" {
		return
	}
	for _, have := range m.needles {
		if have == n {
			return
		}
	}
	m.first[n[0]] = true
	m.needles = append(m.needles, n)
	m.owner = append(m.owner, owner)
}

// find returns the index of the first needle found in s, or -1. It does not
// allocate. Names start only where a word starts, so it tries the needles
// once per word and skips the rest of each identifier.
func (m *matcher) find(s string) int {
	for i := 0; i < len(s); {
		c := s[i]
		if m.first[lowerTable[c]] {
			if k := m.at(s, i); k >= 0 {
				return k
			}
		}
		if byteClass[c]&className == 0 {
			i++
			continue
		}
		i++
		for i < len(s) && byteClass[s[i]]&classIdent != 0 {
			i++
		}
	}
	return -1
}

// at returns the needle found at s[i:] that ends where a name can end.
func (m *matcher) at(s string, i int) int {
	for k, n := range m.needles {
		if n[0] != lowerTable[s[i]] || !hasPrefixFold(s[i:], n) {
			continue
		}
		if m.owner[k] < 0 || i+len(n) >= len(s) || byteClass[s[i+len(n)]]&classIdent == 0 || len(n) > maxIdentLen-utf8.UTFMax {
			return k
		}
	}
	return -1
}

// maxIdentLen is the longest identifier PostgreSQL keeps, in bytes
// (NAMEDATALEN-1): its scanner truncates a longer one at the last
// character boundary at or before it (truncate_identifier, pg_mbcliplen),
// so `<a 63-byte name>_junk` names the 63-byte table, and a name up to
// three bytes shorter is reached by an identifier whose character at the
// limit is cut off. A needle that long counts where the identifier goes
// on; the parse, which truncates as the server does, decides.
const maxIdentLen = 63

const (
	className  = 1 << iota // may continue a name before a needle: letters, _, $, non-ASCII
	classIdent             // may continue an identifier: className and digits
)

var (
	byteClass  [256]byte
	lowerTable [256]byte
)

func init() {
	for c := 0; c < 256; c++ {
		b := byte(c)
		lowerTable[c] = foldByte(b)
		if isIdentStart(b) || b == '$' {
			byteClass[c] |= className | classIdent
		}
		if '0' <= b && b <= '9' {
			byteClass[c] |= classIdent
		}
	}
}

func foldByte(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + ('a' - 'A')
	}
	return c
}

// hasPrefixFold reports whether s starts with the lower-case needle n under
// ASCII case folding.
func hasPrefixFold(s, n string) bool {
	if len(s) < len(n) {
		return false
	}
	for i := 0; i < len(n); i++ {
		if foldByte(s[i]) != n[i] {
			return false
		}
	}
	return true
}
