package tests

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/ttlproxy/ttlproxy/internal/corpus"
	"github.com/ttlproxy/ttlproxy/ttl"
)

// Flags of TestColumnOracleCorpus.
var (
	colCorpusAll  = flag.Bool("colcorpus.all", false, "TestColumnOracleCorpus: run every statement and variant in all three protocols, not one in turn")
	colCorpusFile = flag.String("colcorpus.file", "", "TestColumnOracleCorpus: only the statements of this script (base name)")
)

// colCorpusTable is a regression table with its expiring columns.
type colCorpusTable struct {
	colTable
	base  []string // its own columns, as test_setup.sql creates them
	types []string // their types
	rule  ttl.Rule
	data  string   // INSERT of the base columns' values
	rowID string   // an expression numbering the rows from 1
	unix  bool     // xt_exp in Unix seconds
	none  bool     // rule: none
	row   string   // row rule: "explicit", "derived"
	index []string // indexed columns (create_index.sql's), on the table and its copy
}

var tenkColumns = []string{"unique1", "unique2", "two", "four", "ten", "twenty", "hundred", "thousand",
	"twothousand", "fivethous", "tenthous", "odd", "even", "stringu1", "stringu2", "string4"}

// tenkData returns the INSERT of n rows shaped like PostgreSQL's
// tenk.data and onek.data: unique2 runs 0 … n-1, unique1 is a permutation
// of it (a multiplier prime to n), the next columns its remainders, odd and
// even from hundred, stringu1 and stringu2 the numbers in letters, string4
// one of four names.
func tenkData(table string, n int) string {
	return fmt.Sprintf(`INSERT INTO %[1]s SELECT u1, u2, u1 %% 2, u1 %% 4, u1 %% 10, u1 %% 20, u1 %% 100, u1 %% 1000, u1 %% 2000, u1 %% 5000, u1 %% 10000,
		(u1 %% 100) * 2 + 1, (u1 %% 100) * 2,
		chr(65 + u1 %% 26) || chr(65 + u1 / 26 %% 26) || chr(65 + u1 / 676 %% 26) || 'AAAxxx',
		chr(65 + u2 %% 26) || chr(65 + u2 / 26 %% 26) || chr(65 + u2 / 676 %% 26) || 'AAAxxx',
		(ARRAY['AAAAxx', 'HHHHxx', 'OOOOxx', 'VVVVxx'])[u2 %% 4 + 1]
		FROM (SELECT (u2 * 7919) %% %[2]d AS u1, u2 FROM generate_series(0, %[2]d - 1) u2) s ORDER BY u2`, table, n)
}

// colCorpusOwn names, per table, the columns of its own that expire in
// the "corpus columns" run (text, numeric), each under the expiry of the
// added column it stands for; xt or xn where the table has no column of
// that kind.
var colCorpusOwn = map[string][2]string{
	"tenk1": {"stringu1", "ten"}, "tenk2": {"stringu2", "hundred"}, "onek": {"string4", "four"},
	"int2_tbl": {"xt", "f1"}, "int4_tbl": {"xt", "f1"}, "int8_tbl": {"xt", "q2"}, "float8_tbl": {"xt", "f1"},
	"text_tbl": {"f1", "xn"}, "varchar_tbl": {"f1", "xn"},
}

// colCorpusTables returns the tables, their expiring columns xt and xn, or
// with own the columns colCorpusOwn names (under xt's and xn's expiries).
func colCorpusTables(own bool) []*colCorpusTable {
	tenkTypes := slices.Repeat([]string{"int4"}, 13)
	tenkTypes = append(tenkTypes, "name", "name", "name")
	ts := []*colCorpusTable{
		{colTable: colTable{name: "tenk1"}, base: tenkColumns, types: tenkTypes, data: tenkData("tenk1", 10000), rowID: "unique2 + 1", row: "explicit",
			index: []string{"unique1", "unique2", "hundred", "thousand, tenthous"}},
		{colTable: colTable{name: "tenk2"}, base: tenkColumns, types: tenkTypes, data: tenkData("tenk2", 10000), rowID: "unique2 + 1", none: true,
			index: []string{"unique1", "unique2", "hundred"}},
		{colTable: colTable{name: "onek"}, base: tenkColumns, types: tenkTypes, data: tenkData("onek", 1000), rowID: "unique2 + 1", row: "derived", unix: true,
			index: []string{"unique1", "unique2", "hundred", "stringu1"}},
		{colTable: colTable{name: "int2_tbl"}, base: []string{"f1"}, types: []string{"int2"}, row: "explicit",
			data: `INSERT INTO int2_tbl (f1) VALUES ('0   '), ('  1234 '), ('    -1234'), ('32767'), ('-32767')`},
		{colTable: colTable{name: "int4_tbl"}, base: []string{"f1"}, types: []string{"int4"}, none: true,
			data: `INSERT INTO int4_tbl (f1) VALUES ('   0  '), ('123456     '), ('    -123456'), ('2147483647'), ('-2147483647')`},
		{colTable: colTable{name: "int8_tbl"}, base: []string{"q1", "q2"}, types: []string{"int8", "int8"}, row: "explicit",
			data: `INSERT INTO int8_tbl (q1, q2) VALUES ('  123   ','  456'), ('123   ','4567890123456789'), ('4567890123456789','123'),
				(+4567890123456789,'4567890123456789'), ('+4567890123456789','-4567890123456789')`},
		{colTable: colTable{name: "float8_tbl"}, base: []string{"f1"}, types: []string{"float8"}, row: "explicit",
			data: `INSERT INTO float8_tbl (f1) VALUES ('0.0'), ('-34.84'), ('-1004.30'), ('-1.2345678901234e+200'), ('-1.2345678901234e-200')`},
		{colTable: colTable{name: "text_tbl"}, base: []string{"f1"}, types: []string{"text"}, row: "explicit",
			data: `INSERT INTO text_tbl (f1) VALUES ('doh!'), ('hi de ho neighbor')`},
		{colTable: colTable{name: "varchar_tbl"}, base: []string{"f1"}, types: []string{"varchar(4)"}, row: "explicit",
			data: `INSERT INTO varchar_tbl (f1) VALUES ('a'), ('ab'), ('abcd'), ('abcd    ')`},
	}
	for _, t := range ts {
		t.text, t.num = "xt", "xn"
		t.textLive = "xt_exp IS NULL OR xt_exp >= now()"
		expType := "timestamptz"
		if t.unix {
			t.textLive = "xt_exp IS NULL OR xt_exp >= extract(epoch FROM now())"
			expType = "bigint"
		}
		t.numLive = "xn_at IS NULL OR xn_at + interval '2 hours' >= now()"
		t.columns = append(slices.Clone(t.base), "xt", "xt_exp", "xn", "xn_at")
		defs := make([]string, len(t.base))
		for i, c := range t.base {
			defs[i] = c + " " + t.types[i]
		}
		defs = append(defs, "xt text", "xt_exp "+expType, "xn numeric", "xn_at timestamptz")
		if own {
			t.text, t.num = colCorpusOwn[t.name][0], colCorpusOwn[t.name][1]
		}
		t.rule = ttl.Rule{Table: t.name, Columns: []ttl.ColumnRule{
			{Column: t.text, ExpiresAtColumn: "xt_exp"},
			{Column: t.num, BaseColumn: "xn_at", ExpireAfter: 2 * time.Hour},
		}}
		if t.unix {
			t.rule.Columns[0].ColumnType = ttl.TypeUnixSeconds
		}
		switch {
		case t.none:
			t.rule.Kind = ttl.KindNone
			t.rowLive = "true"
		case t.row == "derived":
			t.rule.Kind, t.rule.BaseColumn, t.rule.ExpireAfter = ttl.KindDerived, "made_at", 48*time.Hour
			t.rowLive = "made_at IS NULL OR made_at + interval '2 days' >= now()"
			t.columns = append(t.columns, "made_at")
			defs = append(defs, "made_at timestamptz")
		default:
			t.rowLive = "expires_at IS NULL OR expires_at >= now()"
			t.columns = append(t.columns, "expires_at")
			defs = append(defs, "expires_at timestamptz")
		}
		t.createSQL = fmt.Sprintf("CREATE TABLE %s (%s)", t.name, strings.Join(defs, ", "))
	}
	return ts
}

