package tests

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// The oracle schema and the random statement generator of TestOracle.
//
// Every table has id int, k int and v text, so that any two can be joined,
// NATURAL and USING joins find common columns, and set operations line up.
// Rows cycle through six expiry states (live in a day, expired a day ago,
// NULL, expired one second ago, live for an hour, expired an hour ago), each
// table with its own phase, so that join keys match live and expired rows
// alike. Nothing expires during a run: the nearest future expiry is an hour
// away (two days for dates).

type oType uint8

const (
	oInt oType = iota
	oText
)

type oColumn struct {
	name string
	typ  oType
}

// oTable is one table of the oracle schema.
type oTable struct {
	schema string // "" means public
	name   string
	cols   []oColumn // columns generated expressions may use
	all    []string  // every column, in order
	rule   *ttl.Rule
	// view: a view created directly that reads TTL tables; the proxy
	// expands it. It is read, never written.
	view bool
}

func (t *oTable) ttl() bool { return t.rule != nil }

// oracleRows is the row source of the base tables: n rows, id 1..n, k in
// 0..4 with some NULLs, v in a..d with some NULLs, st the expiry state.
func oracleRows(phase, n int) string {
	return fmt.Sprintf(`(SELECT i AS id,
		CASE WHEN i %% 9 = 0 THEN NULL ELSE i %% 5 END AS k,
		CASE WHEN i %% 7 = 3 THEN NULL ELSE chr(97 + i %% 4) END AS v,
		(i + %d) %% 6 AS st
		FROM generate_series(1, %d) AS i) AS r`, phase, n)
}

// oracleTZ is the timestamptz expiry of state st.
const oracleTZ = `CASE st WHEN 0 THEN now() + interval '1 day' WHEN 1 THEN now() - interval '1 day'
	WHEN 2 THEN NULL WHEN 3 THEN now() - interval '1 second' WHEN 4 THEN now() + interval '1 hour'
	ELSE now() - interval '1 hour' END`

