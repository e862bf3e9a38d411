package rewrite

// The shape lexer.
//
// A statement's shape is its text with every literal masked: the bytes of
// each literal token are replaced by the two bytes 0x00 and byte(kind), and
// everything else (keywords, identifiers, "quoted identifiers", operators,
// punctuation, $n parameters, white space, comments) is kept byte for byte.
// Two texts have the same shape exactly when they differ only in the text
// of their literals, each literal keeping its kind, so a cache keyed by the
// shape maps `… WHERE aid = 48213` and `… WHERE aid = 7` to one entry. As a
// text the lexer reads holds no NUL byte, every 0x00 in a shape is a mask.
//
// The lexer is one forward pass over the bytes and does not allocate when
// dst and lits have room. It follows PostgreSQL 17's scanner
// (src/backend/parser/scan.l, compiled into libpg_query, which pg.Scan runs)
// with standard_conforming_strings on, and is checked against pg.Scan by
// TestAppendShapeCorpus, TestAppendShapeSoup and FuzzShapeLex:
//
//   - White space is [ \t\n\r\f\v]. A -- comment runs to the next \n or \r
//     (or the end); a /* comment */ nests (each /* opens a level, each */
//     closes one).
//   - An identifier is [A-Za-z_\x80-\xff][A-Za-z_\x80-\xff0-9$]*, so a $
//     inside an identifier (a$b, a$$b) starts nothing. TRUE and FALSE, in
//     any case, are masked as litBool unless the token before them, comments
//     aside, is '.' (then they are a column label: t.true). A quoted
//     identifier "…" holds "" for a quote and is copied verbatim.
//   - '…' is a string (litString): '' stands for a quote, a backslash is an
//     ordinary byte (standard_conforming_strings). E'…' (litEString) also
//     takes \-escapes, \' among them. B'…' (litBitString) and X'…'
//     (litHexString) run to the next quote; their content is not checked
//     (scan.l leaves that to the parser). The prefix letter is only one when
//     it starts the token: ex'1' is the identifier ex and a string.
//   - $tag$…$tag$ and $$…$$ are dollar-quoted strings (litDollar); the tag
//     is [A-Za-z_\x80-\xff][A-Za-z_\x80-\xff0-9]* and the body runs to the
//     first copy of the opening delimiter, case included. $ followed by
//     digits is a parameter, copied verbatim.
//   - Numbers follow PG17's rules: decinteger {digit}(_?{digit})*,
//     hexinteger 0[xX](_?{hexdigit})+, octinteger 0[oO](_?[0-7])+,
//     bininteger 0[bB](_?[01])+, numeric ((decinteger\.decinteger?) |
//     (\.decinteger)), real ((decinteger|numeric)[Ee][-+]?decinteger). An
//     integer is litInt (ICONST) when its value fits in int32
//     (process_integer_literal: pg_strtoint32_safe), else litNumeric
//     (FCONST); numeric and real constants are litNumeric. A sign is never
//     part of a number: -1 is the operator - and the literal 1. A hex, octal
//     or binary integer ends where its digits do: 0x1.5 is 0x1 and .5.
//   - .. is one token (DOT_DOT), so TRUE after it is a literal.
//   - Operators are runs of ~!@#^&|`?+-*/%<>=, cut before a -- or /* inside
//     them; any other byte is a token of its own.
//
// ok is false when the text holds anything the lexer is not sure to read
// exactly as pg.Scan does, or that pg.Scan rejects (the statement is then
// cached by its exact text; a bail-out costs speed, never correctness):
//
//   - a NUL byte (the C scanner would stop there);
//   - U&'…' or U&"…" (Unicode escapes, UESCAPE);
//   - an identifier directly followed by a quote, other than the one-letter
//     prefixes E, B and X: N'…' (national strings, lexed as NCHAR and a
//     string), date'2020-01-01', ex'1', SELECT'a';
//   - a quote that follows a '…', E'…', B'…' or X'…' string with only white
//     space and comments between (scan.l's quotecontinue joins the two
//     strings across a newline; without one the parser rejects the text);
//   - in E'…', a backslash before a digit (octal escapes), x (hex), u or U
//     (Unicode), a byte >= 0x80, or the end of the text: those escapes can
//     make the literal invalid, which scan.l reports as an error;
//   - a number directly followed by an identifier byte
//     ([A-Za-z_0-9$\x80-\xff]): scan.l's integer_junk, numeric_junk and
//     real_junk errors, an exponent without digits (realfail: 1e, 1e+), and
//     1$$…$$ alike; 0x, 0o, 0b without digits (hexfail, octfail, binfail);
//     an integer followed by .. (numericfail: 1..2 is 1 and DOT_DOT);
//   - a parameter directly followed by an identifier byte ($1a, $1_0,
//     $1$$…$$: pg.Scan splits them, the parser rejects them);
//   - a $ that starts neither a parameter ($ and digits) nor a dollar quote
//     ($ and a tag and $), outside an identifier: $a, a lone $;
//   - an unterminated string, quoted identifier, dollar quote or block
//     comment, and an empty quoted identifier "" (errors in scan.l);
//   - an operator run of 64 bytes or more (scan.l: "operator too long").
//
// Invalid UTF-8 needs no bail-out: scan.l reads bytes, every byte >= 0x80
// being an identifier byte, and pg.Scan reports the same tokens for such
// text as for any other (checked by TestAppendShapeSoup and FuzzShapeLex).

