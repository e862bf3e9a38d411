package ttl

import (
	"slices"
	"testing"
)

func TestParseSearchPath(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{`"$user", public`, []string{"alice", "public"}},
		{`$user,public`, []string{"alice", "public"}},
		{`  Foo ,  BAR  `, []string{"foo", "bar"}},
		{`"My Schema", "a""b", "x,y"`, []string{"My Schema", `a"b`, "x,y"}},
		{`public, public, "public"`, []string{"public"}},
		{``, nil},
		{`""`, nil},
		{`pg_catalog, "$user"`, []string{"pg_catalog", "alice"}},
	} {
		if got := ParseSearchPath(c.in, "alice"); !slices.Equal(got, c.want) {
			t.Errorf("ParseSearchPath(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
