package rewrite

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// shapeLexLit is an expected literal: its text and kind.
type shapeLexLit struct {
	text string
	kind litKind
}

func (l shapeLexLit) String() string { return fmt.Sprintf("%d:%q", l.kind, l.text) }

// shapeLexCases are the table cases of TestAppendShape, also FuzzShapeLex's
// seeds. A case with bail set must make appendShape refuse; the others must
// give exactly lits, and agree with pg.Scan.
var shapeLexCases = []struct {
	sql  string
	lits []shapeLexLit
	bail bool
}{
	{sql: `SELECT abalance FROM pgbench_accounts WHERE aid = 48213;`, lits: []shapeLexLit{{"48213", litInt}}},
	{sql: `SELECT 1`, lits: []shapeLexLit{{"1", litInt}}},
	{sql: ``},
	{sql: `SELECT NULL, x FROM t WHERE y IS NULL`},

	// Strings.
	{sql: `SELECT 'it''s'`, lits: []shapeLexLit{{`'it''s'`, litString}}},
	{sql: `SELECT '', ''''`, lits: []shapeLexLit{{`''`, litString}, {`''''`, litString}}},
	{sql: `SELECT 'a\'`, lits: []shapeLexLit{{`'a\'`, litString}}}, // standard_conforming_strings: \ is a byte
	{sql: `SELECT E'a\'b'`, lits: []shapeLexLit{{`E'a\'b'`, litEString}}},
	{sql: `SELECT E'\\'`, lits: []shapeLexLit{{`E'\\'`, litEString}}},
	{sql: `SELECT e'x\ny\t\b\f\r\"\q', E'a''b'`, lits: []shapeLexLit{{`e'x\ny\t\b\f\r\"\q'`, litEString}, {`E'a''b'`, litEString}}},
	{sql: "SELECT E'a\\\nb'", lits: []shapeLexLit{{"E'a\\\nb'", litEString}}},
	{sql: `SELECT b'101', B'', x'ff', X'0aF', b'abc'`, lits: []shapeLexLit{{`b'101'`, litBitString}, {`B''`, litBitString},
		{`x'ff'`, litHexString}, {`X'0aF'`, litHexString}, {`b'abc'`, litBitString}}},
	{sql: `SELECT $$a$b$$`, lits: []shapeLexLit{{`$$a$b$$`, litDollar}}},
	{sql: `SELECT $x$ $$ $x$`, lits: []shapeLexLit{{`$x$ $$ $x$`, litDollar}}},
	{sql: `SELECT $a$ x$ab$a$, $_1$'$_1$, $A$x$a$A$, $é$x$é$`, lits: []shapeLexLit{{`$a$ x$ab$a$`, litDollar},
		{`$_1$'$_1$`, litDollar}, {`$A$x$a$A$`, litDollar}, {`$é$x$é$`, litDollar}}},
	{sql: `SELECT $$a$$'b', 'a'$$b$$, "a"'b', 1'a'`, lits: []shapeLexLit{{`$$a$$`, litDollar}, {`'b'`, litString},
		{`'a'`, litString}, {`$$b$$`, litDollar}, {`'b'`, litString}, {"1", litInt}, {`'a'`, litString}}},
	{sql: "SELECT 'a'\nE'b'", lits: []shapeLexLit{{`'a'`, litString}, {`E'b'`, litEString}}},
	{sql: "SELECT '\xff\xfe', \xff\xfeabc", lits: []shapeLexLit{{"'\xff\xfe'", litString}}}, // bytes, not UTF-8

	// Identifiers, comments, parameters: no literal inside.
	{sql: `SELECT "a""b", "'", a$b, a$$b$$, a$1 FROM t`},
	{sql: `SELECT 1 /* ' */ -- '` + "\n" + `+ 2`, lits: []shapeLexLit{{"1", litInt}, {"2", litInt}}},
	{sql: `SELECT /* a /* nested ' */ still */ 2 /**/ /* **/ /*/ */`, lits: []shapeLexLit{{"2", litInt}}},
	{sql: "SELECT 1 -- '\r'x'", lits: []shapeLexLit{{"1", litInt}, {`'x'`, litString}}},
	{sql: `SELECT 1 -- no newline 'x'`, lits: []shapeLexLit{{"1", litInt}}},
	{sql: `SELECT 3*/*'*/4, 5+--'` + "\n6", lits: []shapeLexLit{{"3", litInt}, {"4", litInt}, {"5", litInt}, {"6", litInt}}},
	{sql: `SELECT $1, $2::text, $10`},
	{sql: `SELECT ` + strings.Repeat("!", 63) + ` 1`, lits: []shapeLexLit{{"1", litInt}}},

	// Numbers.
	{sql: `SELECT 1., .5, 1e-3, 1.5E+10, 1.e5, 1e5`, lits: []shapeLexLit{{"1.", litNumeric}, {".5", litNumeric},
		{"1e-3", litNumeric}, {"1.5E+10", litNumeric}, {"1.e5", litNumeric}, {"1e5", litNumeric}}},
	{sql: `SELECT 1_000, 0_1, 1_000.5_5, .5_5, 1e1_0`, lits: []shapeLexLit{{"1_000", litInt}, {"0_1", litInt},
		{"1_000.5_5", litNumeric}, {".5_5", litNumeric}, {"1e1_0", litNumeric}}},
	{sql: `SELECT 0x7FFFFFFF, 0x80000000, 2147483647, 2147483648, 00000000002147483647, 9999999999999999999999`,
		lits: []shapeLexLit{{"0x7FFFFFFF", litInt}, {"0x80000000", litNumeric}, {"2147483647", litInt},
			{"2147483648", litNumeric}, {"00000000002147483647", litInt}, {"9999999999999999999999", litNumeric}}},
	{sql: `SELECT 0o17, 0O17777777777, 0o20000000000, 0b101, 0B1111111111111111111111111111111, 0b10000000000000000000000000000000`,
		lits: []shapeLexLit{{"0o17", litInt}, {"0O17777777777", litInt}, {"0o20000000000", litNumeric}, {"0b101", litInt},
			{"0B1111111111111111111111111111111", litInt}, {"0b10000000000000000000000000000000", litNumeric}}},
	{sql: `SELECT 0x_1f, 0X1_F, 0x00000000000000000000000000000001, 0x000000FFFFFFFFFF`, lits: []shapeLexLit{{"0x_1f", litInt},
		{"0X1_F", litInt}, {"0x00000000000000000000000000000001", litInt}, {"0x000000FFFFFFFFFF", litNumeric}}},
	{sql: `SELECT 0x1.5, 0b1.5, 1.5e3.5, 1.5.5, 1.5..2`, lits: []shapeLexLit{{"0x1", litInt}, {".5", litNumeric},
		{"0b1", litInt}, {".5", litNumeric}, {"1.5e3", litNumeric}, {".5", litNumeric}, {"1.5", litNumeric},
		{".5", litNumeric}, {"1.5", litNumeric}, {"2", litInt}}},
	{sql: `SELECT 1::int, -1, t.1, ._5`, lits: []shapeLexLit{{"1", litInt}, {"1", litInt}, {".1", litNumeric}}},

	// Booleans.
	{sql: `SELECT TRUE, false, TrUe, t.true, t . false, t./* c */true, a..true, "true", trueish, true1`,
		lits: []shapeLexLit{{"TRUE", litBool}, {"false", litBool}, {"TrUe", litBool}, {"true", litBool}}},
	{sql: `SELECT x FROM t WHERE b = true AND c IS NOT FALSE`, lits: []shapeLexLit{{"true", litBool}, {"FALSE", litBool}}},

	// Bail-outs.
	{sql: "SELECT 1\x00", bail: true},
	{sql: "SELECT '\x00'", bail: true},
	{sql: "SELECT 1 -- \x00", bail: true},
	{sql: `SELECT U&'\0041'`, bail: true},
	{sql: `SELECT u&'a'`, bail: true},
	{sql: `SELECT U&"a"`, bail: true},
	{sql: `SELECT N'x'`, bail: true},
	{sql: `SELECT n'x'`, bail: true},
	{sql: `SELECT date'2020-01-01'`, bail: true},
	{sql: `SELECT ex'1'`, bail: true},
	{sql: `SELECT'a'`, bail: true},
	{sql: "SELECT \xc3\xa9'a'", bail: true},
	{sql: "SELECT 'a'\n'b'", bail: true},
	{sql: "SELECT 'a'\r'b'", bail: true},
	{sql: "SELECT 'a' \v\n\f'b'", bail: true},
	{sql: "SELECT E'a'\n'b'", bail: true},
	{sql: "SELECT B'1'\n'0'", bail: true},
	{sql: "SELECT X'1'\n'0'", bail: true},
	{sql: "SELECT 'a' -- c\n 'b'", bail: true},
	{sql: "SELECT 'a' /* c */ 'b'", bail: true},
	{sql: `SELECT 'a' 'b'`, bail: true},
	{sql: `SELECT B'1''0'`, bail: true},
	{sql: `SELECT E'\101'`, bail: true},
	{sql: `SELECT E'\8'`, bail: true},
	{sql: `SELECT E'\x41'`, bail: true},
	{sql: `SELECT E'\xff'`, bail: true},
	{sql: `SELECT E'\u0041'`, bail: true},
	{sql: `SELECT E'\U00000041'`, bail: true},
	{sql: `SELECT E'\u'`, bail: true},
	{sql: `SELECT E'\é'`, bail: true},
	{sql: `SELECT E'\`, bail: true},
	{sql: `SELECT 123abc`, bail: true},
	{sql: `SELECT 1e`, bail: true},
	{sql: `SELECT 1e+`, bail: true},
	{sql: `SELECT 1e5e`, bail: true},
	{sql: `SELECT 1.e`, bail: true},
	{sql: `SELECT 1.5x`, bail: true},
	{sql: `SELECT 1._5`, bail: true},
	{sql: `SELECT 1_`, bail: true},
	{sql: `SELECT 1__0`, bail: true},
	{sql: `SELECT 1_.5`, bail: true},
	{sql: `SELECT 1e_1`, bail: true},
	{sql: `SELECT 0x`, bail: true},
	{sql: `SELECT 0x_`, bail: true},
	{sql: `SELECT 0x1_`, bail: true},
	{sql: `SELECT 0x1g`, bail: true},
	{sql: `SELECT 0b12`, bail: true},
	{sql: `SELECT 0o18`, bail: true},
	{sql: `SELECT 00x1`, bail: true},
	{sql: `SELECT 0x'a'`, bail: true},
	{sql: `SELECT 1..2`, bail: true},
	{sql: `SELECT 1$$x$$`, bail: true},
	{sql: `SELECT 1$`, bail: true},
	{sql: `SELECT $1a`, bail: true},
	{sql: `SELECT $1_0`, bail: true},
	{sql: `SELECT $1$$x$$`, bail: true},
	{sql: `SELECT $a`, bail: true},
	{sql: `SELECT $`, bail: true},
	{sql: `SELECT $ 1`, bail: true},
	{sql: `SELECT 'open`, bail: true},
	{sql: `SELECT 'open''`, bail: true},
	{sql: `SELECT E'open\'`, bail: true},
	{sql: `SELECT B'open`, bail: true},
	{sql: `SELECT X'open`, bail: true},
	{sql: `SELECT "open`, bail: true},
	{sql: `SELECT """`, bail: true},
	{sql: `SELECT ""`, bail: true},
	{sql: `SELECT $$open`, bail: true},
	{sql: `SELECT $x$ $$ $X$`, bail: true},
	{sql: `SELECT $a$x$a`, bail: true},
	{sql: `SELECT /* open`, bail: true},
	{sql: `SELECT /* /* */ open`, bail: true},
	{sql: `SELECT /*/`, bail: true},
	{sql: `SELECT ` + strings.Repeat("!", 64), bail: true},
	{sql: `SELECT 1 ` + strings.Repeat("<", 70) + `/* c */`, bail: true},
}

func TestAppendShape(t *testing.T) {
	for _, c := range shapeLexCases {
		shape, lits, ok := appendShape(nil, nil, c.sql)
		if c.bail {
			if ok {
				t.Errorf("%q: read as %q, want a bail-out", c.sql, shape)
			}
			continue
		}
		if !ok {
			t.Errorf("%q: bailed out", c.sql)
			continue
		}
		var got []shapeLexLit
		for _, l := range lits {
			got = append(got, shapeLexLit{c.sql[l.start:l.end], l.kind})
		}
		if fmt.Sprint(got) != fmt.Sprint(c.lits) {
			t.Errorf("%q:\n got  %v\n want %v", c.sql, got, c.lits)
		}
		if err := shapeLexUnmask(shape, c.sql, lits); err != nil {
			t.Errorf("%q: %v", c.sql, err)
		}
		// The expectations themselves must be PostgreSQL's.
		if err := shapeLexCompare(c.sql, lits); err != nil {
			t.Errorf("%q: %v", c.sql, err)
		}
	}
}

func TestAppendShapeBytes(t *testing.T) {
	for _, c := range []struct{ sql, shape string }{
		{`SELECT abalance FROM pgbench_accounts WHERE aid = 48213;`, "SELECT abalance FROM pgbench_accounts WHERE aid = \x00\x01;"},
		{`SELECT 1.5, 3000000000, 'a', E'b', B'1', X'f', $t$c$t$, TRUE`, "SELECT \x00\x02, \x00\x02, \x00\x03, \x00\x04, \x00\x05, \x00\x06, \x00\x07, \x00\x08"},
		{`SELECT -1 /* 2 */, $1 -- 3`, "SELECT -\x00\x01 /* 2 */, $1 -- 3"},
		{`x`, `x`},
	} {
		shape, _, ok := appendShape(nil, nil, c.sql)
		if !ok || string(shape) != c.shape {
			t.Errorf("%q: shape %q (ok %v), want %q", c.sql, shape, ok, c.shape)
		}
	}
	// Statements that differ only in their literals share a shape; a literal
	// of another kind makes another shape.
	same := []string{
		`SELECT * FROM t WHERE a = 1 AND b = 'x' AND c = true`,
		`SELECT * FROM t WHERE a = 2147483647 AND b = 'it''s' AND c = FALSE`,
		`SELECT * FROM t WHERE a = 0x10 AND b = '' AND c = tRuE`,
	}
	other := []string{
		`SELECT * FROM t WHERE a = 1.0 AND b = 'x' AND c = true`,
		`SELECT * FROM t WHERE a = 2147483648 AND b = 'x' AND c = true`,
		`SELECT * FROM t WHERE a = 1 AND b = E'x' AND c = true`,
		`SELECT * FROM t WHERE a = 1 AND b = $$x$$ AND c = true`,
		`SELECT * FROM t WHERE a = 1 AND b = 'x' AND c = t.true`,
		`SELECT * FROM t WHERE a = 1 AND b = 'x' AND c = $1`,
	}
	first, _, _ := appendShape(nil, nil, same[0])
	for _, s := range same[1:] {
		if shape, _, ok := appendShape(nil, nil, s); !ok || !bytes.Equal(shape, first) {
			t.Errorf("%q: shape %q, want %q", s, shape, first)
		}
	}
	for _, s := range other {
		if shape, _, ok := appendShape(nil, nil, s); !ok || bytes.Equal(shape, first) {
			t.Errorf("%q: shape %q (ok %v), want one other than %q", s, shape, ok, first)
		}
	}
}

// TestAppendShapeAppends checks that appendShape appends to what dst and
// lits hold, and that literal offsets are offsets in sql.
func TestAppendShapeAppends(t *testing.T) {
	dst := []byte("prefix|")
	lits := []literal{{1, 2, litBool}}
	shape, lits, ok := appendShape(dst, lits, `SELECT 'a', 7`)
	if !ok {
		t.Fatal("bailed out")
	}
	if string(shape) != "prefix|SELECT \x00\x03, \x00\x01" {
		t.Errorf("shape %q", shape)
	}
	if fmt.Sprint(lits) != fmt.Sprint([]literal{{1, 2, litBool}, {7, 10, litString}, {12, 13, litInt}}) {
		t.Errorf("lits %v", lits)
	}
}

func TestAppendShapeAllocs(t *testing.T) {
	for _, sql := range []string{shapeLexBenchPgbench, shapeLexBenchJoin} {
		dst := make([]byte, 0, 1024)
		lits := make([]literal, 0, 32)
		allocs := testing.AllocsPerRun(100, func() {
			var ok bool
			if dst, lits, ok = appendShape(dst[:0], lits[:0], sql); !ok {
				t.Fatal("bailed out")
			}
		})
		if allocs != 0 {
			t.Errorf("%q: %v allocations per call, want 0", sql, allocs)
		}
	}
}

// shapeLexUnmask checks that shape is sql with each literal masked: putting
// sql[start:end] back for each 0x00, kind pair, in order, gives sql.
func shapeLexUnmask(shape []byte, sql string, lits []literal) error {
	var b strings.Builder
	k := 0
	for i := 0; i < len(shape); i++ {
		if shape[i] != 0 {
			b.WriteByte(shape[i])
			continue
		}
		if k >= len(lits) || i+1 >= len(shape) || shape[i+1] != byte(lits[k].kind) {
			return fmt.Errorf("mask %d at %d of shape %q does not match the literals %v", k, i, shape, lits)
		}
		b.WriteString(sql[lits[k].start:lits[k].end])
		k++
		i++
	}
	if k != len(lits) {
		return fmt.Errorf("shape %q has %d masks for %d literals", shape, k, len(lits))
	}
	if b.String() != sql {
		return fmt.Errorf("unmasking the shape gives %q", b.String())
	}
	return nil
}

// shapeLexScanner returns the literal tokens pg.Scan finds in sql, as
// appendShape should report them.
func shapeLexScanner(sql string) ([]literal, error) {
	res, err := pg.Scan(sql)
	if err != nil {
		return nil, err
	}
	var out []literal
	prevDot := false
	for _, t := range res.Tokens {
		if t.Token == pg.Token_SQL_COMMENT || t.Token == pg.Token_C_COMMENT {
			continue
		}
		l := literal{start: int(t.Start), end: int(t.End)}
		switch t.Token {
		case pg.Token_ICONST:
			l.kind = litInt
		case pg.Token_FCONST:
			l.kind = litNumeric
		case pg.Token_BCONST:
			l.kind = litBitString
		case pg.Token_XCONST:
			l.kind = litHexString
		case pg.Token_SCONST:
			switch sql[l.start] {
			case 'e', 'E':
				l.kind = litEString
			case '$':
				l.kind = litDollar
			case '\'':
				l.kind = litString
			default:
				return nil, fmt.Errorf("SCONST %q of no known form", sql[l.start:l.end])
			}
		case pg.Token_TRUE_P, pg.Token_FALSE_P:
			if !prevDot {
				l.kind = litBool
			}
		}
		prevDot = t.Token == pg.Token_ASCII_46
		if l.kind != 0 {
			out = append(out, l)
		}
	}
	return out, nil
}

// shapeLexCompare returns an error when lits, appendShape's literals of
// sql, are not the literal tokens of pg.Scan, or pg.Scan rejects sql.
func shapeLexCompare(sql string, lits []literal) error {
	want, err := shapeLexScanner(sql)
	if err != nil {
		return fmt.Errorf("appendShape read it, pg.Scan fails: %w", err)
	}
	if fmt.Sprint(lits) != fmt.Sprint(want) {
		return fmt.Errorf("literals differ from pg.Scan's\n got  %v\n want %v", lits, want)
	}
	return nil
}

// shapeLexCheck compares appendShape with pg.Scan on sql: when appendShape
// reads sql, pg.Scan must accept it and report the same literal tokens, and
// the shape must give sql back. It reports whether appendShape read sql.
func shapeLexCheck(t testing.TB, sql string) bool {
	t.Helper()
	shape, lits, ok := appendShape(nil, nil, sql)
	if !ok {
		return false
	}
	if err := shapeLexCompare(sql, lits); err != nil {
		t.Fatalf("%q: %v", sql, err)
	}
	if err := shapeLexUnmask(shape, sql, lits); err != nil {
		t.Fatalf("%q: %v", sql, err)
	}
	return true
}

// shapeLexBailReason names what made appendShape give up at offset at of
// sql, for the corpus test's log.
func shapeLexBailReason(sql string, at int) string {
	rest := sql[at:]
	c := rest[0]
	switch {
	case c == 0:
		return "NUL byte"
	case len(rest) > 2 && (c == 'u' || c == 'U') && rest[1] == '&':
		return "U& Unicode escapes"
	case (c == 'e' || c == 'E') && len(rest) > 1 && rest[1] == '\'':
		if lexEString(sql, at+2) < 0 && lexPlainString(sql, at+2) >= 0 {
			return `E'…' escape \digit, \x, \u, \U or \ before non-ASCII`
		}
		return "unterminated string"
	case c == '\'':
		if lexPlainString(sql, at+1) < 0 {
			return "unterminated string"
		}
		return "quote after a string (continuation)"
	case isIdentStart(c):
		if c == 'n' || c == 'N' {
			return "N'…' national string"
		}
		if lexBitString(sql, at+2) < 0 && len(rest) > 1 && rest[1] == '\'' {
			return "unterminated string"
		}
		return "identifier directly followed by a quote"
	case lexIsDigit(c) || c == '.':
		return "number followed by junk or .."
	case c == '$':
		if len(rest) > 1 && lexIsDigit(rest[1]) {
			return "parameter followed by junk"
		}
		return "dollar quote unterminated, or $ alone"
	case c == '"':
		return "unterminated or empty quoted identifier"
	case c == '/':
		return "unterminated comment"
	case lexClass[c] == lexOp:
		return "operator too long"
	}
	return fmt.Sprintf("other: %q", rest[:min(len(rest), 10)])
}

// TestAppendShapeCorpus compares the lexer with pg.Scan on every statement
// of the PostgreSQL regression corpus.
func TestAppendShapeCorpus(t *testing.T) {
	var total, read, nlits, dml, dmlRead int
	reasons := map[string]int{}
	dmlReasons := map[string]int{}
	eachCorpusStatement(t, func(_, stmt string) {
		total++
		isDML := false
		low := strings.ToLower(strings.TrimSpace(stmt))
		for _, p := range []string{"select", "insert", "update", "delete", "with", "merge", "values", "table"} {
			if strings.HasPrefix(low, p) {
				isDML = true
				break
			}
		}
		if isDML {
			dml++
		}
		_, lits, at := lexShape(nil, nil, stmt)
		if at >= 0 {
			r := shapeLexBailReason(stmt, at)
			reasons[r]++
			if isDML {
				dmlReasons[r]++
			}
			return
		}
		read++
		nlits += len(lits)
		if isDML {
			dmlRead++
		}
		shapeLexCheck(t, stmt)
	})
	t.Logf("%d statements: %d read (%.2f%%, %d literals, all as pg.Scan reads them), %d bail-outs", total, read,
		100*float64(read)/float64(total), nlits, total-read)
	t.Logf("DML (SELECT, INSERT, UPDATE, DELETE, WITH, MERGE, VALUES, TABLE): %d statements, %d read, %d bail-outs (%.2f%%)",
		dml, dmlRead, dml-dmlRead, 100*float64(dml-dmlRead)/float64(dml))
	logReasons := func(name string, m map[string]int) {
		var rs []string
		for r, n := range m {
			rs = append(rs, fmt.Sprintf("%6d  %s", n, r))
		}
		sort.Sort(sort.Reverse(sort.StringSlice(rs)))
		t.Logf("bail-outs by cause (%s):\n%s", name, strings.Join(rs, "\n"))
	}
	logReasons("all", reasons)
	logReasons("DML", dmlReasons)
	if total < 10000 {
		t.Errorf("only %d statements in the corpus", total)
	}
	if float64(dmlRead) < 0.98*float64(dml) {
		t.Errorf("the lexer bails out on more than 2%% of the corpus's DML")
	}
}

// FuzzShapeLex compares the lexer with pg.Scan on arbitrary text. The
// contract: whenever appendShape reads a text (ok), pg.Scan accepts it too
// and reports exactly the same literal tokens, and the shape gives the text
// back. When pg.Scan rejects a text, appendShape must therefore bail out;
// when it bails out, nothing is checked.
func FuzzShapeLex(f *testing.F) {
	for _, c := range shapeLexCases {
		f.Add(c.sql)
	}
	f.Add(shapeLexBenchJoin)
	f.Fuzz(func(t *testing.T, sql string) {
		shapeLexCheck(t, sql)
	})
}

const (
	shapeLexBenchPgbench = `SELECT abalance FROM pgbench_accounts WHERE aid = 48213;`
	// A 3-table join with 6 literals: a string, a numeric, a boolean, an
	// integer, an E'' string and a LIMIT.
	shapeLexBenchJoin = `SELECT o.id, c.name, p.title FROM orders o JOIN customers c ON c.id = o.customer_id ` +
		`JOIN products p ON p.id = o.product_id WHERE o.status = 'shipped' AND o.total > 99.95 ` +
		`AND c.active = true AND p.category_id = 3 AND o.note <> E'n/a\n' ORDER BY o.id LIMIT 50;`
)

func BenchmarkAppendShape(b *testing.B) {
	for _, c := range []struct{ name, sql string }{
		{"pgbench", shapeLexBenchPgbench},
		{"join3_6literals", shapeLexBenchJoin},
	} {
		b.Run(c.name, func(b *testing.B) {
			dst := make([]byte, 0, 1024)
			lits := make([]literal, 0, 32)
			b.ReportAllocs()
			b.SetBytes(int64(len(c.sql)))
			for b.Loop() {
				var ok bool
				if dst, lits, ok = appendShape(dst[:0], lits[:0], c.sql); !ok {
					b.Fatal("bailed out")
				}
			}
		})
	}
}

// shapeLexPieces are the fragments TestAppendShapeSoup strings together:
// the bytes where lexing rules meet.
var shapeLexPieces = []string{
	" ", "\n", "\r", "\t", "\v", "\f", "'", "''", "E'", "e'", "B'", "x'", "N'", "U&'", `U&"`, "u&", `\`, `\\`, `\'`,
	`\x`, `\1`, `\u`, `\n`, `"`, `""`, "$", "$$", "$a$", "$A$", "$_$", "$1", "$12", "$a", "0", "1", "9", "07", "_",
	"0x", "0X", "0o", "0b", "0x1F", "ff", "2147483647", "2147483648", "4294967296", ".", "..", "e", "E", "e+", "e-",
	"+", "-", "--", "/*", "*/", "*", "/", "!", "<", ">", "=", "::", ":", ",", ";", "(", ")", "[", "]", "true", "FALSE",
	"TrUe", "t", "a", "ab", "n", "u", "\xc3\xa9", "\xff", "select", "{", "}", "@", "#", "%", "^", "&", "|", "`", "?",
	"~", "\x01", "+-", "-+", "<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<", "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!", "$t$",
	"/* ' */", "-- '\n", "1.5", ".5", "1e5", "1_0",
}

// TestAppendShapeSoup compares the lexer with pg.Scan on many texts made of
// random fragments where the lexing rules meet (quotes, escapes, dollar
// tags, number forms, comment starts): where the fuzzer would need luck to
// combine them, this draws them by the thousand.
func TestAppendShapeSoup(t *testing.T) {
	n := 60000
	if testing.Short() {
		n = 5000
	}
	r := rand.New(rand.NewPCG(1, 2)) //nolint:gosec // a seeded generator: the test must be reproducible
	var b strings.Builder
	read := 0
	for i := 0; i < n; i++ {
		b.Reset()
		for k := 1 + r.IntN(12); k > 0; k-- {
			b.WriteString(shapeLexPieces[r.IntN(len(shapeLexPieces))])
		}
		if shapeLexCheck(t, b.String()) {
			read++
		}
	}
	t.Logf("%d texts, %d read", n, read)
}