// colCorpusFill sets a table's added columns by row number i: xt NULL in
// one row of 7, its expiry passed in half the rows (i % 4 of 0 and 1),
// NULL in a quarter; xn NULL in one row of 6, past its lifetime in half
// the rows ((i / 2) % 4 of 0 and 1), base NULL in a quarter; the row
// expired in one row of 10 (where there is a row rule).
func colCorpusFill(t *colCorpusTable) string {
	past, future := "now() - interval '1 hour'", "now() + interval '1 hour'"
	if t.unix {
		past, future = "extract(epoch FROM now() - interval '1 hour')::bigint", "extract(epoch FROM now() + interval '1 hour')::bigint"
	}
	set := []string{
		"xt = CASE WHEN n.i % 7 = 3 THEN NULL ELSE 'v' || n.i || (ARRAY['a', 'b', 'c'])[n.i % 3 + 1] END",
		fmt.Sprintf("xt_exp = CASE n.i %% 4 WHEN 0 THEN %[1]s WHEN 1 THEN %[1]s WHEN 2 THEN %[2]s END", past, future),
		"xn = CASE WHEN n.i % 6 = 5 THEN NULL ELSE n.i * 1.5 END",
		"xn_at = CASE (n.i / 2) % 4 WHEN 0 THEN now() - interval '3 hours' WHEN 1 THEN now() - interval '3 hours' WHEN 2 THEN now() - interval '1 hour' END",
	}
	switch {
	case t.none:
	case t.row == "derived":
		set = append(set, "made_at = CASE WHEN n.i % 10 = 7 THEN now() - interval '3 days' WHEN n.i % 3 = 0 THEN NULL ELSE now() - interval '1 day' END")
	default:
		set = append(set, "expires_at = CASE WHEN n.i % 10 = 7 THEN now() - interval '1 hour' WHEN n.i % 3 = 0 THEN now() + interval '1 day' END")
	}
	id := t.rowID
	if id == "" {
		id = "row_number() OVER (ORDER BY ctid)"
	}
	return fmt.Sprintf("UPDATE %[1]s SET %[2]s FROM (SELECT ctid AS c, %[3]s AS i FROM %[1]s) n WHERE %[1]s.ctid = n.c",
		t.name, strings.Join(set, ", "), id)
}

// colCorpusStmt is a selected corpus statement.
type colCorpusStmt struct {
	file string
	sql  string
}

// colCorpusVolatile matches statements whose result depends on the moment,
// the transaction or the physical row, which the two sides do not share.
var colCorpusVolatile = regexp.MustCompile(`(?i)\b(random|setseed|now|clock_timestamp|statement_timestamp|transaction_timestamp|timeofday|txid_\w+|pg_current_\w+|pg_backend_pid|nextval|currval|setval|lastval|gen_random_uuid|pg_sleep\w*|pg_advisory\w*|pg_try_advisory\w*)\s*\(|\b(ctid|xmin|xmax|cmin|cmax|tableoid|current_timestamp|current_time|localtime|localtimestamp)\b`)

var colCorpusRelname = regexp.MustCompile(`"relname":"([^"]+)"`)

