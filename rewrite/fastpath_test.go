package rewrite

import (
	"strings"
	"testing"

	"github.com/ttlproxy/ttlproxy/ttl"
)

func TestFastPath(t *testing.T) {
	rw := newTestRewriter(t)
	cases := []struct {
		in     string
		parsed bool
	}{
		{`SELECT 1`, false},
		{`SELECT * FROM users`, false},
		{`SELECT * FROM sessions_archive`, false},
		{`SELECT * FROM old_sessions`, false},
		{`SELECT * FROM x$sessions`, false},
		{`SELECT * FROM sessions`, true},
		{`SELECT * FROM SeSsIoNs`, true},
		{`SELECT * FROM public.sessions`, true},
		{`SELECT * FROM "sessions"`, true},
		{`SELECT 'sessions'`, true}, // only the parser knows it is a string
		{`SELECT * FROM U&"\0073essions"`, true},
		{`SELECT * FROM u&"x"`, true},
		{`SELECT 'docs_ttl'`, true}, // sidecar registry (named in a query: refused, protect.go)
		{`SELECT * FROM "Mixed Case"`, true},
	}
	// The server truncates identifiers to 63 bytes at a character
	// boundary: a name of 60 bytes or more is reached by a longer one.
	long63, long59 := "t"+strings.Repeat("x", 62), "u"+strings.Repeat("x", 58)
	rwLong, err := New([]ttl.Rule{{Table: long63}, {Table: long59}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		in     string
		parsed bool
	}{
		{`SELECT * FROM ` + long63 + `_junk`, true},
		{`SELECT * FROM "` + long63 + `junk"`, true},
		{`SELECT * FROM ` + long59 + `_junk`, false},
		{`SELECT * FROM ` + long59 + `é`, false},
	} {
		if res, err := rwLong.Rewrite(c.in, nil); err != nil || res.Parsed != c.parsed {
			t.Errorf("%s: Parsed = %v, err %v, want %v", c.in, res.Parsed, err, c.parsed)
		}
	}
	for _, c := range cases {
		res, err := rw.Rewrite(c.in, nil)
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if res.Parsed != c.parsed {
			t.Errorf("%s: Parsed = %v, want %v", c.in, res.Parsed, c.parsed)
		}
		if !res.Rewritten && res.SQL != c.in {
			t.Errorf("%s: unchanged text differs", c.in)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = rw.Rewrite(`SELECT a, b, c FROM users WHERE id = $1 ORDER BY created_at`, nil) }); n != 0 {
		t.Errorf("fast path allocates %v times per call", n)
	}
}
