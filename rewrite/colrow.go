package rewrite

import (
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// Whole rows of a table with expiring columns (docs/design/column-ttl.md
// §2): a whole-row reference `t`, or `t.*` used as a value
// (`row_to_json(t.*)`, `t.*::text`), becomes
//
//	CASE WHEN t.* IS NOT DISTINCT FROM NULL THEN NULL
//	ELSE ROW(t."a", V(t.c), …)::schema.t END
//
// which keeps the row type and its field names. The CASE keeps two
// things of PostgreSQL's whole-row value that the ROW(…) alone loses: it
// is NULL for the NULL-extended side of an outer join (a ROW of NULL
// fields is not NULL: count(t.*) would count it, row_to_json print it),
// and it is compared as one composite value (`t IN (SELECT u …)`, `t =
// ROW(1, 2)`), where a ROW(…) cast to the type is taken for a row
// constructor and compared field by field. `t.* IS NOT DISTINCT FROM NULL`
// tests the row's datum, not its fields (an existing row whose fields are
// all NULL is not distinct from NULL only field by field, as `t IS NULL`
// is), so it reveals no value and is left as it is (rowNullTest). `t.*`
// inside ROW(…) is the columns themselves, each expiring one as V;
// functional notation `c(t)` is `t.c`. Each needs the catalog's column
// list; without it the reference is left to be refused.

// rowNullTest returns the whole-row reference e tests with `IS [NOT]
// DISTINCT FROM NULL`, or nil.
func rowNullTest(e *pg.A_Expr) *pg.ColumnRef {
	if e.Kind != pg.A_Expr_Kind_AEXPR_DISTINCT && e.Kind != pg.A_Expr_Kind_AEXPR_NOT_DISTINCT {
		return nil
	}
	isNull := func(n *pg.Node) bool {
		c := n.GetAConst()
		return c != nil && c.Isnull
	}
	switch {
	case isNull(e.Rexpr) && e.Lexpr.GetColumnRef() != nil:
		return e.Lexpr.GetColumnRef()
	case isNull(e.Lexpr) && e.Rexpr.GetColumnRef() != nil:
		return e.Rexpr.GetColumnRef()
	}
	return nil
}

// columnList writes the item's columns in order, each expiring one as V
// (with `AS "c"` when named is set), the others as `q."a"`; "" without
// the catalog's columns.
func (rel *colRel) columnList(named bool) string {
	if rel.r == nil || len(rel.cols) == 0 {
		return ""
	}
	var b strings.Builder
	for k, col := range rel.cols {
		if k > 0 {
			b.WriteString(", ")
		}
		if e := rel.expiring(col.Name); e != nil {
			b.WriteString(rel.value(e, col.Type))
			if named {
				b.WriteString(" AS " + ttl.QuoteIdent(col.Name))
			}
			continue
		}
		b.WriteString(rel.qual + "." + ttl.QuoteIdent(col.Name))
	}
	return b.String()
}

// rowType is the table's row type, quoted.
func rowType(r *ttl.Rule) string {
	return ttl.QuoteIdent(r.SchemaName()) + "." + ttl.QuoteIdent(r.Table)
}

// wholeRowRel returns the table with expiring columns a whole-row
// reference cr names (`t`, or `t.*` where star is set), and the level
// holding it; nil when cr is none or cannot be told from a column (a FROM
// item in scope has unknown columns).
func (l *colLevel) wholeRowRel(cr *pg.ColumnRef, star bool) (*colRel, *colLevel) {
	f := cr.Fields
	switch {
	case star && len(f) == 2 && f[1].GetAStar() != nil:
		rel, owner := l.named(f[0].GetString_().GetSval())
		if rel == nil || rel.r == nil {
			return nil, nil
		}
		return rel, owner
	case !star && len(f) == 1 && f[0].GetString_() != nil:
		name := f[0].GetString_().GetSval()
		if l.c.names[name] == nil {
			return nil, nil
		}
		// A column of that name, at any level, wins over the relation.
		for lv := l; lv != nil; lv = lv.parent {
			for _, x := range lv.rels {
				if x.tainted || !x.known || x.has(name) {
					return nil, nil
				}
			}
		}
		rel, owner := l.named(name)
		if rel == nil || rel.r == nil {
			return nil, nil
		}
		return rel, owner
	}
	return nil, nil
}

// wholeRow rewrites cr when it is a whole-row reference to a table with
// expiring columns, and reports whether it did.
func (l *colLevel) wholeRow(cr *pg.ColumnRef) bool {
	rel, owner := l.wholeRowRel(cr, len(cr.Fields) == 2)
	if rel == nil || (owner != l && owner.pure) {
		return false
	}
	if l.c.rowNull[cr] {
		l.c.read[cr] = true
		return true
	}
	list := rel.columnList(false)
	if list == "" {
		return false
	}
	return l.replaceRef(cr, "CASE WHEN "+rel.qual+".* IS NOT DISTINCT FROM NULL THEN NULL ELSE ROW("+list+")::"+rowType(rel.r)+" END")
}

// replaceRef replaces the text of cr (its names, `.*` included) with
// text, and marks it read.
func (l *colLevel) replaceRef(cr *pg.ColumnRef, text string) bool {
	ts := l.c.w.tokens()
	i := ts.at(int(cr.Location))
	if i < 0 {
		return false
	}
	end := ts.nameEnd(i)
	if ts.kind(end) == pg.Token_ASCII_91 {
		text = "(" + text + ")"
	}
	l.c.w.replace(ts[i].start, ts[end-1].end, text)
	l.c.read[cr] = true
	l.wrapped[cr] = true
	return true
}

// rowStars expands `t.*` among the arguments of ROW(…) into t's columns
// and reports, per argument, whether it did.
func (l *colLevel) rowStars(args []*pg.Node) map[*pg.Node]bool {
	done := map[*pg.Node]bool{}
	for _, a := range args {
		cr := a.GetColumnRef()
		if cr == nil {
			continue
		}
		rel, owner := l.wholeRowRel(cr, true)
		if rel == nil || owner != l {
			continue
		}
		if list := rel.columnList(false); list != "" && l.replaceRef(cr, list) {
			done[a] = true
		}
	}
	return done
}

// funcColumn rewrites functional notation `c(t)` of an expiring column c
// of the table t to V(t.c), and reports whether fc was one.
func (l *colLevel) funcColumn(fc *pg.FuncCall) bool {
	if len(fc.Funcname) != 1 || len(fc.Args) != 1 || fc.AggStar || fc.AggDistinct || fc.FuncVariadic || fc.Over != nil ||
		fc.AggFilter != nil || len(fc.AggOrder) > 0 || fc.AggWithinGroup {
		return false
	}
	arg := fc.Args[0].GetColumnRef()
	if arg == nil {
		return false
	}
	rel, owner := l.wholeRowRel(arg, false)
	if rel == nil || (owner != l && owner.pure) {
		return false
	}
	name := fc.Funcname[0].GetString_().GetSval()
	col := rel.expiring(name)
	typ := columnType(rel.cols, name)
	if col == nil || typ == "" {
		return false
	}
	ts := l.c.w.tokens()
	i := ts.at(int(fc.Location))
	if i < 0 || ts.kind(i+1) != pg.Token_ASCII_40 {
		return false
	}
	end := ts.match(i + 1)
	if end < 0 {
		return false
	}
	l.c.w.replace(ts[i].start, ts[end].end, rel.value(col, typ))
	l.c.read[arg] = true
	l.c.funcs[fc] = true
	return true
}

// funcSource returns the functional-notation call an unnamed target entry
// is named after, through casts and COLLATE, or nil.
func funcSource(n *pg.Node) *pg.FuncCall {
	for {
		switch x := n.GetNode().(type) {
		case *pg.Node_FuncCall:
			return x.FuncCall
		case *pg.Node_TypeCast:
			n = x.TypeCast.Arg
		case *pg.Node_CollateClause:
			n = x.CollateClause.Arg
		default:
			return nil
		}
	}
}