// colCorpusSelect returns the corpus statements the test runs: reads,
// writes and COPY … TO STDOUT that name one of the tables.
func colCorpusSelect(t *testing.T, names map[string]bool) (sel []colCorpusStmt, skipped map[string]int) {
	t.Helper()
	skipped = map[string]int{}
	files, err := filepath.Glob(filepath.Join(corpusDir(t), "*.sql"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus scripts: %v", err)
	}
	for _, file := range files {
		base := filepath.Base(file)
		if *colCorpusFile != "" && base != *colCorpusFile && base != *colCorpusFile+".sql" {
			continue
		}
		raw, err := os.ReadFile(file) //nolint:gosec // a script of the corpus directory
		if err != nil {
			t.Fatal(err)
		}
		for _, stmt := range corpus.Statements(string(raw)) {
			js, err := pg.ParseToJSON(stmt)
			if err != nil {
				continue
			}
			named := false
			for _, m := range colCorpusRelname.FindAllStringSubmatch(js, -1) {
				if names[m[1]] {
					named = true
				}
			}
			if !named {
				continue
			}
			tree, err := pg.Parse(stmt)
			if err != nil || len(tree.Stmts) != 1 {
				skipped["several statements"]++
				continue
			}
			n := tree.Stmts[0].Stmt
			switch {
			case n.GetSelectStmt() != nil && n.GetSelectStmt().IntoClause != nil:
				skipped["SELECT INTO"]++
				continue
			case n.GetSelectStmt() != nil, n.GetInsertStmt() != nil, n.GetUpdateStmt() != nil, n.GetDeleteStmt() != nil, n.GetMergeStmt() != nil:
			case n.GetCopyStmt() != nil && !n.GetCopyStmt().IsFrom && n.GetCopyStmt().Filename == "" && !n.GetCopyStmt().IsProgram:
			case n.GetExplainStmt() != nil:
				skipped["EXPLAIN"]++
				continue
			default:
				skipped["DDL and other utility statements"]++
				continue
			}
			if colCorpusVolatile.MatchString(stmt) {
				skipped["volatile"]++
				continue
			}
			sel = append(sel, colCorpusStmt{file: base, sql: stmt})
		}
	}
	return sel, skipped
}

// colCorpusRef is a table of the selection as a query level names it,
// with its expiring columns.
type colCorpusRef struct {
	name      string // the alias, or the table's name
	text, num string // the expiring text and numeric columns
	bare      bool   // name the columns unqualified: the level reads one table
}

func (r colCorpusRef) col(c string) string {
	if r.bare {
		return ttl.QuoteIdent(c)
	}
	return ttl.QuoteIdent(r.name) + "." + ttl.QuoteIdent(c)
}

// colCorpusBare makes a level's one table's columns unqualified in every
// other statement (by i).
func colCorpusBare(refs []colCorpusRef, i int) []colCorpusRef {
	if len(refs) == 1 && i%2 == 1 {
		refs[0].bare = true
	}
	return refs
}

// colCorpusPreds are the predicates the where variants add, one picked
// per statement in turn: {T} is a table's text expiring column, {N} its
// numeric one, {s} a text literal and {n} a numeric one, given or bound
// as parameters (text and numeric, in that order).
var colCorpusPreds = []struct{ tmpl, s, n string }{
	{"({T} LIKE {s} OR {N} > {n} OR {T} IS NULL)", "%1%", "40.5"},
	{"{T} IS NOT NULL AND {T} <> {s}", "zz", ""},
	{"NOT ({N} < {n})", "", "10"},
	{"({T} > {s} OR {N} BETWEEN 1 AND {n})", "m", "20"},
	{"(coalesce({T}, {s}) <> '' OR {N} IS NULL)", "", ""},
	{"{N} IN (0, 1, 3, 6, 7.5, {n}, 10.5)", "", "9"},
	{"CASE WHEN {T} IS NULL THEN {N} > {n} ELSE true END", "", "3"},
	{"({T}, {N}) IS NOT NULL", "", ""},
	{"{T} = ANY (ARRAY[{s}, 'v2c', 'v9a', 'AAAAxx'])", "v1b", ""},
}

// colCorpusPred returns colCorpusPreds[i] with its literals, or with
// bound its parameters and their values and types.
func colCorpusPred(i int, bound bool) (pred string, params []string, oids []uint32) {
	p := colCorpusPreds[i%len(colCorpusPreds)]
	s, n := ttl.QuoteLiteral(p.s), p.n
	if bound {
		if strings.Contains(p.tmpl, "{s}") {
			params, oids = append(params, p.s), append(oids, 25)
			s = fmt.Sprintf("$%d", len(params))
		}
		if strings.Contains(p.tmpl, "{n}") {
			params, oids = append(params, p.n), append(oids, 1700)
			n = fmt.Sprintf("$%d", len(params))
		}
	}
	return strings.NewReplacer("{s}", s, "{n}", n).Replace(p.tmpl), params, oids
}

// colCorpusExprs are the expressions over the expiring columns the
// "targets, expressions" variant adds, two picked per statement in turn.
var colCorpusExprs = []string{
	"coalesce({T}, '-')", "length({T})", "upper({T})", "{T} IS NULL", "{T} || 'x'", "CASE WHEN {T} LIKE '%1%' THEN 1 ELSE 0 END",
	"nullif({T}, 'zz')", "{T}::text", "{N} * 2", "coalesce({N}, -1)", "{N} IS NOT NULL", "abs({N})", "{N}::text", "greatest({N}, 5)",
	"CASE WHEN {N} > 10 THEN 'big' END", "({N}, {T}) IS NULL",
}

// colCorpusFill replaces T and N in a template with r's columns.
func (r colCorpusRef) fill(tmpl string) string {
	return strings.NewReplacer("{T}", r.col(r.text), "{N}", r.col(r.num)).Replace(tmpl)
}

// colCorpusVariants returns the statement's variants reading the expiring
// columns, each with its kind: "targets", the columns of every table of the
// top level's FROM added to its target list (and to GROUP BY and ORDER BY
// where it has them) or, for a write, to RETURNING; "targets,
// expressions", expressions over them (colCorpusExprs) added likewise;
// "where", a predicate on them (colCorpusPreds) ANDed to the top level's
// WHERE; "where, every level", the predicate added to every query level
// that reads one of the tables (subqueries, CTEs, set operations'
// branches), when there are levels below the top; and on demand (want)
// "targets, aggregated", aggregates of the columns added to the target
// list, for a statement that aggregates without GROUP BY. i picks the
// predicate and the expressions, bound its literals as parameters. A variant the deparser cannot print is
// left out.
func colCorpusVariants(stmt string, cols map[string][2]string, i int, bound bool, want ...string) (sqls, kinds []string) {
	if len(want) == 0 {
		want = []string{"targets", "targets, expressions", "where", "where, every level"}
	}
	pred, _, _ := colCorpusPred(i, bound)
	exprs := []string{colCorpusExprs[i%len(colCorpusExprs)], colCorpusExprs[(i*7+3)%len(colCorpusExprs)]}
	for _, kind := range want {
		tree, err := pg.Parse(stmt)
		if err != nil || len(tree.Stmts) != 1 {
			return nil, nil
		}
		n := tree.Stmts[0].Stmt
		if kind == "where, every level" {
			nested := false
			colCorpusWalk(n.ProtoReflect(), func(m protoreflect.Message) {
				var refs []colCorpusRef
				var where **pg.Node
				switch x := m.Interface().(type) {
				case *pg.SelectStmt:
					if x.Op != pg.SetOperation_SETOP_NONE || len(x.ValuesLists) > 0 {
						return
					}
					for _, f := range x.FromClause {
						refs = append(refs, colCorpusRefs(f, cols)...)
					}
					where = &x.WhereClause
				case *pg.UpdateStmt:
					refs = colCorpusRefs(&pg.Node{Node: &pg.Node_RangeVar{RangeVar: x.Relation}}, cols)
					where = &x.WhereClause
				case *pg.DeleteStmt:
					refs = colCorpusRefs(&pg.Node{Node: &pg.Node_RangeVar{RangeVar: x.Relation}}, cols)
					where = &x.WhereClause
				}
				if len(refs) > 0 && colCorpusAddWhere(where, colCorpusBare(refs, i), pred) && m.Interface() != n.GetSelectStmt() && m.Interface() != n.GetUpdateStmt() && m.Interface() != n.GetDeleteStmt() {
					nested = true
				}
			})
			if !nested {
				continue
			}
		} else {
			var refs []colCorpusRef
			var targets, group, sortBy *[]*pg.Node
			var where **pg.Node
			distinct := false
			switch {
			case n.GetSelectStmt() != nil:
				s := n.GetSelectStmt()
				if s.Op != pg.SetOperation_SETOP_NONE || len(s.ValuesLists) > 0 {
					continue
				}
				for _, f := range s.FromClause {
					refs = append(refs, colCorpusRefs(f, cols)...)
				}
				targets, where = &s.TargetList, &s.WhereClause
				if len(s.GroupClause) > 0 {
					group = &s.GroupClause
				}
				if len(s.SortClause) > 0 {
					sortBy = &s.SortClause
				}
				distinct = len(s.DistinctClause) > 0
			case n.GetUpdateStmt() != nil:
				s := n.GetUpdateStmt()
				refs = colCorpusRefs(&pg.Node{Node: &pg.Node_RangeVar{RangeVar: s.Relation}}, cols)
				targets, where = &s.ReturningList, &s.WhereClause
			case n.GetDeleteStmt() != nil:
				s := n.GetDeleteStmt()
				refs = colCorpusRefs(&pg.Node{Node: &pg.Node_RangeVar{RangeVar: s.Relation}}, cols)
				targets, where = &s.ReturningList, &s.WhereClause
			}
			if len(refs) == 0 {
				continue
			}
			refs = colCorpusBare(refs, i)
			switch kind {
			case "where":
				if !colCorpusAddWhere(where, refs, pred) {
					continue
				}
			case "targets, aggregated":
				for _, r := range refs {
					for _, f := range []string{"count({T})", "max({T})", "sum({N})", "min({N})"} {
						*targets = append(*targets, colCorpusExpr(r.fill(f)))
					}
				}
			case "targets", "targets, expressions":
				var add []string
				for _, r := range refs {
					if kind == "targets" {
						add = append(add, r.col(r.text), r.col(r.num))
					} else {
						add = append(add, r.fill(exprs[0]), r.fill(exprs[1]))
					}
					// GROUP BY and ORDER BY get the columns: the
					// expressions are functions of them.
					for _, c := range []string{r.text, r.num} {
						if group != nil {
							*group = append(*group, colCorpusExpr(r.col(c)).GetResTarget().Val)
						}
						if sortBy != nil && (kind == "targets" || !distinct) {
							*sortBy = append(*sortBy, pg.MakeSortByNode(colCorpusExpr(r.col(c)).GetResTarget().Val,
								pg.SortByDir_SORTBY_DEFAULT, pg.SortByNulls_SORTBY_NULLS_DEFAULT, -1))
						}
					}
				}
				if kind == "targets, expressions" && distinct && sortBy != nil {
					continue // ORDER BY of a DISTINCT must name output columns
				}
				for _, e := range add {
					*targets = append(*targets, colCorpusExpr(e))
				}
			}
		}
		sql, err := pg.Deparse(tree)
		if err != nil {
			continue
		}
		sqls, kinds = append(sqls, sql), append(kinds, kind)
	}
	return sqls, kinds
}

// colCorpusExpr returns the target list entry of an expression's text.
func colCorpusExpr(e string) *pg.Node {
	tree, err := pg.Parse("SELECT " + e)
	if err != nil {
		panic(fmt.Sprintf("expression %q: %v", e, err))
	}
	return tree.Stmts[0].Stmt.GetSelectStmt().TargetList[0]
}

// colCorpusAddWhere ANDs pred, for each table refs names, to *where.
func colCorpusAddWhere(where **pg.Node, refs []colCorpusRef, pred string) bool {
	var preds []string
	for _, r := range refs {
		preds = append(preds, r.fill(pred))
	}
	tmpl, err := pg.Parse("SELECT WHERE " + strings.Join(preds, " AND "))
	if err != nil {
		panic(fmt.Sprintf("predicate %q: %v", pred, err))
	}
	p := tmpl.Stmts[0].Stmt.GetSelectStmt().WhereClause
	if *where != nil {
		p = pg.MakeBoolExprNode(pg.BoolExprType_AND_EXPR, []*pg.Node{*where, p}, -1)
	}
	*where = p
	return true
}

// colCorpusWalk calls fn for m and every message below it, parents first.
func colCorpusWalk(m protoreflect.Message, fn func(protoreflect.Message)) {
	fn(m)
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				colCorpusWalk(l.Get(i).Message(), fn)
			}
		case fd.IsMap():
		case fd.Message() != nil:
			colCorpusWalk(v.Message(), fn)
		}
		return true
	})
}

