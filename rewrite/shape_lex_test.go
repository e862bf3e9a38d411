package rewrite

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	pg "github.com/pganalyze/pg_query_go/v6"
)

func TestAppendShape(t *testing.T) {
	type lit struct {
		text string
		kind litKind
	}
	for _, c := range []struct {
		sql  string
		lits []lit // nil with bail: appendShape must refuse
		bail bool
	}{
		{sql: `SELECT abalance FROM pgbench_accounts WHERE aid = 48213;`, lits: []lit{{"48213", litInt}}},
		{sql: `SELECT 'it''s', E'a\'b', E'\\', e'x\ny'`, lits: []lit{{`'it''s'`, litString}, {`E'a\'b'`, litEString}, {`E'\\'`, litEString}, {`e'x\ny'`, litEString}}},
		{sql: `SELECT $$a$b$$, $x$ $$ $x$, $1`, lits: []lit{{`$$a$b$$`, litDollar}, {`$x$ $$ $x$`, litDollar}}},
		{sql: `SELECT "a""b", a$b$c, "'" FROM t /* ' */ -- '
WHERE x = 1`, lits: []lit{{"1", litInt}}},
		{sql: `SELECT /* a /* nested ' */ still */ 2`, lits: []lit{{"2", litInt}}},
		{sql: `SELECT 1., .5, 1e-3, 1.5E+10, 1_000, 0x7FFFFFFF, 0x80000000, 2147483647, 2147483648, 0o17, 0b101, 0x_1f`,
			lits: []lit{{"1.", litNumeric}, {".5", litNumeric}, {"1e-3", litNumeric}, {"1.5E+10", litNumeric}, {"1_000", litInt},
				{"0x7FFFFFFF", litInt}, {"0x80000000", litNumeric}, {"2147483647", litInt}, {"2147483648", litNumeric},
				{"0o17", litInt}, {"0b101", litInt}, {"0x_1f", litInt}}},
		{sql: `SELECT 1::int, -1, t.true, TRUE, false, b'101', X'ff'`,
			lits: []lit{{"1", litInt}, {"1", litInt}, {"TRUE", litBool}, {"false", litBool}, {"b'101'", litBitString}, {"X'ff'", litHexString}}},
		{sql: `SELECT ex'1', date'2020-01-01'`, lits: []lit{{"'1'", litString}, {"'2020-01-01'", litString}}},
		{sql: `SELECT NULL, x FROM t WHERE y IS NULL`, lits: []lit{}},
		{sql: `SELECT U&'\0041'`, bail: true},
		{sql: `SELECT U&"a"`, bail: true},
		{sql: `SELECT N'x'`, bail: true},
		{sql: "SELECT 'a'\n'b'", bail: true},
		{sql: "SELECT 'a' -- c\n 'b'", bail: true},
		{sql: `SELECT E'\101'`, bail: true},
		{sql: `SELECT E'\x41'`, bail: true},
		{sql: `SELECT E'\u0041'`, bail: true},
		{sql: `SELECT 123abc`, bail: true},
		{sql: `SELECT 1..2`, bail: true},
		{sql: `SELECT 1e+`, bail: true},
		{sql: `SELECT 1_`, bail: true},
		{sql: `SELECT 0x`, bail: true},
		{sql: `SELECT $1a`, bail: true},
		{sql: `SELECT $a`, bail: true},
		{sql: `SELECT 'open`, bail: true},
		{sql: `SELECT "open`, bail: true},
		{sql: `SELECT $$open`, bail: true},
		{sql: `SELECT /* open`, bail: true},
		{sql: `SELECT ""`, bail: true},
		{sql: "SELECT 1\x00", bail: true},
		{sql: "SELECT '\xff'", bail: true},
	} {
		shape, lits, ok := appendShape(nil, nil, c.sql)
		if c.bail {
			if ok {
				t.Errorf("%q: read, want a bail-out (shape %q)", c.sql, shape)
			}
			continue
		}
		if !ok {
			t.Errorf("%q: bailed out", c.sql)
			continue
		}
		var got []lit
		for _, l := range lits {
			got = append(got, lit{c.sql[l.start:l.end], l.kind})
		}
		if fmt.Sprint(got) != fmt.Sprint(c.lits) {
			t.Errorf("%q:\n got  %v\n want %v", c.sql, got, c.lits)
		}
		if back := unmask(shape, c.sql, lits); back != c.sql {
			t.Errorf("%q: unmasking the shape gives %q", c.sql, back)
		}
	}
}

// unmask puts the literals back into a shape.
func unmask(shape []byte, sql string, lits []literal) string {
	var b strings.Builder
	k := 0
	for i := 0; i < len(shape); i++ {
		if shape[i] == 0 && i+1 < len(shape) && k < len(lits) && shape[i+1] == byte(lits[k].kind) {
			b.WriteString(sql[lits[k].start:lits[k].end])
			k++
			i++
			continue
		}
		b.WriteByte(shape[i])
	}
	return b.String()
}