// litKind is the kind of one literal token in a statement's shape.
type litKind uint8

const (
	litInt       litKind = iota + 1 // integer constant the parser reads as ICONST (fits in int32): 42, 0x1F, 0o17, 0b101, 1_000
	litNumeric                      // any other numeric constant (FCONST): 1.5, .5, 1e10, 3000000000
	litString                       // '…' (standard_conforming_strings on; '' is a quote)
	litEString                      // E'…' / e'…'
	litBitString                    // B'…'
	litHexString                    // X'…'
	litDollar                       // $$…$$ or $tag$…$tag$
	litBool                         // the keywords TRUE or FALSE (any case), unquoted, not right after a '.'
)

// literal is one literal token: sql[start:end] is its whole text (quotes,
// prefix, tag included).
type literal struct {
	start, end int
	kind       litKind
}

// appendShape appends to dst the shape of sql: sql byte for byte, except
// that each literal is replaced by the two bytes 0x00, byte(kind). It
// appends each literal, in order, to lits. ok is false (and the returned
// slices must not be used) when sql holds anything the lexer does not
// handle exactly; see the bail-out list above.
func appendShape(dst []byte, lits []literal, sql string) (shape []byte, outLits []literal, ok bool) {
	dst, lits, bail := lexShape(dst, lits, sql)
	if bail >= 0 {
		return nil, nil, false
	}
	return dst, lits, true
}

// Byte classes of the lexer's initial state.
const (
	lexOther  = iota // a token of its own: , ( ) [ ] ; : { } \ and control bytes
	lexSpace         // [ \t\n\r\f\v]
	lexIdent         // identifier start: [A-Za-z_\x80-\xff]
	lexDigit         // [0-9]
	lexOp            // operator byte: ~!@#^&|`?+-*/%<>=
	lexQuote         // '
	lexDQuote        // "
	lexDollar        // $
	lexDot           // .
	lexNUL           // 0x00
)

var lexClass = func() (t [256]uint8) {
	for c := 0; c < 256; c++ {
		b := byte(c)
		switch {
		case b == 0:
			t[c] = lexNUL
		case b == ' ' || b == '\t' || b == '\n' || b == '\r' || b == '\f' || b == '\v':
			t[c] = lexSpace
		case isIdentStart(b):
			t[c] = lexIdent
		case '0' <= b && b <= '9':
			t[c] = lexDigit
		case b == '\'':
			t[c] = lexQuote
		case b == '"':
			t[c] = lexDQuote
		case b == '$':
			t[c] = lexDollar
		case b == '.':
			t[c] = lexDot
		default:
			for i := 0; i < len(lexOpChars); i++ {
				if lexOpChars[i] == b {
					t[c] = lexOp
				}
			}
		}
	}
	return t
}()

// lexOpChars are scan.l's op_chars.
const lexOpChars = "~!@#^&|`?+-*/%<>="

// lexMaxOp is the length from which scan.l rejects an operator
// (NAMEDATALEN).
const lexMaxOp = 64