// oracleSchema returns the setup statements (tables, rows, the row-level
// security policies of the oracle role), the rules of the TTL tables, and the
// tables the generator uses.
func oracleSchema() (setup []string, rules []ttl.Rule, tables []*oTable) {
	ikv := []oColumn{{"id", oInt}, {"k", oInt}, {"v", oText}}
	today := `(now() AT TIME ZONE 'UTC')::date`
	type def struct {
		rule   ttl.Rule
		create string
		fill   []string
		all    []string
		cols   []oColumn
	}
	defs := []def{
		{
			rule:   ttl.Rule{Table: "sessions"},
			create: `CREATE TABLE sessions (id int PRIMARY KEY, k int, v text, expires_at timestamptz)`,
			fill:   []string{`INSERT INTO sessions SELECT id, k, v, ` + oracleTZ + ` FROM ` + oracleRows(0, 30)},
			all:    []string{"id", "k", "v", "expires_at"},
		},
		{
			rule:   ttl.Rule{Table: "events", Column: "valid_until", ColumnType: ttl.TypeTimestamp},
			create: `CREATE TABLE events (id int PRIMARY KEY, k int, v text, valid_until timestamp)`,
			fill:   []string{`INSERT INTO events SELECT id, k, v, (` + oracleTZ + `) AT TIME ZONE 'UTC' FROM ` + oracleRows(1, 24)},
			all:    []string{"id", "k", "v", "valid_until"},
		},
		{
			rule:   ttl.Rule{Table: "coupons", Column: "good_thru", ColumnType: ttl.TypeDate},
			create: `CREATE TABLE coupons (id int PRIMARY KEY, k int, v text, good_thru date)`,
			fill: []string{`INSERT INTO coupons SELECT id, k, v, CASE st WHEN 0 THEN ` + today + ` + 30 WHEN 1 THEN ` + today + ` - 30
				WHEN 2 THEN NULL WHEN 3 THEN ` + today + ` WHEN 4 THEN ` + today + ` + 2 ELSE ` + today + ` - 1 END FROM ` + oracleRows(2, 24)},
			all: []string{"id", "k", "v", "good_thru"},
		},
		{
			rule:   ttl.Rule{Table: "tokens", Column: "exp", ColumnType: ttl.TypeUnixSeconds},
			create: `CREATE TABLE tokens (id int PRIMARY KEY, k int, v text, exp bigint)`,
			fill:   []string{`INSERT INTO tokens SELECT id, k, v, floor(extract(epoch FROM ` + oracleTZ + `))::bigint FROM ` + oracleRows(3, 24)},
			all:    []string{"id", "k", "v", "exp"},
		},
		{
			rule:   ttl.Rule{Table: "pings", Column: "exp_ms", ColumnType: ttl.TypeUnixMilliseconds},
			create: `CREATE TABLE pings (id int PRIMARY KEY, k int, v text, exp_ms bigint)`,
			fill:   []string{`INSERT INTO pings SELECT id, k, v, floor(extract(epoch FROM ` + oracleTZ + `) * 1000)::bigint FROM ` + oracleRows(4, 20)},
			all:    []string{"id", "k", "v", "exp_ms"},
		},
		{
			rule:   ttl.Rule{Table: "uploads", Kind: ttl.KindDerived, BaseColumn: "created_at", ExpireAfter: time.Hour},
			create: `CREATE TABLE uploads (id int PRIMARY KEY, k int, v text, created_at timestamptz)`,
			fill: []string{`INSERT INTO uploads SELECT id, k, v, CASE st WHEN 0 THEN now() + interval '1 day' WHEN 1 THEN now() - interval '1 day'
				WHEN 2 THEN NULL WHEN 3 THEN now() - interval '1 hour 1 second' WHEN 4 THEN now() - interval '10 minutes'
				ELSE now() - interval '2 hours' END FROM ` + oracleRows(5, 24)},
			all: []string{"id", "k", "v", "created_at"},
		},
		{
			rule:   ttl.Rule{Table: "jobs", Kind: ttl.KindDerived, BaseColumn: "started_at", IntervalColumn: "lifetime"},
			create: `CREATE TABLE jobs (id int PRIMARY KEY, k int, v text, started_at timestamptz, lifetime interval)`,
			fill: []string{`INSERT INTO jobs SELECT id, k, v,
				CASE st WHEN 0 THEN now() - interval '10 minutes' WHEN 1 THEN now() - interval '1 day' WHEN 2 THEN now() - interval '1 day'
					WHEN 3 THEN now() - interval '61 seconds' WHEN 4 THEN NULL ELSE now() - interval '2 hours' END,
				CASE st WHEN 0 THEN interval '1 hour' WHEN 1 THEN interval '1 hour' WHEN 2 THEN NULL
					WHEN 3 THEN interval '1 minute' WHEN 4 THEN interval '1 hour' ELSE interval '30 minutes' END
				FROM ` + oracleRows(0, 24)},
			all: []string{"id", "k", "v", "started_at", "lifetime"},
		},
		{
			rule:   ttl.Rule{Table: "carts", Kind: ttl.KindSidecar, SidecarTable: "cart_ttl", KeyColumns: []string{"id"}},
			create: `CREATE TABLE carts (id int PRIMARY KEY, k int, v text)`,
			fill: []string{
				`CREATE TABLE cart_ttl (id int PRIMARY KEY, expires_at timestamptz)`,
				`INSERT INTO carts SELECT id, k, v FROM ` + oracleRows(1, 24),
				// State 2 has no registry row, state 4 a NULL expiry: both live.
				`INSERT INTO cart_ttl SELECT id, CASE WHEN st = 4 THEN NULL ELSE ` + oracleTZ + ` END FROM ` + oracleRows(1, 24) + ` WHERE st <> 2`,
			},
			all: []string{"id", "k", "v"},
		},
		{
			rule:   ttl.Rule{Table: "cart_items", Kind: ttl.KindSidecar, SidecarTable: "cart_item_ttl", KeyColumns: []string{"id", "line"}},
			create: `CREATE TABLE cart_items (id int, line int, k int, v text, PRIMARY KEY (id, line))`,
			fill: []string{
				`CREATE TABLE cart_item_ttl (id int, line int, expires_at timestamptz, PRIMARY KEY (id, line))`,
				`INSERT INTO cart_items SELECT (id + 1) / 2, 1 + id % 2, k, v FROM ` + oracleRows(2, 36),
				`INSERT INTO cart_item_ttl SELECT (id + 1) / 2, 1 + id % 2, CASE WHEN st = 4 THEN NULL ELSE ` + oracleTZ + ` END
					FROM ` + oracleRows(2, 36) + ` WHERE st <> 2`,
			},
			all:  []string{"id", "line", "k", "v"},
			cols: []oColumn{{"id", oInt}, {"line", oInt}, {"k", oInt}, {"v", oText}},
		},
		{
			// Outside the search_path, and named like a plain public table.
			rule:   ttl.Rule{Schema: "vault", Table: "notes"},
			create: `CREATE SCHEMA vault`,
			fill: []string{
				`CREATE TABLE vault.notes (id int PRIMARY KEY, k int, v text, expires_at timestamptz)`,
				`INSERT INTO vault.notes SELECT id, k, v, ` + oracleTZ + ` FROM ` + oracleRows(5, 20),
			},
			all: []string{"id", "k", "v", "expires_at"},
		},
	}
	for _, d := range defs {
		r := d.rule
		rules = append(rules, r)
		setup = append(setup, d.create)
		setup = append(setup, d.fill...)
		cols := d.cols
		if cols == nil {
			cols = ikv
		}
		tables = append(tables, &oTable{schema: r.Schema, name: r.Table, cols: cols, all: d.all})
	}
	for i, t := range tables {
		t.rule = &rules[i]
	}
	setup = append(setup,
		`CREATE TABLE accounts (id int PRIMARY KEY, k int, v text, name text)`,
		`INSERT INTO accounts SELECT i, CASE WHEN i % 6 = 5 THEN NULL ELSE i % 6 END,
			CASE WHEN i % 5 = 1 THEN NULL ELSE chr(97 + i % 3) END, 'n' || i FROM generate_series(1, 20) AS i`,
		// No key, duplicate rows: set operations and DISTINCT see multisets.
		`CREATE TABLE tags (id int, k int, v text, label text)`,
		`INSERT INTO tags SELECT 1 + i % 26, i % 4, chr(97 + i % 5), 'l' || i % 3 FROM generate_series(1, 32) AS i`,
		// A plain table named like a TTL table, in another schema.
		`CREATE SCHEMA archive`,
		`CREATE TABLE archive.sessions (id int, k int, v text, expires_at timestamptz)`,
		`INSERT INTO archive.sessions SELECT id, k, v, `+oracleTZ+` FROM `+oracleRows(0, 30),
		// The target of INSERT … SELECT.
		`CREATE TABLE sink (a int, b text)`,
		`CREATE TABLE notes (id int PRIMARY KEY, k int, v text, expires_at timestamptz)`,
		`INSERT INTO notes SELECT id, k, v, `+oracleTZ+` FROM `+oracleRows(4, 20),
		// Views created directly over TTL tables, which the proxy expands.
		// security_invoker: the reference role's policies apply through them.
		`CREATE VIEW v_sessions WITH (security_invoker) AS SELECT id, k, v FROM sessions`,
		`CREATE VIEW v_nested WITH (security_invoker) AS SELECT id, k, v FROM v_sessions WHERE id > 2`,
		`CREATE VIEW v_barrier WITH (security_invoker, security_barrier) AS SELECT id, k, v FROM events WHERE k IS DISTINCT FROM 3`,
		`CREATE VIEW v_renamed (id, k, v) WITH (security_invoker) AS
			SELECT t.id, t.k, u.v FROM tokens t LEFT JOIN uploads u ON u.id = t.id`,
		// A simple view writes go through (not among the generator's tables).
		`CREATE VIEW v_sessions_all WITH (security_invoker) AS SELECT * FROM sessions`,
		// Paths the proxy refuses: functions and a materialized view.
		`CREATE FUNCTION oracle_count() RETURNS bigint LANGUAGE sql AS 'SELECT count(*) FROM sessions'`,
		`CREATE FUNCTION oracle_count_pl() RETURNS bigint LANGUAGE plpgsql AS $$ BEGIN RETURN (SELECT count(*) FROM tokens); END $$`,
		`CREATE MATERIALIZED VIEW oracle_m AS SELECT id, k FROM sessions`,
	)
	tables = append(tables,
		&oTable{name: "v_sessions", cols: ikv, all: []string{"id", "k", "v"}, view: true},
		&oTable{name: "v_nested", cols: ikv, all: []string{"id", "k", "v"}, view: true},
		&oTable{name: "v_barrier", cols: ikv, all: []string{"id", "k", "v"}, view: true},
		&oTable{name: "v_renamed", cols: ikv, all: []string{"id", "k", "v"}, view: true},
		&oTable{name: "accounts", cols: ikv, all: []string{"id", "k", "v", "name"}},
		&oTable{name: "tags", cols: ikv, all: []string{"id", "k", "v", "label"}},
		&oTable{schema: "archive", name: "sessions", cols: ikv, all: []string{"id", "k", "v", "expires_at"}},
		&oTable{name: "notes", cols: ikv, all: []string{"id", "k", "v", "expires_at"}},
	)

	// The oracle: a role that is neither owner nor superuser, so row-level
	// security applies to it, with one policy per TTL table whose condition
	// is the rule's own definition of live.
	setup = append(setup,
		`DO $$ BEGIN CREATE ROLE oracle_reader NOLOGIN;
		EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$`,
		`GRANT USAGE ON SCHEMA public, archive, vault TO oracle_reader`,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public, archive, vault TO oracle_reader`,
	)
	for i := range rules {
		r := &rules[i]
		setup = append(setup,
			`ALTER TABLE `+r.QuotedName()+` ENABLE ROW LEVEL SECURITY`,
			`CREATE POLICY live ON `+r.QuotedName()+` FOR ALL TO oracle_reader USING (`+
				r.LiveCondition(ttl.QuoteIdent(r.Table), "now()")+`)`,
		)
	}
	setup = append(setup, `ANALYZE`)
	return setup, rules, tables
}

// genCase is one generated statement and how to run it.
type genCase struct {
	sql   string   // the statement under test
	steps []step   // what runs on each side
	feats []string // the SQL features it uses, sorted
}

// withParams returns c with params bound to its statement under test.
func (c genCase) withParams(params []string) genCase {
	if len(params) == 0 {
		return c
	}
	for i := range c.steps {
		if c.steps[i].sql == c.sql {
			c.steps[i].params = params
		}
	}
	return c
}

// step is one statement of a case.
type step struct {
	sql     string
	compare bool     // compare the outcome; otherwise it only sets up or cleans up
	copyOut bool     // COPY … TO STDOUT
	params  []string // values of $1, $2, … (extended protocol only)
}

// gen generates random statements over the oracle schema.
type gen struct {
	r      *rand.Rand
	lit    *rand.Rand // literal values only
	tables []*oTable
	n      int      // alias counter
	ctes   []cteRel // CTEs in scope, innermost last
	feats  map[string]bool
	// params, when not nil, makes some constants parameters: their values.
	params []string
	// reserved names an UPDATE or DELETE target used without an alias.
	reserved string
}

// cteRel is a CTE in scope.
type cteRel struct {
	name string
	cols []oColumn
	all  []string // set when the CTE has the id, k, v columns of a table
}

// rel is one FROM-clause entry in scope.
type rel struct {
	qual    string    // qualifier for its columns, as SQL
	name    string    // relation name when referenced without an alias
	cols    []oColumn // columns usable in expressions
	all     []string  // every column, for NATURAL and USING; nil if unknown
	natural bool      // columns named like the tables' (id int, k int, v text)
	base    bool      // a table: has ctid, and a whole-row value
}

// scope is the FROM clause of one query level; parent is the enclosing
// query's, for correlated references.
type scope struct {
	rels   []rel
	from   int // rels[from:] are visible to ON clauses and JOIN LATERAL
	parent *scope
}

const maxDepth = 2

// newGen returns a generator for case number i of a run with the seed, so
// that one case can be regenerated alone. Literal values are drawn from a
// second source, seeded with variant: the variants of a case are one
// statement shape with other literals (the proxy's shape cache).
func newGen(seed, i uint64, tables []*oTable, variant uint64) *gen {
	return &gen{r: rand.New(rand.NewPCG(seed, i)), lit: rand.New(rand.NewPCG(seed^i, variant)), tables: tables} //nolint:gosec // a seeded generator: a failing case must be reproducible
}

func (g *gen) chance(p float64) bool { return g.r.Float64() < p }

func (g *gen) intn(n int) int { return g.r.IntN(n) }

func (g *gen) feat(f string) { g.feats[f] = true }

// choose returns an index drawn with the given weights.
func (g *gen) choose(weights ...int) int {
	sum := 0
	for _, w := range weights {
		sum += w
	}
	x := g.intn(sum)
	for i, w := range weights {
		if x < w {
			return i
		}
		x -= w
	}
	panic("unreachable")
}

func (g *gen) alias(prefix string) string {
	g.n++
	return fmt.Sprintf("%s%d", prefix, g.n)
}

// next generates one case; params allows $n parameters (for the extended
// protocol).
func (g *gen) next(params bool) genCase {
	g.n = 0
	g.ctes = nil
	g.feats = map[string]bool{}
	g.params = nil
	g.reserved = ""
	kind := g.choose(76, 2, 3, 5, 5, 4, 2, 3)
	if params && kind != 1 && kind != 7 && g.chance(0.35) {
		// Not in TABLE, nor in the utility statements of wrapped, which
		// take no parameters.
		g.feat("parameters")
		g.params = []string{}
	}
	c := g.statement(kind)
	for f := range g.feats {
		c.feats = append(c.feats, f)
	}
	slices.Sort(c.feats)
	return c.withParams(g.params)
}

func (g *gen) statement(kind int) genCase {
	var c genCase
	switch kind {
	case 0:
		c.sql, _ = g.query(nil, nil, 0)
		c.steps = []step{{sql: c.sql, compare: true}}
	case 1:
		c.sql = "TABLE " + g.tableName(g.ttlTable(), false)
		g.feat("TABLE")
		c.steps = []step{{sql: c.sql, compare: true}}
	case 2:
		c.sql = g.forUpdate()
		c.steps = []step{{sql: "BEGIN"}, {sql: c.sql, compare: true}, {sql: "ROLLBACK"}}
	case 3:
		c.sql = g.insertSelect()
		c.steps = []step{{sql: "BEGIN"}, {sql: c.sql, compare: true},
			{sql: "SELECT a, b FROM sink", compare: true}, {sql: "ROLLBACK"}}
	case 4:
		c.sql = g.update()
		c.steps = []step{{sql: "BEGIN"}, {sql: c.sql, compare: true}, {sql: "ROLLBACK"}}
	case 5:
		c.sql = g.delete()
		c.steps = []step{{sql: "BEGIN"}, {sql: c.sql, compare: true}, {sql: "ROLLBACK"}}
	case 6:
		c.sql = g.modifyingCTE()
		c.steps = []step{{sql: "BEGIN"}, {sql: c.sql, compare: true}, {sql: "ROLLBACK"}}
	case 7:
		c = g.wrapped()
	}
	return c
}

// param returns a parameter reference for value, cast to typ, when
// parameters are on, half of the time.
func (g *gen) param(value, typ string) (string, bool) {
	if g.params == nil || !g.chance(0.5) {
		return "", false
	}
	g.params = append(g.params, value)
	return fmt.Sprintf("$%d::%s", len(g.params), typ), true
}

// wrapped runs a generated query through a statement that carries one:
// CREATE TABLE AS, a cursor, COPY, PREPARE.
func (g *gen) wrapped() genCase {
	types := g.types()
	q, _ := g.query(nil, types, 1)
	switch g.intn(5) {
	case 4:
		g.feat("CREATE VIEW")
		sql := "CREATE TEMP VIEW oracle_view" + colList(types) + " AS " + q
		return genCase{sql: sql, steps: []step{{sql: "BEGIN"}, {sql: sql, compare: true},
			{sql: "SELECT * FROM oracle_view", compare: true}, {sql: "ROLLBACK"}}}
	case 0:
		g.feat("CREATE TABLE AS")
		sql := "CREATE TEMP TABLE oracle_tmp" + colList(types) + " AS " + q
		return genCase{sql: sql, steps: []step{{sql: "BEGIN"}, {sql: sql, compare: true},
			{sql: "SELECT * FROM oracle_tmp", compare: true}, {sql: "ROLLBACK"}}}
	case 1:
		g.feat("DECLARE CURSOR")
		sql := "DECLARE oracle_cur CURSOR FOR " + q
		return genCase{sql: sql, steps: []step{{sql: "BEGIN"}, {sql: sql, compare: true},
			{sql: "FETCH ALL FROM oracle_cur", compare: true}, {sql: "ROLLBACK"}}}
	case 2:
		g.feat("COPY TO")
		sql := "COPY (" + q + ") TO STDOUT"
		return genCase{sql: sql, steps: []step{{sql: sql, compare: true, copyOut: true}}}
	default:
		g.feat("PREPARE")
		sql := "PREPARE oracle_stmt AS " + q
		return genCase{sql: sql, steps: []step{{sql: sql, compare: true},
			{sql: "EXECUTE oracle_stmt", compare: true}, {sql: "DEALLOCATE ALL"}}}
	}
}

// ttlTable picks a TTL table, or one time in five a view over TTL tables.
func (g *gen) ttlTable() *oTable {
	view := g.chance(0.2)
	for {
		if t := g.tables[g.intn(len(g.tables))]; (view && t.view) || (!view && t.ttl()) {
			if t.view {
				g.feat("view")
			}
			return t
		}
	}
}

// table picks a table, TTL tables three times out of four.
func (g *gen) table() *oTable {
	if g.chance(0.75) {
		return g.ttlTable()
	}
	for {
		if t := g.tables[g.intn(len(g.tables))]; !t.ttl() && !t.view {
			return t
		}
	}
}

// shadowed reports whether a CTE in scope hides the table's unqualified name.
func (g *gen) shadowed(name string) bool {
	for _, c := range g.ctes {
		if c.name == name {
			return true
		}
	}
	return false
}

// tableName spells a reference to t in one of the ways PostgreSQL accepts.
func (g *gen) tableName(t *oTable, only bool) string {
	if t.schema != "" {
		g.feat("other schema")
		return t.schema + "." + t.name
	}
	name := t.name
	switch g.intn(12) {
	case 0, 1:
		g.feat("public.t")
		name = "public." + name
	case 2:
		g.feat(`"t"`)
		name = `"` + name + `"`
	case 3:
		g.feat(`public."t"`)
		name = `public."` + name + `"`
	case 4:
		g.feat("upper case T")
		name = strings.ToUpper(name)
		if g.chance(0.5) {
			name = "Public." + name
		}
	case 5:
		// A Unicode escape hides the name from a byte-level search.
		g.feat(`U&"t"`)
		name = `U&"\` + fmt.Sprintf("%04x", name[0]) + name[1:] + `"`
	}
	if g.shadowed(t.name) && !strings.HasPrefix(strings.ToLower(name), "public.") {
		g.feat("CTE shadows table")
		name = "public." + name
	}
	if only && g.chance(0.1) {
		g.feat("ONLY")
		name = "ONLY " + name
	}
	return name
}

// names in use as unaliased qualifiers anywhere in sc's chain.
func inScope(sc *scope, name string) bool {
	for s := sc; s != nil; s = s.parent {
		for _, r := range s.rels {
			if r.qual == name || r.name == name {
				return true
			}
		}
	}
	return false
}

// baseItem is a table reference with an alias most of the time.
func (g *gen) baseItem(sc *scope) (string, rel) {
	t := g.table()
	if t.ttl() {
		g.feat("TTL table")
	}
	ref := g.tableName(t, true)
	r := rel{cols: t.cols, all: t.all, natural: true, name: t.name, base: true}
	unaliased := t.schema == "" && !inScope(sc, t.name) && !g.shadowed(t.name) && t.name != g.reserved && g.chance(0.2)
	if unaliased {
		g.feat("unaliased")
		switch g.intn(5) {
		case 0:
			r.qual = `"` + t.name + `"`
		case 1:
			g.feat("schema.table.column")
			r.qual = "public." + t.name
		default:
			r.qual = t.name
		}
		return ref, r
	}
	a := g.alias("t")
	if g.chance(0.1) {
		g.feat("quoted alias")
		a = `"T` + a[1:] + `"`
	}
	r.qual = a
	if g.chance(0.1) {
		// Rename the first columns: the expiry column may be among them.
		g.feat("column aliases")
		m := 1 + g.intn(len(t.all))
		var names []string
		for _, c := range t.all[:m] {
			names = append(names, c+"_"+strings.Trim(a, `"`))
		}
		r.all = append(names, t.all[m:]...)
		r.cols = nil
		for _, c := range t.cols {
			if i := slices.Index(t.all, c.name); i < m {
				c.name = names[i]
			}
			r.cols = append(r.cols, c)
		}
		r.natural = false
		return ref + " AS " + a + "(" + strings.Join(names, ", ") + ")", r
	}
	if g.chance(0.5) {
		return ref + " AS " + a, r
	}
	return ref + " " + a, r
}

