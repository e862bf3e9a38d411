package rewrite

import "testing"

// TestIntervalCanon: the interval spellings the recognition equates.
func TestIntervalCanon(t *testing.T) {
	for _, c := range []struct{ a, b string }{
		{"720:00:00", "2592000 seconds"},
		{"00:00:01.5", "1500000 microseconds"},
		{"8760:00:00", "31536000 seconds"},
		{"1 year 2 mons 3 days 04:05:06", "14 mons 3 days 14706 seconds"},
		{"-00:00:01", "-1 seconds"},
	} {
		a, okA := intervalCanon(c.a)
		b, okB := intervalCanon(c.b)
		if !okA || !okB || a != b {
			t.Errorf("%q = %q (%v), %q = %q (%v): want equal", c.a, a, okA, c.b, b, okB)
		}
	}
	for _, differ := range [][2]string{{"1 day", "24:00:00"}, {"1 mon", "30 days"}} {
		a, _ := intervalCanon(differ[0])
		b, _ := intervalCanon(differ[1])
		if a == b {
			t.Errorf("%q and %q read alike (%s): PostgreSQL adds them differently", differ[0], differ[1], a)
		}
	}
	for _, bad := range []string{"P30D", "1 fortnight", "1:2", "soon", "5"} {
		if got, ok := intervalCanon(bad); ok {
			t.Errorf("%q read as %q, want refused", bad, got)
		}
	}
}
