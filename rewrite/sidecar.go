package rewrite

import (
	"fmt"
	"strings"
	"time"

	pg "github.com/pganalyze/pg_query_go/v6"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// sidecarTTL reports that INSERT into the rule's table must register an
// expiry in the sidecar registry: a sidecar rule with a lifetime to stamp.
func (w *walker) sidecarTTL(rule *ttl.Rule) bool {
	_, ok := sidecarTTLFor(rule, w.s)
	return ok
}

// sidecarTTLFor returns the lifetime registered for rows inserted into a
// sidecar rule's table in session s, and whether registration applies.
func sidecarTTLFor(r *ttl.Rule, s *Session) (time.Duration, bool) {
	if r.RuleKind() != ttl.KindSidecar {
		return 0, false
	}
	lifetime := r.DefaultTTL
	if s.TTL != nil {
		lifetime = *s.TTL
	}
	return lifetime, lifetime > 0
}

// rejectSidecarRegistration fails closed on an INSERT form whose rows the
// rewriter cannot register in the sidecar registry.
func (w *walker) rejectSidecarRegistration(rule *ttl.Rule, form string) {
	w.fail(errSidecarForm(rule, form))
}

// sidecarCTE names the data-modifying CTE that carries the rows of an INSERT
// into a sidecar table to the registry.
const sidecarCTE = "_ttl_ins"

// registerSidecar makes an INSERT into a sidecar table register the expiry
// of each row it inserts:
//
//	WITH _ttl_ins AS (<insert> RETURNING <keys>)
//	INSERT INTO <registry> (<keys>, expires_at) SELECT <keys>, <expiry> FROM _ttl_ins
//	ON CONFLICT (<keys>) DO UPDATE SET expires_at = EXCLUDED.expires_at
//
// The command tag stays INSERT 0 n: one registry row per inserted row. A
// registry row left behind by a deleted base row is overwritten, which needs
// a unique key on the registry's key columns. The INSERT's own WITH list is
// kept and _ttl_ins appended to it. Forms whose result or rows cannot be
// carried this way are rejected.
func (w *walker) registerSidecar(ins *pg.InsertStmt, rule *ttl.Rule, end int) {
	lifetime, ok := sidecarTTLFor(rule, w.s)
	if !ok || w.registered[ins] || !w.sessionTTLUsable(rule) {
		return
	}
	switch {
	case w.cteDepth > 0:
		w.rejectSidecarRegistration(rule, "INSERT in a WITH query")
		return
	case ins.OnConflictClause != nil && ins.OnConflictClause.Action == pg.OnConflictAction_ONCONFLICT_UPDATE && !rule.RefreshOnUpdate:
		// RETURNING cannot tell an inserted row from an updated one, whose
		// expiry must then stay as it is.
		w.rejectSidecarRegistration(rule, "INSERT … ON CONFLICT DO UPDATE without refresh_on_update")
		return
	}
	ts := w.tokens()
	i := ts.at(int(ins.Relation.Location))
	if i < 2 || ts.kind(i-1) != pg.Token_INTO || ts.kind(i-2) != pg.Token_INSERT {
		w.fail(internalError("cannot locate INSERT INTO"))
		return
	}
	w.registerRows(rule, sidecarCTE, i-2, i, end, ins.WithClause != nil, ins.Relation, false, ins.ReturningList, lifetime)
}

// sidecarUpdateCTE names the data-modifying CTE that carries the rows an
// UPDATE of a sidecar table refreshes to the registry.
const sidecarUpdateCTE = "_ttl_upd"

// sidecarRefreshFor returns the lifetime an UPDATE of a sidecar rule's
// table refreshes its rows to in session s, and whether refresh applies
// (refresh_on_update, as refreshFor for the other kinds).
func sidecarRefreshFor(r *ttl.Rule, s *Session) (time.Duration, bool) {
	if r.RuleKind() != ttl.KindSidecar || !r.RefreshOnUpdate || r.DefaultTTL <= 0 {
		return 0, false
	}
	lifetime := r.DefaultTTL
	if s.TTL != nil && *s.TTL > 0 {
		lifetime = *s.TTL
	}
	return lifetime, true
}

// refreshSidecar makes an UPDATE of a sidecar table with refresh_on_update
// register the new expiry of each row it updates (its WHERE holds the live
// condition, so only live rows), as registerSidecar does for an INSERT:
//
//	WITH _ttl_upd AS (<update> RETURNING <keys>)
//	INSERT INTO <registry> (<keys>, expires_at) SELECT <keys>, <expiry> FROM _ttl_upd
//	ON CONFLICT (<keys>) DO UPDATE SET expires_at = EXCLUDED.expires_at
//
// A row without a registry row (one that never expired) gets one, as a
// column rule's refresh stamps a NULL expiry. One registry row per updated
// row: the command tag reads INSERT 0 n for UPDATE n.
func (w *walker) refreshSidecar(u *pg.UpdateStmt, rule *ttl.Rule, end int) {
	lifetime, ok := sidecarRefreshFor(rule, w.s)
	if !ok || w.refreshed[u] || !w.sessionTTLUsable(rule) {
		return
	}
	if w.cteDepth > 0 {
		w.rejectSidecarRegistration(rule, "UPDATE in a WITH query under refresh_on_update")
		return
	}
	ts := w.tokens()
	i := ts.at(int(u.Relation.Location))
	kw := i - 1
	if ts.kind(kw) == pg.Token_ONLY {
		kw--
	}
	if i < 1 || ts.kind(kw) != pg.Token_UPDATE {
		w.fail(internalError("cannot locate UPDATE"))
		return
	}
	w.registerRows(rule, sidecarUpdateCTE, kw, i, end, u.WithClause != nil, u.Relation, len(u.FromClause) > 0, u.ReturningList, lifetime)
}

// registerRows wraps the write whose first token is kw (its target's token
// at) into the CTE cte, returning its rows' keys to an INSERT into the
// registry of rule with the expiry now() + lifetime; a RETURNING list of
// the write's is answered by the registration (sidecarAnswer). with says
// the write has a WITH clause of its own, which stays in front; joined
// says it has FROM items besides its target.
func (w *walker) registerRows(rule *ttl.Rule, cte string, kw, at, end int, with bool, target *pg.RangeVar, joined bool, returning []*pg.Node, lifetime time.Duration) {
	ts := w.tokens()
	last := ts.lastBefore(at, end)
	if last < at {
		w.fail(internalError("cannot locate the end of the statement"))
		return
	}
	keys := make([]string, len(rule.KeyColumns))
	for k, c := range rule.KeyColumns {
		keys[k] = ttl.QuoteIdent(c)
	}
	list := strings.Join(keys, ", ")
	head, returned, answer := cte, " RETURNING "+list, ""
	if len(returning) > 0 {
		names, ok := w.returningNames(rule, target, joined, returning)
		if !ok {
			return
		}
		head, returned, answer = sidecarAnswer(rule, cte, names, list)
	}
	open := "WITH " + head + " AS ("
	if with {
		open = ", " + head + " AS ("
	}
	w.insert(ts[kw].start, open)
	w.insert(ts[last].end, returned+") INSERT INTO "+rule.SidecarName()+" ("+list+", expires_at) SELECT "+
		list+", "+rule.ExpiryValue(lifetime)+" FROM "+cte+" ON CONFLICT ("+list+") DO UPDATE SET expires_at = EXCLUDED.expires_at"+answer)
}

// sidecarAnswer gives what registerSidecar writes for an INSERT … RETURNING
// whose output columns are named names: the CTE's name with a column alias
// list (_ttl_1 … _ttl_n for the client's columns, then the keys under
// their own names), the keys appended to the client's RETURNING list, and
// the registration's own RETURNING, which answers the client's list as
// written: each column read from the CTE's row of the registry row's keys,
// under its name, with its type and type modifier. The registration
// writes one registry row per inserted row, so its command tag and rows
// are the INSERT's.
//
//	WITH _ttl_ins (_ttl_1, …, <keys>) AS (<insert> RETURNING <list>, <keys>)
//	INSERT INTO <registry> … ON CONFLICT … DO UPDATE …
//	RETURNING (SELECT _ttl_ins._ttl_1 FROM _ttl_ins WHERE _ttl_ins.<key> = <registry>.<key>) AS <name>, …
func sidecarAnswer(rule *ttl.Rule, name string, names []string, keys string) (cte, returned, answer string) {
	var b strings.Builder
	b.WriteString(name + " (")
	for i := range names {
		fmt.Fprintf(&b, "_ttl_%d, ", i+1)
	}
	b.WriteString(keys + ")")
	cte = b.String()
	var match strings.Builder
	reg := ttl.QuoteIdent(rule.SidecarTable)
	for i, k := range rule.KeyColumns {
		if i > 0 {
			match.WriteString(" AND ")
		}
		q := ttl.QuoteIdent(k)
		match.WriteString(name + "." + q + " OPERATOR(pg_catalog.=) " + reg + "." + q)
	}
	b.Reset()
	b.WriteString(" RETURNING ")
	for i, col := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "(SELECT %s._ttl_%d FROM %s WHERE %s) AS %s", name, i+1, name, match.String(), ttl.QuoteIdent(col))
	}
	return cte, ", " + keys, b.String()
}