// fromItem returns one FROM-clause entry and the relations it adds. lateral
// allows a LATERAL subquery that references rels visible in sc.
func (g *gen) fromItem(sc *scope, depth int, lateral bool) (string, []rel) {
	w := []int{62, 0, 0, 4, 4, 0, 0}
	if depth < maxDepth {
		w[1] = 10 // subquery
		w[5] = 7  // parenthesized join
	}
	if len(g.ctes) > 0 {
		w[2] = 14
	}
	if lateral && depth < maxDepth {
		w[6] = 12
	}
	switch g.choose(w...) {
	case 1:
		g.feat("subquery in FROM")
		types := g.types()
		q, _ := g.query(sc.parent, types, depth+1)
		a := g.alias("d")
		return "(" + q + ") AS " + a + colList(types), []rel{derivedRel(a, types)}
	case 2:
		c := g.ctes[g.intn(len(g.ctes))]
		g.feat("CTE reference")
		a := g.alias("c")
		r := rel{qual: a, cols: c.cols, all: c.all, natural: c.all != nil}
		return c.name + " AS " + a, []rel{r}
	case 3:
		g.feat("VALUES")
		a := g.alias("v")
		var rows []string
		for range 1 + g.intn(4) {
			rows = append(rows, fmt.Sprintf("(%s, %s)", g.intConst(true), g.textConst(true)))
		}
		return "(VALUES " + strings.Join(rows, ", ") + ") AS " + a + "(id, v)",
			[]rel{{qual: a, cols: []oColumn{{"id", oInt}, {"v", oText}}}}
	case 4:
		g.feat("generate_series")
		a := g.alias("g")
		hi := fmt.Sprint(2 + g.intn(5))
		if g.chance(0.2) {
			g.feat("subquery in function argument")
			hi = fmt.Sprintf("(SELECT count(*) / 4 FROM %s)", g.tableName(g.ttlTable(), false))
		}
		return fmt.Sprintf("generate_series(%d, %s) AS %s(k)", g.intn(2), hi, a),
			[]rel{{qual: a, cols: []oColumn{{"k", oInt}}}}
	case 5:
		g.feat("nested join")
		// Names in sc stay taken: the join's tables are entries of the same
		// FROM clause.
		inner := &scope{parent: sc.parent}
		taken := &scope{rels: slices.Clone(sc.rels), parent: sc.parent}
		lsql, lr := g.baseItem(taken)
		inner.rels = append(inner.rels, lr)
		taken.rels = append(taken.rels, lr)
		rsql, rr := g.baseItem(taken)
		inner.rels = append(inner.rels, rr)
		kind := []string{"JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN"}[g.intn(4)]
		g.feat("nested " + kind)
		on := g.equi(inner.rels[:1], inner.rels[1:])
		return "(" + lsql + " " + kind + " " + rsql + " ON " + on + ")", inner.rels
	case 6:
		// A comma-separated LATERAL sees every entry to its left.
		g.feat("LATERAL")
		types := g.types()
		lsc := &scope{rels: sc.rels, parent: sc.parent}
		q, _ := g.query(lsc, types, depth+1)
		a := g.alias("l")
		return "LATERAL (" + q + ") AS " + a + colList(types), []rel{derivedRel(a, types)}
	}
	sql, r := g.baseItem(sc)
	return sql, []rel{r}
}