// identCont reports scan.l's ident_cont: [A-Za-z_\x80-\xff0-9$].
func identCont(c byte) bool { return byteClass[c]&classIdent != 0 }

func lexIsDigit(c byte) bool { return '0' <= c && c <= '9' }

// lexShape is appendShape; bail is the offset at which it gave up, or -1.
func lexShape(dst []byte, lits []literal, sql string) (_ []byte, _ []literal, bail int) {
	n := len(sql)
	copied := 0       // sql[:copied] is in dst
	afterDot := false // the last token, comments aside, was '.'
	// afterStr: the last token, white space and comments aside, was a
	// quote-delimited string; a quote now would continue it (across a
	// newline) or make a second string the parser rejects.
	afterStr := false
	i := 0
	for i < n {
		c := sql[i]
		start := i
		var kind litKind
		switch lexClass[c] {
		case lexSpace:
			i++
			for i < n && lexClass[sql[i]] == lexSpace {
				i++
			}
			continue

		case lexIdent:
			j := i + 1
			for j < n && identCont(sql[j]) {
				j++
			}
			switch {
			case j < n && sql[j] == '\'':
				if j != i+1 {
					return nil, nil, i // ex'1', date'…'
				}
				switch c {
				case 'e', 'E':
					kind = litEString
					j = lexEString(sql, j+1)
				case 'b', 'B':
					kind = litBitString
					j = lexBitString(sql, j+1)
				case 'x', 'X':
					kind = litHexString
					j = lexBitString(sql, j+1)
				default:
					return nil, nil, i // N'…', U'…'
				}
				if j < 0 {
					return nil, nil, i
				}
			case (c == 'u' || c == 'U') && j == i+1 && j+1 < n && sql[j] == '&' && (sql[j+1] == '\'' || sql[j+1] == '"'):
				return nil, nil, i // U&'…', U&"…"
			case !afterDot && (j-i == 4 && hasPrefixFold(sql[i:j], "true") || j-i == 5 && hasPrefixFold(sql[i:j], "false")):
				kind = litBool
			}
			i = j

		case lexDigit:
			var ok bool
			if i, kind, ok = lexNumber(sql, i); !ok {
				return nil, nil, start
			}

		case lexDot:
			switch {
			case i+1 < n && lexIsDigit(sql[i+1]):
				var ok bool
				if i, kind, ok = lexNumber(sql, i); !ok {
					return nil, nil, start
				}
			case i+1 < n && sql[i+1] == '.':
				i += 2 // DOT_DOT
			default:
				i++
				afterDot, afterStr = true, false
				continue
			}

		case lexQuote:
			if afterStr {
				return nil, nil, i // string continuation, or adjacent strings
			}
			kind = litString
			if i = lexPlainString(sql, i+1); i < 0 {
				return nil, nil, start
			}

		case lexDQuote:
			if i = lexQuotedIdent(sql, i+1); i < 0 {
				return nil, nil, start
			}

		case lexDollar:
			j := i + 1
			switch {
			case j < n && lexIsDigit(sql[j]):
				for j < n && lexIsDigit(sql[j]) {
					j++
				}
				if j < n && identCont(sql[j]) {
					return nil, nil, i // $1a, $1_0, $1$$…$$
				}
				i = j
			case j < n && (sql[j] == '$' || lexClass[sql[j]] == lexIdent):
				if i = lexDollarString(sql, i); i < 0 {
					return nil, nil, start
				}
				kind = litDollar
			default:
				return nil, nil, i // $ as a token of its own
			}

		case lexOp:
			if c == '-' && i+1 < n && sql[i+1] == '-' {
				for i += 2; i < n && sql[i] != '\n' && sql[i] != '\r'; i++ {
					if sql[i] == 0 {
						return nil, nil, i
					}
				}
				continue
			}
			if c == '/' && i+1 < n && sql[i+1] == '*' {
				if i = lexBlockComment(sql, i+2); i < 0 {
					return nil, nil, start
				}
				continue
			}
			// The operator runs to the first byte that is not an operator
			// byte or to a comment start; scan.l may cut it further (a
			// trailing + or -), which changes no literal.
			j := i + 1
			for j < n && lexClass[sql[j]] == lexOp {
				if (sql[j] == '-' && j+1 < n && sql[j+1] == '-') || (sql[j] == '/' && j+1 < n && sql[j+1] == '*') {
					break
				}
				j++
			}
			if j-i >= lexMaxOp {
				return nil, nil, i
			}
			i = j

		case lexNUL:
			return nil, nil, i

		default: // lexOther
			i++
		}

		afterDot = false
		afterStr = false
		if kind != 0 {
			afterStr = kind >= litString && kind <= litHexString
			dst = append(dst, sql[copied:start]...)
			dst = append(dst, 0, byte(kind))
			lits = append(lits, literal{start: start, end: i, kind: kind})
			copied = i
		}
	}
	dst = append(dst, sql[copied:]...)
	return dst, lits, -1
}