// colCorpusRefs returns the tables of cols a FROM item holds at its own
// level, by the names it gives them: the alias, or the table's name.
func colCorpusRefs(n *pg.Node, cols map[string][2]string) []colCorpusRef {
	switch {
	case n.GetRangeVar() != nil:
		rv := n.GetRangeVar()
		c, ok := cols[rv.Relname]
		if !ok || (rv.Schemaname != "" && rv.Schemaname != "public") {
			return nil
		}
		r := colCorpusRef{name: rv.Relname, text: c[0], num: c[1]}
		if rv.Alias != nil {
			if len(rv.Alias.Colnames) > 0 {
				return nil // the alias renames the columns
			}
			r.name = rv.Alias.Aliasname
		}
		return []colCorpusRef{r}
	case n.GetJoinExpr() != nil:
		j := n.GetJoinExpr()
		if j.Alias != nil {
			return nil // the join's alias hides its tables' names
		}
		return append(colCorpusRefs(j.Larg, cols), colCorpusRefs(j.Rarg, cols)...)
	}
	return nil
}

// TestColumnOracleCorpus is the corpus part of the oracle in column mode
// (docs/design/column-ttl.md §7): PostgreSQL's regression statements over
// its own regression tables, each table given a text and a numeric
// expiring column, compared through the proxy and directly against the
// copies TestColumnOracle makes (colRefSQL: live rows, expired values
// NULL, first on the direct connection's search_path).
//
// The tables are those of the corpus's test_setup.sql that its statements
// name most: tenk1, tenk2, onek, int2_tbl, int4_tbl, int8_tbl, float8_tbl,
// text_tbl and varchar_tbl, with their columns and types. The corpus does
// not hold their data files, so tenk1's and onek's rows are generated in
// the shape PostgreSQL's data has (unique1 a permutation, two … even its
// remainders, stringu1, stringu2 and string4 names), the small tables get
// test_setup.sql's own values. Each table has xt text (expiry xt_exp) and
// xn numeric (derived: xn_at plus 2 hours); per row, by its number, about
// half of each column's values are expired, some are NULL, some have a
// NULL expiry. tenk1, onek, int2_tbl, int8_tbl, float8_tbl, text_tbl and
// varchar_tbl have a row rule too (onek's derived, the others' explicit),
// under which a tenth of the rows are expired; tenk2 and int4_tbl are
// rule: none. onek's xt expires in Unix seconds.
//
// Statements: every corpus statement that is a SELECT (WITH … SELECT,
// VALUES, set operations, TABLE), an INSERT, UPDATE, DELETE or MERGE, or a
// COPY … TO STDOUT, and names one of the tables. Writes run in a
// transaction rolled back on both sides; one that succeeds is followed, in
// that transaction, by SELECT * of the table it wrote, compared too. (The
// rules stamp nothing: a write that gave an expired value a new one would
// differ by design, docs/design/column-ttl.md's open question 1; the
// corpus has none.) Statements the corpus runs for
// their side effects (DDL, SET, transaction control, and SELECT … INTO)
// are skipped, on both sides: run in the order of their scripts they would
// make other statements' outcomes depend on what came before, and the two
// sides must see the same objects; a statement that needs an object a
// skipped one made fails alike on both sides and is counted so. Statements
// whose result depends on the moment or the physical row (now(), random(),
// ctid, …) are skipped too, and so is EXPLAIN.
//
// Each statement runs as it is, and in variants that read the expiring
// columns where it is natural (colCorpusVariants): added to the top
// level's target list (and GROUP BY and ORDER BY where it has them), or
// to a write's RETURNING, or through aggregates when the statement
// aggregates without GROUP BY; a predicate on them ANDed to the top
// level's WHERE; and that predicate at every query level that reads one of
// the tables. A statement ordered at its top level is compared in order
// (rows the ORDER BY keys leave tied may come in another order when every
// key is an output column), the others as multisets.
//
// Counts per kind of run: equal, refused by the proxy (0A000, its own
// message), failed alike (the same SQLSTATE on both sides), and different,
// each difference a failure but those of colCorpusKnown (reported, with a
// skipped test of their own). A whole row's type is the table's row type
// through the proxy and the copy's on the reference: the two are compared
// as one. Rows in another order are equal when the ORDER BY keys agree row
// by row or, ordered further by every output column, both sides agree. Each run uses one protocol in turn (simple,
// extended, prepared); -colcorpus.all runs each in all three,
// -colcorpus.file the statements of one script only.
func TestColumnOracleCorpus(t *testing.T) {
	names := map[string]bool{}
	for _, tb := range colCorpusTables(false) {
		names[tb.name] = true
	}
	stmts, skipped := colCorpusSelect(t, names)
	t.Logf("%d corpus statements selected (skipped %v)", len(stmts), skipped)
	if *colCorpusFile == "" && len(stmts) < 500 {
		t.Fatalf("only %d corpus statements selected: the corpus or its splitting changed", len(stmts))
	}
	t.Run("added columns", func(t *testing.T) { colCorpusRun(t, stmts, false) })
	t.Run("corpus columns", func(t *testing.T) { colCorpusRun(t, stmts, true) })
}

