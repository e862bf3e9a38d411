package rewrite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	pg "github.com/pganalyze/pg_query_go/v6"

	"github.com/ttlproxy/ttlproxy/internal/corpus"
	"github.com/ttlproxy/ttlproxy/ttl"
)

// corpusDir returns the directory TTLPROXY_CORPUS_DIR names, or else finds
// shared/corpus/pg-regress-15 in a parent of the package directory
// (CONTRIBUTING.md, "The SQL corpus"). Outside CI a missing corpus skips the
// test.
func corpusDir(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("TTLPROXY_CORPUS_DIR"); d != "" {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() { //nolint:gosec // the corpus directory the developer names
			t.Fatalf("TTLPROXY_CORPUS_DIR=%s: not a directory (%v)", d, err)
		}
		return d
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		c := filepath.Join(dir, "shared", "corpus")
		if fi, err := os.Stat(c); err == nil && fi.IsDir() {
			return filepath.Join(c, "pg-regress-15")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("TTLPROXY_CORPUS_DIR is not set and shared/corpus is not above the package directory")
	}
	t.Skip("TTLPROXY_CORPUS_DIR is not set and shared/corpus is not above the package directory")
	return ""
}

// corpusFiles returns the regression corpus's scripts; a missing or empty
// corpus fails the test (or skips it outside CI, as corpusDir does).
func corpusFiles(t *testing.T) []string {
	t.Helper()
	dir := corpusDir(t)
	files, err := filepath.Glob(filepath.Join(dir, "*.sql"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no .sql files in %s: %v", dir, err)
	}
	return files
}

// eachCorpusStatement calls fn for every statement of the regression corpus,
// with the script's base name.
func eachCorpusStatement(t *testing.T, fn func(file, stmt string)) {
	t.Helper()
	for _, file := range corpusFiles(t) {
		raw, err := os.ReadFile(file) //nolint:gosec // a script of the corpus directory
		if err != nil {
			t.Fatal(err)
		}
		for _, stmt := range corpus.Statements(string(raw)) {
			fn(filepath.Base(file), stmt)
		}
	}
}

// corpusSession is a session whose catalog knows tenk1's columns.
func corpusSession() *State {
	cols := make([]Column, len(tenk1Columns))
	for i, c := range tenk1Columns {
		cols[i] = Column{Name: c}
	}
	return NewState(Session{Catalog: NewCatalog(CatalogData{Tables: map[string]*TableInfo{"public.tenk1": {Columns: cols}}})})
}

// corpusRules makes some of the regression suite's most used tables TTL
// tables.
var corpusRules = []ttl.Rule{
	{Table: "tenk1", DefaultTTL: time.Hour, RefreshOnUpdate: true},
	{Table: "onek", Kind: ttl.KindDerived, BaseColumn: "unique1", ExpireAfter: time.Hour},
	{Table: "int4_tbl", Column: "f1", ColumnType: ttl.TypeUnixSeconds, DefaultTTL: time.Minute},
	{Table: "int8_tbl", Kind: ttl.KindSidecar, SidecarTable: "int8_tbl_ttl", KeyColumns: []string{"q1", "q2"}},
	{Table: "road", Column: "name", ColumnType: ttl.TypeTimestamp},
	{Table: "emp", DefaultTTL: time.Hour},
	{Table: "foo", DefaultTTL: time.Hour, RefreshOnUpdate: true},
	{Table: "t1", Kind: ttl.KindDerived, BaseColumn: "a", IntervalColumn: "b", DefaultTTL: time.Hour, RefreshOnUpdate: true},
	{Table: "fktable", DefaultTTL: time.Hour},
}

var tenk1Columns = []string{"unique1", "unique2", "two", "four", "ten", "twenty", "hundred", "thousand",
	"twothousand", "fivethous", "tenthous", "odd", "even", "stringu1", "stringu2", "string4", "expires_at"}

func TestCorpusPgRegress(t *testing.T) {
	rw, err := New(corpusRules, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := corpusSession()
	var total, fast, parsedSame, rewritten int
	codes := map[string]int{}
	var internal []string
	eachCorpusStatement(t, func(file, stmt string) {
		total++
		res, err := rewriteNoPanic(rw, stmt, s)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || len(e.Code) != 5 {
				t.Errorf("%s: %q: error %v is not an *Error with a SQLSTATE", file, stmt, err)
				return
			}
			codes[e.Code]++
			if e.Code == "XX000" {
				internal = append(internal, fmt.Sprintf("%s: %s\n    %s", file, e.Message, stmt))
			}
			return
		}
		switch {
		case !res.Parsed:
			fast++
			if res.SQL != stmt {
				t.Errorf("%q: fast path changed the text", stmt)
			}
		case !res.Rewritten:
			parsedSame++
			if res.SQL != stmt {
				t.Errorf("%q: unchanged statement is not byte-identical", stmt)
			}
		default:
			rewritten++
			if _, err := pg.Parse(res.SQL); err != nil {
				t.Errorf("%s: rewrite does not parse: %v\n in:  %s\n out: %s", file, err, stmt, res.SQL)
			}
		}
	})
	var byCode []string
	for c, n := range codes {
		byCode = append(byCode, fmt.Sprintf("%s=%d", c, n))
	}
	sort.Strings(byCode)
	t.Logf("%d statements: %d passed the fast path, %d parsed and unchanged, %d rewritten, rejected %v",
		total, fast, parsedSame, rewritten, byCode)
	for _, m := range internal {
		t.Errorf("internal rewrite error in %s", m)
	}
}

func rewriteNoPanic(rw *Rewriter, sql string, s *State) (res Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
			panic(fmt.Sprintf("Rewrite(%q) panicked: %v", sql, p))
		}
	}()
	return rw.Rewrite(sql, s)
}
