package rewrite

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	pg "github.com/pganalyze/pg_query_go/v6"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// testRules covers every rule kind and column type.
var testRules = []ttl.Rule{
	{Table: "sessions", DefaultTTL: time.Hour, RefreshOnUpdate: true},
	{Table: "events", Kind: ttl.KindDerived, BaseColumn: "created_at", ExpireAfter: 24 * time.Hour},
	{Schema: "app", Table: "tokens", Column: "valid_until", ColumnType: ttl.TypeTimestamp, DefaultTTL: 30 * time.Minute},
	{Table: "Mixed Case", Column: "Exp"},
	{Table: "cache", Column: "exp_ms", ColumnType: ttl.TypeUnixMilliseconds, DefaultTTL: time.Minute},
	{Table: "jobs", Kind: ttl.KindDerived, BaseColumn: "created_at", IntervalColumn: "ttl_seconds", IntervalSeconds: true, DefaultTTL: 2 * time.Hour, RefreshOnUpdate: true},
	{Table: "docs", Kind: ttl.KindSidecar, SidecarTable: "docs_ttl", KeyColumns: []string{"id"}},
	{Table: "days", Column: "until", ColumnType: ttl.TypeDate, DefaultTTL: 48 * time.Hour},
}

// live is the sessions filter under qualifier q, spelled out.
func live(q string) string {
	return fmt.Sprintf(`(%s."expires_at" IS NULL OR %s."expires_at" OPERATOR(pg_catalog.>=) pg_catalog.now())`, q, q)
}

// join is the FROM item filter for sessions.
func join(item, q string, n int) string {
	return fmt.Sprintf("(%s JOIN (SELECT) AS _ttl_%d ON %s)", item, n, live(q))
}

const stamp = `(pg_catalog.now() OPERATOR(pg_catalog.+) interval '3600 seconds')`

// testRule returns the test rule for the table "schema.table".
func testRule(t testing.TB, name string) *ttl.Rule {
	t.Helper()
	for i := range testRules {
		if testRules[i].QualifiedName() == name {
			return &testRules[i]
		}
	}
	t.Fatalf("no test rule for %s", name)
	return nil
}

// ruleLive and ruleStamp spell the predicate and stamp of the other rule
// kinds through the rule itself: their text is predicate.go's to test, the
// splice around them is the rewriter's.
func ruleLive(t testing.TB, name, qual string) string {
	return testRule(t, name).LiveCondition(qual, ttl.Now)
}

func ruleStamp(t testing.TB, name string) string {
	r := testRule(t, name)
	return r.StampValue(r.DefaultTTL)
}

func newTestRewriter(t testing.TB) *Rewriter {
	t.Helper()
	rw, err := New(testRules, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return rw
}

type rwCase struct {
	name, in, out string
}

// checkRewrite rewrites c.in and compares with c.out (c.out empty means
// unchanged, byte for byte). Every output must parse, and rewriting it again
// must still parse.
func checkRewrite(t *testing.T, rw *Rewriter, s *State, c rwCase) {
	t.Helper()
	res, err := rw.Rewrite(c.in, s)
	if err != nil {
		t.Errorf("%s: Rewrite(%q): unexpected error %v", c.name, c.in, err)
		return
	}
	want := c.out
	if want == "" {
		want = c.in
	}
	if res.SQL != want {
		t.Errorf("%s:\n in:   %s\n got:  %s\n want: %s", c.name, c.in, res.SQL, want)
		return
	}
	if res.Rewritten != (want != c.in) {
		t.Errorf("%s: Rewritten = %v", c.name, res.Rewritten)
	}
	if _, err := pg.Parse(res.SQL); err != nil {
		t.Errorf("%s: output does not parse: %v\n%s", c.name, err, res.SQL)
		return
	}
	again, err := rw.Rewrite(res.SQL, s)
	if err != nil {
		t.Errorf("%s: rewriting the output: %v", c.name, err)
		return
	}
	if _, err := pg.Parse(again.SQL); err != nil {
		t.Errorf("%s: second rewrite does not parse: %v\n%s", c.name, err, again.SQL)
	}
}

type rejCase struct {
	name, in, code string
	// msg lists substrings the message must hold.
	msg []string
}

func checkReject(t *testing.T, rw *Rewriter, s *State, c rejCase) {
	t.Helper()
	res, err := rw.Rewrite(c.in, s)
	if err == nil {
		t.Errorf("%s: Rewrite(%q) = %q, want rejection %s", c.name, c.in, res.SQL, c.code)
		return
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Errorf("%s: error %T %v is not *Error", c.name, err, err)
		return
	}
	if e.Code != c.code {
		t.Errorf("%s: code %s (%s), want %s", c.name, e.Code, e.Message, c.code)
	}
	if !strings.HasPrefix(e.Message, "ttlproxy: ") {
		t.Errorf("%s: message %q does not start with ttlproxy: ", c.name, e.Message)
	}
	for _, m := range c.msg {
		if !strings.Contains(e.Message, m) {
			t.Errorf("%s: message %q does not name %q", c.name, e.Message, m)
		}
	}
}