// returningNames returns the names of the output columns of the RETURNING
// list of a write to rule's table target, as PostgreSQL names them: `*`
// and `target.*` the catalog's columns. It fails the walk when a name is
// not known (no catalog for `*`, `*` over other FROM items (joined), an
// entry named after a scalar subquery or a keyword).
func (w *walker) returningNames(rule *ttl.Rule, target *pg.RangeVar, joined bool, list []*pg.Node) ([]string, bool) {
	var names []string
	for _, n := range list {
		rt := n.GetResTarget()
		switch {
		case rt == nil:
		case rt.Name != "":
			names = append(names, rt.Name)
			continue
		case hasStar(rt):
			if f := rt.Val.GetColumnRef().GetFields(); (len(f) == 1 && joined) || (len(f) == 2 && f[0].GetString_().GetSval() != qualifierName(target)) || len(f) > 2 {
				break
			}
			cols := w.columns(rule)
			if cols == nil {
				w.rejectSidecarRegistration(rule, "INSERT … RETURNING * without the table's columns from the catalog")
				return nil, false
			}
			for _, c := range cols {
				names = append(names, c.Name)
			}
			continue
		default:
			if name, ok := figureName(rt.Val); ok {
				names = append(names, name)
				continue
			}
		}
		w.rejectSidecarRegistration(rule, "INSERT … RETURNING an entry without AS whose name the proxy cannot tell")
		return nil, false
	}
	return names, true
}

