package sweeper

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// A kindCase is one expiry rule kind with a fixture: rows whose expiry sits
// around a cutoff, each with the verdict computed in Go from its intended
// expiry instant (expired when the instant is before the cutoff; NULL never).
type kindCase struct {
	name string
	rule ttl.Rule // Schema/Table filled in by the test
	// ddl creates the table (and registry) under the names %[1]s (table)
	// and %[2]s (registry).
	ddl string
	// rows returns the fixture for cutoff c.
	rows func(c time.Time) []fixtureRow
}

// fixtureRow is one base row: SQL literals for the case's columns, registry
// literals for a sidecar, and whether it is expired at the cutoff.
type fixtureRow struct {
	cols    map[string]string
	reg     map[string]string // sidecar registry row; nil = none
	expired bool
}

// deltas are the offsets around the cutoff the fixtures use.
var deltas = []time.Duration{
	-72 * time.Hour, -24 * time.Hour, -time.Hour, -time.Second, -time.Millisecond, -time.Microsecond,
	0,
	time.Microsecond, time.Millisecond, time.Second, time.Hour, 24 * time.Hour, 72 * time.Hour,
}

// cutoffs: midnight exactly (the date and whole-unit boundaries) and a
// sub-millisecond instant (the rounding of Unix units).
var cutoffs = []time.Time{
	time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC),
	time.Date(2030, 1, 1, 12, 34, 56, 789_012_000, time.UTC),
}

func tstz(t time.Time) string {
	return "'" + t.UTC().Format("2006-01-02 15:04:05.999999") + "+00'::timestamptz"
}

func tsLit(t time.Time) string {
	return "'" + t.UTC().Format("2006-01-02 15:04:05.999999") + "'::timestamp"
}

func columnCase(typ ttl.ColumnType, sqlType string) kindCase {
	return kindCase{
		name: "column_" + string(typ),
		rule: ttl.Rule{Kind: ttl.KindColumn, Column: "valid_until", ColumnType: typ},
		ddl:  "CREATE TABLE %[1]s (id bigint PRIMARY KEY, valid_until " + sqlType + ")",
		rows: func(c time.Time) []fixtureRow {
			var out []fixtureRow
			add := func(lit string, at time.Time) {
				out = append(out, fixtureRow{cols: map[string]string{"valid_until": lit}, expired: at.Before(c)})
			}
			for _, d := range deltas {
				e := c.Add(d)
				switch typ {
				case ttl.TypeTimestamptz:
					add(tstz(e), e)
				case ttl.TypeTimestamp:
					add(tsLit(e), e)
				case ttl.TypeDate:
					day := time.Date(e.Year(), e.Month(), e.Day(), 0, 0, 0, 0, time.UTC)
					add("'"+day.Format("2006-01-02")+"'::date", day)
				default:
					unit := unixUnit(typ)
					v := e.UnixNano() / int64(unit)
					for k := int64(-1); k <= 1; k++ {
						add(strconv.FormatInt(v+k, 10), time.Unix(0, (v+k)*int64(unit)))
					}
				}
			}
			out = append(out, fixtureRow{cols: map[string]string{"valid_until": "NULL"}})
			return out
		},
	}
}

func unixUnit(typ ttl.ColumnType) time.Duration {
	switch typ {
	case ttl.TypeUnixMilliseconds:
		return time.Millisecond
	case ttl.TypeUnixMicroseconds:
		return time.Microsecond
	case ttl.TypeUnixNanoseconds:
		return time.Nanosecond
	}
	return time.Second
}

// lifetimes are the per-row lifetimes of the derived fixtures, whole
// seconds and a full day (an interval that is not a day in every time zone).
var lifetimes = []time.Duration{90 * time.Second, time.Hour, 24 * time.Hour}

