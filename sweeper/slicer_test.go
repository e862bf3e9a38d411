package sweeper

import (
	"slices"
	"strings"
	"testing"

	"github.com/ttlproxy/ttlproxy/ttl"
)

func TestHashColumns(t *testing.T) {
	for _, tc := range []struct {
		def  string
		want []string
	}{
		{`CREATE UNIQUE INDEX t_pkey ON public.t USING lsm (c1 HASH)`, []string{"c1"}},
		{`CREATE UNIQUE INDEX t_pkey ON public.t USING lsm (c1 HASH, c2 ASC)`, []string{"c1"}},
		{`CREATE UNIQUE INDEX t_pkey ON public.t USING lsm ((tenant, id) HASH, ts DESC)`, []string{"tenant", "id"}},
		{`CREATE UNIQUE INDEX t_pkey ON public.t USING lsm (("Tenant", "a""b") HASH)`, []string{`"Tenant"`, `"a""b"`}},
		{`CREATE UNIQUE INDEX t_pkey ON public.t USING lsm ("My Col" HASH, x ASC)`, []string{`"My Col"`}},
		{`CREATE UNIQUE INDEX t_pkey ON public.t USING lsm (c1 ASC, c2 ASC)`, nil},  // range sharded
		{`CREATE UNIQUE INDEX t_pkey ON public.t USING btree (c1)`, nil},            // PostgreSQL
		{`CREATE UNIQUE INDEX t_pkey ON public.t USING lsm ((lower(x)) HASH)`, nil}, // expression
		{`CREATE UNIQUE INDEX t_pkey ON public.t USING lsm (c1 HASH`, nil},          // unbalanced
	} {
		if got := hashColumns(tc.def); !slices.Equal(got, tc.want) {
			t.Errorf("hashColumns(%q) = %q, want %q", tc.def, got, tc.want)
		}
	}
}

func TestHashSlicesCoverTheHashSpace(t *testing.T) {
	sl := hashSlices([]string{"a", `"B"`}, ybHashBuckets)
	if len(sl) != ybHashBuckets {
		t.Fatalf("%d slices", len(sl))
	}
	next := 0
	for _, s := range sl {
		if s.lo != next || s.hi < s.lo {
			t.Fatalf("slice %s does not continue at %d", s.label, next)
		}
		next = s.hi + 1
	}
	if next != ybHashCodeSpace {
		t.Fatalf("slices end at %d, want %d", next, ybHashCodeSpace)
	}
	if got, want := sl[1].cond("s"), `yb_hash_code(s.a, s."B") BETWEEN 4096 AND 8191`; got != want {
		t.Errorf("cond = %s, want %s", got, want)
	}
	if wholeTable.cond("s") != "" {
		t.Errorf("whole table has a condition")
	}
}

// TestYugabyteStatement runs the YugabyteDB batch statement on PostgreSQL
// with stand-ins for ybctid (a unique column) and yb_hash_code (a function
// onto 0..65535): it checks the statement's shape and that the slices
// together delete exactly the expired rows, not YugabyteDB's behaviour.
func TestYugabyteStatement(t *testing.T) {
	e := setup(t)
	e.exec(t, `CREATE FUNCTION yb_hash_code(bigint) RETURNS int LANGUAGE sql IMMUTABLE
		AS $$ SELECT (abs(hashint8($1)) % 65536)::int $$`)
	e.exec(t, `CREATE TABLE yb (id bigint PRIMARY KEY, ybctid uuid UNIQUE DEFAULT gen_random_uuid(), expires_at timestamptz)`)
	e.exec(t, `INSERT INTO yb (id, expires_at) SELECT g, CASE WHEN g % 3 = 0 THEN now() - interval '1 day'
		WHEN g % 3 = 1 THEN now() + interval '1 day' END FROM generate_series(1, 600) g`)
	r := ttl.Rule{Schema: "public", Table: "yb"}
	tg := targets(&r)[0]
	var total int64
	for _, sl := range hashSlices([]string{"id"}, ybHashBuckets) {
		sql := deleteBatchSQL(dialectYugabyte, tg, sl, true)
		if strings.Contains(sql, " t.ctid") || !strings.Contains(sql, "yb_hash_code(s.id) BETWEEN") {
			t.Fatalf("statement does not slice by ybctid and yb_hash_code: %s", sql)
		}
		for {
			tag, err := e.conn.Exec(e.ctx, sql, e.nowUTC(t), int64(7))
			if err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
			total += tag.RowsAffected()
			if tag.RowsAffected() < 7 {
				break
			}
		}
	}
	if total != 200 {
		t.Errorf("deleted %d rows, want 200", total)
	}
	if n := len(e.ids(t, "yb", "s.expires_at < now()")); n != 0 {
		t.Errorf("%d expired rows left", n)
	}
	if n := e.count(t, "yb"); n != 400 {
		t.Errorf("%d rows left, want 400", n)
	}
}