// colCorpusRun runs the selected statements with the expiring columns
// xt and xn, or with own the tables' own columns colCorpusOwn names.
func colCorpusRun(t *testing.T, stmts []colCorpusStmt, own bool) {
	tables := colCorpusTables(own)
	cols := map[string][2]string{}
	for _, tb := range tables {
		cols[tb.name] = [2]string{tb.text, tb.num}
	}
	var setup []string
	var rules []ttl.Rule
	for _, tb := range tables {
		setup = append(setup, tb.createSQL, tb.data, colCorpusFill(tb))
		for _, ix := range tb.index {
			setup = append(setup, fmt.Sprintf("CREATE INDEX ON %s (%s)", tb.name, ix))
		}
		setup = append(setup, "ANALYZE "+tb.name)
		rules = append(rules, tb.rule)
	}
	s := newStack(t, stackOptions{setup: setup, rules: rules})
	ctx := context.Background()

	proxied := s.connect(s.proxied).PgConn()
	ref := s.connect(s.direct).PgConn()
	for _, q := range []string{"SET statement_timeout = '5s'"} {
		for _, c := range []*pgconn.PgConn{proxied, ref} {
			if _, err := c.Exec(ctx, q).ReadAll(); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tb := range tables {
		q := colRefSQL(&tb.colTable)
		// A CASE drops the type modifier (varchar(4) reads varchar):
		// the copy's column gets the table's type back, so that a write
		// fails on both sides alike.
		for i, c := range tb.base {
			if c == tb.text || c == tb.num {
				q += fmt.Sprintf("; ALTER TABLE pg_temp.%s ALTER COLUMN %s TYPE %s", tb.name, c, tb.types[i])
			}
		}
		for _, ix := range tb.index {
			q += fmt.Sprintf("; CREATE INDEX ON pg_temp.%s (%s)", tb.name, ix)
		}
		if _, err := ref.Exec(ctx, q+"; ANALYZE pg_temp."+tb.name).ReadAll(); err != nil {
			t.Fatalf("copy of %s: %v", tb.name, err)
		}
	}
	if _, err := ref.Exec(ctx, "SET search_path = pg_temp, public").ReadAll(); err != nil {
		t.Fatal(err)
	}
	// A whole row of a table has its row type, of a copy the copy's: the
	// reference's columns of a copy's row type are compared as the table's.
	rowTypes := map[string]string{}
	for _, tb := range tables {
		res, err := ref.Exec(ctx, fmt.Sprintf("SELECT 'pg_temp.%[1]s'::regclass::oid::text, (SELECT reltype FROM pg_class WHERE oid = 'pg_temp.%[1]s'::regclass)::text, (SELECT reltype FROM pg_class WHERE oid = 'public.%[1]s'::regclass)::text", tb.name)).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		rowTypes[":"+string(res[0].Rows[0][1])] = ":" + string(res[0].Rows[0][2])
	}
	// The data set is what the comparison counts on: live and expired
	// values, NULL values, NULL expiries, expired rows.
	for _, tb := range tables {
		res, err := ref.Exec(ctx, fmt.Sprintf(`SELECT count(*), count(%[2]s), count(%[3]s),
			(SELECT count(*) FROM public.%[1]s), (SELECT count(%[2]s) FROM public.%[1]s), (SELECT count(%[3]s) FROM public.%[1]s)
			FROM pg_temp.%[1]s`, tb.name, tb.text, tb.num)).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: copy %s of table %s (rows, %s values, %s values)", tb.name, renderRow(res[0].Rows[0][:3]), renderRow(res[0].Rows[0][3:]), tb.text, tb.num)
	}

	start := time.Now()
	// Per kind of run ("as is" and the variants' kinds): equal, refused,
	// failed alike, different.
	const (
		nEqual = iota
		nRefused
		nFailed
		nDiffer
	)
	counts := map[string]*[4]int{}
	count := func(kind string, k int) {
		if counts[kind] == nil {
			counts[kind] = &[4]int{}
		}
		counts[kind][k]++
	}
	refusals := map[string]int{}
	refusalSample := map[string]string{}
	failedAlike := map[string]int{}
	runs, bound := 0, 0
	known := map[string]int{} // differences of colCorpusKnown, by finding
	for i, st := range stmts {
		tree, _ := pg.Parse(st.sql)
		n := tree.Stmts[0].Stmt
		base := colCase{sql: st.sql, kind: "as is"}
		switch {
		case n.GetSelectStmt() != nil:
			base.ordered = len(n.GetSelectStmt().SortClause) > 0
		case n.GetCopyStmt() != nil:
			base.copyOut = true
		default:
			base.write = true
		}
		cases := []colCase{base}
		vs, vkinds := colCorpusVariants(st.sql, cols, i, false)
		for k, v := range vs {
			c := base
			c.sql, c.kind = v, vkinds[k]
			cases = append(cases, c)
		}
		for j := 0; j < len(cases); j++ {
			c := cases[j]
			// One protocol a run, in turn; all three with -colcorpus.all.
			modes := []execMode{[]execMode{modeSimple, modeExtended, modePrepared}[(i+j)%3]}
			if *colCorpusAll {
				modes = []execMode{modeSimple, modeExtended, modePrepared}
			}
			if c.copyOut {
				modes = []execMode{modeSimple}
			}
			for _, mode := range modes {
				runs++
				if mode != modeSimple && strings.HasPrefix(c.kind, "where") && !strings.Contains(st.sql, "$") {
					// The predicate's literals as parameters.
					if vs, _ := colCorpusVariants(st.sql, cols, i, true, c.kind); len(vs) == 1 {
						c.sql = vs[0]
						_, c.params, c.oids = colCorpusPred(i, true)
					}
				}
				if len(c.params) > 0 {
					bound++
				}
				var p, d colResult
				if target := colCorpusTarget(n, cols); c.write && target != "" {
					// The write in a transaction, then the table it wrote
					// read on both sides, then rolled back.
					var after [2]colResult
					p, after[0] = colCorpusWrite(ctx, proxied, c, mode, target)
					d, after[1] = colCorpusWrite(ctx, ref, c, mode, target)
					if p.err == nil && d.err == nil {
						readBack := colCase{sql: "SELECT * FROM " + target, kind: "table after write"}
						runs++
						if diff := colCompare(readBack, after[0], after[1]); diff != "" {
							count(readBack.kind, nDiffer)
							t.Errorf("%s (%s, %s protocol): %s, after\n    %s\n  proxy:     %s\n  reference: %s", st.file, c.kind, mode, diff, c.sql, after[0], after[1])
						} else {
							count(readBack.kind, nEqual)
						}
					}
				} else {
					p = colRun(ctx, proxied, c, mode)
					d = colRun(ctx, ref, c, mode)
				}
				switch {
				case p.err != nil && sqlstate(p.err) == "0A000" && strings.HasPrefix(errMessage(p.err), "ttlproxy"):
					count(c.kind, nRefused)
					reason := colCorpusReason(errMessage(p.err))
					refusals[reason]++
					if _, ok := refusalSample[reason]; !ok {
						refusalSample[reason] = st.file + ": " + colCorpusUncomment(c.sql)
					}
				case p.err != nil && d.err != nil && sqlstate(p.err) == sqlstate(d.err):
					count(c.kind, nFailed)
					failedAlike[sqlstate(d.err)]++
					if c.kind == "targets" && sqlstate(d.err) == "42803" && mode == modes[0] {
						// An aggregate without GROUP BY: read the columns
						// through aggregates instead.
						if vs, _ := colCorpusVariants(st.sql, cols, i, false, "targets, aggregated"); len(vs) == 1 {
							a := base
							a.sql, a.kind = vs[0], "targets, aggregated"
							cases = append(cases, a)
						}
					}
				case p.err != nil || d.err != nil:
					if f := colCorpusKnownFinding(st.sql); f != "" {
						known[f]++
						break
					}
					count(c.kind, nDiffer)
					t.Errorf("%s (%s, %s protocol): outcomes differ\n    %s\n  proxy:     %s\n  reference: %s", st.file, c.kind, mode, c.sql, p, d)
				default:
					for k, f := range d.fields {
						if i := strings.LastIndexByte(f, ':'); i >= 0 && rowTypes[f[i:]] != "" {
							d.fields[k] = f[:i] + rowTypes[f[i:]]
						}
					}
					diff := colCompare(c, p, d)
					if diff == "rows in another order" && (colCorpusTiesOnly(c.sql, p, d) || colCorpusTotalOrderAgrees(ctx, proxied, ref, c, mode, len(p.fields))) {
						diff = ""
					}
					if f := colCorpusKnownFinding(st.sql); diff != "" && f != "" {
						known[f]++
						break
					}
					if diff != "" {
						count(c.kind, nDiffer)
						t.Errorf("%s (%s, %s protocol): %s\n    %s\n  proxy:     %s\n  reference: %s", st.file, c.kind, mode, diff, c.sql, p, d)
						break
					}
					count(c.kind, nEqual)
				}
				if proxied.IsClosed() || ref.IsClosed() {
					t.Fatalf("%s closed a connection: %s", st.file, c.sql)
				}
			}
		}
	}
	var total [4]int
	var byKind []string
	for _, kind := range []string{"as is", "targets", "targets, aggregated", "targets, expressions", "where", "where, every level", "table after write"} {
		c := counts[kind]
		if c == nil {
			c = &[4]int{}
		}
		for k := range total {
			total[k] += c[k]
		}
		byKind = append(byKind, fmt.Sprintf("%s: %d equal, %d refused, %d failed alike, %d different", kind, c[nEqual], c[nRefused], c[nFailed], c[nDiffer]))
	}
	t.Logf("%d runs (%d with bound parameters) in %v: %d equal, %d refused by the proxy (0A000), %d failed alike %v, %d different\n    %s",
		runs, bound, time.Since(start).Round(time.Millisecond), total[nEqual], total[nRefused], total[nFailed], failedAlike, total[nDiffer],
		strings.Join(byKind, "\n    "))
	if len(known) > 0 {
		t.Logf("known differences (colCorpusKnown), by finding: %v", known)
	}
	for k, f := range colCorpusKnown {
		if known[f] == 0 && *colCorpusFile == "" {
			t.Errorf("known difference %s (%q) no longer shows: take it out of colCorpusKnown and unskip TestColumnOracleCorpusWholeRows", f, k)
		}
	}
	type reason struct {
		msg string
		n   int
	}
	var rs []reason
	for m, k := range refusals {
		rs = append(rs, reason{m, k})
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].n > rs[j].n || rs[i].n == rs[j].n && rs[i].msg < rs[j].msg })
	for i, r := range rs {
		if i == 12 {
			break
		}
		t.Logf("refused %d×: %s\n      e.g. %s", r.n, r.msg, refusalSample[r.msg])
	}
	// The selection is what the proof counts on: most statements and most
	// variants reading the expiring columns are served and compared.
	if runs == 0 || total[nEqual] < runs/2 {
		t.Errorf("only %d of %d runs compared equal", total[nEqual], runs)
	}
	for _, kind := range []string{"targets", "where"} {
		if c := counts[kind]; c == nil || c[nEqual] < 100 {
			t.Errorf("fewer than 100 %q variants compared equal", kind)
		}
	}
}