// lexPlainString returns the offset after the '…' string whose body starts
// at i (a doubled quote stands for a quote), or -1 when it is unterminated
// or holds a NUL.
func lexPlainString(sql string, i int) int {
	for ; i < len(sql); i++ {
		switch sql[i] {
		case '\'':
			if i+1 < len(sql) && sql[i+1] == '\'' {
				i++
				continue
			}
			return i + 1
		case 0:
			return -1
		}
	}
	return -1
}

// lexEString returns the offset after the E'…' string whose body starts at
// i, or -1 when it is unterminated, holds a NUL or holds an escape that can
// make it invalid: \ before a digit, x, u, U, a byte >= 0x80 or the end.
func lexEString(sql string, i int) int {
	for ; i < len(sql); i++ {
		switch sql[i] {
		case '\'':
			if i+1 < len(sql) && sql[i+1] == '\'' {
				i++
				continue
			}
			return i + 1
		case '\\':
			if i+1 >= len(sql) {
				return -1
			}
			switch e := sql[i+1]; {
			case e == 0, lexIsDigit(e), e == 'x', e == 'u', e == 'U', e >= 0x80:
				return -1
			}
			i++
		case 0:
			return -1
		}
	}
	return -1
}

// lexBitString returns the offset after the B'…' or X'…' string whose body
// starts at i (it runs to the next quote), or -1 when it is unterminated or
// holds a NUL.
func lexBitString(sql string, i int) int {
	for ; i < len(sql); i++ {
		switch sql[i] {
		case '\'':
			return i + 1
		case 0:
			return -1
		}
	}
	return -1
}

// lexQuotedIdent returns the offset after the "…" identifier whose body
// starts at i ("" stands for a quote), or -1 when it is unterminated, empty
// or holds a NUL.
func lexQuotedIdent(sql string, i int) int {
	body := i
	for ; i < len(sql); i++ {
		switch sql[i] {
		case '"':
			if i+1 < len(sql) && sql[i+1] == '"' {
				i++
				continue
			}
			if i == body {
				return -1 // zero-length delimited identifier
			}
			return i + 1
		case 0:
			return -1
		}
	}
	return -1
}

// lexDollarString returns the offset after the dollar-quoted string that
// starts at the $ at i, or -1 when i does not start one (dolqfailed: $tag
// without the closing $), the string is unterminated or it holds a NUL.
func lexDollarString(sql string, i int) int {
	n := len(sql)
	j := i + 1
	if j < n && lexClass[sql[j]] == lexIdent {
		j++
		for j < n && (lexClass[sql[j]] == lexIdent || lexIsDigit(sql[j])) {
			j++
		}
	}
	if j >= n || sql[j] != '$' {
		return -1
	}
	delim := sql[i : j+1]
	for k := j + 1; k < n; k++ {
		switch sql[k] {
		case '$':
			if len(sql)-k >= len(delim) && sql[k:k+len(delim)] == delim {
				return k + len(delim)
			}
		case 0:
			return -1
		}
	}
	return -1
}

// lexBlockComment returns the offset after the /* comment */ whose body
// starts at i (nested comments included), or -1 when it is unterminated or
// holds a NUL.
func lexBlockComment(sql string, i int) int {
	depth := 1
	for i < len(sql) {
		switch sql[i] {
		case '/':
			if i+1 < len(sql) && sql[i+1] == '*' {
				depth++
				i += 2
				continue
			}
		case '*':
			if i+1 < len(sql) && sql[i+1] == '/' {
				if depth--; depth == 0 {
					return i + 2
				}
				i += 2
				continue
			}
		case 0:
			return -1
		}
		i++
	}
	return -1
}