func kindCases() []kindCase {
	cases := []kindCase{
		columnCase(ttl.TypeTimestamptz, "timestamptz"),
		columnCase(ttl.TypeTimestamp, "timestamp"),
		columnCase(ttl.TypeDate, "date"),
		columnCase(ttl.TypeUnixSeconds, "bigint"),
		columnCase(ttl.TypeUnixMilliseconds, "bigint"),
		columnCase(ttl.TypeUnixMicroseconds, "bigint"),
		columnCase(ttl.TypeUnixNanoseconds, "bigint"),
		{
			name: "derived_fixed",
			rule: ttl.Rule{Kind: ttl.KindDerived, BaseColumn: "created_at", ExpireAfter: time.Hour},
			ddl:  "CREATE TABLE %[1]s (id bigint PRIMARY KEY, created_at timestamptz)",
			rows: func(c time.Time) []fixtureRow {
				var out []fixtureRow
				for _, d := range deltas {
					base := c.Add(-time.Hour + d)
					out = append(out, fixtureRow{cols: map[string]string{"created_at": tstz(base)}, expired: d < 0})
				}
				return append(out, fixtureRow{cols: map[string]string{"created_at": "NULL"}})
			},
		},
		{
			name: "derived_interval",
			rule: ttl.Rule{Kind: ttl.KindDerived, BaseColumn: "created_at", IntervalColumn: "lifetime"},
			ddl:  "CREATE TABLE %[1]s (id bigint PRIMARY KEY, created_at timestamptz, lifetime interval)",
			rows: func(c time.Time) []fixtureRow {
				var out []fixtureRow
				for _, l := range lifetimes {
					ivl := fmt.Sprintf("interval '%d seconds'", int64(l/time.Second))
					if l == 24*time.Hour {
						ivl = "interval '1 day'"
					}
					for _, d := range deltas {
						base := c.Add(-l + d)
						out = append(out, fixtureRow{cols: map[string]string{"created_at": tstz(base), "lifetime": ivl}, expired: d < 0})
					}
				}
				return append(out,
					fixtureRow{cols: map[string]string{"created_at": "NULL", "lifetime": "interval '1 second'"}},
					fixtureRow{cols: map[string]string{"created_at": tstz(c.Add(-72 * time.Hour)), "lifetime": "NULL"}})
			},
		},
		{
			name: "derived_seconds",
			rule: ttl.Rule{Kind: ttl.KindDerived, BaseColumn: "created_at", IntervalColumn: "ttl_seconds", IntervalSeconds: true},
			ddl:  "CREATE TABLE %[1]s (id bigint PRIMARY KEY, created_at timestamptz, ttl_seconds integer)",
			rows: func(c time.Time) []fixtureRow {
				var out []fixtureRow
				for _, l := range lifetimes {
					for _, d := range deltas {
						base := c.Add(-l + d)
						out = append(out, fixtureRow{cols: map[string]string{
							"created_at": tstz(base), "ttl_seconds": strconv.FormatInt(int64(l/time.Second), 10),
						}, expired: d < 0})
					}
				}
				return append(out,
					fixtureRow{cols: map[string]string{"created_at": "NULL", "ttl_seconds": "1"}},
					fixtureRow{cols: map[string]string{"created_at": tstz(c.Add(-72 * time.Hour)), "ttl_seconds": "NULL"}})
			},
		},
		sidecarCase("sidecar_single", []string{"id"},
			"CREATE TABLE %[1]s (id bigint PRIMARY KEY, payload text); "+
				"CREATE TABLE %[2]s (id bigint PRIMARY KEY, expires_at timestamptz)"),
		sidecarCase("sidecar_composite", []string{"tenant", "id"},
			"CREATE TABLE %[1]s (tenant text, id bigint, payload text, PRIMARY KEY (tenant, id)); "+
				"CREATE TABLE %[2]s (tenant text, id bigint, expires_at timestamptz, PRIMARY KEY (tenant, id))"),
	}
	return cases
}

func sidecarCase(name string, keys []string, ddl string) kindCase {
	return kindCase{
		name: name,
		rule: ttl.Rule{Kind: ttl.KindSidecar, KeyColumns: keys},
		ddl:  ddl,
		rows: func(c time.Time) []fixtureRow {
			var out []fixtureRow
			for _, d := range deltas {
				e := c.Add(d)
				out = append(out, fixtureRow{
					cols:    map[string]string{"payload": "'x'"},
					reg:     map[string]string{"expires_at": tstz(e)},
					expired: e.Before(c),
				})
			}
			return append(out,
				fixtureRow{cols: map[string]string{"payload": "'no registry row'"}},
				fixtureRow{cols: map[string]string{"payload": "'null expiry'"}, reg: map[string]string{"expires_at": "NULL"}})
		},
	}
}