// scannerLiterals returns the literal tokens PostgreSQL's scanner finds in
// sql, as appendShape should report them.
func scannerLiterals(sql string) ([]literal, error) {
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
			default:
				l.kind = litString
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

// checkAgainstScanner fails when appendShape reads sql and disagrees with
// PostgreSQL's scanner about its literals, or its shape does not give sql
// back.
func checkAgainstScanner(t testing.TB, sql string) (read bool) {
	t.Helper()
	shape, lits, ok := appendShape(nil, nil, sql)
	if !ok {
		return false
	}
	want, err := scannerLiterals(sql)
	if err != nil {
		// The scanner may fail on what is not a literal (an operator over
		// 63 bytes): every statement of the shape fails alike. A failure
		// inside a literal would differ between statements of one shape,
		// so the text with plain literals in their place must fail too.
		if _, err2 := scannerLiterals(plainLiterals(sql, lits)); err2 == nil {
			t.Fatalf("%q: appendShape read it, PostgreSQL's scanner fails inside a literal: %v", sql, err)
		}
		return true
	}
	if fmt.Sprint(lits) != fmt.Sprint(want) {
		t.Fatalf("%q: literals differ from PostgreSQL's scanner\n got  %v\n want %v", sql, lits, want)
	}
	if back := unmask(shape, sql, lits); back != sql {
		t.Fatalf("%q: unmasking the shape gives %q", sql, back)
	}
	return true
}

// plainLiterals returns sql with each literal replaced by a plain one of
// its kind.
func plainLiterals(sql string, lits []literal) string {
	plain := map[litKind]string{litInt: "1", litNumeric: "1.5", litString: "'x'", litEString: "E'x'",
		litBitString: "B'1'", litHexString: "X'1'", litDollar: "$$x$$", litBool: "TRUE"}
	var b strings.Builder
	cur := 0
	for _, l := range lits {
		b.WriteString(sql[cur:l.start])
		b.WriteString(plain[l.kind])
		cur = l.end
	}
	b.WriteString(sql[cur:])
	return b.String()
}

// TestAppendShapeCorpus compares the lexer with PostgreSQL's scanner on
// every statement of the regression corpus.
func TestAppendShapeCorpus(t *testing.T) {
	dir := corpusDir(t)
	files, err := filepath.Glob(filepath.Join(dir, "*.sql"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus files in %s: %v", dir, err)
	}
	var total, read, dml, dmlRead int
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		stmts, _ := corpusStatements(string(raw))
		for _, stmt := range stmts {
			total++
			ok := checkAgainstScanner(t, stmt)
			if ok {
				read++
			}
			low := strings.ToLower(strings.TrimSpace(stmt))
			for _, p := range []string{"select", "insert", "update", "delete", "with", "merge"} {
				if strings.HasPrefix(low, p) {
					dml++
					if ok {
						dmlRead++
					}
					break
				}
			}
		}
	}
	t.Logf("%d statements, %d read (%.1f%%); DML: %d, %d read (%.1f%%)", total, read, 100*float64(read)/float64(total),
		dml, dmlRead, 100*float64(dmlRead)/float64(dml))
	if float64(dmlRead) < 0.9*float64(dml) {
		t.Errorf("the lexer bails out on more than 10%% of the corpus's DML")
	}
}

// FuzzShapeLex compares the lexer with PostgreSQL's scanner on arbitrary
// text: whatever appendShape reads, it must read as the scanner does.
func FuzzShapeLex(f *testing.F) {
	for _, s := range []string{
		`SELECT 'it''s', E'a\'b', $$x$$, $t$y$t$, 1.5e3, 0x1F, 1_000, TRUE, t.false, B'1', X'f'`,
		"SELECT 'a'\n'b'", `SELECT /* /* */ */ "q""" -- x`, `SELECT 1..2, 1e+, 123abc, $1, $a`,
		`SELECT U&'\0041', N'x', E'\101'`, `SELECT .5, 1., 2147483648, 0b2`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		if len(sql) > 1024 {
			return // statements, not scripts: keeps each run short
		}
		checkAgainstScanner(t, sql)
	})
}

func BenchmarkAppendShape(b *testing.B) {
	for _, c := range []struct{ name, sql string }{
		{"pgbench_select", `SELECT abalance FROM pgbench_accounts WHERE aid = 48213;`},
		{"join3_6literals", `SELECT s.id, u.name, e.kind FROM sessions s JOIN users u ON u.id = s.owner JOIN events e ON e.sid = s.id
WHERE s.id = 17 AND u.name = 'user17' AND e.kind IN ('a', 'b') AND e.weight > 3.5 LIMIT 10`},
	} {
		b.Run(c.name, func(b *testing.B) {
			dst := make([]byte, 0, 512)
			lits := make([]literal, 0, 16)
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
