package rewrite

import (
	"fmt"

	pg "github.com/pganalyze/pg_query_go/v6"

	"github.com/ttlproxy/ttlproxy/internal/sqlstate"
	"github.com/ttlproxy/ttlproxy/ttl"
)

// Resolutions that bind the server. The proxy resolves an unqualified
// relation name under the search_path, role and temporary relations it
// knows, which it reads back after the statements that visibly may change
// them (SessionStateMayChange). A function, procedure or trigger can change
// all three inside the server where the proxy does not see it
// (set_config('search_path', …), EXECUTE 'DROP TABLE pg_temp.…', EXECUTE
// 'CREATE TEMP VIEW …'), and so can an earlier statement of the same text.
// So every unqualified reference whose name is a TTL table's, a child's or a
// catalog view's, in any schema, is written with the schema the rewriter
// resolved it to: FROM sessions becomes FROM "public".sessions (the name
// sessions still binds the statement's column references), a temporary
// shadow becomes "pg_temp".sessions, another schema's table of the name
// "evil".sessions. Whatever the server's state, it reads the relation the
// proxy filtered, or fails. This holds in every statement whose table
// references the rewriter decides on (pinnable); a name it cannot place on
// the search path is refused rather than left to the server's resolution.
//
// Function calls are resolved by the server with their argument types,
// which the proxy does not know, so their schema cannot be pinned the same
// way: an unqualified call of a name that some function reading a TTL table
// has, in any schema, is refused unless every such function is trusted
// (leakyFunction).

// pinnable reports the statements whose relation references are pinned:
// those whose table references the rewriter reads, filters or stamps. DDL
// and utility statements name their tables as objects and keep their text.
func pinnable(n *pg.Node) bool {
	switch n.GetNode().(type) {
	case *pg.Node_SelectStmt, *pg.Node_InsertStmt, *pg.Node_UpdateStmt, *pg.Node_DeleteStmt,
		*pg.Node_MergeStmt, *pg.Node_ExplainStmt, *pg.Node_PrepareStmt, *pg.Node_DeclareCursorStmt,
		*pg.Node_CreateTableAsStmt, *pg.Node_ViewStmt, *pg.Node_CopyStmt:
		return true
	}
	return false
}

// pinSchema returns the schema to write before the unqualified relation
// name rel: known is false when no TTL table, child or catalog view has the
// name (nothing to pin), ok is false when the name is known but the
// rewriter cannot place it on the search path.
func (w *walker) pinSchema(rel string) (sch string, known, ok bool) {
	if w.isTTLName(rel) {
		sch, ok = w.resolve(rel)
		return sch, true, ok
	}
	cat := w.s.Catalog
	if cat == nil || !cat.viewNamed[rel] {
		return "", false, false
	}
	if key := w.resolveIn(rel, cat.viewKeys); key != "" {
		return key[:len(key)-len(rel)-1], true, true
	}
	return "", true, false
}

// indexNames fills the Catalog's name indexes of views and functions.
func (c *Catalog) indexNames() {
	c.viewNamed = make(map[string]bool, len(c.d.Views))
	for k := range c.d.Views {
		for _, name := range childNames(k) {
			c.viewNamed[name] = true
		}
	}
	c.functionsNamed = make(map[string][]string, len(c.d.Functions))
	for k := range c.d.Functions {
		names := childNames(k)
		for _, name := range names {
			c.functionsNamed[name] = append(c.functionsNamed[name], k)
		}
	}
	for _, keys := range c.functionsNamed {
		sortStrings(keys)
	}
}

// untrustedNamed returns the first function reading a TTL table named name,
// in any schema, that the operator has not trusted, or "".
func (w *walker) untrustedNamed(name string) string {
	if w.rw.trusted[name] {
		return ""
	}
	for _, key := range w.s.Catalog.functionsNamed[name] {
		if !w.rw.trusted[key] {
			return key
		}
	}
	return ""
}

// errUnresolvedName: an unqualified name of a TTL table, child or view that
// the rewriter cannot place on the search path (0A000).
func errUnresolvedName(rel string) *Error {
	return &Error{
		Code:    sqlstate.FeatureNotSupported,
		Message: fmt.Sprintf("ttlproxy: cannot tell which schema %s refers to under the current search path", ttl.QuoteIdent(rel)),
		Detail:  "The proxy writes the schema of every table it filters into the statement, so that a search_path or temporary table changed inside a function cannot make the server read another relation.",
		Hint:    "Qualify the table with its schema, or set search_path to include it.",
	}
}

// errUnqualifiedCall: an unqualified call of a name that a function
// reading a TTL table has in some schema (0A000).
func errUnqualifiedCall(name, key, reads string) *Error {
	return &Error{
		Code: sqlstate.FeatureNotSupported,
		Message: fmt.Sprintf("ttlproxy: refusing an unqualified call of %s: function %s reads %s inside the server, where expired rows are not filtered",
			ttl.QuoteIdent(name), key, reads),
		Detail: "The server resolves a function call by the search path and the argument types at run time; a search path changed inside a function could make the call reach that function.",
		Hint:   "Call the function with its schema, or list it in trusted_functions.",
	}
}
