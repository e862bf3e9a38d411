package tests

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ttlproxy/ttlproxy/rewrite"
	"github.com/ttlproxy/ttlproxy/ttl"
)

// TestOracle is a differential test of the read filter's placement: every
// statement runs through the proxy as the tables' owner, and directly as
// oracle_reader, a role that row-level security policies restrict to live
// rows with the rules' own LiveCondition. The two must agree on every row
// and command tag, whatever the shape of the statement. Both sides use the
// same definition of live, so what is tested is where the rewriter puts it.
//
// Reproduce a run with -oracle.seed=S, one case with -oracle.case=I.

var (
	oracleSeed = flag.Uint64("oracle.seed", 0, "TestOracle: generator seed; 0 picks one from the clock, or ciOracleSeed with CI=true")
	oracleN    = flag.Int("oracle.n", 3000, "TestOracle: number of generated statements")
	oracleCase = flag.Int("oracle.case", -1, "TestOracle: run only this generated case")
)

// ciOracleSeed is the generator seed of CI runs (CI=true) when
// -oracle.seed is not given.
const ciOracleSeed = 20261125

// maxRejectedShare bounds the generated statements the proxy may reject:
// every generated shape is one the contract (docs/contract.md) says is served.
const maxRejectedShare = 0.05

// maxErrorShare bounds the generated statements both sides refuse alike:
// they test nothing, so many of them mean the generator has drifted.
const maxErrorShare = 0.10

// execMode is how a compared statement is sent.
type execMode int

const (
	modeSimple   execMode = iota // Query message
	modeExtended                 // unnamed Parse, Bind, Execute
	modePrepared                 // named Parse, then Bind, Execute by name
)

func (m execMode) String() string {
	return [...]string{"simple", "extended", "prepared"}[m]
}

// result is the outcome of one compared step on one side.
type result struct {
	tag  string
	rows []string // rendered rows, sorted
	err  error
}

func (r result) code() string {
	if c := sqlstate(r.err); c != "" {
		return c
	}
	if r.err != nil {
		return "client error"
	}
	return ""
}

func (r result) String() string {
	if r.err != nil {
		return "error: " + r.err.Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s, %d rows", r.tag, len(r.rows))
	for i, row := range r.rows {
		if i == 20 {
			fmt.Fprintf(&b, "\n      … %d more", len(r.rows)-i)
			break
		}
		b.WriteString("\n      " + row)
	}
	return b.String()
}

// verdict is how one case came out.
type verdict int

const (
	verdictEqual      verdict = iota
	verdictBothFailed         // equal: both sides failed with the same SQLSTATE
	verdictRejected
	verdictFailed
)

// caseReport is a case that did not come out equal.
type caseReport struct {
	name    string
	index   int // generated case number, -1 for a hand-written one
	c       genCase
	mode    execMode
	verdict verdict
	reason  string // the rejection's message, or what differed
	detail  string
}

type oracle struct {
	t       *testing.T
	s       *stack
	rw      *rewrite.Rewriter
	sess    *rewrite.State
	proxied *pgconn.PgConn
	direct  *pgconn.PgConn
	seed    uint64
}

func TestOracle(t *testing.T) {
	setup, rules, tables := oracleSchema()
	s := newStack(t, stackOptions{setup: setup, rules: rules})
	o := newOracle(t, s, rules)

	t.Run("handwritten", func(t *testing.T) {
		start := time.Now()
		var equal, rejected int
		runs := 0
		for _, hc := range oracleHandwritten() {
			for _, mode := range []execMode{modeSimple, modeExtended} {
				if hc.simpleOnly && mode != modeSimple {
					continue
				}
				runs++
				rep, v := o.check(hc.name, hc.c, mode)
				switch {
				case hc.wantReject && v != verdictRejected:
					t.Errorf("%s (%s): want a rejection, got verdict %d: %s\n    %s", hc.name, mode, v, rep.reason, hc.c.sql)
				case v == verdictEqual:
					equal++
				case v == verdictBothFailed:
					t.Errorf("%s (%s): both sides failed: %s\n    %s", hc.name, mode, rep.reason, hc.c.sql)
				case v == verdictRejected && hc.wantReject:
					rejected++
				case v == verdictRejected:
					// A hand-written case is a shape the contract serves
					// unless it says wantReject: a rejection is a failure.
					t.Errorf("%s (%s): rejected unexpectedly: %s\n    %s", hc.name, mode, rep.reason, hc.c.sql)
				default:
					t.Errorf("%s", rep.detail)
				}
			}
		}
		t.Logf("handwritten: %d cases, %d runs, %d equal, %d rejected, in %v",
			len(oracleHandwritten()), runs, equal, rejected, time.Since(start).Round(time.Millisecond))
	})

	t.Run("generated", func(t *testing.T) {
		o.generated(t, tables)
	})
}

func newOracle(t *testing.T, s *stack, rules []ttl.Rule) *oracle {
	rw, err := rewrite.New(rules, rewrite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	o := &oracle{t: t, s: s, rw: rw, seed: *oracleSeed}
	switch {
	case o.seed != 0:
	case os.Getenv("CI") == "true":
		// CI runs one fixed seed, so that a red run is the same run
		// whoever repeats it; other runs explore (the seed is logged).
		o.seed = ciOracleSeed
	default:
		o.seed = uint64(time.Now().UnixNano())
	}
	admin := s.connect(s.direct)
	o.sess = rewrite.NewState(rewrite.Session{
		SearchPath: []string{admin.Config().User, "public"},
		Catalog:    loadOracleCatalog(t, admin, rules),
	})
	o.connect()
	return o
}

// connect (re)opens both sides: the proxy as the owner, the server directly
// as oracle_reader.
func (o *oracle) connect() {
	o.proxied = o.s.connect(o.s.proxied).PgConn()
	o.direct = o.s.connect(o.s.direct).PgConn()
	for _, c := range []*pgconn.PgConn{o.proxied, o.direct} {
		if _, err := c.Exec(context.Background(), "SET statement_timeout = '10s'").ReadAll(); err != nil {
			o.t.Fatalf("setting statement_timeout: %v", err)
		}
	}
	if _, err := o.direct.Exec(context.Background(), "SET ROLE oracle_reader").ReadAll(); err != nil {
		o.t.Fatalf("SET ROLE oracle_reader: %v", err)
	}
}

// loadOracleCatalog builds the catalog the proxy learns at startup, so that
// failure reports show the rewrite the proxy made.
func loadOracleCatalog(t *testing.T, conn *pgx.Conn, rules []ttl.Rule) *rewrite.Catalog {
	ctx := context.Background()
	cat := rewrite.CatalogData{Tables: map[string]*rewrite.TableInfo{}, Schemas: map[string][]string{}}
	for _, r := range rules {
		ti := &rewrite.TableInfo{}
		rows, err := conn.Query(ctx, `SELECT a.attname, format_type(a.atttypid, a.atttypmod)
			FROM pg_attribute a WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped
			ORDER BY a.attnum`, r.QuotedName())
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var c rewrite.Column
			if err := rows.Scan(&c.Name, &c.Type); err != nil {
				t.Fatal(err)
			}
			ti.Columns = append(ti.Columns, c)
		}
		rows, err = conn.Query(ctx, `SELECT array_agg(a.attname::text ORDER BY k.ord)
			FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
			JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
			WHERE i.indrelid = $1::regclass AND i.indisunique AND k.ord <= i.indnkeyatts
			GROUP BY i.indexrelid ORDER BY i.indexrelid`, r.QuotedName())
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var key []string
			if err := rows.Scan(&key); err != nil {
				t.Fatal(err)
			}
			ti.UniqueKeys = append(ti.UniqueKeys, key)
		}
		cat.Tables[r.QualifiedName()] = ti
		rows, err = conn.Query(ctx, `SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE c.relname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S') AND n.nspname !~ '^pg_(toast_)?temp_'
			ORDER BY 1`, r.Table)
		if err != nil {
			t.Fatal(err)
		}
		schemas, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		cat.Schemas[r.Table] = schemas
	}
	return rewrite.NewCatalog(cat)
}