func derivedRel(alias string, types []oType) rel {
	r := rel{qual: alias}
	for i, t := range types {
		r.cols = append(r.cols, oColumn{fmt.Sprintf("c%d", i+1), t})
	}
	return r
}

func colList(types []oType) string {
	var b strings.Builder
	b.WriteString("(")
	for i := range types {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "c%d", i+1)
	}
	b.WriteString(")")
	return b.String()
}

// types returns 1–3 random column types.
func (g *gen) types() []oType {
	ts := make([]oType, 1+g.intn(3))
	for i := range ts {
		ts[i] = oType(g.intn(2))
	}
	return ts
}

// from builds a FROM clause of 1–3 entries into sc.
func (g *gen) from(sc *scope, depth int) string {
	n := 1 + g.choose(50, 35, 15)
	if depth > 0 {
		n = 1 + g.choose(70, 30)
	}
	sql, rels := g.fromItem(sc, depth, false)
	sc.rels = append(sc.rels, rels...)
	var b strings.Builder
	b.WriteString(sql)
	for range n - 1 {
		single := len(sc.rels)-sc.from == 1 && sc.rels[len(sc.rels)-1].natural
		kinds := []int{26, 20, 12, 10, 6, 7, 0, 0, 10}
		if single {
			kinds[6], kinds[7] = 8, 8
		}
		if depth >= maxDepth {
			kinds[8] = 0
		}
		switch k := g.choose(kinds...); k {
		case 0, 1, 2, 3:
			kind := []string{"JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN"}[k]
			if k == 0 && g.chance(0.2) {
				kind = "INNER JOIN"
			}
			g.feat(strings.TrimPrefix(kind, "INNER "))
			sql, rels := g.fromItem(sc, depth, false)
			left := sc.rels[sc.from:]
			sc.rels = append(sc.rels, rels...)
			on := g.equi(left, rels)
			if k != 3 && g.chance(0.35) {
				on += " AND " + g.pred(&scope{rels: sc.rels[sc.from:], parent: sc.parent}, depth, 1)
			}
			fmt.Fprintf(&b, " %s %s ON %s", kind, sql, on)
		case 4:
			g.feat("CROSS JOIN")
			sql, rels := g.fromItem(sc, depth, false)
			sc.rels = append(sc.rels, rels...)
			fmt.Fprintf(&b, " CROSS JOIN %s", sql)
		case 5:
			g.feat("comma")
			from := len(sc.rels)
			sql, rels := g.fromItem(sc, depth, true)
			sc.rels = append(sc.rels, rels...)
			sc.from = from
			fmt.Fprintf(&b, ", %s", sql)
		case 6, 7:
			left := sc.rels[len(sc.rels)-1]
			t := g.table()
			r := rel{cols: t.cols, all: t.all, natural: true, qual: g.alias("t")}
			ref := g.tableName(t, false) + " " + r.qual
			var common []string
			for _, c := range left.all {
				if slices.Contains(r.all, c) {
					common = append(common, c)
				}
			}
			kind := []string{"", " LEFT", " RIGHT", " FULL"}[g.intn(4)]
			sc.rels = append(sc.rels, r)
			if k == 6 || len(common) == 0 {
				g.feat("NATURAL" + kind + " JOIN")
				fmt.Fprintf(&b, " NATURAL%s JOIN %s", kind, ref)
				break
			}
			g.feat("USING" + kind)
			g.r.Shuffle(len(common), func(i, j int) { common[i], common[j] = common[j], common[i] })
			use := common[:1+g.intn(min(2, len(common)))]
			fmt.Fprintf(&b, "%s JOIN %s USING (%s)", kind, ref, strings.Join(use, ", "))
		case 8:
			g.feat("LATERAL")
			kind := []string{"JOIN", "LEFT JOIN", "CROSS JOIN", ","}[g.intn(4)]
			lateralSc := sc
			if kind == "," {
				// A comma-separated LATERAL sees every entry to its left.
				lateralSc = &scope{rels: sc.rels, parent: sc.parent}
			}
			from := len(sc.rels)
			sql, rels := g.lateralItem(lateralSc, depth)
			left := sc.rels[sc.from:]
			sc.rels = append(sc.rels, rels...)
			switch kind {
			case ",":
				sc.from = from
				fmt.Fprintf(&b, ", %s", sql)
			case "CROSS JOIN":
				fmt.Fprintf(&b, " CROSS JOIN %s", sql)
			default:
				g.feat(kind + " LATERAL")
				on := "true"
				if g.chance(0.6) {
					on = g.equi(left, rels)
				}
				fmt.Fprintf(&b, " %s %s ON %s", kind, sql, on)
			}
		}
	}
	return b.String()
}

