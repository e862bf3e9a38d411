package rewrite

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
	// StateFree reports that every statement of the text provably leaves
	// no session state on the server (docs/design/pooling.md §9): it is
	// understood, calls only built-in functions, operators and casts that
	// change no state, and touches only relations that carry no user code
	// (CatalogData.State). False when unsure, and always false unless
	// Options.ClassifyState is set.
	StateFree bool
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
