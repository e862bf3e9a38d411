package rewrite

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// substitute returns sql with each literal replaced by a random literal of
// the same kind, drawn from r. The strings are chosen to tempt a rewriter
// that reads literals: TTL table names, _ttl_N aliases, setting names.
func substitute(sql string, lits []literal, r *rand.Rand) string {
	var b strings.Builder
	cur := 0
	for _, l := range lits {
		b.WriteString(sql[cur:l.start])
		b.WriteString(randomLiteral(l.kind, r))
		cur = l.end
	}
	b.WriteString(sql[cur:])
	return b.String()
}

var temptingWords = []string{"", "x", "it''s", "sessions", "_ttl_7", "ttlproxy.ttl", "set_config", "search_path",
	"reset", "public.sessions", "1 day", "2020-01-01 00:00:00+00", "events", "docs_ttl", "u&", ";", "--", "/*", "$1"}

func randomLiteral(k litKind, r *rand.Rand) string {
	word := temptingWords[r.IntN(len(temptingWords))]
	switch k {
	case litInt:
		return fmt.Sprint(r.Int32N(1 << 30))
	case litNumeric:
		switch r.IntN(3) {
		case 0:
			return fmt.Sprintf("%d.%d", r.IntN(1000), r.IntN(1000))
		case 1:
			return fmt.Sprintf("%de%d", 1+r.IntN(9), r.IntN(20))
		default:
			return fmt.Sprint(3000000000 + r.Int64N(1e9))
		}
	case litString:
		return "'" + word + "'"
	case litEString:
		return "E'" + strings.ReplaceAll(word, "''", `\'`) + `\n'`
	case litBitString:
		return "B'" + []string{"", "0", "101", "1111"}[r.IntN(4)] + "'"
	case litHexString:
		return "X'" + []string{"", "f", "1F", "00ff"}[r.IntN(4)] + "'"
	case litDollar:
		return "$q$" + strings.ReplaceAll(word, "$", "") + "$q$"
	case litBool:
		return []string{"TRUE", "false", "True"}[r.IntN(3)]
	}
	panic(fmt.Sprintf("literal kind %d", k))
}

// checkShapePath rewrites three statements of sql's shape through a cached
// Rewriter (the first two confirm the template, the third is served from
// it) and compares each result with a rewrite of the same text without the
// cache. It reports whether sql had a shape and whether the third came from
// the template.
func checkShapePath(t testing.TB, cachedRW, fullRW *Rewriter, s *State, sql string, r *rand.Rand) (shaped, hit bool) {
	t.Helper()
	_, lits, ok := appendShape(nil, nil, sql)
	if !ok || len(lits) == 0 {
		return false, false
	}
	texts := []string{sql, substitute(sql, lits, r), substitute(sql, lits, r)}
	for i, text := range texts {
		got, gerr := rewriteNoPanic(cachedRW, text, s)
		want, werr := rewriteNoPanic(fullRW, text, s)
		var ge, we *Error
		errors.As(gerr, &ge)
		errors.As(werr, &we)
		if !sameResult(got, ge, want, we) || got.Parsed != want.Parsed {
			t.Fatalf("statement %d of the shape differs from a full rewrite\n in:   %s\n got:  %q %v\n want: %q %v", i, text, got.SQL, gerr, want.SQL, werr)
		}
		if i == 2 {
			hit = got.CacheHit
		}
	}
	if n := cachedRW.Stats().ShapeMismatches; n != 0 {
		t.Fatalf("%d shape mismatches after %q: the rewriter read a literal without saying so", n, sql)
	}
	return true, hit
}

