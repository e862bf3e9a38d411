package sweeper

import (
	"strings"
	"testing"
)

func TestParseYBRelease(t *testing.T) {
	for _, tc := range []struct {
		version string
		want    ybRelease
		ok      bool
	}{
		// As the YugabyteDB documentation and ysql_dump outputs print them.
		{"PostgreSQL 11.2-YB-2.5.0.0-b0 on x86_64-pc-linux-gnu, 64-bit", ybRelease{2, 5, 0, 0}, true},
		{"PostgreSQL 11.2-YB-2.20.0.0-b0 on x86_64-pc-linux-gnu", ybRelease{2, 20, 0, 0}, true},
		{"PostgreSQL 15.2-YB-2.23.0.1500-b0 on x86_64", ybRelease{2, 23, 0, 1500}, true},
		{"PostgreSQL 15.2-YB-2025.1.0.0-b168 on aarch64", ybRelease{2025, 1, 0, 0}, true},
		{"PostgreSQL 11.2-YB-2.25", ybRelease{2, 25, 0, 0}, true},
		{"PostgreSQL 15.18 (Debian 15.18-0+deb12u1) on x86_64-pc-linux-gnu", ybRelease{}, false},
	} {
		got, ok := parseYBRelease(tc.version)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseYBRelease(%q) = %v, %v; want %v, %v", tc.version, got, ok, tc.want, tc.ok)
		}
	}
}

func TestYBCoordination(t *testing.T) {
	for _, tc := range []struct {
		version, silenced string
		// want is a word of the reason, or "" when advisory locks
		// coordinate.
		want string
	}{
		{"PostgreSQL 11.2-YB-2.20.0.0-b0", "", "no advisory locks"},
		{"PostgreSQL 11.2-YB-2.25.0.0-b0", "", "no advisory locks"},
		{"PostgreSQL 15.2-YB-2.25.1.0-b0", "", ""},
		{"PostgreSQL 15.2-YB-2.27.0.0-b0", "off", ""},
		{"PostgreSQL 11.2-YB-2024.2.3.0-b0", "", "no advisory locks"},
		{"PostgreSQL 15.2-YB-2025.1.0.0-b0", "", ""},
		{"PostgreSQL 15.2-YB-2025.2.1.0-b0", "on", "one node only"},
		{"PostgreSQL 15.2-YB-unknown", "", "not in version()"},
	} {
		got := ybCoordination(tc.version, tc.silenced)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("ybCoordination(%q, %q) = %q; want %q", tc.version, tc.silenced, got, tc.want)
		}
	}
}

func TestYBOriginWarning(t *testing.T) {
	for version, warn := range map[string]bool{
		"PostgreSQL 15.2-YB-2025.2.1.0-b0": false,
		"PostgreSQL 15.2-YB-2026.1.0.0-b0": false,
		"PostgreSQL 15.2-YB-2025.1.2.0-b0": true,
		"PostgreSQL 15.2-YB-2.25.1.0-b0":   true,
	} {
		if got := ybOriginWarning(version) != ""; got != warn {
			t.Errorf("ybOriginWarning(%q) warns: %v; want %v", version, got, warn)
		}
	}
}