// generated runs the generated statements and reports the counts, the
// rejected shapes, and the failures, shortest first.
func (o *oracle) generated(t *testing.T, tables []*oTable) {
	n := *oracleN
	if testing.Short() && n > 500 {
		n = 500
	}
	t.Logf("oracle seed %d (rerun with -oracle.seed=%d)", o.seed, o.seed)
	start := time.Now()
	var equal int
	var bothFailed, rejected, failed []caseReport
	type timed struct {
		d time.Duration
		i int
	}
	var slowest []timed
	ran := 0
	views := map[verdict]int{} // statements reading a view the proxy expands, by verdict
	for i := range n {
		if *oracleCase >= 0 && i != *oracleCase {
			continue
		}
		mode := execMode(i % 3)
		// A simple-protocol case runs in three variants: one shape with
		// other literals, so that the third is rewritten from the shape
		// template the first two made and confirmed.
		variants := uint64(1)
		if mode == modeSimple {
			variants = 3
		}
		for variant := range variants {
			g := newGen(o.seed, uint64(i), tables, variant)
			c := g.next(mode != modeSimple)
			ran++
			t0 := time.Now()
			name := fmt.Sprintf("case %d", i)
			if variant > 0 {
				name = fmt.Sprintf("case %d variant %d", i, variant)
			}
			rep, v := o.check(name, c, mode)
			if slices.Contains(c.feats, "view") {
				views[v]++
			}
			slowest = append(slowest, timed{time.Since(t0), i})
			slices.SortFunc(slowest, func(a, b timed) int { return int(b.d - a.d) })
			slowest = slowest[:min(len(slowest), 3)]
			switch v {
			case verdictEqual:
				equal++
			case verdictBothFailed:
				bothFailed = append(bothFailed, rep)
			case verdictRejected:
				rejected = append(rejected, rep)
			default:
				failed = append(failed, rep)
			}
		}
	}
	elapsed := time.Since(start)
	t.Logf("oracle: seed %d, %d statements: %d equal (%d with rows, %d failing alike on both sides), %d rejected, %d failed, in %v",
		o.seed, ran, equal+len(bothFailed), equal, len(bothFailed), len(rejected), len(failed), elapsed.Round(time.Millisecond))
	t.Logf("oracle: %d statements read a view over TTL tables: %d equal, %d failing alike, %d rejected",
		views[verdictEqual]+views[verdictBothFailed]+views[verdictRejected]+views[verdictFailed],
		views[verdictEqual], views[verdictBothFailed], views[verdictRejected])
	if ran >= 300 && views[verdictEqual] == 0 {
		t.Errorf("no statement read a view with rows equal to the reference: the oracle does not exercise view expansion")
	}
	shapeHits := o.s.metric("ttlproxy_proxy_rewrite_shape_hits_total", nil)
	t.Logf("oracle: %v statements were rewritten from a shape template, %v shape mismatches",
		shapeHits, o.s.metric("ttlproxy_proxy_rewrite_shape_mismatches_total", nil))
	if m := o.s.metric("ttlproxy_proxy_rewrite_shape_mismatches_total", nil); m != 0 {
		t.Errorf("%v shape templates were contradicted by a full rewrite", m)
	}
	if ran >= 300 && shapeHits == 0 {
		t.Errorf("no statement was rewritten from a shape template: the oracle does not exercise the shape cache")
	}
	for _, s := range slowest {
		t.Logf("slow: case %d took %v", s.i, s.d.Round(time.Millisecond))
	}
	if len(bothFailed) > 0 {
		t.Logf("statements failing alike on both sides:\n%s", groupReports(bothFailed))
	}
	if ran > 0 && float64(len(bothFailed)) > maxErrorShare*float64(ran) {
		t.Errorf("%d of %d generated statements failed on both sides (more than %.0f%%): the generator makes invalid SQL",
			len(bothFailed), ran, 100*maxErrorShare)
	}

	if len(rejected) > 0 {
		t.Logf("rejected shapes (a rejection is not a leak, but these shapes are in the contract):\n%s", groupReports(rejected))
	}
	if ran > 0 && float64(len(rejected)) > maxRejectedShare*float64(ran) {
		t.Errorf("the proxy rejected %d of %d generated statements (%.1f%%), more than %.0f%%",
			len(rejected), ran, 100*float64(len(rejected))/float64(ran), 100*maxRejectedShare)
	}
	if len(failed) == 0 {
		return
	}
	t.Logf("failures by feature:\n%s", featureCounts(failed))
	t.Logf("failures by difference:\n%s", groupReports(failed))
	// The shortest failure of each kind, then the shortest others.
	slices.SortStableFunc(failed, func(a, b caseReport) int { return len(a.c.sql) - len(b.c.sql) })
	shown := map[string]bool{}
	var first, rest []caseReport
	for _, f := range failed {
		if !shown[f.reason] {
			shown[f.reason] = true
			first = append(first, f)
		} else {
			rest = append(rest, f)
		}
	}
	for i, f := range append(first, rest...) {
		if i == max(15, len(first)) {
			t.Errorf("… and %d more failures (seed %d)", len(failed)-i, o.seed)
			break
		}
		t.Errorf("%s", f.detail)
	}
}