// qualifierName is the name a write's own clauses call its target rv.
func qualifierName(rv *pg.RangeVar) string {
	if rv.Alias != nil {
		return rv.Alias.Aliasname
	}
	return rv.Relname
}

// markRegistered recognizes a statement registerSidecar wrote: the INSERT
// into a sidecar table in the CTE _ttl_ins of an INSERT into that table's
// registry. Rewriting it again must not register twice, nor reject the
// INSERT for sitting in a WITH query.
func (w *walker) markRegistered(outer *pg.InsertStmt) {
	if outer.WithClause == nil || outer.Relation == nil {
		return
	}
	for _, c := range outer.WithClause.Ctes {
		cte := c.GetCommonTableExpr()
		if upd := cte.GetCtequery().GetUpdateStmt(); upd != nil && cte.GetCtename() == sidecarUpdateCTE {
			if r := w.ruleFor(upd.Relation, nil); r != nil && r.RuleKind() == ttl.KindSidecar &&
				outer.Relation.Relname == r.SidecarTable && (outer.Relation.Schemaname == "" || outer.Relation.Schemaname == r.SidecarSchemaName()) {
				w.refreshed[upd] = true
			}
			continue
		}
		inner := cte.GetCtequery().GetInsertStmt()
		if cte.GetCtename() != sidecarCTE || inner == nil {
			continue
		}
		if r := w.ruleFor(inner.Relation, nil); r != nil && r.RuleKind() == ttl.KindSidecar &&
			outer.Relation.Relname == r.SidecarTable && (outer.Relation.Schemaname == "" || outer.Relation.Schemaname == r.SidecarSchemaName()) {
			w.registered[inner] = true
		}
	}
}
