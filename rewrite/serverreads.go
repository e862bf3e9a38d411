package rewrite

import (
	"fmt"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/ttlproxy/ttlproxy/internal/sqlstate"
)

// Built-in functions that read rows inside the server: PostgreSQL's XML
// export functions (query_to_xml, table_to_xml, schema_to_xml,
// database_to_xml and their _and_xmlschema forms, "Mapping Tables to XML"
// in the manual's chapter on XML functions), the text search functions
// that run a query given as text (ts_stat, the two-argument ts_rewrite),
// and the dblink extension's functions that run a query and return its
// rows (dblink, dblink_open, dblink_send_query), whose every text argument
// is checked, since the query's position depends on the overload.
// Their rows never pass through the proxy's filter, so a call is let
// through only when the text it reads names neither a TTL table, nor a
// view or function of the catalog that reads one, nor another such
// function: a constant query or table name, checked by the same cheap
// identifier check as a statement. A call with any other argument, and
// every call of the schema and database forms (they read every table), is
// rejected with 0A000. The check reads a literal's value, so such
// statements are cached by their exact text (walker.literal).

// serverReader says which argument names what a function reads.
type serverReader struct {
	// arg is the argument holding a query text or table name; -1: the
	// function reads every table; -2: every argument may hold the query.
	arg int
	// nargs, when not 0, is the only number of arguments with which the
	// function reads rows (ts_rewrite's three-argument form does not).
	nargs int
}

var serverReaders = map[string]serverReader{
	"query_to_xml":                  {arg: 0},
	"query_to_xml_and_xmlschema":    {arg: 0},
	"table_to_xml":                  {arg: 0},
	"table_to_xml_and_xmlschema":    {arg: 0},
	"schema_to_xml":                 {arg: -1},
	"schema_to_xml_and_xmlschema":   {arg: -1},
	"database_to_xml":               {arg: -1},
	"database_to_xml_and_xmlschema": {arg: -1},
	"ts_stat":                       {arg: 0},
	"ts_rewrite":                    {arg: 1, nargs: 2},
	"dblink":                        {arg: -2},
	"dblink_open":                   {arg: -2},
	"dblink_send_query":             {arg: -2},
}

// serverReaderNames finds the names of serverReaders in raw text.
var serverReaderNames matcher

func init() {
	for name := range serverReaders {
		serverReaderNames.add(name, 0)
	}
}

// mentionsServerReader reports that sql may call one of serverReaders.
func mentionsServerReader(sql string) bool { return serverReaderNames.find(sql) >= 0 }

// serverReads fails the walk when n calls one of serverReaders in a way
// that may read a TTL table.
func (w *walker) serverReads(n *pg.Node) {
	if n == nil || n.Node == nil || !mentionsServerReader(w.sql) {
		return
	}
	walkMessages(n.ProtoReflect(), func(m protoreflect.Message) bool {
		if w.err != nil || isLeaf(m) {
			return false
		}
		if f, ok := m.Interface().(*pg.FuncCall); ok && len(f.Funcname) > 0 {
			name := f.Funcname[len(f.Funcname)-1].GetString_().GetSval()
			if r, ok := serverReaders[name]; ok && (r.nargs == 0 || len(f.Args) == r.nargs) {
				w.literal = true
				if why := w.serverRead(r, f); why != "" {
					w.fail(errServerRead(name, why))
				}
			}
		}
		return true
	})
}

// serverRead returns why the call f may read a TTL table, or "".
func (w *walker) serverRead(r serverReader, f *pg.FuncCall) string {
	switch {
	case r.arg == -1:
		return "it reads every table of a schema or database"
	case r.arg == -2:
		for _, a := range f.Args {
			if why := w.serverReadText(a); why != "" {
				return why
			}
		}
		return ""
	case r.arg >= len(f.Args):
		return "" // the server rejects the call
	}
	return w.serverReadText(f.Args[r.arg])
}

// serverReadText returns why the argument a, a query text or table name,
// may name a TTL table, or "".
func (w *walker) serverReadText(a *pg.Node) string {
	if b := a.GetAConst(); b != nil && b.GetBoolval() != nil {
		return "" // dblink's fail_on_error
	}
	text, ok := constantText(a)
	if !ok {
		return "the query or table it reads is not a constant"
	}
	if what, ok := w.rw.namesTTL(text, w.s); ok {
		return "the text it reads names " + what
	}
	if w.rw.mentionsCatalogName(text, w.s) || mentionsServerReader(text) {
		return "the text it reads names a view or function that reads a TTL table"
	}
	if mentionsStatsView(text) {
		// Statistics list values of TTL tables (stats.go); inside the
		// server the proxy cannot filter them.
		return "the text it reads names a view of planner statistics"
	}
	return ""
}

// constantText returns the value of a string constant, cast or not.
func constantText(n *pg.Node) (string, bool) {
	for n.GetTypeCast() != nil {
		n = n.GetTypeCast().Arg
	}
	if s := n.GetAConst().GetSval(); s != nil {
		return s.GetSval(), true
	}
	return "", false
}

// errServerRead: a call of a built-in function that reads rows inside the
// server may read a TTL table (0A000).
func errServerRead(fn, why string) *Error {
	return &Error{
		Code:    sqlstate.FeatureNotSupported,
		Message: fmt.Sprintf("ttlproxy: cannot call %s through the proxy: %s, and its rows do not pass through the proxy's filter", fn, why),
		Hint:    "Read the table in the statement itself, or connect directly for maintenance.",
	}
}