// groupReports groups reports by reason: count, features, shortest example.
func groupReports(reps []caseReport) string {
	byReason := map[string][]caseReport{}
	for _, r := range reps {
		byReason[r.reason] = append(byReason[r.reason], r)
	}
	reasons := slices.SortedFunc(maps.Keys(byReason), func(a, b string) int {
		return len(byReason[b]) - len(byReason[a])
	})
	var b strings.Builder
	for _, reason := range reasons {
		rs := byReason[reason]
		shortest := slices.MinFunc(rs, func(x, y caseReport) int { return len(x.c.sql) - len(y.c.sql) })
		fmt.Fprintf(&b, "  %4d × %s\n         e.g. %s (%s): %s\n", len(rs), reason, shortest.name, shortest.mode, shortest.c.sql)
	}
	return b.String()
}

// featureCounts counts reports by the features their statements use.
func featureCounts(reps []caseReport) string {
	counts := map[string]int{}
	for _, r := range reps {
		for _, f := range r.c.feats {
			counts[f]++
		}
	}
	feats := slices.SortedFunc(maps.Keys(counts), func(a, b string) int { return counts[b] - counts[a] })
	var b strings.Builder
	for _, f := range feats {
		fmt.Fprintf(&b, "  %4d %s\n", counts[f], f)
	}
	return b.String()
}

// check runs c on both sides and compares every compared step.
func (o *oracle) check(name string, c genCase, mode execMode) (caseReport, verdict) {
	rep := caseReport{name: name, index: -1, c: c, mode: mode}
	if n, ok := strings.CutPrefix(name, "case "); ok {
		if _, err := fmt.Sscan(n, &rep.index); err != nil {
			rep.index = -1
		}
	}
	ctx := context.Background()
	pres := o.runSteps(ctx, o.proxied, c, mode)
	dres := o.runSteps(ctx, o.direct, c, mode)
	defer func() {
		if o.proxied.IsClosed() || o.direct.IsClosed() {
			o.connect()
		}
	}()

	k := 0
	bothFailed := ""
	for i, st := range c.steps {
		if !st.compare {
			continue
		}
		p, d := pres[k], dres[k]
		k++
		if p.err != nil {
			if msg, ok := o.rejection(st.sql, p.err); ok {
				rep.verdict = verdictRejected
				rep.reason = msg
				return rep, verdictRejected
			}
		}
		var reason string
		switch {
		case p.err != nil && d.err != nil:
			if p.code() != d.code() {
				reason = fmt.Sprintf("errors differ: %s through the proxy, %s under RLS", p.code(), d.code())
			} else if bothFailed == "" && k == 1 {
				bothFailed = d.code() + " " + errMessage(d.err)
			}
		case p.err != nil:
			reason = "error through the proxy only: " + p.code() + " " + normalize(errMessage(p.err))
		case d.err != nil:
			reason = "error under RLS only: " + d.code() + " " + normalize(errMessage(d.err))
		case !slices.Equal(p.rows, d.rows):
			extra, missing := diffRows(p.rows, d.rows)
			switch {
			case len(extra) > 0 && len(missing) > 0:
				reason = "rows differ both ways"
			case len(extra) > 0:
				reason = "extra rows through the proxy"
			default:
				reason = "rows missing through the proxy"
			}
		case p.tag != d.tag:
			reason = "command tags differ"
		}
		if reason == "" {
			continue
		}
		rep.verdict = verdictFailed
		rep.reason = reason
		rep.detail = o.describe(rep, i, p, d)
		return rep, verdictFailed
	}
	if bothFailed != "" {
		rep.verdict = verdictBothFailed
		rep.reason = bothFailed
		return rep, verdictBothFailed
	}
	return rep, verdictEqual
}

// normalize drops the numbers from a message (alias and placeholder
// numbers), so that reports group by kind.
func normalize(msg string) string {
	var b strings.Builder
	digits := false
	for _, r := range msg {
		if r >= '0' && r <= '9' {
			if !digits {
				b.WriteByte('N')
			}
			digits = true
			continue
		}
		digits = false
		b.WriteRune(r)
	}
	return b.String()
}

func errMessage(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Message
	}
	return err.Error()
}

