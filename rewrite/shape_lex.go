package rewrite

import (
	"strings"
	"unicode/utf8"
)

// A statement's shape is its text with every literal masked: each literal's
// bytes are replaced by 0x00 and a byte of its kind; everything else
// (keywords, identifiers, quoted identifiers, operators, $n parameters,
// white space, comments) is kept byte for byte. Two statements have the
// same shape exactly when they differ only in the values of their literals,
// each literal keeping its kind.
//
// The lexer follows PostgreSQL 17's scanner (src/backend/parser/scan.l,
// which libpg_query embeds) with standard_conforming_strings on:
//   - white space is [ \t\n\r\f\v]; -- comments run to the end of the line,
//     /* comments */ nest;
//   - identifiers start with [A-Za-z_] or a byte >= 0x80 and continue with
//     those, digits and $; "quoted identifiers" double "" to hold a quote;
//   - '…' strings double '' to hold a quote (no backslash escapes);
//     E'…' strings take backslash escapes; B'…' and X'…' are bit strings;
//     $tag$…$tag$ is a dollar-quoted string (tag: an identifier without $);
//   - numbers: decimal integers with optional _ between digits, 0x/0o/0b
//     integers, decimals (1.5, 1., .5) and exponents (1e10, 1.5E-3); an
//     integer is ICONST when its value fits in int32 (process_integer_literal)
//     and FCONST otherwise;
//   - $n is a parameter; TRUE and FALSE are keywords, masked as booleans
//     unless they follow a '.' (then they are column labels).
//
// Anything it is not sure to read exactly as scan.l does makes appendShape
// return ok false (the statement is then cached by its exact text): a NUL
// byte or invalid UTF-8; Unicode escapes (U&'…', U&"…"); national strings
// (N'…'); a string followed, past white space and comments, by another
// quote (string continuation, or two adjacent strings); E'…' escapes that
// can make the literal invalid (octal, \x, \u, \U); a number directly
// followed by an identifier character or by ".." (scan.l's *_junk,
// numericfail and realfail rules); a $ that starts neither a parameter nor a
// dollar quote; anything unterminated; an empty quoted identifier.

// litKind is the kind of one literal token in a statement's shape.
type litKind uint8

const (
	litInt       litKind = iota + 1 // integer constant the parser reads as ICONST (fits in int32)
	litNumeric                      // any other numeric constant (FCONST)
	litString                       // '…'
	litEString                      // E'…'
	litBitString                    // B'…'
	litHexString                    // X'…'
	litDollar                       // $$…$$ or $tag$…$tag$
	litBool                         // TRUE or FALSE, not after '.'
)

// literal is one literal token: sql[start:end] is its whole text (quotes,
// prefix and tag included).
type literal struct {
	start, end int
	kind       litKind
}