// colCorpusTarget returns the table of cols a write names as its target,
// or "".
func colCorpusTarget(n *pg.Node, cols map[string][2]string) string {
	var rv *pg.RangeVar
	switch {
	case n.GetInsertStmt() != nil:
		rv = n.GetInsertStmt().Relation
	case n.GetUpdateStmt() != nil:
		rv = n.GetUpdateStmt().Relation
	case n.GetDeleteStmt() != nil:
		rv = n.GetDeleteStmt().Relation
	case n.GetMergeStmt() != nil:
		rv = n.GetMergeStmt().Relation
	}
	if _, ok := cols[rv.GetRelname()]; !ok || rv.GetSchemaname() != "" {
		return ""
	}
	return rv.GetRelname()
}

// colCorpusWrite runs the write c on conn in a transaction, reads the
// table it wrote (SELECT *: the copy on the reference side) when it
// succeeded, and rolls back.
func colCorpusWrite(ctx context.Context, conn *pgconn.PgConn, c colCase, mode execMode, table string) (res, after colResult) {
	if _, err := conn.Exec(ctx, "BEGIN").ReadAll(); err != nil {
		return colResult{err: err}, colResult{}
	}
	defer func() { _, _ = conn.Exec(ctx, "ROLLBACK").ReadAll() }()
	c.write = false
	res = colRun(ctx, conn, c, mode)
	if res.err == nil {
		after = colRun(ctx, conn, colCase{sql: "SELECT * FROM " + table}, modeSimple)
	}
	return res, after
}

