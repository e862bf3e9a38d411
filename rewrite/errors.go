package rewrite

import (
	"fmt"

	"github.com/ttlproxy/ttlproxy/internal/sqlstate"
	"github.com/ttlproxy/ttlproxy/ttl"
)

// The rejections the rewriter answers with, one constructor per condition.
// Every message starts with "ttlproxy: " and names the table and the
// construct; SQLSTATEs are PostgreSQL's own for the same condition
// (internal/sqlstate).

// errStatementTooLong: the text is longer than Options.MaxStatementBytes
// (54000, as the server's own statement size limit).
func errStatementTooLong(n, limit int) *Error {
	return &Error{
		Code:    sqlstate.ProgramLimitExceeded,
		Message: fmt.Sprintf("ttlproxy: statement of %d bytes is longer than the %d bytes the proxy parses", n, limit),
		Hint:    "Split the statement, or raise the proxy's statement size limit.",
	}
}

// errNestedTooDeeply: the text is nested beyond Options.MaxNestingDepth, or
// beyond the parser's own stack (limit 0) (54001, as the server's
// "stack depth limit exceeded").
func errNestedTooDeeply(limit int) *Error {
	msg := "ttlproxy: statement is nested too deeply for the proxy to parse"
	if limit > 0 {
		msg += fmt.Sprintf(" (limit %d)", limit)
	}
	return &Error{Code: sqlstate.StatementTooComplex, Message: msg}
}

// errSyntax: the text mentions a TTL table and does not parse (42601).
func errSyntax(msg string) *Error {
	return &Error{
		Code:    sqlstate.SyntaxError,
		Message: "ttlproxy: " + msg,
		Detail:  "The statement mentions a TTL table and the proxy cannot parse it.",
	}
}

// internalError: the rewriter lost its way in a statement it parsed (XX000);
// the statement is rejected, never forwarded.
func internalError(what string) *Error {
	return &Error{Code: sqlstate.InternalError, Message: "ttlproxy: internal rewrite error: " + what}
}

// errUnhandledPosition: a TTL table in a position of construct the walk does
// not filter (0A000).
func errUnhandledPosition(r *ttl.Rule, construct string) *Error {
	return &Error{
		Code:    sqlstate.FeatureNotSupported,
		Message: fmt.Sprintf("ttlproxy: cannot filter TTL table %s in %s: the proxy does not handle this position", r.QualifiedName(), construct),
	}
}

// errCannotFilterIn: a TTL table anywhere in a statement kind the rewriter
// refuses whole (0A000).
func errCannotFilterIn(r *ttl.Rule, construct string) *Error {
	return &Error{
		Code:    sqlstate.FeatureNotSupported,
		Message: fmt.Sprintf("ttlproxy: cannot filter TTL table %s in %s", r.QualifiedName(), construct),
	}
}

// errFunctionBody: a function or DO body names a TTL table (0A000).
func errFunctionBody(r *ttl.Rule, construct string) *Error {
	return &Error{
		Code:    sqlstate.FeatureNotSupported,
		Message: fmt.Sprintf("ttlproxy: cannot filter TTL table %s in %s: the proxy cannot see inside function bodies", r.QualifiedName(), construct),
		Hint:    "Run the statements of the body through the proxy one by one, or connect directly for maintenance.",
	}
}

// errStateChangeInString: a statement that may change the session state is
// followed in the same query string by one on a TTL table (0A000).
func errStateChangeInString(what string) *Error {
	return &Error{
		Code:    sqlstate.FeatureNotSupported,
		Message: fmt.Sprintf("ttlproxy: a statement that may change search_path, role or ttlproxy.ttl is followed by a statement on %s in the same query string; send them as separate queries", what),
		Detail:  "The proxy rewrites a query string under the session state from before it; a change made inside it applies to the statements after it only in the server.",
		Hint:    "Send the statement that changes the setting in its own query string.",
	}
}

// errPrepareUnresolved: a PREPARE names a TTL table name the search path
// does not place (0A000).
func errPrepareUnresolved(rel string) *Error {
	return &Error{
		Code:    sqlstate.FeatureNotSupported,
		Message: fmt.Sprintf("ttlproxy: cannot prepare a statement on %s: the proxy cannot tell which schema the name refers to under the current search path", ttl.QuoteIdent(rel)),
		Detail:  "EXECUTE analyses a prepared statement again under the search path of its time, so the proxy qualifies the TTL table names of a PREPARE with their schema.",
		Hint:    "Qualify the table with its schema in the PREPARE statement.",
	}
}

// errAliasColumnsUnknown: a column alias list on a TTL table whose columns
// the catalog does not know (0A000).
func errAliasColumnsUnknown(r *ttl.Rule, alias string) *Error {
	return &Error{
		Code:    sqlstate.FeatureNotSupported,
		Message: fmt.Sprintf("ttlproxy: cannot filter TTL table %s under the column alias list of %q: the proxy does not know the table's columns", r.QualifiedName(), alias),
		Hint:    "Refer to the table without a column alias list.",
	}
}