// appendShape appends to dst the shape of sql and to lits its literals, in
// order. ok is false, and the returned slices must not be used, when sql
// holds anything the lexer does not read exactly as PostgreSQL's does. It
// does not allocate when dst and lits have room.
func appendShape(dst []byte, lits []literal, sql string) (shape []byte, outLits []literal, ok bool) {
	if !utf8.ValidString(sql) || strings.IndexByte(sql, 0) >= 0 {
		return nil, nil, false
	}
	n := len(sql)
	afterDot := false // the last token was '.'
	for i := 0; i < n; {
		c := sql[i]
		start := i
		kind := litKind(0)
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
			dst = append(dst, c)
			continue
		case c == '-' && i+1 < n && sql[i+1] == '-':
			for i < n && sql[i] != '\n' && sql[i] != '\r' {
				i++
			}
			dst = append(dst, sql[start:i]...)
			continue
		case c == '/' && i+1 < n && sql[i+1] == '*':
			if i = skipNestedComment(sql, i); i < 0 {
				return nil, nil, false
			}
			dst = append(dst, sql[start:i]...)
			continue
		case c == '\'':
			if i = endPlainString(sql, i+1); i < 0 {
				return nil, nil, false
			}
			kind = litString
		case c == '"':
			j := i + 1
			for {
				k := indexByteFrom(sql, j, '"')
				if k < 0 {
					return nil, nil, false
				}
				if k+1 < n && sql[k+1] == '"' {
					j = k + 2
					continue
				}
				i = k + 1
				break
			}
			if i == start+2 {
				return nil, nil, false // zero-length delimited identifier
			}
		case c == '$':
			j := i + 1
			switch {
			case j < n && isDigit(sql[j]):
				for j < n && isDigit(sql[j]) {
					j++
				}
				if j < n && isIdentByte(sql[j]) {
					return nil, nil, false // param_junk
				}
				i = j
			default:
				for j < n && isDollarTagByte(sql[j]) {
					if j == i+1 && isDigit(sql[j]) {
						break
					}
					j++
				}
				if j >= n || sql[j] != '$' {
					return nil, nil, false
				}
				tag := sql[i : j+1]
				k := indexFrom(sql, j+1, tag)
				if k < 0 {
					return nil, nil, false
				}
				i = k + len(tag)
				kind = litDollar
			}
		case isDigit(c) || c == '.' && i+1 < n && isDigit(sql[i+1]):
			var ok bool
			if i, kind, ok = scanNumber(sql, i); !ok {
				return nil, nil, false
			}
		case isIdentStart(c):
			if i+1 < n && sql[i+1] == '\'' {
				switch c {
				case 'e', 'E':
					if i = endEString(sql, i+2); i < 0 {
						return nil, nil, false
					}
					kind = litEString
				case 'b', 'B', 'x', 'X':
					k := indexByteFrom(sql, i+2, '\'')
					if k < 0 {
						return nil, nil, false
					}
					i = k + 1
					kind = litBitString
					if c == 'x' || c == 'X' {
						kind = litHexString
					}
				case 'n', 'N':
					return nil, nil, false
				}
			}
			if kind == 0 {
				if (c == 'u' || c == 'U') && i+2 < n && sql[i+1] == '&' && (sql[i+2] == '\'' || sql[i+2] == '"') {
					return nil, nil, false
				}
				j := i + 1
				for j < n && isIdentByte(sql[j]) {
					j++
				}
				if !afterDot && j-i <= 5 && (equalFold(sql[i:j], "true") || equalFold(sql[i:j], "false")) {
					kind = litBool
				}
				i = j
			}
		case c == '.' && i+1 < n && sql[i+1] == '.':
			i += 2 // DOT_DOT, one token: what follows is not a column label
		default:
			i++
		}
		if kind == 0 {
			dst = append(dst, sql[start:i]...)
			afterDot = c == '.' && i == start+1
			continue
		}
		if kind != litBool && kind != litInt && kind != litNumeric && kind != litDollar && quoteFollows(sql, i) {
			return nil, nil, false
		}
		dst = append(dst, 0, byte(kind))
		lits = append(lits, literal{start: start, end: i, kind: kind})
		afterDot = false
	}
	return dst, lits, true
}

// endPlainString returns the offset after the '…' string whose body starts
// at i (quotes doubled inside), or -1 when it is unterminated.
func endPlainString(sql string, i int) int {
	for {
		k := indexByteFrom(sql, i, '\'')
		if k < 0 {
			return -1
		}
		if k+1 < len(sql) && sql[k+1] == '\'' {
			i = k + 2
			continue
		}
		return k + 1
	}
}

// endEString returns the offset after the E'…' string whose body starts at
// i, or -1 when it is unterminated or holds an escape that can make it
// invalid (octal, \x, \u, \U).
func endEString(sql string, i int) int {
	for i < len(sql) {
		switch sql[i] {
		case '\\':
			if i+1 >= len(sql) {
				return -1
			}
			switch e := sql[i+1]; {
			case '0' <= e && e <= '7', e == 'x', e == 'u', e == 'U', e >= 0x80:
				return -1
			}
			i += 2
		case '\'':
			if i+1 < len(sql) && sql[i+1] == '\'' {
				i += 2
				continue
			}
			return i + 1
		default:
			i++
		}
	}
	return -1
}