// colCorpusUncomment drops the comment lines a corpus statement starts
// with, for the log.
func colCorpusUncomment(sql string) string {
	for strings.HasPrefix(sql, "--") {
		_, rest, _ := strings.Cut(sql, "\n")
		sql = strings.TrimLeft(rest, " \t\n")
	}
	return sql
}

// colCorpusReason is a refusal's message with the names of tables and
// columns and the numbers taken out, so that refusals group by kind.
func colCorpusReason(msg string) string {
	msg = regexp.MustCompile(`"[^"]*"`).ReplaceAllString(msg, `"…"`)
	msg = regexp.MustCompile(`of table [^:\s]+`).ReplaceAllString(msg, "of table …")
	return normalize(msg)
}

// colCorpusKnown are corpus statements (spaces removed, lower case) whose
// runs differ for a reason already reported, each with its finding; their
// differences are counted, not failed, and one that no longer differs
// fails the test, so that the list does not outlive the bug.
// TestColumnOracleCorpusWholeRows holds each as a minimal statement.
var colCorpusKnown = map[string]string{}

// colCorpusKnownFinding returns the finding of a known difference of the
// corpus statement sql, or "".
func colCorpusKnownFinding(sql string) string {
	key := strings.ToLower(strings.Join(strings.Fields(sql), ""))
	for k, f := range colCorpusKnown {
		if strings.Contains(key, k) {
			return f
		}
	}
	return ""
}

