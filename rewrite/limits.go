package rewrite

import "strings"

// Parser safety. libpg_query recurses on the C stack over the parse tree; a
// deep enough tree overflows it and kills the process, which recover() cannot
// catch. Two shapes make deep trees: nested brackets, and left-deep chains
// (1+1+1+…, a::t::t…, x UNION y UNION …, a JOIN b JOIN …) that the grammar
// builds without growing its own bounded stack. On a 8 MiB thread stack the
// crash was observed between 20,000 and 30,000 levels; right-recursive shapes
// (NOT NOT …, - - …) stop at bison's 10,000-entry stack with an error.

// chainFactor bounds a left-deep chain at this many times MaxNestingDepth.
const chainFactor = 4

// nesting estimates, with one pass over the bytes, the bracket depth of sql
// and the depth of its left-deep operator chains (summed along the bracket
// path, plus the bracket depth). Strings, quoted identifiers, comments and
// dollar quotes are skipped roughly as the server's lexer does with
// standard_conforming_strings on; where it errs it over-counts.
func nesting(sql string) (brackets, chain int) {
	var (
		depth int
		cur   int   // chain length at the current bracket level
		outer int   // sum of the chain lengths of the enclosing levels
		saved []int // cur of each enclosing level
	)
	note := func() {
		if depth > brackets {
			brackets = depth
		}
		if e := outer + cur + depth; e > chain {
			chain = e
		}
	}
	n := len(sql)
	for i := 0; i < n; {
		c := sql[i]
		switch {
		case c == '(' || c == '[':
			saved = append(saved, cur)
			outer += cur
			cur = 0
			depth++
			note()
			i++
		case c == ')' || c == ']':
			if depth > 0 {
				depth--
				cur = saved[len(saved)-1]
				saved = saved[:len(saved)-1]
				outer -= cur
			}
			i++
		case c == ',' || c == ';':
			cur = 0
			i++
		case c == '\'':
			escapes := i > 0 && (sql[i-1] == 'e' || sql[i-1] == 'E') && (i < 2 || !isIdentByte(sql[i-2]))
			i = skipQuoted(sql, i+1, '\'', escapes)
		case c == '"':
			i = skipQuoted(sql, i+1, '"', false)
		case c == '-' && i+1 < n && sql[i+1] == '-':
			for i < n && sql[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < n && sql[i+1] == '*':
			i = skipBlockComment(sql, i)
		case c == '$':
			i = skipDollar(sql, i)
		case isOperatorByte(c):
			for i < n && isOperatorByte(sql[i]) {
				if sql[i] == '-' && i+1 < n && sql[i+1] == '-' {
					break
				}
				if sql[i] == '/' && i+1 < n && sql[i+1] == '*' {
					break
				}
				i++
			}
			cur++
			note()
		case isIdentStart(c):
			j := i + 1
			for j < n && isIdentByte(sql[j]) {
				j++
			}
			switch chainWord(sql[i:j]) {
			case wordChain:
				cur++
				note()
			case wordReset:
				cur = 0
			}
			i = j
		default:
			i++
		}
	}
	return brackets, chain
}

func isOperatorByte(c byte) bool {
	switch c {
	case '+', '-', '*', '/', '<', '>', '=', '~', '!', '@', '#', '%', '^', '&', '|', '`', '?', ':':
		return true
	}
	return false
}

func isIdentStart(c byte) bool {
	return c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || c >= 0x80
}

func isIdentByte(c byte) bool {
	return isIdentStart(c) || ('0' <= c && c <= '9') || c == '$'
}

const (
	wordOther = iota
	wordChain
	wordReset
)

// chainWord classifies a keyword: wordChain for the left-associative ones
// that deepen the tree at each use, wordReset for the list separators the
// parser flattens (AND, OR, CASE arms).
func chainWord(w string) int {
	if len(w) < 2 || len(w) > 9 {
		return wordOther
	}
	var buf [9]byte
	for i := 0; i < len(w); i++ {
		buf[i] = foldByte(w[i])
	}
	switch string(buf[:len(w)]) {
	case "is", "isnull", "notnull", "at", "collate", "union", "intersect", "except",
		"join", "like", "ilike", "similar", "between", "in", "operator":
		return wordChain
	case "and", "or", "when", "then", "else":
		return wordReset
	}
	return wordOther
}

// skipQuoted returns the index after the quote closing a literal or quoted
// identifier whose body starts at i; a doubled quote is part of the body.
func skipQuoted(s string, i int, q byte, backslash bool) int {
	for i < len(s) {
		switch c := s[i]; {
		case backslash && c == '\\':
			i += 2
		case c == q:
			if i+1 < len(s) && s[i+1] == q {
				i += 2
				continue
			}
			return i + 1
		default:
			i++
		}
	}
	return len(s)
}

// skipBlockComment skips a /* */ comment starting at i; they nest.
func skipBlockComment(s string, i int) int {
	level := 0
	for i < len(s) {
		switch {
		case s[i] == '/' && i+1 < len(s) && s[i+1] == '*':
			level++
			i += 2
		case s[i] == '*' && i+1 < len(s) && s[i+1] == '/':
			level--
			i += 2
			if level == 0 {
				return i
			}
		default:
			i++
		}
	}
	return len(s)
}

// skipDollar skips a dollar-quoted string starting at i, or just the $ of a
// parameter ($1) or of an identifier (a$b).
func skipDollar(s string, i int) int {
	if i > 0 && isIdentByte(s[i-1]) {
		return i + 1
	}
	j := i + 1
	for j < len(s) && s[j] != '$' {
		if !isIdentByte(s[j]) || (j == i+1 && '0' <= s[j] && s[j] <= '9') {
			return i + 1
		}
		j++
	}
	if j >= len(s) {
		return i + 1
	}
	tag := s[i : j+1]
	if k := strings.Index(s[j+1:], tag); k >= 0 {
		return j + 1 + k + len(tag)
	}
	return len(s)
}