// rejection reports whether err, the proxy's answer to sql, is the
// rewriter's refusal, and its message.
func (o *oracle) rejection(sql string, err error) (string, bool) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return "", false
	}
	_, rerr := o.rw.Rewrite(sql, o.sess)
	var re *rewrite.Error
	if errors.As(rerr, &re) && re.Message == pgErr.Message {
		return pgErr.Code + " " + pgErr.Message, true
	}
	if strings.HasPrefix(pgErr.Message, "ttlproxy") {
		return pgErr.Code + " " + pgErr.Message, true
	}
	return "", false
}

func (o *oracle) describe(rep caseReport, stepIdx int, p, d result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s (%s protocol", rep.name, rep.reason, rep.mode)
	if rep.index >= 0 {
		fmt.Fprintf(&b, "; rerun: -oracle.seed=%d -oracle.case=%d", o.seed, rep.index)
	}
	b.WriteString(")\n")
	fmt.Fprintf(&b, "  statement: %s\n", rep.c.sql)
	if ps := rep.c.steps[stepIdx].params; len(ps) > 0 {
		fmt.Fprintf(&b, "  params:    %q\n", ps)
	}
	if st := rep.c.steps[stepIdx]; st.sql != rep.c.sql {
		fmt.Fprintf(&b, "  step:      %s\n", st.sql)
	}
	res, err := o.rw.Rewrite(rep.c.steps[stepIdx].sql, o.sess)
	switch {
	case err != nil:
		fmt.Fprintf(&b, "  rewritten: rejected locally: %v\n", err)
	case !res.Rewritten:
		b.WriteString("  rewritten: (unchanged)\n")
	default:
		fmt.Fprintf(&b, "  rewritten: %s\n", res.SQL)
	}
	if len(rep.c.feats) > 0 {
		fmt.Fprintf(&b, "  features:  %s\n", strings.Join(rep.c.feats, ", "))
	}
	fmt.Fprintf(&b, "  through the proxy: %s\n", p)
	fmt.Fprintf(&b, "  under RLS:         %s\n", d)
	if p.err == nil && d.err == nil {
		extra, missing := diffRows(p.rows, d.rows)
		if len(extra) > 0 {
			fmt.Fprintf(&b, "  only through the proxy (leaked?): %s\n", limitRows(extra))
		}
		if len(missing) > 0 {
			fmt.Fprintf(&b, "  only under RLS (hidden?):         %s\n", limitRows(missing))
		}
	}
	return b.String()
}

func limitRows(rows []string) string {
	if len(rows) > 10 {
		return strings.Join(rows[:10], "; ") + fmt.Sprintf("; … %d more", len(rows)-10)
	}
	return strings.Join(rows, "; ")
}

// diffRows returns the rows of the sorted multiset a missing from b, and
// those of b missing from a.
func diffRows(a, b []string) (extra, missing []string) {
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && a[i] < b[j]):
			extra = append(extra, a[i])
			i++
		case i == len(a) || b[j] < a[i]:
			missing = append(missing, b[j])
			j++
		default:
			i++
			j++
		}
	}
	return extra, missing
}