// colCorpusTotalOrderAgrees reports whether c, ordered further by every
// output column in turn, gives the same rows in the same order on both
// sides: then the two results differed only in the order of rows c's own
// ORDER BY left tied.
func colCorpusTotalOrderAgrees(ctx context.Context, proxied, ref *pgconn.PgConn, c colCase, mode execMode, width int) bool {
	tree, err := pg.Parse(c.sql)
	if err != nil || tree.Stmts[0].Stmt.GetSelectStmt() == nil {
		return false
	}
	sel := tree.Stmts[0].Stmt.GetSelectStmt()
	for i := 1; i <= width; i++ {
		sel.SortClause = append(sel.SortClause, pg.MakeSortByNode(pg.MakeAConstIntNode(int64(i), -1), pg.SortByDir_SORTBY_DEFAULT, pg.SortByNulls_SORTBY_NULLS_DEFAULT, -1))
	}
	total, err := pg.Deparse(tree)
	if err != nil {
		return false
	}
	c.sql = total
	p, d := colRun(ctx, proxied, c, mode), colRun(ctx, ref, c, mode)
	return p.err == nil && d.err == nil && slices.Equal(p.rows, d.rows)
}

// colCorpusTiesOnly reports whether two results holding the same rows in
// another order agree on the values of the statement's ORDER BY keys row
// by row: they differ only in the order of rows the keys leave tied. It
// resolves a key that is an output column by position, by output name or
// by its column reference, and reports false for any other key.
func colCorpusTiesOnly(sql string, p, d colResult) bool {
	tree, err := pg.Parse(sql)
	if err != nil || tree.Stmts[0].Stmt.GetSelectStmt() == nil {
		return false
	}
	s := tree.Stmts[0].Stmt.GetSelectStmt()
	var names []string // an output column's name, or its column reference's last name
	for _, tn := range s.TargetList {
		rt := tn.GetResTarget()
		name := rt.GetName()
		if name == "" {
			if cr := rt.GetVal().GetColumnRef(); cr != nil {
				name = cr.Fields[len(cr.Fields)-1].GetString_().GetSval()
			}
		}
		names = append(names, name)
	}
	var keys []int
	for _, sn := range s.SortClause {
		node := sn.GetSortBy().GetNode()
		switch {
		case node.GetAConst() != nil && node.GetAConst().GetIval() != nil:
			keys = append(keys, int(node.GetAConst().GetIval().GetIval())-1)
		case node.GetColumnRef() != nil:
			f := node.GetColumnRef().Fields
			name := f[len(f)-1].GetString_().GetSval()
			k := slices.Index(names, name)
			if name == "" || k < 0 || slices.Index(names[k+1:], name) >= 0 {
				return false
			}
			keys = append(keys, k)
		default:
			return false
		}
	}
	if len(p.rows) != len(d.rows) {
		return false
	}
	for i := range p.rows {
		pv, dv := strings.Split(p.rows[i], " | "), strings.Split(d.rows[i], " | ")
		if len(pv) != len(p.fields) || len(dv) != len(d.fields) {
			return false
		}
		for _, k := range keys {
			if k < 0 || k >= len(pv) || pv[k] != dv[k] {
				return false
			}
		}
	}
	return true
}

// TestColumnOracleCorpusWholeRows holds the whole-row differences the
// corpus run found, each as a minimal statement compared through the
// proxy with the copy: the whole row of a NULL-extended join side is NULL
// (count(b.*) 0, row_to_json(b) NULL), and whole rows compare as composite
// values, not as row constructors (rewrite/colrow.go).
func TestColumnOracleCorpusWholeRows(t *testing.T) {
	tb := &colTable{name: "wr", text: "c", num: "n", rowLive: "true",
		textLive: "c_exp IS NULL OR c_exp >= now()", numLive: "n_exp IS NULL OR n_exp >= now()",
		columns:   []string{"id", "c", "c_exp", "n", "n_exp"},
		createSQL: `CREATE TABLE wr (id int PRIMARY KEY, c text, c_exp timestamptz, n numeric, n_exp timestamptz)`}
	setup := []string{tb.createSQL,
		`INSERT INTO wr VALUES (1, 'live', NULL, 1, NULL), (2, 'dead', now() - interval '1 hour', 2, NULL), (3, 'x', NULL, 3, now() + interval '1 hour')`}
	rules := []ttl.Rule{{Table: "wr", Kind: ttl.KindNone, Columns: []ttl.ColumnRule{
		{Column: "c", ExpiresAtColumn: "c_exp"}, {Column: "n", ExpiresAtColumn: "n_exp"}}}}
	s := newStack(t, stackOptions{setup: setup, rules: rules})
	ctx := context.Background()
	proxied := s.connect(s.proxied).PgConn()
	ref := s.connect(s.direct).PgConn()
	if _, err := ref.Exec(ctx, colRefSQL(tb)+"; SET search_path = pg_temp, public").ReadAll(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []colCase{
		// The whole row of a NULL-extended side of an outer join is
		// NULL, not a row of NULLs.
		{sql: `SELECT a.id, count(b.*) FROM wr a LEFT JOIN wr b ON b.id = a.id + 10 GROUP BY a.id`},
		{sql: `SELECT a.id, row_to_json(b) FROM wr a LEFT JOIN wr b ON b.id = a.id + 10`},
		// A whole row compared with another is a composite comparison
		// (NULL fields equal), not one of row constructors (NULL fields
		// unknown), and compares with a subquery's one column.
		{sql: `SELECT a.id FROM wr a JOIN wr b ON a = b`},
		{sql: `SELECT id FROM wr w WHERE w IN (SELECT x FROM wr x)`},
		{sql: `SELECT id FROM wr w WHERE w IN (ROW(1, 'live', NULL, 1, NULL))`},
		{sql: `SELECT id FROM wr w WHERE w = ROW(1, 2)`},
		{sql: `SELECT a.id, b IS NULL, b IS NOT DISTINCT FROM NULL FROM wr a LEFT JOIN wr b ON b.id = a.id - 1`},
	} {
		for _, mode := range []execMode{modeSimple, modeExtended} {
			p, d := colRun(ctx, proxied, c, mode), colRun(ctx, ref, c, mode)
			if p.err != nil || d.err != nil {
				if sqlstate(p.err) != sqlstate(d.err) {
					t.Errorf("%s (%s): outcomes differ\n  proxy:     %s\n  reference: %s", c.sql, mode, p, d)
				}
				continue
			}
			if diff := colCompare(c, p, d); diff != "" {
				t.Errorf("%s (%s): %s\n  proxy:     %s\n  reference: %s", c.sql, mode, diff, p, d)
			}
		}
	}
}