// stampHint is the advice for an INSERT of form that cannot be stamped.
func stampHint(r *ttl.Rule, form string) string {
	if form != "INSERT" {
		return "Give the INSERT a column list, e.g. INSERT (a, b, …) VALUES (…)."
	}
	return fmt.Sprintf("Give a column list, e.g. INSERT INTO %s (a, b, …) ….", r.Table)
}

// errStampWithoutColumnList: an INSERT of form without a column list whose
// stamp position the proxy cannot tell, for reason (0A000).
func errStampWithoutColumnList(r *ttl.Rule, form, reason string) *Error {
	return &Error{
		Code:    sqlstate.FeatureNotSupported,
		Message: fmt.Sprintf("ttlproxy: cannot stamp TTL table %s: %s without a column list %s", r.QualifiedName(), form, reason),
		Hint:    stampHint(r, form),
	}
}

// errStampNoColumn: the table has no stamp column col (0A000).
func errStampNoColumn(r *ttl.Rule, form, col string) *Error {
	return &Error{
		Code:    sqlstate.FeatureNotSupported,
		Message: fmt.Sprintf("ttlproxy: cannot stamp TTL table %s: it has no column %s", r.QualifiedName(), ttl.QuoteIdent(col)),
		Hint:    stampHint(r, form),
	}
}

// errSidecarForm: an INSERT or UPDATE form whose rows cannot be registered
// in the sidecar registry (0A000).
func errSidecarForm(r *ttl.Rule, form string) *Error {
	return &Error{
		Code:    sqlstate.FeatureNotSupported,
		Message: fmt.Sprintf("ttlproxy: cannot write to TTL table %s with %s: the sidecar expiry cannot be registered for this form", r.QualifiedName(), form),
		Hint:    fmt.Sprintf("Write to %s outside WITH, give RETURNING entries a name with AS, or write the registry row yourself.", r.Table),
	}
}

// ttlSettingHint is the advice for every ttlproxy.ttl rejection.
const ttlSettingHint = "Give a lifetime such as '90s', '10 minutes', '1 day', '00:10:00' or 'PT10M'; months and years are not accepted, and '' or RESET removes the override."

// errTTLSetting: a SET or set_config of ttlproxy.ttl the proxy cannot accept
// (22023, as the server's invalid_parameter_value).
func errTTLSetting(msg string) *Error {
	return &Error{Code: sqlstate.InvalidParameterValue, Message: "ttlproxy: " + msg, Hint: ttlSettingHint}
}

// errSessionTTLInvalid: a statement would stamp while the session's
// ttlproxy.ttl holds a value the proxy cannot read (22023).
func errSessionTTLInvalid(r *ttl.Rule, value string) *Error {
	return &Error{
		Code:    sqlstate.InvalidParameterValue,
		Message: fmt.Sprintf("ttlproxy: cannot stamp TTL table %s: the session's ttlproxy.ttl %q is not a valid lifetime", r.QualifiedName(), value),
		Hint:    ttlSettingHint,
	}
}

// errLeakyView: a view or materialized view reads a TTL table (or such a
// view, reads) inside the server, where the proxy cannot filter (0A000).
func errLeakyView(view, reads string, materialized bool) *Error {
	why := fmt.Sprintf("it reads %s inside the server, where the proxy cannot hide expired rows or values", reads)
	if materialized {
		why = fmt.Sprintf("its rows of %s were computed at its last refresh and may have expired since", reads)
	}
	return &Error{
		Code:    sqlstate.FeatureNotSupported,
		Message: fmt.Sprintf("ttlproxy: cannot read view %s through the proxy: %s", view, why),
		Hint:    "Read the table itself, create the view through the proxy (its definition is then filtered), or install the row security policies (ttlproxy install --row-security).",
	}
}

// errAncestor: a statement names parent, an inheritance parent of the TTL
// table desc, without ONLY (0A000).
func errAncestor(parent, desc string) *Error {
	return &Error{
		Code:    sqlstate.FeatureNotSupported,
		Message: fmt.Sprintf("ttlproxy: cannot use table %s through the proxy without ONLY: it holds the rows of its descendant %s, a TTL table, which the proxy cannot filter through it", parent, desc),
		Hint:    fmt.Sprintf("Name ONLY %s for its own rows, or name %s itself.", parent, desc),
	}
}

// errRegistry: a statement names the sidecar registry of r's table (42501):
// its rows are the table's expiries; reading them shows expired keys, and
// deleting or changing them brings expired rows back.
func errRegistry(r *ttl.Rule) *Error {
	return &Error{
		Code:    sqlstate.InsufficientPrivilege,
		Message: fmt.Sprintf("ttlproxy: cannot use table %s through the proxy: it is the expiry registry of TTL table %s", r.SidecarName(), r.QualifiedName()),
		Detail:  "The proxy reads and writes the registry itself; a client that read or wrote it could see expired keys or bring expired rows back.",
		Hint:    "Read and write the TTL table; maintain the registry from a bypass role or a direct connection.",
	}
}