// lateralItem is a LATERAL subquery correlated with sc's visible entries.
func (g *gen) lateralItem(sc *scope, depth int) (string, []rel) {
	types := g.types()
	lsc := &scope{rels: sc.rels[sc.from:], parent: sc.parent}
	q, _ := g.query(lsc, types, depth+1)
	a := g.alias("l")
	return "LATERAL (" + q + ") AS " + a + colList(types), []rel{derivedRel(a, types)}
}

// equi returns l.x = r.y for columns of the same type, sometimes two such
// equalities: the only join conditions a FULL JOIN accepts.
func (g *gen) equi(left, right []rel) string {
	var conds []string
	for range 1 + g.choose(85, 15) {
		t := oInt
		if g.chance(0.15) {
			t = oText
		}
		l, okL := pickCol(g, left, t)
		r, okR := pickCol(g, right, t)
		if !okL || !okR {
			t = 1 - t
			l, okL = pickCol(g, left, t)
			r, okR = pickCol(g, right, t)
		}
		if !okL || !okR {
			return "true"
		}
		conds = append(conds, l+" = "+r)
	}
	return strings.Join(conds, " AND ")
}

// pickCol returns a column of type t from rels, preferring k (the join key).
func pickCol(g *gen, rels []rel, t oType) (string, bool) {
	var cands []string
	for _, r := range rels {
		for _, c := range r.cols {
			if c.typ != t {
				continue
			}
			ref := r.qual + "." + c.name
			cands = append(cands, ref)
			if c.name == "k" {
				cands = append(cands, ref, ref)
			}
		}
	}
	if len(cands) == 0 {
		return "", false
	}
	return cands[g.intn(len(cands))], true
}

// col returns a column reference of type t visible in sc, from an enclosing
// level now and then (a correlated reference).
func (g *gen) col(sc *scope, t oType) (string, bool) {
	if sc == nil {
		return "", false
	}
	if sc.parent != nil && g.chance(0.25) {
		if c, ok := g.col(sc.parent, t); ok {
			g.feat("correlated")
			return c, true
		}
	}
	if c, ok := pickCol(g, sc.rels, t); ok {
		return c, true
	}
	return g.col(sc.parent, t)
}

func (g *gen) intConst(null bool) string {
	if null && g.chance(0.1) {
		return "NULL::int"
	}
	v := fmt.Sprint(g.lit.IntN(7))
	if p, ok := g.param(v, "int"); ok {
		return p
	}
	return v
}

func (g *gen) textConst(null bool) string {
	if null && g.chance(0.1) {
		return "NULL::text"
	}
	v := string(rune('a' + g.lit.IntN(5)))
	if p, ok := g.param(v, "text"); ok {
		return p
	}
	return "'" + v + "'"
}

// expr returns an expression of type t over sc.
func (g *gen) expr(sc *scope, t oType, depth int) string {
	w := []int{55, 12, 15, 0, 4, 2}
	if depth < maxDepth {
		w[3] = 5
	}
	switch g.choose(w...) {
	case 0:
		if c, ok := g.col(sc, t); ok {
			return c
		}
	case 2:
		c, ok := g.col(sc, t)
		if !ok {
			break
		}
		if t == oInt {
			return []string{c + " + 1", "coalesce(" + c + ", -1)", "abs(" + c + " - 2)", c + " % 3"}[g.intn(4)]
		}
		return []string{"coalesce(" + c + ", 'z')", "upper(" + c + ")", c + " || 'x'", "lower(" + c + ")"}[g.intn(4)]
	case 3:
		if t == oInt && g.chance(0.2) {
			g.feat("ARRAY subquery")
			q, _ := g.query(sc, []oType{oInt}, depth+1)
			return "cardinality(ARRAY(" + q + "))"
		}
		return g.scalarSub(sc, t, depth)
	case 5:
		var bases []rel
		for _, r := range sc.rels {
			if r.base && !strings.Contains(r.qual, ".") {
				bases = append(bases, r)
			}
		}
		if len(bases) == 0 {
			break
		}
		r := bases[g.intn(len(bases))]
		if t == oInt {
			g.feat("ctid")
			return "(" + r.qual + ".ctid::text::point)[1]::int"
		}
		if g.chance(0.5) {
			g.feat("whole-row reference")
			return r.qual + "::text"
		}
		g.feat("tableoid")
		return r.qual + ".tableoid::regclass::text"
	case 4:
		g.feat("CASE")
		return "CASE WHEN " + g.pred(sc, depth, 1) + " THEN " + g.expr(sc, t, maxDepth) + " ELSE " + g.expr(sc, t, maxDepth) + " END"
	}
	if t == oInt {
		return g.intConst(false)
	}
	return g.textConst(false)
}

// scalarSub returns a subquery that yields at most one row of type t.
func (g *gen) scalarSub(sc *scope, t oType, depth int) string {
	g.feat("scalar subquery")
	inner := &scope{parent: sc}
	from := g.from(inner, depth+1)
	where := g.where(inner, depth+1)
	if g.chance(0.7) {
		return "(SELECT " + g.aggregate(inner, t, depth+1) + " FROM " + from + where + ")"
	}
	g.feat("ORDER BY LIMIT 1")
	return "(SELECT " + g.expr(inner, t, maxDepth) + " FROM " + from + where + " ORDER BY 1 LIMIT 1)"
}

// aggregate returns an aggregate call of type t over sc.
func (g *gen) aggregate(sc *scope, t oType, depth int) string {
	g.feat("aggregate")
	// Arguments come from this level only: an aggregate of outer columns
	// belongs to the outer query.
	var call string
	if t == oInt {
		c, ok := pickCol(g, sc.rels, oInt)
		if !ok || g.chance(0.3) {
			call = "count(*)"
		} else {
			call = []string{"count(" + c + ")", "sum(" + c + ")", "max(" + c + ")", "min(" + c + ")", "count(DISTINCT " + c + ")"}[g.intn(5)]
		}
	} else {
		c, ok := pickCol(g, sc.rels, oText)
		if !ok {
			return "string_agg('x', '')"
		}
		call = []string{"min(" + c + ")", "max(" + c + ")", "string_agg(" + c + ", ',' ORDER BY " + c + ")"}[g.intn(3)]
	}
	if g.chance(0.1) {
		g.feat("FILTER")
		call += " FILTER (WHERE " + g.pred(&scope{rels: sc.rels}, maxDepth, 1) + ")"
	}
	return call
}

func (g *gen) where(sc *scope, depth int) string {
	if g.chance(0.6) {
		return " WHERE " + g.pred(sc, depth, 0)
	}
	return ""
}

