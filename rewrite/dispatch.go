package rewrite

import (
	"fmt"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// Dispatch: one top-level statement to the walk that handles its kind, the
// safety net after it, and the rejections of what no walk handles.

// rawStmt walks one top-level statement and then runs the safety net on it.
func (w *walker) rawStmt(raw *pg.RawStmt) {
	start := int(raw.StmtLocation)
	end := len(w.sql)
	if raw.StmtLen > 0 {
		end = start + int(raw.StmtLen)
	}
	if e, ok := showTTLEdit(w.sql, raw); ok {
		w.replace(e.start, e.end, e.text)
		return
	}
	w.construct = constructName(raw.Stmt)
	w.stmtEnd = end
	w.protectDDL(raw.Stmt)
	if w.err != nil {
		return
	}
	w.expiringColumns(raw.Stmt)
	if w.err != nil {
		return
	}
	w.leakyFunctions(raw.Stmt)
	w.serverReads(raw.Stmt)
	w.pinning = pinnable(raw.Stmt)
	defer func() { w.pinning = false }()
	w.stmt(raw.Stmt, nil, start, end)
	if w.err != nil {
		return
	}
	top := constructName(raw.Stmt)
	w.ownRegistry = nil
	forEachRangeVar(raw.Stmt, func(rv *pg.RangeVar) {
		if w.err != nil {
			return
		}
		if len(w.rw.registries) > 0 {
			if w.checkRegistry(raw.Stmt, rv); w.err != nil {
				return
			}
		}
		if isStatsView(rv, nil) && !w.expanded[rv] {
			w.fail(errCannotFilterStats(rv.Relname, top))
			return
		}
		if w.handled[rv] {
			return
		}
		if r := w.ruleFor(rv, nil); r != nil {
			w.fail(errUnhandledPosition(r, top))
		}
	})
	if w.err == nil {
		w.flushPins()
	}
}

// stmt walks a statement that spans the text [start, end) at most; for a
// statement nested in another (EXPLAIN, PREPARE, a CTE body) the span is
// where it ends, which is where a WHERE clause may be added.
func (w *walker) stmt(n *pg.Node, sc *scope, start, end int) {
	if n == nil || w.err != nil {
		return
	}
	switch x := n.Node.(type) {
	case *pg.Node_SelectStmt:
		w.selectStmt(x.SelectStmt, sc)
	case *pg.Node_InsertStmt:
		w.insertStmt(x.InsertStmt, sc, end)
	case *pg.Node_UpdateStmt:
		w.updateStmt(x.UpdateStmt, sc, end)
	case *pg.Node_DeleteStmt:
		w.deleteStmt(x.DeleteStmt, sc, end)
	case *pg.Node_ExplainStmt:
		w.stmt(x.ExplainStmt.Query, sc, start, end)
	case *pg.Node_PrepareStmt:
		w.stmt(x.PrepareStmt.Query, sc, start, end)
	case *pg.Node_DeclareCursorStmt:
		w.stmt(x.DeclareCursorStmt.Query, sc, start, end)
	case *pg.Node_CreateTableAsStmt:
		if x.CreateTableAsStmt.Into != nil {
			w.mark(x.CreateTableAsStmt.Into.Rel)
		}
		w.stmt(x.CreateTableAsStmt.Query, sc, start, end)
	case *pg.Node_ViewStmt:
		w.mark(x.ViewStmt.View)
		w.stmt(x.ViewStmt.Query, sc, start, end)
	case *pg.Node_CopyStmt:
		w.copyStmt(x.CopyStmt, start, end)
	case *pg.Node_DoStmt:
		w.functionBody(n, x.DoStmt.Args, nil, "a DO block")
	case *pg.Node_CreateFunctionStmt:
		what := "CREATE FUNCTION"
		if x.CreateFunctionStmt.IsProcedure {
			what = "CREATE PROCEDURE"
		}
		w.functionBody(n, x.CreateFunctionStmt.Options, x.CreateFunctionStmt.SqlBody, what)
	case *pg.Node_MergeStmt:
		w.mergeStmt(x.MergeStmt, sc, end)
	default:
		if isUtility(n) {
			w.utility(n)
		} else {
			w.rejectAny(n, constructName(n))
		}
	}
}

// utility walks a DDL or utility statement: the tables it names are objects,
// not reads, and pass; a query inside one (a policy's USING (EXISTS …)) is
// still filtered.
func (w *walker) utility(n *pg.Node) {
	w.genericMsg(n.ProtoReflect(), nil, true)
}

// rejectAny rejects a statement the rewriter cannot make safe if it refers to
// a TTL table anywhere.
func (w *walker) rejectAny(n *pg.Node, what string) {
	forEachRangeVar(n, func(rv *pg.RangeVar) {
		w.mark(rv)
		if r := w.ruleFor(rv, nil); r != nil {
			w.fail(errCannotFilterIn(r, what))
		}
	})
}

// functionBody rejects a DO block or function whose body mentions a TTL
// table: the body runs inside the server where the proxy cannot filter it.
func (w *walker) functionBody(n *pg.Node, opts []*pg.Node, sqlBody *pg.Node, what string) {
	check := func(body string) {
		if k := w.rw.tables.find(body); k >= 0 {
			w.fail(errFunctionBody(&w.rw.rules[w.rw.tables.owner[k]], what))
		} else if k := w.rw.registryText.find(body); k >= 0 {
			w.fail(errRegistry(&w.rw.rules[w.rw.registryText.owner[k]]))
		} else if cat := w.s.Catalog; cat != nil && len(cat.ancestorKeys) > 0 {
			if k := cat.ancestorNames.find(body); k >= 0 {
				key := cat.ancestorKeys[cat.ancestorNames.owner[k]]
				w.fail(errAncestorBody(key, cat.d.Ancestors[key], what))
			}
		}
	}
	for _, o := range opts {
		d := o.GetDefElem()
		if d == nil || d.Defname != "as" {
			continue
		}
		if s := d.Arg.GetString_(); s != nil {
			check(s.Sval)
		}
		for _, item := range d.Arg.GetList().GetItems() {
			check(item.GetString_().GetSval())
		}
	}
	if sqlBody != nil {
		w.rejectAny(sqlBody, what)
	}
	// Everything else in the statement (argument types, names) is DDL.
	forEachRangeVar(n, w.mark)
}

// isUtility reports statements that name tables as objects without reading
// their rows.
func isUtility(n *pg.Node) bool {
	switch n.Node.(type) {
	case *pg.Node_AlterTableStmt, *pg.Node_AlterObjectDependsStmt, *pg.Node_AlterObjectSchemaStmt,
		*pg.Node_AlterOwnerStmt, *pg.Node_AlterPolicyStmt, *pg.Node_AlterSeqStmt, *pg.Node_ClusterStmt,
		*pg.Node_CompositeTypeStmt, *pg.Node_CreatePolicyStmt, *pg.Node_CreateSeqStmt, *pg.Node_CreateStmt,
		*pg.Node_CreateForeignTableStmt, *pg.Node_CreateTrigStmt, *pg.Node_IndexStmt, *pg.Node_RefreshMatViewStmt,
		*pg.Node_ReindexStmt, *pg.Node_RenameStmt, *pg.Node_TruncateStmt, *pg.Node_LockStmt, *pg.Node_GrantStmt,
		*pg.Node_CreateStatsStmt, *pg.Node_AlterStatsStmt, *pg.Node_CommentStmt, *pg.Node_SecLabelStmt,
		*pg.Node_VacuumStmt, *pg.Node_CreatePublicationStmt, *pg.Node_AlterPublicationStmt, *pg.Node_DropStmt,
		*pg.Node_AlterTableMoveAllStmt, *pg.Node_ImportForeignSchemaStmt:
		return true
	}
	return false
}

// constructName names a statement for messages.
func constructName(n *pg.Node) string {
	switch x := n.GetNode().(type) {
	case *pg.Node_SelectStmt:
		return "SELECT"
	case *pg.Node_InsertStmt:
		return "INSERT"
	case *pg.Node_UpdateStmt:
		return "UPDATE"
	case *pg.Node_DeleteStmt:
		return "DELETE"
	case *pg.Node_MergeStmt:
		return "MERGE"
	case *pg.Node_CopyStmt:
		return "COPY"
	case *pg.Node_ExplainStmt:
		return "EXPLAIN"
	case *pg.Node_PrepareStmt:
		return "PREPARE"
	case *pg.Node_DeclareCursorStmt:
		return "DECLARE CURSOR"
	case *pg.Node_CreateTableAsStmt:
		if x.CreateTableAsStmt.Objtype == pg.ObjectType_OBJECT_MATVIEW {
			return "CREATE MATERIALIZED VIEW"
		}
		return "CREATE TABLE AS"
	case *pg.Node_ViewStmt:
		return "CREATE VIEW"
	case *pg.Node_RuleStmt:
		return "CREATE RULE"
	case *pg.Node_DoStmt:
		return "DO"
	case *pg.Node_CreateFunctionStmt:
		return "CREATE FUNCTION"
	case nil:
		return "statement"
	}
	name := fmt.Sprintf("%T", n.Node)
	name = strings.TrimPrefix(name, "*pg_query.Node_")
	return name
}
