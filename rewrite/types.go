package rewrite

import (
	"sync/atomic"
	"time"
)

// Session is the per-connection state that changes what a statement means.
// The proxy owns it; the rewriter only reads it.
type Session struct {
	// SearchPath is the session's effective search_path, schemas in order,
	// "$user" already replaced; nil means ["public"].
	SearchPath []string
	// TTL overrides every rule's DefaultTTL for stamping (SET ttlproxy.ttl);
	// nil means no override.
	TTL *time.Duration
	// TTLInvalid holds the server's ttlproxy.ttl when it is set to text
	// ttl.ParseTTLSetting rejects (set where the proxy could not check it, e.g.
	// ALTER ROLE … SET or set_config with a parameter); statements that would
	// stamp are then rejected with SQLSTATE 22023. "" when valid or unset.
	TTLInvalid string
	// Bypass disables filtering and stamping (a role in bypass_roles).
	Bypass bool
	// Catalog describes the TTL tables in the session's database; nil when
	// unknown.
	Catalog *Catalog

	// memo holds the Session's fingerprint once Rewrite has computed it: do
	// not change a Session, or its Catalog, after giving it to Rewrite.
	memo atomic.Value
}

// Catalog is what the proxy learned from the server about the TTL tables.
//
// The rewrite cache keys on the catalog's content, not its identity: the
// schemas holding each TTL table name and each TTL table's column names, and
// for each child its rule, its column names and the schemas holding its
// name. An equal Catalog built for another session shares cache entries.
// Rewrite reads the maps without locking and remembers what they held in the
// Session (Session.memo), so replace a Catalog that sessions use, with a new
// Session, instead of modifying it.
type Catalog struct {
	// Tables by qualified name "schema.table".
	Tables map[string]*TableInfo
	// Schemas lists, for each relation name that is also the name of a TTL
	// table or of one of Children, every schema holding a relation of that
	// name.
	Schemas map[string][]string
	// Children maps each inheritance child and partition of a TTL table, at
	// any depth, "schema.table", to the qualified name (ttl.Rule.QualifiedName)
	// of the TTL table whose rule it follows. A child is filtered, stamped
	// and registered like its ancestor (same expiry column; a sidecar rule
	// keeps the ancestor's registry); Tables should hold its columns, which
	// may be ordered differently. The rewriter indexes a Children map by its
	// identity on first use: build a new map instead of changing one.
	Children map[string]string
}

// TableInfo describes one table.
type TableInfo struct {
	// Columns in attnum order, dropped columns omitted.
	Columns []Column
	// UniqueKeys lists the column sets of unique indexes and constraints.
	UniqueKeys [][]string
}

// Column is one table column.
type Column struct {
	Name string
	Type string // format_type() output, e.g. "timestamp with time zone"
}

// Result is a rewritten statement.
type Result struct {
	// SQL to send to the server: the input itself when Rewritten is false.
	SQL string
	// Rewritten reports that SQL differs from the input.
	Rewritten bool
	// Parsed reports that the statement went through the parser (it was not
	// cleared by the cheap identifier check).
	Parsed bool
	// CacheHit reports that the result came from the rewrite cache.
	CacheHit bool
}

// Error is a rejection: the statement touches a TTL table but cannot be made
// safe. The proxy returns it to the client as an ErrorResponse.
type Error struct {
	// Code is the SQLSTATE, e.g. "0A000".
	Code string
	// Message names the table and the construct.
	Message string
	Detail  string
	Hint    string
}

func (e *Error) Error() string { return e.Message }