// pred returns a boolean expression over sc; nest bounds AND/OR/NOT.
func (g *gen) pred(sc *scope, depth int, nest int) string {
	w := []int{30, 10, 6, 5, 0, 0, 0, 0, 0, 0, 0}
	if depth < maxDepth {
		w[4], w[5], w[6], w[7], w[8] = 9, 4, 9, 5, 5 // IN, NOT IN, EXISTS, NOT EXISTS, ANY/ALL
		w[9], w[10] = 4, 2                           // = scalar subquery, row IN
	}
	if nest < 2 {
		w = append(w, 14)
	}
	t := oType(g.intn(2))
	switch g.choose(w...) {
	case 0:
		ops := []string{"=", "<>", "<", ">="}
		if t == oText {
			ops = ops[:2]
		}
		return g.expr(sc, t, depth) + " " + ops[g.intn(len(ops))] + " " + g.expr(sc, t, depth)
	case 1:
		c, ok := g.col(sc, t)
		if !ok {
			return "true"
		}
		if g.chance(0.5) {
			return c + " IS NULL"
		}
		return c + " IS NOT NULL"
	case 2:
		if t == oInt {
			return g.expr(sc, t, depth) + fmt.Sprintf(" IN (%s, %s)", g.intConst(false), g.intConst(true))
		}
		return g.expr(sc, t, depth) + fmt.Sprintf(" IN (%s, %s)", g.textConst(false), g.textConst(false))
	case 3:
		return g.expr(sc, oInt, depth) + fmt.Sprintf(" BETWEEN %d AND %d", g.intn(3), 2+g.intn(10))
	case 4, 5:
		not := ""
		if g.choose(w[4], w[5]) == 1 {
			not = "NOT "
		}
		g.feat(not + "IN subquery")
		q, _ := g.query(sc, []oType{t}, depth+1)
		return g.expr(sc, t, maxDepth) + " " + not + "IN (" + q + ")"
	case 6, 7:
		not := ""
		if g.choose(w[6], w[7]) == 1 {
			not = "NOT "
		}
		g.feat(not + "EXISTS")
		return not + "EXISTS (" + g.existsSub(sc, depth+1) + ")"
	case 8:
		q, _ := g.query(sc, []oType{oInt}, depth+1)
		op := []string{"= ANY", "< ANY", "<> ALL", ">= ALL", "= SOME"}[g.intn(5)]
		g.feat(op)
		return g.expr(sc, oInt, maxDepth) + " " + op + " (" + q + ")"
	case 9:
		return g.expr(sc, t, maxDepth) + " = " + g.scalarSub(sc, t, depth)
	case 10:
		g.feat("row IN subquery")
		q, _ := g.query(sc, []oType{oInt, oText}, depth+1)
		return "(" + g.expr(sc, oInt, maxDepth) + ", " + g.expr(sc, oText, maxDepth) + ") IN (" + q + ")"
	default:
		switch g.intn(3) {
		case 0:
			return "(" + g.pred(sc, depth, nest+1) + " AND " + g.pred(sc, depth, nest+1) + ")"
		case 1:
			g.feat("OR")
			return "(" + g.pred(sc, depth, nest+1) + " OR " + g.pred(sc, depth, nest+1) + ")"
		default:
			g.feat("NOT")
			return "NOT (" + g.pred(sc, depth, nest+1) + ")"
		}
	}
}

// existsSub is the body of an EXISTS, usually correlated with sc.
func (g *gen) existsSub(sc *scope, depth int) string {
	inner := &scope{parent: sc}
	from := g.from(inner, depth)
	var conds []string
	if g.chance(0.75) {
		t := oInt
		if in, ok := pickCol(g, inner.rels, t); ok {
			if out, ok := g.col(sc, t); ok {
				g.feat("correlated")
				conds = append(conds, in+" = "+out)
			}
		}
	}
	if g.chance(0.5) {
		conds = append(conds, g.pred(inner, depth, 1))
	}
	list := "1"
	if g.chance(0.2) {
		list = "*"
	}
	sql := "SELECT " + list + " FROM " + from
	if len(conds) > 0 {
		sql += " WHERE " + strings.Join(conds, " AND ")
	}
	return sql
}

// query returns a full query (WITH, set operations, ORDER BY, LIMIT) over
// the enclosing scope outer whose output columns have the types want; want
// nil means any columns (the output types returned, nil if unknown).
func (g *gen) query(outer *scope, want []oType, depth int) (string, []oType) {
	if depth < maxDepth && g.chance(0.12) {
		return g.with(outer, want, depth)
	}
	return g.body(outer, want, depth)
}

// body is a query without a WITH clause.
func (g *gen) body(outer *scope, want []oType, depth int) (string, []oType) {
	if depth < maxDepth && g.chance(0.14) {
		return g.setOp(outer, want, depth)
	}
	return g.selectCore(outer, want, depth, true)
}

func (g *gen) setOp(outer *scope, want []oType, depth int) (string, []oType) {
	if want == nil {
		want = g.types()
	}
	n := 2 + g.choose(85, 15)
	var b strings.Builder
	for i := range n {
		if i > 0 {
			op := []string{"UNION", "UNION ALL", "INTERSECT", "INTERSECT ALL", "EXCEPT", "EXCEPT ALL"}[g.intn(6)]
			g.feat(op)
			b.WriteString(" " + op + " ")
		}
		s, _ := g.selectCore(outer, want, depth+1, false)
		if strings.Contains(s, " ORDER BY ") || strings.Contains(s, " LIMIT ") || g.chance(0.2) {
			s = "(" + s + ")"
		}
		b.WriteString(s)
	}
	return b.String() + g.orderLimit(len(want), 0.3), want
}

// orderLimit returns ORDER BY every output column (n of them), sometimes with
// LIMIT and OFFSET, with probability p; a LIMIT never goes without an ORDER
// BY that decides which rows it keeps.
func (g *gen) orderLimit(n int, p float64) string {
	if n == 0 || !g.chance(p) {
		return ""
	}
	g.feat("ORDER BY")
	var b strings.Builder
	b.WriteString(" ORDER BY ")
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d", i+1)
		if g.chance(0.3) {
			b.WriteString([]string{" DESC", " ASC NULLS FIRST", " DESC NULLS LAST"}[g.intn(3)])
		}
	}
	if g.chance(0.6) {
		g.feat("LIMIT")
		if g.chance(0.1) {
			g.feat("LIMIT subquery")
			fmt.Fprintf(&b, " LIMIT (SELECT count(*) / 3 FROM %s)", g.tableName(g.ttlTable(), false))
		} else {
			n := fmt.Sprint(1 + g.intn(8))
			if p, ok := g.param(n, "int"); ok {
				n = p
			}
			b.WriteString(" LIMIT " + n)
		}
		if g.chance(0.4) {
			g.feat("OFFSET")
			fmt.Fprintf(&b, " OFFSET %d", g.intn(5))
		}
	}
	return b.String()
}

func (g *gen) with(outer *scope, want []oType, depth int) (string, []oType) {
	g.feat("WITH")
	saved := len(g.ctes)
	var defs []string
	recursive := false
	for range 1 + g.choose(75, 25) {
		var def string
		var c cteRel
		switch g.choose(50, 14, 14, 14) {
		case 0:
			types := g.types()
			q, _ := g.query(outer, types, depth+1)
			c = derivedCTE(g.alias("cte"), types)
			mat := []string{"", "", "MATERIALIZED ", "NOT MATERIALIZED "}[g.intn(4)]
			if mat != "" {
				g.feat(strings.TrimSpace(mat))
			}
			def = c.name + colList(types) + " AS " + mat + "(" + q + ")"
		case 1:
			g.feat("WITH RECURSIVE counter")
			recursive = true
			c = cteRel{name: g.alias("r"), cols: []oColumn{{"k", oInt}}}
			def = fmt.Sprintf("%s(k) AS (SELECT %d UNION ALL SELECT k + 1 FROM %s WHERE k < %d)", c.name, g.intn(2), c.name, 2+g.intn(6))
		case 2:
			g.feat("WITH RECURSIVE over table")
			recursive = true
			t := g.table()
			c = cteRel{name: g.alias("r"), cols: []oColumn{{"id", oInt}, {"k", oInt}}}
			ref, ref2 := g.tableName(t, false), g.tableName(t, false)
			def = fmt.Sprintf(`%[1]s(id, k) AS (SELECT b.id, b.k FROM %[2]s b WHERE b.k = %[4]d
				UNION SELECT x.id, x.k FROM %[3]s x JOIN %[1]s ON x.id = %[1]s.id + 1 OR x.k = (%[1]s.k + 1) %% 5)`,
				c.name, ref, ref2, g.intn(5))
		case 3:
			// Shadow a TTL table's name with a CTE of the same columns.
			g.feat("CTE shadows table")
			t := g.ttlTable()
			for g.shadowed(t.name) || t.schema != "" {
				t = g.ttlTable()
			}
			src := g.table()
			ref := g.tableName(src, false)
			if src.name == t.name && src.schema == "" && !strings.HasPrefix(strings.ToLower(ref), "public.") {
				// Under WITH RECURSIVE the bare name would be the CTE itself.
				ref = "public." + ref
			}
			q := fmt.Sprintf("SELECT s.id, s.k, s.v FROM %s s%s", ref, g.whereOn("s"))
			c = cteRel{name: t.name, cols: []oColumn{{"id", oInt}, {"k", oInt}, {"v", oText}}, all: []string{"id", "k", "v"}}
			def = t.name + " AS (" + q + ")"
		}
		defs = append(defs, def)
		g.ctes = append(g.ctes, c)
	}
	body, types := g.body(outer, want, depth)
	g.ctes = g.ctes[:saved]
	kw := "WITH "
	if recursive {
		kw = "WITH RECURSIVE "
	}
	return kw + strings.Join(defs, ", ") + " " + body, types
}