// quoteFollows reports whether, past white space and comments from i, the
// next byte is a quote: string continuation across a newline (scan.l's
// quotecontinue) or two adjacent strings.
func quoteFollows(sql string, i int) bool {
	for i < len(sql) {
		switch c := sql[i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-':
			for i < len(sql) && sql[i] != '\n' && sql[i] != '\r' {
				i++
			}
		case c == '/' && i+1 < len(sql) && sql[i+1] == '*':
			if i = skipNestedComment(sql, i); i < 0 {
				return true
			}
		default:
			return c == '\''
		}
	}
	return false
}

// skipNestedComment returns the offset after the /* comment */ starting at
// i, nested ones included, or -1 when it is unterminated.
func skipNestedComment(sql string, i int) int {
	depth := 0
	for i < len(sql) {
		switch {
		case sql[i] == '/' && i+1 < len(sql) && sql[i+1] == '*':
			depth++
			i += 2
		case sql[i] == '*' && i+1 < len(sql) && sql[i+1] == '/':
			depth--
			i += 2
			if depth == 0 {
				return i
			}
		default:
			i++
		}
	}
	return -1
}

// scanNumber reads the numeric constant at i and returns the offset after
// it and its kind; ok is false for the forms scan.l rejects or that this
// lexer does not follow (a number directly followed by an identifier
// character or by "..", an exponent without digits).
func scanNumber(sql string, i int) (end int, kind litKind, ok bool) {
	n := len(sql)
	start := i
	if sql[i] == '0' && i+2 < n {
		base := 0
		switch sql[i+1] {
		case 'x', 'X':
			base = 16
		case 'o', 'O':
			base = 8
		case 'b', 'B':
			base = 2
		}
		if base != 0 {
			var v uint64
			j := i + 2
			digits := 0
			for j < n {
				k := j
				if sql[k] == '_' {
					k++
				}
				if k >= n {
					break
				}
				d := digitValue(sql[k])
				if d < 0 || d >= base {
					break
				}
				if v <= 1<<32 {
					v = v*uint64(base) + uint64(d)
				}
				digits++
				j = k + 1
			}
			if digits == 0 || j < n && (isIdentByte(sql[j]) || sql[j] == '.') {
				return 0, 0, false
			}
			if v <= 1<<31-1 {
				return j, litInt, true
			}
			return j, litNumeric, true
		}
	}
	var v uint64
	intDigits := 0
	j := i
	for j < n && isDigit(sql[j]) {
		if v <= 1<<32 {
			v = v*10 + uint64(sql[j]-'0')
		}
		intDigits++
		j++
		if j+1 < n && sql[j] == '_' && isDigit(sql[j+1]) {
			j++
		}
	}
	kind = litInt
	if j < n && sql[j] == '.' {
		if j+1 < n && sql[j+1] == '.' {
			return 0, 0, false // numericfail: 1..
		}
		kind = litNumeric
		j++
		for j < n && isDigit(sql[j]) {
			j++
			if j+1 < n && sql[j] == '_' && isDigit(sql[j+1]) {
				j++
			}
		}
	}
	if intDigits == 0 && j == start+1 {
		return 0, 0, false
	}
	if j < n && (sql[j] == 'e' || sql[j] == 'E') {
		k := j + 1
		if k < n && (sql[k] == '+' || sql[k] == '-') {
			k++
		}
		if k >= n || !isDigit(sql[k]) {
			return 0, 0, false // realfail, or junk
		}
		for k < n && isDigit(sql[k]) {
			k++
			if k+1 < n && sql[k] == '_' && isDigit(sql[k+1]) {
				k++
			}
		}
		kind = litNumeric
		j = k
	}
	if j < n && (isIdentByte(sql[j]) || sql[j] == '.' && kind == litNumeric && j+1 < n && sql[j+1] == '.') {
		return 0, 0, false
	}
	if kind == litInt && v > 1<<31-1 {
		kind = litNumeric
	}
	return j, kind, true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// isDollarTagByte reports the bytes of a dollar-quote tag (scan.l's
// dolq_cont: no $).
func isDollarTagByte(c byte) bool {
	return isIdentStart(c) || isDigit(c)
}

func digitValue(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

func indexByteFrom(s string, from int, c byte) int {
	for i := from; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

func indexFrom(s string, from int, sub string) int {
	for i := from; i+len(sub) <= len(s); i++ {
		if s[i] == sub[0] && s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}