// runSteps runs every step of c on conn and returns the results of the
// compared ones. Steps go on after an error, so a transaction is always
// rolled back.
func (o *oracle) runSteps(ctx context.Context, conn *pgconn.PgConn, c genCase, mode execMode) []result {
	var out []result
	for _, st := range c.steps {
		if conn.IsClosed() {
			if st.compare {
				out = append(out, result{err: errors.New("connection closed")})
			}
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		switch {
		case !st.compare:
			_, _ = conn.Exec(sctx, st.sql).ReadAll()
		case st.copyOut:
			var buf bytes.Buffer
			tag, err := conn.CopyTo(sctx, &buf, st.sql)
			r := result{tag: tag.String(), err: err}
			if err == nil {
				r.rows = strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
				if buf.Len() == 0 {
					r.rows = nil
				}
				slices.Sort(r.rows)
			}
			out = append(out, r)
		default:
			out = append(out, execStep(sctx, conn, st, mode))
		}
		cancel()
	}
	return out
}

// execStep runs one statement with text results and renders its rows.
func execStep(ctx context.Context, conn *pgconn.PgConn, st step, mode execMode) result {
	sql := st.sql
	var params [][]byte
	for _, p := range st.params {
		params = append(params, []byte(p))
	}
	var res *pgconn.Result
	switch mode {
	case modeSimple:
		results, err := conn.Exec(ctx, sql).ReadAll()
		if err != nil {
			return result{err: err}
		}
		if len(results) != 1 {
			// Several statements: their tags, and their rows numbered by
			// statement.
			var r result
			for i, res := range results {
				r.tag += res.CommandTag.String() + ";"
				for _, row := range res.Rows {
					r.rows = append(r.rows, fmt.Sprintf("#%d: %s", i+1, renderRow(row)))
				}
			}
			slices.Sort(r.rows)
			return r
		}
		res = results[0]
	case modeExtended:
		res = conn.ExecParams(ctx, sql, params, nil, nil, nil).Read()
	case modePrepared:
		if _, err := conn.Prepare(ctx, "oracle_stmt_p", sql, nil); err != nil {
			return result{err: err}
		}
		res = conn.ExecPrepared(ctx, "oracle_stmt_p", params, nil, nil).Read()
		if err := conn.Deallocate(ctx, "oracle_stmt_p"); err != nil && res.Err == nil {
			return result{err: fmt.Errorf("deallocate: %w", err)}
		}
	}
	if res.Err != nil {
		return result{err: res.Err}
	}
	r := result{tag: res.CommandTag.String()}
	for _, row := range res.Rows {
		r.rows = append(r.rows, renderRow(row))
	}
	slices.Sort(r.rows)
	return r
}

func renderRow(row [][]byte) string {
	var b strings.Builder
	for i, v := range row {
		if i > 0 {
			b.WriteString(" | ")
		}
		if v == nil {
			b.WriteString("NULL")
		} else {
			b.Write(v)
		}
	}
	return b.String()
}

// handCase is a hand-written oracle case.
type handCase struct {
	name       string
	c          genCase
	simpleOnly bool // several statements in one Query message
	wantReject bool // a documented rejection (the proxy refuses it)
}

func read(sql string) genCase {
	return genCase{sql: sql, steps: []step{{sql: sql, compare: true}}}
}

// inTx runs sql and then the reads in a transaction that is rolled back.
func inTx(sql string, reads ...string) genCase {
	c := genCase{sql: sql, steps: []step{{sql: "BEGIN"}, {sql: sql, compare: true}}}
	for _, r := range reads {
		c.steps = append(c.steps, step{sql: r, compare: true})
	}
	c.steps = append(c.steps, step{sql: "ROLLBACK"})
	return c
}

// oracleHandwritten are the shapes most likely to leak: the TTL table on
// the nullable side of outer joins, nested joins, LATERAL, recursion, set
// operations, correlation, aliases, locking, and names that only look like
// a TTL table.
func oracleHandwritten() []handCase {
	cs := []struct{ name, sql string }{
		{"left join, TTL right", `SELECT s.id, t.id FROM sessions s LEFT JOIN tokens t ON t.k = s.k`},
		{"right join, TTL left", `SELECT s.id, t.id FROM tokens t RIGHT JOIN sessions s ON t.k = s.k`},
		{"left join, plain left", `SELECT a.id, s.id FROM accounts a LEFT JOIN sessions s ON s.k = a.k`},
		{"right join, plain right", `SELECT a.id, s.id FROM sessions s RIGHT JOIN accounts a ON s.k = a.k`},
		{"left join with extra ON condition", `SELECT a.id, s.id FROM accounts a LEFT JOIN sessions s ON s.k = a.k AND s.v = 'b'`},
		{"full join, both TTL", `SELECT s.id, e.id FROM sessions s FULL JOIN events e ON s.id = e.id`},
		{"full join, two equalities", `SELECT coalesce(s.id, c.id), s.v, c.v FROM sessions s FULL JOIN coupons c ON c.id = s.id AND c.k = s.k`},
		{"full join using, sidecar", `SELECT * FROM sessions s FULL JOIN carts c USING (id)`},
		{"natural left join", `SELECT * FROM coupons NATURAL LEFT JOIN tokens`},
		{"natural full join", `SELECT * FROM uploads NATURAL FULL JOIN jobs`},
		{"left join nested inner join", `SELECT a.id, s.id, e.id FROM accounts a LEFT JOIN (sessions s JOIN events e ON e.k = s.k) ON s.id = a.id`},
		{"left join nested left join", `SELECT a.id, s.id, e.id FROM accounts a LEFT JOIN (sessions s LEFT JOIN events e ON e.k = s.k) ON s.id = a.id`},
		{"chain of left joins", `SELECT a.id, s.id, c.id FROM accounts a LEFT JOIN sessions s ON s.k = a.k LEFT JOIN carts c ON c.id = s.id`},
		{"right join of a nested full join", `SELECT * FROM (pings p FULL JOIN cart_items ci ON ci.id = p.id) RIGHT JOIN tags g ON g.id = p.id`},
		{"cross join lateral aggregate", `SELECT a.id, l.n FROM accounts a CROSS JOIN LATERAL (SELECT count(*) AS n FROM sessions s WHERE s.k = a.k) l`},
		{"left join lateral limit", `SELECT a.id, l.id FROM accounts a LEFT JOIN LATERAL (SELECT s.id FROM sessions s WHERE s.k = a.k ORDER BY s.id DESC LIMIT 1) l ON true`},
		{"comma lateral over TTL", `SELECT s.id, l.id FROM sessions s, LATERAL (SELECT t.id FROM tokens t WHERE t.k = s.k ORDER BY t.id LIMIT 2) l`},
		{"lateral referencing a TTL table", `SELECT j.id, l.c FROM jobs j JOIN LATERAL (SELECT count(*) AS c FROM cart_items ci WHERE ci.k = j.k) l ON l.c > 0`},
		{"recursive CTE over TTL table", `WITH RECURSIVE r(id, k) AS (SELECT id, k FROM sessions WHERE id = 1
			UNION SELECT s.id, s.k FROM sessions s JOIN r ON s.k = r.k OR s.id = r.id + 1) SELECT * FROM r`},
		{"recursive counter joined to TTL", `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 30)
			SELECT n.i, c.v FROM n LEFT JOIN coupons c ON c.id = n.i`},
		{"union", `SELECT k FROM sessions UNION SELECT k FROM tokens`},
		{"intersect all", `SELECT id FROM sessions INTERSECT ALL SELECT id FROM carts`},
		{"except plain minus TTL", `SELECT id FROM accounts EXCEPT SELECT id FROM sessions`},
		{"same name, other schema", `TABLE archive.sessions EXCEPT TABLE sessions`},
		{"other schema joined", `SELECT * FROM archive.sessions a LEFT JOIN sessions s USING (id)`},
		{"correlated subquery in HAVING", `SELECT a.k, count(*) FROM accounts a GROUP BY a.k
			HAVING count(*) > (SELECT count(*) FROM sessions s WHERE s.k = a.k) - 3`},
		{"EXISTS in HAVING", `SELECT s.k, count(*) FROM sessions s GROUP BY s.k HAVING EXISTS (SELECT 1 FROM tokens t WHERE t.k = s.k)`},
		{"three aliases of one table", `SELECT s1.id, s2.id, s3.id FROM sessions s1 JOIN sessions s2 ON s2.k = s1.k
			LEFT JOIN sessions s3 ON s3.id = s2.id + 1 WHERE s1.id < 8`},
		{"unaliased and aliased self-join", `SELECT sessions.id, s.id FROM sessions JOIN sessions s ON s.id = sessions.id + 1`},
		{"window functions", `SELECT id, k, count(*) OVER (PARTITION BY k), rank() OVER (ORDER BY k) FROM jobs`},
		{"distinct on", `SELECT DISTINCT ON (k) k, id FROM uploads ORDER BY k, id DESC`},
		{"scalar subquery in select list", `SELECT a.id, (SELECT max(s.id) FROM sessions s WHERE s.k = a.k) FROM accounts a`},
		{"aggregates", `SELECT count(*), count(expires_at), min(id), max(id), sum(k) FROM sessions`},
		{"scalar subqueries without FROM", `SELECT (SELECT count(*) FROM sessions), (SELECT count(*) FROM carts), (SELECT count(*) FROM cart_items)`},
		{"NOT IN sidecar", `SELECT id FROM carts WHERE id NOT IN (SELECT id FROM cart_items)`},
		{"NOT EXISTS composite sidecar", `SELECT * FROM cart_items ci WHERE NOT EXISTS (SELECT 1 FROM carts c WHERE c.id = ci.id)`},
		{"ANY and ALL", `SELECT id FROM accounts WHERE k = ANY (SELECT k FROM jobs) AND id > ALL (SELECT id FROM pings WHERE k = 0)`},
		{"IN set operation", `SELECT s.id FROM sessions s WHERE s.k IN (SELECT k FROM tokens UNION SELECT k FROM pings)`},
		{"IN in outer join's ON", `SELECT a.id, s.id FROM accounts a LEFT JOIN sessions s ON s.k = a.k AND s.id IN (SELECT id FROM tokens)`},
		{"nested EXISTS", `SELECT * FROM jobs j WHERE EXISTS (SELECT 1 FROM uploads u WHERE u.k = j.k AND EXISTS (SELECT 1 FROM pings p WHERE p.id = u.id))`},
		{"correlated IN", `SELECT * FROM sessions s WHERE s.id IN (SELECT t.id FROM tokens t WHERE t.k = s.k)`},
		{"name forms", `SELECT * FROM public.sessions`},
		{"TTL table in another schema", `SELECT n.id, p.id FROM vault.notes n LEFT JOIN notes p USING (id)`},
		{"quoted name", `SELECT * FROM "sessions"`},
		{"quoted alias", `SELECT "S".id FROM public."sessions" AS "S"`},
		{"ONLY", `SELECT * FROM ONLY sessions`},
		{"subquery star", `SELECT id FROM (SELECT * FROM sessions) sub WHERE sub.expires_at IS NULL`},
		{"TABLE in subquery", `SELECT x.* FROM (TABLE tokens) x`},
		{"VALUES left join", `SELECT v.x, s.id FROM (VALUES (1), (2), (3), (4)) v(x) LEFT JOIN sessions s ON s.id = v.x`},
		{"rollup", `SELECT k, v, count(*) FROM sessions GROUP BY ROLLUP (k, v)`},
		{"CTE shadows TTL table", `WITH sessions AS (SELECT * FROM accounts) SELECT * FROM sessions`},
		{"CTE of the same name reads the table", `WITH sessions AS (SELECT id, k FROM public.sessions) SELECT * FROM sessions`},
		{"CTE shadowing another TTL table", `WITH tokens AS (SELECT * FROM public.sessions) SELECT t.id, u.id FROM tokens t LEFT JOIN public.tokens u ON u.id = t.id`},
		{"CTE shadow in subquery only", `SELECT s.id, (WITH sessions AS (SELECT 1 AS id) SELECT count(*) FROM sessions) FROM sessions s`},
		{"for update skip locked", `SELECT id FROM sessions WHERE k = 1 ORDER BY id FOR UPDATE SKIP LOCKED`},
		{"for update of alias", `SELECT s.id FROM sessions s JOIN accounts a ON a.k = s.k FOR UPDATE OF s SKIP LOCKED`},
		{"for share nowait", `SELECT id FROM carts FOR SHARE NOWAIT`},
		{"upper case name", `SELECT * FROM SESSIONS`},
		{"mixed case qualified name", `SELECT * FROM Public.Sessions`},
		{"unicode escape name", `SELECT * FROM U&"\0073essions"`},
		{"unicode escape, other escape char", `SELECT * FROM U&"!0063arts" UESCAPE '!'`},
		{"comment as separator", `SELECT * FROM/*x*/sessions/*y*/WHERE k = 1`},
		{"line comment", "SELECT id FROM sessions -- all of them\nWHERE k <> 0"},
		{"schema.table.column", `SELECT public.sessions.id FROM sessions WHERE public.sessions.k = 1`},
		{"column alias list, column rule", `SELECT * FROM sessions AS s(a, b, c, d)`},
		{"column alias list, derived rule", `SELECT s.a FROM jobs AS s(a, b, c, d, e)`},
		{"column alias list, sidecar rule", `SELECT * FROM carts AS c(i)`},
		{"join alias", `SELECT j.id FROM (sessions s LEFT JOIN tokens t USING (id)) AS j`},
		{"whole-row reference", `SELECT s::text FROM sessions s`},
		{"count of whole rows", `SELECT count(s), count(c) FROM sessions s FULL JOIN carts c USING (id)`},
		{"system columns", `SELECT ctid, tableoid::regclass, id FROM carts`},
		{"tablesample", `SELECT id FROM sessions TABLESAMPLE SYSTEM (100) REPEATABLE (1)`},
		{"fetch first with ties", `SELECT id, k FROM sessions ORDER BY k FETCH FIRST 3 ROWS WITH TIES`},
		{"row IN", `SELECT * FROM sessions s WHERE (s.k, s.v) IN (SELECT k, v FROM events)`},
		{"VALUES statement", `VALUES ((SELECT count(*) FROM sessions), (SELECT count(*) FROM cart_items))`},
		{"LIMIT subquery", `SELECT id FROM accounts ORDER BY id LIMIT (SELECT count(*) FROM sessions)`},
		{"function argument subquery", `SELECT * FROM generate_series(1, (SELECT count(*) FROM tokens)) AS g(n)`},
		{"ARRAY subquery", `SELECT a.id, ARRAY(SELECT s.id FROM sessions s WHERE s.k = a.k ORDER BY 1) FROM accounts a`},
		{"ORDER BY subquery", `SELECT a.id FROM accounts a ORDER BY (SELECT count(*) FROM sessions s WHERE s.k = a.k), a.id LIMIT 5`},
		{"DISTINCT ON outer join", `SELECT DISTINCT ON (a.k) a.k, s.id FROM accounts a LEFT JOIN sessions s USING (k) ORDER BY a.k, s.id`},
	}
	var out []handCase
	for _, c := range cs {
		out = append(out, handCase{name: c.name, c: read(c.sql)})
	}
	dml := []struct {
		name string
		c    genCase
	}{
		{"insert select", inTx(`INSERT INTO sink SELECT id, v FROM sessions`, `SELECT a, b FROM sink`)},
		{"insert select join", inTx(`INSERT INTO sink (a, b) SELECT c.id, ci.v FROM carts c LEFT JOIN cart_items ci USING (id) RETURNING *`, `SELECT a, b FROM sink`)},
		{"update returning", inTx(`UPDATE sessions SET v = 'u' RETURNING id`)},
		{"delete returning star", inTx(`DELETE FROM tokens WHERE k = 1 RETURNING *`)},
		{"update plain from TTL", inTx(`UPDATE accounts a SET v = 'z' FROM sessions s WHERE s.k = a.k RETURNING a.id`)},
		{"delete using composite sidecar", inTx(`DELETE FROM carts c USING cart_items ci WHERE ci.id = c.id RETURNING c.id`)},
		{"update set from subquery", inTx(`UPDATE accounts a SET k = (SELECT count(*) FROM tokens t WHERE t.k = a.k) RETURNING a.id, a.k`)},
		{"update derived", inTx(`UPDATE jobs SET v = v || '!' WHERE k IN (SELECT k FROM uploads) RETURNING id, v`)},
		{"delete date rule", inTx(`DELETE FROM coupons WHERE id NOT IN (SELECT id FROM events) RETURNING id`)},
		{"data-modifying CTE", inTx(`WITH d AS (DELETE FROM jobs RETURNING id) SELECT count(*) FROM d`)},
		{"update then read", inTx(`UPDATE pings SET k = 9 WHERE k = 1`, `SELECT id, k FROM pings`)},
		{"cursor", inTx(`DECLARE oracle_cur CURSOR FOR SELECT id FROM sessions`, `FETCH ALL FROM oracle_cur`)},
		{"create table as", inTx(`CREATE TEMP TABLE oracle_tmp AS SELECT s.id, c.v FROM sessions s JOIN coupons c USING (k)`, `SELECT * FROM oracle_tmp`)},
		{"select into", inTx(`SELECT id, v INTO TEMP oracle_tmp2 FROM carts`, `SELECT * FROM oracle_tmp2`)},
		{"prepare with parameter", genCase{sql: `PREPARE oracle_p(int) AS SELECT id FROM sessions WHERE k = $1`, steps: []step{
			{sql: `PREPARE oracle_p(int) AS SELECT id FROM sessions WHERE k = $1`, compare: true},
			{sql: `EXECUTE oracle_p(1)`, compare: true}, {sql: `DEALLOCATE ALL`}}}},
		{"copy out", copyOut(`COPY (SELECT id, v FROM tokens) TO STDOUT`)},
		{"copy table", copyOut(`COPY sessions TO STDOUT`)},
		{"copy table columns", copyOut(`COPY carts (id, v) TO STDOUT`)},
		{"where current of", genCase{sql: `UPDATE sessions SET v = 'cur' WHERE CURRENT OF oracle_cur RETURNING id, v`, steps: []step{
			{sql: "BEGIN"},
			{sql: `DECLARE oracle_cur CURSOR FOR SELECT id, v FROM sessions ORDER BY id FOR UPDATE`, compare: true},
			{sql: `FETCH 2 FROM oracle_cur`, compare: true},
			{sql: `UPDATE sessions SET v = 'cur' WHERE CURRENT OF oracle_cur RETURNING id, v`, compare: true},
			{sql: "ROLLBACK"}}}},
		{"queue: UPDATE from a locking CTE", inTx(`WITH next AS (SELECT id FROM jobs ORDER BY id LIMIT 5 FOR UPDATE SKIP LOCKED)
			UPDATE jobs SET v = 'taken' FROM next WHERE jobs.id = next.id RETURNING jobs.id`)},
		{"queue: DELETE IN locking subquery", inTx(`DELETE FROM carts WHERE id IN (SELECT id FROM carts ORDER BY id LIMIT 3 FOR UPDATE SKIP LOCKED) RETURNING id`)},
		{"update self-subquery", inTx(`UPDATE sessions SET v = 'self' WHERE id IN (SELECT id FROM sessions WHERE k = 2) RETURNING id`)},
		{"delete by ctid", inTx(`DELETE FROM sessions WHERE ctid = (SELECT min(ctid) FROM sessions) RETURNING id`)},
		{"multi-column SET from TTL", inTx(`UPDATE accounts a SET (v, k) = (SELECT s.v, s.k FROM sessions s WHERE s.id = a.id) RETURNING a.id, a.v, a.k`)},
		{"WITH on INSERT", inTx(`WITH c AS (SELECT id, v FROM sessions) INSERT INTO sink SELECT * FROM c`, `SELECT a, b FROM sink`)},
		{"WITH on UPDATE", inTx(`WITH c AS (SELECT k FROM tokens) UPDATE accounts SET v = 'w' WHERE k IN (SELECT k FROM c) RETURNING id`)},
		{"WITH on DELETE", inTx(`WITH c AS (SELECT id FROM carts) DELETE FROM cart_items WHERE id IN (SELECT id FROM c) RETURNING id, line`)},
		{"INSERT ON CONFLICT from TTL", inTx(`INSERT INTO accounts (id, k, v, name) SELECT id, k, v, 'x' FROM sessions
			ON CONFLICT (id) DO UPDATE SET name = excluded.name RETURNING id, name`)},
		{"MERGE into TTL table", inTx(`MERGE INTO sessions s USING accounts a ON s.id = a.id
			WHEN MATCHED THEN UPDATE SET v = 'm' WHEN NOT MATCHED THEN DO NOTHING`, `SELECT id, v FROM sessions`)},
		{"MERGE from TTL table", inTx(`MERGE INTO accounts a USING tokens t ON t.id = a.id
			WHEN MATCHED THEN UPDATE SET v = t.v WHEN NOT MATCHED THEN DO NOTHING`, `SELECT id, v FROM accounts`)},
		{"temp view", inTx(`CREATE TEMP VIEW oracle_v AS SELECT id, k FROM sessions`, `SELECT * FROM oracle_v`)},
		{"UPDATE through a view", inTx(`UPDATE v_sessions_all SET v = 'w' WHERE k < 3 RETURNING id, v`, `SELECT id, v FROM sessions`)},
		{"DELETE through a view", inTx(`DELETE FROM v_sessions_all AS x WHERE x.k = 1 RETURNING id`, `SELECT id FROM sessions`)},
		{"INSERT through a view", inTx(`INSERT INTO v_sessions_all (id, k, v) VALUES (1000, 1, 'new') RETURNING id, expires_at IS NULL`,
			`SELECT id FROM v_sessions_all WHERE id >= 1000`)},
		{"SET LOCAL search_path to another schema", genCase{sql: `SELECT * FROM sessions`, steps: []step{
			{sql: "BEGIN"}, {sql: "SET LOCAL search_path = archive, public"},
			{sql: `SELECT * FROM sessions`, compare: true},
			{sql: `SELECT s.id, p.id FROM sessions s LEFT JOIN public.sessions p USING (id)`, compare: true},
			{sql: "ROLLBACK"}}}},
		{"SET search_path to another schema", genCase{sql: `SELECT * FROM sessions`, steps: []step{
			{sql: "SET search_path = archive, public"},
			{sql: `SELECT * FROM sessions`, compare: true},
			{sql: `SELECT * FROM tokens`, compare: true},
			{sql: "RESET search_path"}}}},
		{"search_path reaching a TTL table", genCase{sql: `SELECT * FROM notes`, steps: []step{
			{sql: "SET search_path = vault, public"},
			{sql: `SELECT * FROM notes`, compare: true},
			{sql: `SELECT n.id, p.id FROM notes n FULL JOIN public.notes p USING (id)`, compare: true},
			{sql: "RESET search_path"}}}},
		{"SET LOCAL search_path reaching a TTL table", genCase{sql: `SELECT * FROM notes`, steps: []step{
			{sql: "BEGIN"}, {sql: "SET LOCAL search_path = vault"},
			{sql: `SELECT * FROM notes`, compare: true},
			{sql: "ROLLBACK"}}}},
		{"set_config search_path reaching a TTL table", genCase{sql: `SELECT * FROM notes`, steps: []step{
			{sql: "SELECT set_config('search_path', 'vault', false)"},
			{sql: `SELECT * FROM notes`, compare: true},
			{sql: "RESET search_path"}}}},
		{"temp table named like a TTL table", genCase{sql: `SELECT * FROM sessions`, steps: []step{
			{sql: "BEGIN"},
			{sql: `CREATE TEMP TABLE sessions (id int, k int, v text, expires_at timestamptz) ON COMMIT DROP`, compare: true},
			{sql: `INSERT INTO sessions VALUES (100, 1, 'tmp', '2000-01-01 00:00:00+00'), (101, 1, 'tmp', NULL)`, compare: true},
			{sql: `SELECT * FROM sessions`, compare: true},
			{sql: `SELECT id FROM public.sessions WHERE id < 4`, compare: true},
			{sql: "ROLLBACK"}}}},
	}
	for _, d := range dml {
		out = append(out, handCase{name: d.name, c: d.c})
	}
	out = append(out, handCase{name: "several statements", simpleOnly: true,
		c: read(`SELECT id FROM sessions WHERE k = 1; SELECT count(*) FROM carts; UPDATE accounts SET v = v WHERE k IN (SELECT k FROM tokens)`)})
	// Changes of the state inside one Query string, followed statement by
	// statement.
	for _, c := range []struct{ name, sql string }{
		{"SET then read in one string", `SET search_path = vault, public; SELECT * FROM notes`},
		{"SET LOCAL until COMMIT in one string", `BEGIN; SET LOCAL search_path = vault; SELECT * FROM notes; COMMIT; SELECT * FROM notes`},
		{"ROLLBACK of a SET in one string", `BEGIN; SET search_path = archive; ROLLBACK; SELECT * FROM sessions`},
		{"set_config then read in one string", `SELECT set_config('search_path', 'archive, public', false); SELECT * FROM sessions; SELECT * FROM tokens`},
	} {
		out = append(out, handCase{name: c.name, simpleOnly: true, c: genCase{sql: c.sql, steps: []step{
			{sql: c.sql, compare: true}, {sql: "RESET search_path"}}}})
	}
	// Paths inside the server the proxy refuses (documented rejections).
	for _, c := range []struct{ name, sql string }{
		{"SQL function reading a TTL table", `SELECT oracle_count()`},
		{"PL/pgSQL function reading a TTL table", `SELECT * FROM oracle_count_pl()`},
		{"materialized view of a TTL table", `SELECT count(*) FROM oracle_m`},
	} {
		out = append(out, handCase{name: c.name, c: read(c.sql), wantReject: true})
	}
	return out
}

func copyOut(sql string) genCase {
	return genCase{sql: sql, steps: []step{{sql: sql, compare: true, copyOut: true}}}
}