// whereOn is a simple filter on alias's k.
func (g *gen) whereOn(alias string) string {
	if g.chance(0.5) {
		return ""
	}
	return fmt.Sprintf(" WHERE %s.k <> %d", alias, g.intn(5))
}

func derivedCTE(name string, types []oType) cteRel {
	r := derivedRel(name, types)
	return cteRel{name: name, cols: r.cols}
}

// selectCore is one SELECT with FROM, WHERE, and one of: plain, GROUP BY,
// DISTINCT, DISTINCT ON, window functions.
func (g *gen) selectCore(outer *scope, want []oType, depth int, ordered bool) (string, []oType) {
	sc := &scope{parent: outer}
	if outer == nil && want == nil && g.chance(0.03) {
		// No FROM: scalar subqueries only.
		g.feat("no FROM")
		types := g.types()
		var items []string
		for _, t := range types {
			items = append(items, g.scalarSub(sc, t, depth))
		}
		return "SELECT " + strings.Join(items, ", "), types
	}
	from := g.from(sc, depth)
	where := g.where(sc, depth)
	free := want == nil
	if free {
		want = g.types()
		if g.chance(0.25) {
			want = append(want, g.types()...)
		}
	}
	orderP := 0.0
	if ordered {
		orderP = 0.25
	}
	switch mode := g.choose(55, 22, 8, 6, 9); {
	case mode == 0 && free && g.chance(0.2):
		g.feat("SELECT *")
		list := "*"
		if g.chance(0.4) {
			list = sc.rels[g.intn(len(sc.rels))].qual + ".*"
		}
		return "SELECT " + list + " FROM " + from + where, nil
	case mode == 1:
		return g.grouped(sc, from, where, want, depth, orderP), want
	case mode == 2:
		g.feat("DISTINCT")
		return "SELECT DISTINCT " + g.list(sc, want, depth) + " FROM " + from + where + g.orderLimit(len(want), orderP), want
	case mode == 3 && ordered:
		g.feat("DISTINCT ON")
		sql := "SELECT DISTINCT ON (1) " + g.list(sc, want, depth) + " FROM " + from + where + " ORDER BY "
		for i := range want {
			if i > 0 {
				sql += ", "
			}
			sql += fmt.Sprint(i + 1)
		}
		if g.chance(0.4) {
			sql += fmt.Sprintf(" LIMIT %d", 1+g.intn(5))
		}
		return sql, want
	case mode == 4:
		return g.windowed(sc, from, where, want, depth, orderP), want
	}
	list := g.list(sc, want, depth)
	if ordered && depth < maxDepth && g.chance(0.04) {
		// ORDER BY an expression first, then every output column.
		g.feat("ORDER BY subquery")
		ol := g.orderLimit(len(want), 1)
		return "SELECT " + list + " FROM " + from + where + " ORDER BY " + g.scalarSub(sc, oInt, depth) + "," +
			strings.TrimPrefix(ol, " ORDER BY"), want
	}
	return "SELECT " + list + " FROM " + from + where + g.orderLimit(len(want), orderP), want
}

func (g *gen) list(sc *scope, types []oType, depth int) string {
	items := make([]string, len(types))
	for i, t := range types {
		items[i] = g.expr(sc, t, depth)
	}
	return strings.Join(items, ", ")
}

// grouped is a SELECT with GROUP BY (or a whole-table aggregate) and maybe
// HAVING. The select list holds grouping columns and aggregates only.
func (g *gen) grouped(sc *scope, from, where string, want []oType, depth int, orderP float64) string {
	g.feat("GROUP BY")
	// The grouping columns, and a scope holding only them, for expressions
	// outside aggregates (correlated subqueries in HAVING too).
	keys := map[oType]string{}
	var groupBy []string
	gsc := &scope{parent: sc.parent}
	for _, t := range []oType{oInt, oText} {
		if g.chance(0.6) {
			if c, ok := pickCol(g, sc.rels, t); ok {
				keys[t] = c
				groupBy = append(groupBy, c)
				qual, name, _ := strings.Cut(c, ".")
				gsc.rels = append(gsc.rels, rel{qual: qual, cols: []oColumn{{name, t}}})
			}
		}
	}
	items := make([]string, len(want))
	for i, t := range want {
		if k, ok := keys[t]; ok && g.chance(0.6) {
			items[i] = k
		} else {
			items[i] = g.aggregate(sc, t, depth)
		}
	}
	sql := "SELECT " + strings.Join(items, ", ") + " FROM " + from + where
	if len(groupBy) > 0 {
		if len(groupBy) == 2 && g.chance(0.2) {
			switch g.intn(3) {
			case 0:
				g.feat("ROLLUP")
				sql += " GROUP BY ROLLUP (" + strings.Join(groupBy, ", ") + ")"
			case 1:
				g.feat("CUBE")
				sql += " GROUP BY CUBE (" + strings.Join(groupBy, ", ") + ")"
			default:
				g.feat("GROUPING SETS")
				sql += " GROUP BY GROUPING SETS ((" + groupBy[0] + "), (" + groupBy[1] + "), ())"
			}
		} else {
			sql += " GROUP BY " + strings.Join(groupBy, ", ")
		}
	}
	if g.chance(0.35) {
		g.feat("HAVING")
		var cond string
		switch {
		case len(gsc.rels) > 0 && depth < maxDepth && g.chance(0.5):
			g.feat("correlated HAVING")
			k := gsc.rels[g.intn(len(gsc.rels))]
			if g.chance(0.5) {
				cond = fmt.Sprintf("count(*) >= %s", g.scalarSub(&scope{rels: []rel{k}, parent: gsc.parent}, oInt, depth))
			} else {
				cond = "EXISTS (" + g.existsSub(&scope{rels: []rel{k}, parent: gsc.parent}, depth+1) + ")"
			}
		default:
			cond = fmt.Sprintf("count(*) > %d", g.intn(3))
		}
		sql += " HAVING " + cond
	}
	return sql + g.orderLimit(len(want), orderP)
}

// windowed is a SELECT with a window function among its items; window
// functions whose value depends on the order of peers are not used.
func (g *gen) windowed(sc *scope, from, where string, want []oType, depth int, orderP float64) string {
	g.feat("window")
	items := make([]string, len(want))
	wi := -1
	for i, t := range want {
		if t == oInt && wi < 0 {
			wi = i
			continue
		}
		items[i] = g.expr(sc, t, depth)
	}
	if wi < 0 {
		return "SELECT " + strings.Join(items, ", ") + " FROM " + from + where + g.orderLimit(len(want), orderP)
	}
	part, _ := g.col(sc, oInt)
	ord, _ := g.col(sc, oText)
	over := ""
	if part != "" && g.chance(0.7) {
		over = "PARTITION BY " + part
	}
	fn := []string{"count(*)", "rank()", "dense_rank()", "sum(%s)", "max(%s)"}[g.intn(5)]
	if strings.Contains(fn, "%s") {
		c, ok := pickCol(g, sc.rels, oInt)
		if !ok {
			c = "1"
		}
		fn = fmt.Sprintf(fn, c)
	}
	if ord != "" && (strings.HasSuffix(fn, "rank()") || g.chance(0.4)) {
		over += " ORDER BY " + ord
	}
	items[wi] = fn + " OVER (" + strings.TrimSpace(over) + ")"
	if g.chance(0.2) {
		g.feat("WINDOW clause")
		items[wi] = fn + " OVER w"
		return "SELECT " + strings.Join(items, ", ") + " FROM " + from + where +
			" WINDOW w AS (" + strings.TrimSpace(over) + ")" + g.orderLimit(len(want), orderP)
	}
	return "SELECT " + strings.Join(items, ", ") + " FROM " + from + where + g.orderLimit(len(want), orderP)
}