func TestShapeCacheServesOtherLiterals(t *testing.T) {
	rw := newTestRewriter(t)
	full, err := New(testRules, Options{CacheSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	q := func(aid int) string {
		return fmt.Sprintf(`SELECT note FROM sessions WHERE id = %d AND note <> 'n%d'`, aid, aid)
	}
	for i, wantHit := range []bool{false, false, true, true} {
		res, err := rw.Rewrite(q(i+1), nil)
		want, _ := full.Rewrite(q(i+1), nil)
		if err != nil || res.SQL != want.SQL || !res.Rewritten {
			t.Fatalf("%d: %+v %v, want %q", i, res, err, want.SQL)
		}
		if res.CacheHit != wantHit {
			t.Errorf("%d: CacheHit %v, want %v (a shape is served once a second statement confirmed it)", i, res.CacheHit, wantHit)
		}
	}
	if st := rw.Stats(); st.ShapeHits != 2 || st.ShapeMismatches != 0 {
		t.Errorf("stats %+v", st)
	}
	// The candidate serves its own text before it is confirmed.
	rw = newTestRewriter(t)
	_, _ = rw.Rewrite(q(1), nil)
	if res, _ := rw.Rewrite(q(1), nil); !res.CacheHit {
		t.Errorf("repeat of the first text missed")
	}
	// Kinds are kept: an integer and a string do not share a shape.
	rw = newTestRewriter(t)
	for _, sql := range []string{`SELECT * FROM sessions WHERE id = 1`, `SELECT * FROM sessions WHERE id = 2`, `SELECT * FROM sessions WHERE id = '3'`} {
		res, _ := rw.Rewrite(sql, nil)
		if strings.Contains(sql, "'") && res.CacheHit {
			t.Errorf("%s: served from the integer shape", sql)
		}
	}
}

func TestShapeCacheLiteralDependent(t *testing.T) {
	rw := newTestRewriter(t)
	// set_config's literal arguments decide the outcome: never shared.
	ok := `SELECT set_config('ttlproxy.ttl', '5 minutes', false), id FROM sessions`
	bad := `SELECT set_config('ttlproxy.ttl', 'forever', false), id FROM sessions`
	for i := 0; i < 3; i++ {
		if _, err := rw.Rewrite(ok, nil); err != nil {
			t.Fatalf("%s: %v", ok, err)
		}
	}
	var e *Error
	if _, err := rw.Rewrite(bad, nil); !errors.As(err, &e) || e.Code != "22023" {
		t.Fatalf("%s: %v, want 22023", bad, err)
	}
	// A query string of several statements is judged by its words,
	// literals included.
	for _, sql := range []string{`SELECT 'a'; SELECT * FROM sessions`, `SELECT 'reset'; SELECT * FROM sessions`, `SELECT 'b'; SELECT * FROM sessions`} {
		full, _ := New(testRules, Options{CacheSize: -1})
		want, werr := full.Rewrite(sql, nil)
		got, gerr := rw.Rewrite(sql, nil)
		if got.SQL != want.SQL || fmt.Sprint(gerr) != fmt.Sprint(werr) {
			t.Errorf("%s: got %q %v, want %q %v", sql, got.SQL, gerr, want.SQL, werr)
		}
	}
	// A literal holding an alias name does not move the alias numbering.
	a, _ := rw.Rewrite(`SELECT * FROM sessions WHERE note = 'x'`, nil)
	b, _ := rw.Rewrite(`SELECT * FROM sessions WHERE note = '_ttl_7'`, nil)
	if strings.Replace(b.SQL, "_ttl_7", "x", 1) != a.SQL {
		t.Errorf("alias numbering read a literal:\n %s\n %s", a.SQL, b.SQL)
	}
	if n := rw.Stats().ShapeMismatches; n != 0 {
		t.Errorf("%d shape mismatches", n)
	}
}

func TestMapLiterals(t *testing.T) {
	lits := []literal{{10, 13, litInt}, {20, 23, litString}}
	for _, c := range []struct {
		name  string
		edits []edit
		want  []span
		ok    bool
	}{
		{"none", nil, []span{{10, 13}, {20, 23}}, true},
		{"insert before and at", []edit{{start: 5, end: 5, text: "ab"}, {start: 10, end: 10, text: "c"}}, []span{{13, 16}, {23, 26}}, true},
		{"insert at end of literal", []edit{{start: 13, end: 13, text: "zz"}}, []span{{10, 13}, {22, 25}}, true},
		{"replace between", []edit{{start: 14, end: 19, text: "q"}}, []span{{10, 13}, {16, 19}}, true},
		{"insert inside", []edit{{start: 11, end: 11, text: "x"}}, nil, false},
		{"replace overlapping", []edit{{start: 8, end: 11, text: "x"}}, nil, false},
		{"replace covering", []edit{{start: 19, end: 24, text: "x"}}, nil, false},
	} {
		got, ok := mapLiterals(c.edits, lits)
		if ok != c.ok || fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: %v %v, want %v %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

// shapeSeeds are statements of every shape kind the proxy sees.
var shapeSeeds = []string{
	`SELECT abalance FROM sessions WHERE aid = 48213;`,
	`SELECT s.id, u.name, e.kind FROM sessions s JOIN users u ON u.id = s.owner JOIN events e ON e.sid = s.id WHERE s.id = 17 AND u.name = 'bob' AND e.kind IN ('a', 'b') AND e.w > 1.5 LIMIT 10 OFFSET 0`,
	`UPDATE sessions SET note = 'x', hits = hits + 1 WHERE id = 42`,
	`UPDATE sessions SET expires_at = now() + interval '1 hour' WHERE id = 3`,
	`DELETE FROM sessions WHERE id = 9 AND note = E'a\nb'`,
	`INSERT INTO sessions (id, note) VALUES (1, 'a'), (2, 'b') ON CONFLICT (id) DO UPDATE SET note = 'c'`,
	`INSERT INTO sessions (id, note, expires_at) VALUES (1, 'a', '2030-01-01')`,
	`INSERT INTO docs (id, body) VALUES (5, $$text$$)`,
	`INSERT INTO jobs (id, ttl_seconds) VALUES (1, 60)`,
	`SELECT * FROM cache WHERE exp_ms > 1700000000000 AND flag = true`,
	`SELECT count(*) FROM events WHERE created_at > '2024-01-01' AND b = B'101' AND x = X'ff'`,
	`WITH c AS (SELECT id FROM sessions WHERE id < 100) SELECT * FROM c WHERE id > 5`,
	`MERGE INTO sessions s USING (VALUES (1, 'a')) v(id, note) ON s.id = v.id WHEN MATCHED THEN UPDATE SET note = v.note WHEN NOT MATCHED THEN INSERT (id, note) VALUES (v.id, v.note)`,
	`SELECT * FROM app.tokens t WHERE t.valid_until > '2020-01-01' AND t.id = 3 FOR UPDATE`,
	`SELECT ctid, * FROM sessions WHERE id = 1`,
	`SELECT * FROM "Mixed Case" WHERE "Exp" > 5`,
	`SELECT * FROM days WHERE until > '2020-01-01'::date`,
	`SELECT set_config('search_path', 'public', false) FROM sessions`,
}

// FuzzShapeCache checks the shape path against a full rewrite: for a
// statement and random literals of the same kinds in its place, a cached
// Rewriter (confirming the template, then serving from it) answers exactly
// what a Rewriter without cache answers, and never reports a mismatch.
func FuzzShapeCache(f *testing.F) {
	for i, s := range shapeSeeds {
		f.Add(s, uint64(i))
	}
	full, err := New(testRules, Options{CacheSize: -1})
	if err != nil {
		f.Fatal(err)
	}
	s := NewState(Session{Catalog: sessionsCatalog()})
	f.Fuzz(func(t *testing.T, sql string, seed uint64) {
		if len(sql) > 4096 {
			return
		}
		cached, err := New(testRules, Options{})
		if err != nil {
			t.Fatal(err)
		}
		checkShapePath(t, cached, full, s, sql, rand.New(rand.NewPCG(seed, 1))) //nolint:gosec // a seeded generator: the test must be reproducible
	})
}

// TestShapeCacheCorpus runs the shape-path check on every statement of the
// PostgreSQL regression corpus, with the corpus rules, and on the seeds.
func TestShapeCacheCorpus(t *testing.T) {
	full, err := New(corpusRules, Options{CacheSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	s := corpusSession()
	r := rand.New(rand.NewPCG(1, 2)) //nolint:gosec // a seeded generator: the test must be reproducible
	var total, shaped, hits int
	eachCorpusStatement(t, func(_, stmt string) {
		total++
		cached, err := New(corpusRules, Options{})
		if err != nil {
			t.Fatal(err)
		}
		sh, hit := checkShapePath(t, cached, full, s, stmt, r)
		if sh {
			shaped++
		}
		if hit {
			hits++
		}
	})
	t.Logf("%d statements: %d with literals and a shape, %d served from a confirmed template with other literals", total, shaped, hits)
	if hits == 0 {
		t.Errorf("no statement was served from a template")
	}
}

// sameResult reports whether two rewrites gave the same answer.
func sameResult(a Result, ae *Error, b Result, be *Error) bool {
	if (ae == nil) != (be == nil) {
		return false
	}
	if ae != nil {
		return *ae == *be
	}
	return a.SQL == b.SQL && a.Rewritten == b.Rewritten
}