// lexNumber reads the numeric constant starting at i (a digit, or a '.'
// before a digit) and returns the offset after it and its kind. ok is false
// for the forms scan.l rejects or reads otherwise: a constant directly
// followed by an identifier byte (integer_junk, numeric_junk, real_junk),
// an exponent without digits (realfail), 0x, 0o or 0b without digits
// (hexfail, octfail, binfail) and an integer followed by .. (numericfail).
func lexNumber(sql string, i int) (end int, kind litKind, ok bool) {
	n := len(sql)
	if sql[i] == '0' && i+1 < n {
		var base uint64
		switch sql[i+1] {
		case 'x', 'X':
			base = 16
		case 'o', 'O':
			base = 8
		case 'b', 'B':
			base = 2
		}
		if base != 0 {
			// (_?digit)+, the value saturating above int32's range.
			var v uint64
			j := i + 2
			for j < n {
				k := j
				if sql[k] == '_' {
					if k++; k >= n {
						break
					}
				}
				d := lexDigitValue(sql[k])
				if d >= base {
					break
				}
				if v <= 1<<31 {
					v = v*base + d
				}
				j = k + 1
			}
			if j == i+2 || j < n && identCont(sql[j]) {
				return 0, 0, false
			}
			if v <= 1<<31-1 {
				return j, litInt, true
			}
			return j, litNumeric, true
		}
	}
	j := i
	var v uint64
	kind = litInt
	if sql[j] != '.' {
		j, v = lexDecInteger(sql, j)
		if j < n && sql[j] == '.' {
			if j+1 < n && sql[j+1] == '.' {
				return 0, 0, false // numericfail: 1..2 is 1 and DOT_DOT
			}
			kind = litNumeric
			j++
			if j < n && lexIsDigit(sql[j]) {
				j, _ = lexDecInteger(sql, j)
			}
		}
	} else {
		kind = litNumeric
		j, _ = lexDecInteger(sql, j+1)
	}
	if j < n && (sql[j] == 'e' || sql[j] == 'E') {
		k := j + 1
		if k < n && (sql[k] == '+' || sql[k] == '-') {
			k++
		}
		if k >= n || !lexIsDigit(sql[k]) {
			return 0, 0, false // realfail, or junk
		}
		j, _ = lexDecInteger(sql, k)
		kind = litNumeric
	}
	if j < n && identCont(sql[j]) {
		return 0, 0, false
	}
	if kind == litInt && v > 1<<31-1 {
		kind = litNumeric
	}
	return j, kind, true
}

// lexDecInteger reads the decinteger {digit}(_?{digit})* at i, which starts
// with a digit, and returns the offset after it and its value, saturating
// above int32's range.
func lexDecInteger(sql string, i int) (end int, v uint64) {
	n := len(sql)
	for i < n && lexIsDigit(sql[i]) {
		if v <= 1<<31 {
			v = v*10 + uint64(sql[i]-'0')
		}
		i++
		if i+1 < n && sql[i] == '_' && lexIsDigit(sql[i+1]) {
			i++
		}
	}
	return i, v
}

// lexDigitValue is the value of a hexadecimal digit, or 16.
func lexDigitValue(c byte) uint64 {
	switch {
	case '0' <= c && c <= '9':
		return uint64(c - '0')
	case 'a' <= c && c <= 'f':
		return uint64(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return uint64(c-'A') + 10
	}
	return 16
}

// LiteralSpans appends to spans, for each literal token of sql in order
// (strings of every kind, dollar quotes, numbers, TRUE and FALSE), its
// start and end offsets: sql[start:end] is the literal, prefix and quotes
// included. It reads sql as PostgreSQL's scanner does with
// standard_conforming_strings on. ok is false when the shape lexer cannot
// read sql exactly (its bail-outs above: U&'…', N'…', an unterminated
// string, …); spans must not be used then.
func LiteralSpans(spans []int, sql string) (_ []int, ok bool) {
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	shape, lits, ok := appendShape(sc.key[:0], sc.lits[:0], sql)
	if !ok {
		return spans, false
	}
	sc.key, sc.lits = shape[:0], lits[:0]
	for _, l := range lits {
		spans = append(spans, l.start, l.end)
	}
	return spans, true
}
