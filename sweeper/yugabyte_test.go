package sweeper

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ttlproxy/ttlproxy/ttl"
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

// TestYugabyteSidecarBatch runs the YugabyteDB batch of a sidecar rule's
// base table on PostgreSQL with stand-ins for ybctid (a unique bytea
// column) and yb_hash_code: over all hash slices it deletes exactly the
// doomed rows, and a row whose registry entry a foreground transaction is
// refreshing survives (the registry row is locked with the base row). It
// checks the statements' shape and locking, not YugabyteDB's behaviour.
func TestYugabyteSidecarBatch(t *testing.T) {
	e := setup(t)
	e.exec(t, ybHashCodeStandIn)
	e.exec(t, `CREATE TABLE ybitems (id bigint PRIMARY KEY, payload text,
		ybctid bytea UNIQUE DEFAULT decode(md5(random()::text || clock_timestamp()::text), 'hex'))`)
	e.exec(t, "CREATE TABLE ybitems_ttl (id bigint PRIMARY KEY, expires_at timestamptz NOT NULL)")
	e.exec(t, "INSERT INTO ybitems (id, payload) SELECT g, 'x' FROM generate_series(1, 60) g")
	e.exec(t, `INSERT INTO ybitems_ttl SELECT g, CASE WHEN g % 2 = 0 THEN now() - interval '1 hour'
		ELSE now() + interval '1 day' END FROM generate_series(1, 60) g`)
	tx := e.otherTx(t)
	if _, err := tx.Exec(e.ctx, "UPDATE ybitems_ttl SET expires_at = now() + interval '1 day' WHERE id = 4"); err != nil {
		t.Fatal(err)
	}
	r := ttl.Rule{Schema: "public", Table: "ybitems", Kind: ttl.KindSidecar, SidecarTable: "ybitems_ttl", KeyColumns: []string{"id"}}
	s := e.newSweeper(t, Config{Rules: []ttl.Rule{r}, BatchTimeout: 5 * time.Second})
	s.lockRows = true
	base := targets(&r)[0]
	if base.registry == nil {
		t.Fatal("the base target has no registry")
	}
	var total int64
	for _, sl := range hashSlices([]string{"id"}, ybHashBuckets) {
		lock, del := lockedBatchSQL(dialectYugabyte, base, sl, true)
		if !strings.Contains(lock, "SELECT s.ybctid") || !strings.Contains(lock, "FOR UPDATE OF s, _ttl_lock SKIP LOCKED") ||
			!strings.Contains(lock, "yb_hash_code(s.id) BETWEEN") || !strings.Contains(del, "t.ybctid OPERATOR(pg_catalog.=) ANY ($2::pg_catalog.bytea[])") {
			t.Fatalf("statements do not lock and delete by ybctid per yb_hash_code slice:\n%s\n%s", lock, del)
		}
		batch := s.batchFunc(dialectYugabyte, base, sl)
		for {
			n, picked, full, err := batch(e.ctx, e.nowUTC(t), 3)
			if err != nil {
				t.Fatalf("batch in slice %s: %v", sl.label, err)
			}
			if n != picked {
				t.Errorf("slice %s: deleted %d of %d picked", sl.label, n, picked)
			}
			total += n
			if !full {
				break
			}
		}
	}
	if err := tx.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	if total != 29 {
		t.Errorf("deleted %d rows, want 29 (30 expired, one being refreshed)", total)
	}
	left := e.ids(t, "ybitems", "")
	if len(left) != 31 || !slices.Contains(left, 4) {
		t.Errorf("%d rows left (want 31), refreshed row 4 left: %v", len(left), slices.Contains(left, 4))
	}
}