// forUpdate is a locking SELECT: no outer joins, aggregates or set
// operations, which PostgreSQL refuses to lock.
func (g *gen) forUpdate() string {
	g.feat("FOR UPDATE")
	sc := &scope{}
	sql, r := g.baseItem(sc)
	sc.rels = append(sc.rels, r)
	from := sql
	if g.chance(0.4) {
		sql2, r2 := g.baseItem(sc)
		sc.rels = append(sc.rels, r2)
		from += " JOIN " + sql2 + " ON " + g.equi(sc.rels[:1], sc.rels[1:])
	}
	q := "SELECT " + g.list(sc, g.types(), maxDepth) + " FROM " + from + g.where(sc, 1)
	lock := []string{"FOR UPDATE", "FOR NO KEY UPDATE", "FOR SHARE", "FOR KEY SHARE"}[g.intn(4)]
	if q := sc.rels[g.intn(len(sc.rels))].qual; g.chance(0.4) && !strings.Contains(q, ".") {
		lock += " OF " + q
	}
	switch g.intn(3) {
	case 0:
		g.feat("SKIP LOCKED")
		lock += " SKIP LOCKED"
	case 1:
		lock += " NOWAIT"
	}
	return q + " " + lock
}

func (g *gen) insertSelect() string {
	g.feat("INSERT SELECT")
	if g.chance(0.15) {
		g.feat("INSERT VALUES subquery")
		sc := &scope{}
		return "INSERT INTO sink (a, b) VALUES (" + g.scalarSub(sc, oInt, 1) + ", " + g.scalarSub(sc, oText, 1) + ")"
	}
	q, _ := g.query(nil, []oType{oInt, oText}, 1)
	sql := "INSERT INTO sink (a, b) " + q
	if g.chance(0.3) {
		g.feat("RETURNING")
		sql += " RETURNING a, b"
	}
	return sql
}

// target is the table an UPDATE or DELETE changes, and its scope.
func (g *gen) target() (string, *scope) {
	t := g.table()
	for t.view {
		t = g.table()
	}
	if t.ttl() {
		g.feat("TTL target")
	}
	r := rel{cols: t.cols, all: t.all, natural: true}
	if !g.shadowed(t.name) && g.chance(0.3) {
		g.feat("unaliased target")
		g.reserved = t.name
		r.qual = t.name
		return g.tableName(t, true), &scope{rels: []rel{r}}
	}
	r.qual = g.alias("x")
	return g.tableName(t, true) + " AS " + r.qual, &scope{rels: []rel{r}}
}

// dmlWith is an optional WITH clause of an UPDATE or DELETE: a CTE in scope
// until the returned function is called.
func (g *gen) dmlWith() (string, func()) {
	saved := len(g.ctes)
	done := func() { g.ctes = g.ctes[:saved] }
	if !g.chance(0.15) {
		return "", done
	}
	g.feat("WITH on UPDATE/DELETE")
	q, _ := g.query(nil, []oType{oInt}, 1)
	c := derivedCTE(g.alias("w"), []oType{oInt})
	g.ctes = append(g.ctes, c)
	return "WITH " + c.name + "(c1) AS (" + q + ") ", done
}

// returning lists the target's columns: never those of the FROM/USING
// tables, whose matching row PostgreSQL picks at will.
func (g *gen) returning(sc *scope) string {
	if !g.chance(0.8) {
		return ""
	}
	g.feat("RETURNING")
	t := sc.rels[0]
	if g.chance(0.3) {
		return " RETURNING " + t.qual + ".*"
	}
	items := []string{t.qual + ".id"}
	for range g.intn(3) {
		c := t.qual + "." + t.cols[g.intn(len(t.cols))].name
		if !slices.Contains(items, c) {
			items = append(items, c)
		}
	}
	if g.chance(0.2) {
		items = append(items, g.scalarSub(&scope{rels: sc.rels[:1]}, oInt, 2)+" AS sub")
	}
	return " RETURNING " + strings.Join(items, ", ")
}

func (g *gen) update() string {
	g.feat("UPDATE")
	with, done := g.dmlWith()
	defer done()
	target, sc := g.target()
	x := sc.rels[0]
	// Only v and k change: the expiry and the sidecar key stay, so a row the
	// policy lets through stays visible to it (WITH CHECK passes).
	var set string
	if g.chance(0.12) {
		g.feat("SET (…) = (SELECT …)")
		set = fmt.Sprintf("(v, k) = (SELECT y.v, y.k FROM %s y WHERE y.id = %s.id ORDER BY 1, 2 LIMIT 1)",
			g.tableName(g.table(), false), x.qual)
	} else {
		set = "v = " + g.expr(&scope{rels: sc.rels[:1]}, oText, 1)
		if g.chance(0.3) {
			set += ", k = " + g.expr(&scope{rels: sc.rels[:1]}, oInt, 1)
		}
	}
	sql := with + "UPDATE " + target + " SET " + set
	var conds []string
	if with != "" && g.chance(0.7) {
		conds = append(conds, x.qual+".k IN (SELECT c1 FROM "+g.ctes[len(g.ctes)-1].name+")")
	}
	if g.chance(0.3) {
		g.feat("UPDATE FROM")
		from := &scope{}
		f := g.from(from, 1)
		sc.rels = append(sc.rels, from.rels...)
		sql += " FROM " + f
		if c, ok := pickCol(g, from.rels, oInt); ok {
			conds = append(conds, x.qual+".k = "+c)
		}
	}
	if g.chance(0.8) {
		conds = append(conds, g.pred(sc, 1, 0))
	}
	if len(conds) > 0 {
		sql += " WHERE " + strings.Join(conds, " AND ")
	}
	return sql + g.returning(sc)
}

func (g *gen) delete() string {
	g.feat("DELETE")
	with, done := g.dmlWith()
	defer done()
	target, sc := g.target()
	x := sc.rels[0]
	sql := with + "DELETE FROM " + target
	var conds []string
	if with != "" && g.chance(0.7) {
		conds = append(conds, x.qual+".k IN (SELECT c1 FROM "+g.ctes[len(g.ctes)-1].name+")")
	}
	if g.chance(0.3) {
		g.feat("DELETE USING")
		using := &scope{}
		f := g.from(using, 1)
		sc.rels = append(sc.rels, using.rels...)
		sql += " USING " + f
		if c, ok := pickCol(g, using.rels, oInt); ok {
			conds = append(conds, x.qual+".k = "+c)
		}
	}
	if g.chance(0.8) {
		conds = append(conds, g.pred(sc, 1, 0))
	}
	if len(conds) > 0 {
		sql += " WHERE " + strings.Join(conds, " AND ")
	}
	return sql + g.returning(sc)
}

// modifyingCTE reads the rows an UPDATE or DELETE in a WITH returns.
func (g *gen) modifyingCTE() string {
	g.feat("data-modifying CTE")
	var dml string
	if g.chance(0.5) {
		dml = g.delete()
	} else {
		dml = g.update()
	}
	if !strings.Contains(dml, " RETURNING ") {
		dml += " RETURNING 1 AS id"
	}
	switch g.intn(3) {
	case 0:
		return "WITH m AS (" + dml + ") SELECT count(*) FROM m"
	case 1:
		return "WITH m AS (" + dml + ") SELECT * FROM m"
	default:
		t := g.table()
		return "WITH m AS (" + dml + ") SELECT m.id, y.k FROM m LEFT JOIN " + g.tableName(t, false) + " y ON y.id = m.id"
	}
}