// insertFixture creates the case's tables and rows; ids are 1..n in order.
// For a sidecar, it also adds registry rows without a base row (ids from
// 1001): expired ones, which the sweeper removes, and live ones, which it
// keeps. It returns the registry ids expected to survive.
func insertFixture(t *testing.T, e *env, kc kindCase, r *ttl.Rule, rows []fixtureRow) (regKept []int64) {
	t.Helper()
	e.exec(t, fmt.Sprintf(kc.ddl, r.QuotedName(), r.SidecarName()))
	keyVals := func(id int) (cols, vals []string) {
		if slices.Contains(r.KeyColumns, "tenant") {
			return []string{"tenant", "id"}, []string{fmt.Sprintf("'tenant%d'", id%3), strconv.Itoa(id)}
		}
		return []string{"id"}, []string{strconv.Itoa(id)}
	}
	insert := func(table string, id int, m map[string]string) {
		cols, vals := keyVals(id)
		names := make([]string, 0, len(m))
		for k := range m {
			names = append(names, k)
		}
		slices.Sort(names)
		for _, k := range names {
			cols = append(cols, k)
			vals = append(vals, m[k])
		}
		e.exec(t, fmt.Sprintf("INSERT INTO %s (%s) VALUES (%s)", table, strings.Join(cols, ", "), strings.Join(vals, ", ")))
	}
	for i, row := range rows {
		insert(r.QuotedName(), i+1, row.cols)
		if row.reg != nil {
			insert(r.SidecarName(), i+1, row.reg)
		}
	}
	if r.RuleKind() == ttl.KindSidecar {
		insert(r.SidecarName(), 1001, map[string]string{"expires_at": "'2000-01-01+00'::timestamptz"})
		insert(r.SidecarName(), 1002, map[string]string{"expires_at": "'2999-01-01+00'::timestamptz"})
		insert(r.SidecarName(), 1003, map[string]string{"expires_at": "NULL"})
		regKept = []int64{1002, 1003}
	}
	return regKept
}

// TestSharedDefinition checks, for every rule kind and at fixed cutoffs, that
// the rows the read filter hides (NOT LiveCondition) are exactly the rows the
// sweeper deletes, and that both agree with the verdict computed in Go.
func TestSharedDefinition(t *testing.T) {
	e := setup(t)
	e.exec(t, "SET TimeZone = 'UTC'") // see TestDerivedIntervalTimeZone
	for _, kc := range kindCases() {
		for ci, c := range cutoffs {
			t.Run(fmt.Sprintf("%s/cutoff%d", kc.name, ci), func(t *testing.T) {
				r := kc.rule
				r.Schema = "public"
				r.Table = fmt.Sprintf("%s_%d", kc.name, ci)
				if r.RuleKind() == ttl.KindSidecar {
					r.SidecarTable = r.Table + "_ttl"
				}
				rows := kc.rows(c)
				regKept := insertFixture(t, e, kc, &r, rows)

				var all, want []int64
				for i, row := range rows {
					all = append(all, int64(i+1))
					if row.expired {
						want = append(want, int64(i+1))
					}
				}
				if len(want) == 0 || len(want) == len(all) {
					t.Fatalf("fixture has %d expired rows of %d: not a boundary test", len(want), len(all))
				}
				live := e.ids(t, r.QuotedName(), r.LiveCondition("s", "$1::timestamptz"), c)
				hidden := difference(all, live)
				if !slices.Equal(hidden, want) {
					t.Errorf("read filter hides %v, want %v", hidden, want)
				}

				s := e.newSweeper(t, Config{Rules: []ttl.Rule{r}, BatchSize: 4, Registerer: prometheus.NewRegistry()})
				s.cutoffFunc = func() time.Time { return c }
				res, err := s.RunOnce(e.ctx)
				if err != nil {
					t.Fatalf("RunOnce: %v", err)
				}
				if len(res.Errors) > 0 {
					t.Fatalf("RunOnce errors: %v", res.Errors)
				}
				deleted := difference(all, e.ids(t, r.QuotedName(), ""))
				if !slices.Equal(deleted, hidden) {
					t.Errorf("sweeper deleted %v, read filter hides %v", deleted, hidden)
				}
				if got := res.Deleted[r.QualifiedName()]; got != int64(len(deleted)) {
					t.Errorf("RunResult.Deleted = %d, want %d", got, len(deleted))
				}
				if r.RuleKind() == ttl.KindSidecar {
					// Registry: entries of swept rows and expired orphans
					// gone; the rest kept.
					var wantReg []int64
					for i, row := range rows {
						if row.reg != nil && !row.expired {
							wantReg = append(wantReg, int64(i+1))
						}
					}
					wantReg = append(wantReg, regKept...)
					gotReg := e.ids(t, r.SidecarName(), "")
					if !slices.Equal(gotReg, wantReg) {
						t.Errorf("registry keeps %v, want %v", gotReg, wantReg)
					}
					regName := r.SchemaName() + "." + r.SidecarTable
					if got, want := res.Deleted[regName], int64(len(deleted)+1); got != want {
						t.Errorf("registry rows deleted = %d, want %d", got, want)
					}
				}
				// A second run at the same cutoff finds nothing.
				res, err = s.RunOnce(e.ctx)
				if err != nil || res.Deleted[r.QualifiedName()] != 0 {
					t.Errorf("second run: deleted %v, err %v", res.Deleted, err)
				}
			})
		}
	}
}

// difference returns the elements of all (sorted) that are not in some.
func difference(all, some []int64) []int64 {
	var out []int64
	for _, x := range all {
		if !slices.Contains(some, x) {
			out = append(out, x)
		}
	}
	return out
}
