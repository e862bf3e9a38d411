package rewrite

import (
	pg "github.com/pganalyze/pg_query_go/v6"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// A simple Query may hold several statements. The server runs each under the
// session state the ones before it leave, so the text is rewritten
// statement by statement under that state (follow.go). A change whose
// effect the text does not determine (RESET, SET ROLE, DISCARD, a
// set_config that is not a plain literal call, a temporary table, a
// ROLLBACK to a state from before the text) cannot be followed: a text in
// which such a change comes before a statement that may name a TTL table is
// rejected.

// stmtText returns the text of one parsed statement.
func stmtText(sql string, raw *pg.RawStmt) string {
	start := int(raw.StmtLocation)
	end := len(sql)
	if raw.StmtLen > 0 {
		end = start + int(raw.StmtLen)
	}
	if start < 0 || start > end || end > len(sql) {
		return sql
	}
	return sql[start:end]
}

// stmtMayChangeState is SessionStateMayChange for one parsed statement. The
// keyword phrases (SET ROLE, SET SCHEMA, CREATE TEMP, …) also match column
// names (UPDATE t SET role = …), so a statement matched only by them counts
// when the tree confirms it: a SET, or a relation created temporary. Text
// naming pg_temp always counts.
func stmtMayChangeState(text string, n *pg.Node) bool {
	if n.GetVariableShowStmt() != nil {
		return false // SHOW reads a setting
	}
	if hasStateNeedle(text) {
		// A plain SELECT that only reads a setting (current_setting, the
		// SHOW rewrite) changes nothing; one calling set_config does.
		if sel := n.GetSelectStmt(); sel != nil && sel.IntoClause == nil && indexFold(text, "set_config") < 0 {
			return false
		}
		return true
	}
	if !roleOrTempPhrase(text) {
		return false
	}
	if indexFold(text, "pg_temp") >= 0 || n.GetVariableSetStmt() != nil {
		return true
	}
	temp := false
	forEachRangeVar(n, func(rv *pg.RangeVar) {
		if rv.Relpersistence == "t" {
			temp = true
		}
	})
	return temp
}

// namesTTL reports whether text is not cleared by the cheap identifier
// check, and describes the first name that holds it.
func (rw *Rewriter) namesTTL(text string, s *Session) (string, bool) {
	if k := rw.quick.find(text); k >= 0 {
		o := rw.quick.owner[k]
		if o < 0 {
			return `a name spelled with U&"…" escapes`, true
		}
		r := &rw.rules[o]
		if n := rw.quick.needles[k]; r.RuleKind() == ttl.KindSidecar && n == ttl.FoldIdent(r.SidecarTable) && n != ttl.FoldIdent(r.Table) {
			return "the registry of TTL table " + r.QualifiedName(), true
		}
		return "TTL table " + r.QualifiedName(), true
	}
	cat := s.Catalog
	if cat == nil || len(cat.childKeys) == 0 {
		return "", false
	}
	k := cat.children.find(text)
	if k < 0 {
		return "", false
	}
	n := cat.children.needles[k]
	for _, key := range cat.childKeys {
		for _, name := range childNames(key) {
			if ttl.FoldIdent(name) == n {
				return "TTL table " + key, true
			}
		}
	}
	return "a child of a TTL table", true
}