// errProtectedDDL: DDL through the proxy would rename, move or reshape the
// relation name the rewrite depends on (42501).
func errProtectedDDL(name, what string) *Error {
	return &Error{
		Code:    sqlstate.InsufficientPrivilege,
		Message: fmt.Sprintf("ttlproxy: cannot alter %s through the proxy: %s would leave it read unfiltered until the proxy reads the catalog again", name, what),
		Hint:    "Run this DDL from a bypass role or a direct connection, and change the TTL rules to match; the proxy's DDL events then refresh every session's catalog.",
	}
}

// errAncestorBody: a DO or function body names parent, an inheritance
// parent of the TTL table desc (0A000): inside the server it reads desc's
// rows unfiltered.
func errAncestorBody(parent, desc, construct string) *Error {
	return &Error{
		Code:    sqlstate.FeatureNotSupported,
		Message: fmt.Sprintf("ttlproxy: cannot filter table %s in %s: it holds the rows of its descendant %s, a TTL table, and function bodies run inside the server", parent, construct, desc),
		Hint:    fmt.Sprintf("Read %s in the statement itself, with ONLY for its own rows.", parent),
	}
}

// errLeakyFunction: a function whose body reads a TTL table (or reads, a
// view or function that does) is called (0A000).
func errLeakyFunction(fn, reads string) *Error {
	return &Error{
		Code:    sqlstate.FeatureNotSupported,
		Message: fmt.Sprintf("ttlproxy: cannot call function %s through the proxy: its body reads %s, where the proxy cannot hide expired rows", fn, reads),
		Hint:    "List the function in trusted_functions if it may see expired rows, or read the table in the statement itself.",
	}
}

// errExpiringColumn: a statement names column, an expiring column of the
// rule's table, in the way how describes (a column reference, `*`, a
// whole-row reference, a write, a view) where the proxy cannot rewrite the
// read or write exactly (0A000).
func errExpiringColumn(r *ttl.Rule, column, how string) *Error {
	return &Error{
		Code: sqlstate.FeatureNotSupported,
		Message: fmt.Sprintf("ttlproxy: cannot serve expiring column %s of table %s: the statement names it through %s, where the proxy cannot hide expired values",
			ttl.QuoteIdent(column), r.QualifiedName(), how),
		Detail: "The proxy reads an expiring column wherever it can rewrite the read exactly; a statement that names it anywhere else is refused.",
		Hint:   "Qualify the column with its table's name or alias; list the columns instead of * over a join that merges them (USING, NATURAL); write the column with INSERT or UPDATE without FROM; or use a direct connection.",
	}
}

// errUnqualifiedColumn: a statement names column, an expiring column of the
// rule's table, without a qualifier at a query level where a FROM item has
// columns the proxy does not know, so that it cannot tell which item the
// name reads (0A000).
func errUnqualifiedColumn(r *ttl.Rule, column string) *Error {
	return &Error{
		Code: sqlstate.FeatureNotSupported,
		Message: fmt.Sprintf("ttlproxy: cannot serve expiring column %s of table %s: the statement names it without a qualifier beside a relation whose columns the proxy does not know",
			ttl.QuoteIdent(column), r.QualifiedName()),
		Detail: "The proxy knows the columns of its TTL tables only; an unqualified name could be another relation's column.",
		Hint:   "Qualify the column with its table's name or alias.",
	}
}

// errRowSecurityMissing: row_security is required and the TTL table (or
// child) named lacks the live policy (55000, object not in prerequisite
// state).
func errRowSecurityMissing(table, why string) *Error {
	return &Error{
		Code:    sqlstate.ObjectNotInPrerequisiteState,
		Message: fmt.Sprintf("ttlproxy: TTL table %s is not served: row_security is required and %s", table, why),
		Hint:    "Run ttlproxy install --row-security (ttlproxy check lists the tables it lacks), or set row_security: off.",
	}
}

// errStatsUnknownCatalog: a read of a statistics view when the session's
// catalog, which names the TTL tables' children, is unknown (0A000).
func errStatsUnknownCatalog(view string) *Error {
	return &Error{
		Code:    sqlstate.FeatureNotSupported,
		Message: "ttlproxy: cannot filter " + view + ": the proxy does not know the TTL tables' children yet",
		Hint:    "Try again: the proxy reads the catalog again shortly.",
	}
}

// errCannotFilterStats: a statistics view in a position the walk does not
// filter (0A000).
func errCannotFilterStats(view, construct string) *Error {
	return &Error{
		Code:    sqlstate.FeatureNotSupported,
		Message: fmt.Sprintf("ttlproxy: cannot filter %s in %s: it lists values of TTL tables", view, construct),
	}
}
