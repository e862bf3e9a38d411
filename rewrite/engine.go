package rewrite

// Options bounds what the rewriter accepts and caches.
type Options struct {
	// MaxStatementBytes rejects longer statements before parsing; 0 means 1 MiB.
	MaxStatementBytes int
	// MaxNestingDepth rejects statements nested deeper (parentheses) before
	// parsing; 0 means 1000.
	MaxNestingDepth int
	// CacheSize is the number of rewrites kept; 0 means 10000, negative
	// disables the cache.
	CacheSize int
}

// Rewriter rewrites statements for a fixed set of rules. It is safe for
// concurrent use.
type Rewriter struct {
	rules []Rule
	opts  Options
}

// New validates rules and returns a Rewriter.
func New(rules []Rule, opts Options) (*Rewriter, error) {
	for i := range rules {
		if err := rules[i].Validate(); err != nil {
			return nil, err
		}
	}
	return &Rewriter{rules: rules, opts: opts}, nil
}

// Rules returns the rules the Rewriter was built with.
func (rw *Rewriter) Rules() []Rule { return rw.rules }

// Rewrite returns the SQL to send for sql (one Query message's text, possibly
// several statements, or one Parse message's text) in session s, or an *Error.
// TODO(rewrite): stub, replaced by the real engine.
func (rw *Rewriter) Rewrite(sql string, s *Session) (Result, error) {
	return Result{SQL: sql}, nil
}
