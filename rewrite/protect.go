package rewrite

import (
	"slices"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// Relations the rewrite depends on by name. The filter is written on the
// names the rules and the session's catalog give: a sidecar registry read
// or written by a client shows or revives expired rows, and a TTL table (or
// a child, an ancestor, a view that reads one) renamed, moved or reshaped
// through the proxy is read unfiltered under its new name until the catalog
// is read again. Both are refused in the client's text; the proxy's own
// additions (the live condition's registry lookup, an INSERT's
// registration) are edits made after the walk, and are recognised where
// it writes them when its output is rewritten again.

// registryRule returns the sidecar rule whose registry rv may name: by its
// schema, or unqualified with the registry's schema on the search path.
// A name the server may resolve elsewhere is refused too: the rewriter
// errs toward refusing.
func (w *walker) registryRule(rv *pg.RangeVar) *ttl.Rule {
	if len(w.rw.registries) == 0 || rv == nil {
		return nil
	}
	if rv.Schemaname != "" {
		return w.rw.registries[relKey{rv.Schemaname, rv.Relname}]
	}
	if _, ok := w.rw.registryNames[rv.Relname]; !ok {
		return nil
	}
	path := w.s.SearchPath
	if path == nil {
		path = publicPath
	}
	for _, sch := range path {
		if r := w.rw.registries[relKey{sch, rv.Relname}]; r != nil {
			return r
		}
	}
	return nil
}

// checkRegistry fails the walk when rv, a table reference of the statement
// n, names a sidecar registry anywhere (a read, a write, TRUNCATE, COPY,
// DDL) but in the proxy's own text (ownRegistryReads, found once per
// statement in walker.ownRegistry). It runs in the safety net's pass over
// every table reference (rawStmt), so that a rule set with registries
// costs no walk of its own.
func (w *walker) checkRegistry(n *pg.Node, rv *pg.RangeVar) {
	r := w.registryRule(rv)
	if r == nil {
		return
	}
	if w.ownRegistry == nil {
		w.ownRegistry = w.ownRegistryReads(n)
	}
	if !w.ownRegistry[rv] {
		w.fail(errRegistry(r))
	}
}

// protectedName returns the "schema.name" of the relation rv names when
// the rewrite depends on its name: a TTL table or a child of one (with its
// rule), an ancestor of one or a view that may return expired rows (rule
// nil); "" for any other.
func (w *walker) protectedName(rv *pg.RangeVar) (string, *ttl.Rule) {
	if rv == nil {
		return "", nil
	}
	sch := rv.Schemaname
	if sch == "" {
		if s, ok := w.resolve(rv.Relname); ok {
			sch = s
		}
	}
	if sch != "" {
		if r := w.ruleAt(sch, rv.Relname); r != nil {
			return sch + "." + rv.Relname, r
		}
	}
	cat := w.s.Catalog
	if cat == nil {
		return "", nil
	}
	for _, m := range []map[string]string{cat.d.Ancestors, cat.leaky} {
		if len(m) == 0 {
			continue
		}
		key := rv.Schemaname + "." + rv.Relname
		if rv.Schemaname == "" {
			key = w.resolveIn(rv.Relname, m)
		}
		if _, ok := m[key]; ok {
			return key, nil
		}
	}
	return "", nil
}

// ruleColumns reports that column is one r reads: the row rule's expiry,
// base, interval or key columns, an expiring column or its clock.
func ruleColumns(r *ttl.Rule, column string) bool {
	if r == nil {
		return true
	}
	switch {
	case r.RuleKind() == ttl.KindColumn && r.ExpiryColumn() == column,
		r.BaseColumn != "" && r.BaseColumn == column,
		r.IntervalColumn != "" && r.IntervalColumn == column:
		return true
	}
	for _, k := range r.KeyColumns {
		if k == column {
			return true
		}
	}
	for i := range r.Columns {
		if c := &r.Columns[i]; c.Column == column || c.Clock() == column {
			return true
		}
	}
	return false
}

// protectDDL fails the walk on DDL that would leave a relation the rewrite
// depends on under a name or shape the session's catalog does not know:
// renaming or moving it (ALTER … RENAME, SET SCHEMA), renaming, dropping
// or retyping a column its rule reads (any column of an ancestor, whose
// columns its descendants inherit), and changing inheritance or
// partitioning on either side (INHERIT, NO INHERIT, ATTACH and DETACH
// PARTITION). Other DDL passes as before.
func (w *walker) protectDDL(n *pg.Node) {
	switch x := n.Node.(type) {
	case *pg.Node_RenameStmt:
		rs := x.RenameStmt
		name, r := w.protectedName(rs.Relation)
		if name == "" {
			return
		}
		switch rs.RenameType {
		case pg.ObjectType_OBJECT_COLUMN:
			if ruleColumns(r, rs.Subname) {
				w.fail(errProtectedDDL(name, "renaming its column "+ttl.QuoteIdent(rs.Subname)))
			}
		case pg.ObjectType_OBJECT_TABLE, pg.ObjectType_OBJECT_VIEW, pg.ObjectType_OBJECT_MATVIEW,
			pg.ObjectType_OBJECT_FOREIGN_TABLE, pg.ObjectType_OBJECT_SEQUENCE, pg.ObjectType_OBJECT_INDEX:
			w.fail(errProtectedDDL(name, "renaming it"))
		}
	case *pg.Node_AlterObjectSchemaStmt:
		if name, _ := w.protectedName(x.AlterObjectSchemaStmt.Relation); name != "" {
			w.fail(errProtectedDDL(name, "moving it to another schema"))
		}
	case *pg.Node_AlterTableStmt:
		at := x.AlterTableStmt
		name, r := w.protectedName(at.Relation)
		for _, c := range at.Cmds {
			cmd := c.GetAlterTableCmd()
			if cmd == nil || w.err != nil {
				continue
			}
			switch cmd.Subtype {
			case pg.AlterTableType_AT_AddInherit, pg.AlterTableType_AT_DropInherit:
				other, _ := w.protectedName(cmd.Def.GetRangeVar())
				if name != "" || other != "" {
					w.fail(errProtectedDDL(firstNonEmpty(name, other), "changing its inheritance"))
				}
			case pg.AlterTableType_AT_AttachPartition, pg.AlterTableType_AT_DetachPartition,
				pg.AlterTableType_AT_DetachPartitionFinalize:
				other, _ := w.protectedName(cmd.Def.GetPartitionCmd().GetName())
				if name != "" || other != "" {
					w.fail(errProtectedDDL(firstNonEmpty(name, other), "attaching or detaching a partition"))
				}
			case pg.AlterTableType_AT_DropColumn, pg.AlterTableType_AT_AlterColumnType,
				pg.AlterTableType_AT_SetExpression, pg.AlterTableType_AT_DropExpression:
				if name != "" && ruleColumns(r, cmd.Name) {
					w.fail(errProtectedDDL(name, "dropping or changing its column "+ttl.QuoteIdent(cmd.Name)))
				}
			}
		}
	}
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// ownRegistryReads returns the registry references in n that are text the
// proxy writes, so that its output rewritten again stays valid: the lookup
// in a sidecar rule's live condition where the proxy puts it, byte for
// byte (the ON of a filter join on a FROM item of the rule's table, the
// last condition of the WHERE of an UPDATE, DELETE or DO UPDATE, or of
// the join condition of a MERGE, into that table, each qualified by that item's name), and the INSERT of a
// registration (markRegistered's shape). Such a lookup only tests, for the
// row of the item the filter is already on, what the filter tests.
func (w *walker) ownRegistryReads(n *pg.Node) map[*pg.RangeVar]bool {
	own := map[*pg.RangeVar]bool{}
	claim := func(cond *pg.Node, r *ttl.Rule, live string) {
		if cond == nil || r == nil || r.RuleKind() != ttl.KindSidecar {
			return
		}
		if ands := cond.GetBoolExpr(); ands != nil && ands.Boolop == pg.BoolExprType_AND_EXPR && len(ands.Args) > 0 {
			cond = ands.Args[len(ands.Args)-1]
		}
		not := cond.GetBoolExpr()
		if not == nil || not.Boolop != pg.BoolExprType_NOT_EXPR || not.Location < 1 || !w.matchText(int(not.Location)-1, live) {
			return
		}
		forEachRangeVar(cond, func(rv *pg.RangeVar) { own[rv] = true })
	}
	targetLive := func(rv *pg.RangeVar) (*ttl.Rule, string) {
		_, r := w.protectedName(rv)
		if r == nil {
			return nil, ""
		}
		return r, r.LiveCondition(qualifier(rv), ttl.Now)
	}
	walkMessages(n.ProtoReflect(), func(m protoreflect.Message) bool {
		switch x := m.Interface().(type) {
		case *pg.JoinExpr:
			if rv := x.Larg.GetRangeVar(); rv != nil && isFilterJoin(x) {
				if _, r := w.protectedName(rv); r != nil {
					if live, ok := w.itemLive(r, rv); ok {
						// A filter join's ON is the condition alone.
						if not := x.Quals.GetBoolExpr(); not != nil && not.Boolop == pg.BoolExprType_NOT_EXPR {
							claim(x.Quals, r, live)
						}
					}
				}
			}
		case *pg.UpdateStmt:
			r, live := targetLive(x.Relation)
			claim(x.WhereClause, r, live)
		case *pg.DeleteStmt:
			r, live := targetLive(x.Relation)
			claim(x.WhereClause, r, live)
		case *pg.MergeStmt:
			r, live := targetLive(x.Relation)
			claim(x.JoinCondition, r, live)
		case *pg.InsertStmt:
			if oc := x.OnConflictClause; oc != nil {
				r, live := targetLive(x.Relation)
				claim(oc.WhereClause, r, live)
			}
			if x.WithClause != nil {
				for _, c := range x.WithClause.Ctes {
					cte := c.GetCommonTableExpr()
					var target *pg.RangeVar
					var returning []*pg.Node
					switch name := cte.GetCtename(); {
					case name == sidecarCTE && cte.GetCtequery().GetInsertStmt() != nil:
						ins := cte.GetCtequery().GetInsertStmt()
						target, returning = ins.Relation, ins.ReturningList
					case name == sidecarUpdateCTE && cte.GetCtequery().GetUpdateStmt() != nil:
						upd := cte.GetCtequery().GetUpdateStmt()
						target, returning = upd.Relation, upd.ReturningList
					default:
						continue
					}
					_, r := w.protectedName(target)
					reg := w.registryRule(x.Relation)
					if reg == nil || r == nil || r.RuleKind() != ttl.KindSidecar || reg.SidecarName() != r.SidecarName() ||
						!returnsOwnKeys(cte, returning, r.KeyColumns) {
						continue
					}
					// Only the keys the CTE's write returned are
					// registered: its new rows (and, upserted or
					// updated, live ones).
					keys := make([]string, len(r.KeyColumns))
					for k, c := range r.KeyColumns {
						keys[k] = ttl.QuoteIdent(c)
					}
					list := strings.Join(keys, ", ")
					sel := x.SelectStmt.GetSelectStmt()
					if sel != nil && len(sel.FromClause) == 1 && sel.WhereClause == nil && x.Relation.Location >= 0 &&
						sel.FromClause[0].GetRangeVar().GetRelname() == cte.GetCtename() && sel.FromClause[0].GetRangeVar().GetSchemaname() == "" &&
						w.matchText(int(x.Relation.Location), r.SidecarName()+" ("+list+", expires_at) SELECT "+list+", ") {
						own[x.Relation] = true
					}
				}
			}
		}
		return true
	})
	return own
}

// returnsOwnKeys reports that the CTE of a registration (the write's
// RETURNING list returning) gives the registry the written rows' own keys:
// the list ends with the key columns as bare names, and a column alias list
// of the CTE names them so in the same last places and nowhere before. Any
// other output named as a key then makes the registration's reference to it
// ambiguous, which PostgreSQL refuses.
func returnsOwnKeys(cte *pg.CommonTableExpr, returning []*pg.Node, keys []string) bool {
	n, k := len(returning), len(keys)
	if n < k {
		return false
	}
	for i, key := range keys {
		rt := returning[n-k+i].GetResTarget()
		f := rt.GetVal().GetColumnRef().GetFields()
		if rt == nil || rt.Name != "" || len(f) != 1 || f[0].GetString_().GetSval() != key {
			return false
		}
	}
	if aliases := cte.Aliascolnames; len(aliases) > 0 {
		m := len(aliases)
		if m < k {
			return false
		}
		for i, a := range aliases {
			name := a.GetString_().GetSval()
			isKey := slices.Contains(keys, name)
			if i < m-k && isKey || i >= m-k && name != keys[i-(m-k)] {
				return false
			}
		}
	}
	return true
}
