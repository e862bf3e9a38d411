package ttl

import (
	"testing"
	"time"
)

func TestParseTTLSetting(t *testing.T) {
	d := func(s string) time.Duration {
		v, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	ok := []struct {
		in   string
		want time.Duration
	}{
		{"00:10:00", d("10m")},
		{"10:30", d("10h30m")},
		{"1:02:03.5", d("1h2m3.5s")},
		{"10 minutes", d("10m")},
		{"10 min", d("10m")},
		{"10min", d("10m")},
		{"1 day", d("24h")},
		{"1 day 02:00:00", d("26h")},
		{"2 days 1 hour 30 mins", d("49h30m")},
		{"@ 1 hour", d("1h")},
		{"1 week", d("168h")},
		{"90s", d("90s")},
		{"1h30m", d("1h30m")},
		{"1.5h", d("90m")},
		{"7d", d("168h")},
		{"1.5d", d("36h")},
		{"600", d("10m")},
		{"0", 0},
		{"500 ms", d("500ms")},
		{"PT10M", d("10m")},
		{"P1DT2H", d("26h")},
		{"P2W", d("336h")},
		{"  1 HOUR  ", d("1h")},
	}
	for _, c := range ok {
		got, err := ParseTTLSetting(c.in)
		if err != nil || got == nil || *got != c.want {
			t.Errorf("ParseTTLSetting(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "  ", "NULL", "null"} {
		if got, err := ParseTTLSetting(in); got != nil || err != nil {
			t.Errorf("ParseTTLSetting(%q) = %v, %v; want nil, nil", in, got, err)
		}
	}
	for _, in := range []string{"1 month", "1 year", "P1M", "P1Y", "-00:10:00", "-1h", "1 hour ago", "abc", "10 parsecs", "1:2:3:4", "PT", "P", "1e400 days", "P1e300D"} {
		if got, err := ParseTTLSetting(in); err == nil {
			t.Errorf("ParseTTLSetting(%q) = %v, want an error", in, *got)
		}
	}
}
