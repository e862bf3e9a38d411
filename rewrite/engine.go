package rewrite

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	pg "github.com/pganalyze/pg_query_go/v6"
	"github.com/pganalyze/pg_query_go/v6/parser"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// Options bounds what the rewriter accepts and caches.
type Options struct {
	// MaxStatementBytes rejects longer statements before parsing; 0 means
	// DefaultMaxStatementBytes.
	MaxStatementBytes int
	// MaxNestingDepth rejects statements nested deeper (parentheses) before
	// parsing; 0 means DefaultMaxNestingDepth. Left-deep operator chains are bounded at four
	// times this. Raising it far risks a crash inside the C parser.
	MaxNestingDepth int
	// BypassRoles are the roles whose sessions are neither filtered nor
	// stamped (the proxy's bypass_roles): a SET ROLE in a text is followed
	// with them.
	BypassRoles []string
	// TrustedFunctions lists the functions that may be called although
	// their bodies read a TTL table inside the server (CatalogData.Functions),
	// where they see expired rows: "schema.name", or a bare name for every
	// function so named.
	TrustedFunctions []string
	// CacheSize is the number of rewrites kept; 0 means DefaultCacheSize, negative
	// disables the cache.
	CacheSize int
	// RequireRowSecurity (row_security: required) refuses every statement
	// on a TTL table with a row rule, or on one of its children, that the
	// session's catalog does not show protected by the live policy of
	// ttlproxy install --row-security (RowSecurity.Protects), and every
	// one when the catalog is unknown. Sessions of bypass roles are not
	// filtered and not refused.
	RequireRowSecurity bool
	// ClassifyState computes Result.StateFree for every text, parsing (once
	// per shape, cached) texts that name no TTL table as well: transaction
	// pooling hands a server whose last transaction was state-free to the
	// next client without a reset.
	ClassifyState bool
}

// Defaults of Options left zero.
const (
	// DefaultMaxStatementBytes: 1 MiB holds any hand-written or ORM statement
	// with room for large IN lists; longer texts are bulk loads, which
	// belong in COPY.
	DefaultMaxStatementBytes = 1 << 20
	// DefaultMaxNestingDepth keeps the C parser well inside its stack (it
	// recurses per parenthesis; the server's max_stack_depth is 2 MB).
	DefaultMaxNestingDepth = 1000
	// DefaultCacheSize is the number of rewrites kept.
	DefaultCacheSize = 10000
)

// Rewriter rewrites statements for a fixed set of rules. It is safe for
// concurrent use.
type Rewriter struct {
	rules []ttl.Rule
	opts  Options

	// byKey finds a rule by (schema, table); byName lists the schemas that
	// have a rule for a table name.
	byKey  map[relKey]*ttl.Rule
	byName map[string][]*ttl.Rule
	// byQualified finds a rule by QualifiedName (Catalog.Children values).
	byQualified map[string]*ttl.Rule
	// names lists the distinct TTL table names, sorted (cache key).
	names []string
	// registries finds a sidecar rule by its registry's (schema, table);
	// registryNames holds the registries' table names (protect.go).
	registries    map[relKey]*ttl.Rule
	registryNames map[string]struct{}
	// registryText finds the registries' names in a function body.
	registryText matcher
	// quick finds TTL and registry table names and U&" in raw text; tables
	// finds TTL table names only.
	quick  matcher
	tables matcher

	cache *cache
	// hasColumns: a rule has expiring columns (ttl.Rule.Columns), so every
	// statement is checked for them (columns.go) and views are looked for
	// in raw text.
	hasColumns bool
	// trusted indexes Options.TrustedFunctions, bypass Options.BypassRoles.
	trusted, bypass map[string]bool

	stats struct {
		shapeHits, shapeMismatches atomic.Uint64
	}
}

// Stats are counters of a Rewriter's cache since it was made.
type Stats struct {
	// ShapeHits counts statements rewritten from a shape template, without
	// the parser.
	ShapeHits uint64
	// ShapeMismatches counts shapes whose template a full rewrite of a
	// second statement contradicted; such shapes are cached by exact text
	// from then on. Anything but 0 is a bug in the rewriter.
	ShapeMismatches uint64
}

// Stats returns the Rewriter's counters.
func (rw *Rewriter) Stats() Stats {
	return Stats{ShapeHits: rw.stats.shapeHits.Load(), ShapeMismatches: rw.stats.shapeMismatches.Load()}
}

type relKey struct{ schema, table string }

// New validates rules and returns a Rewriter.
func New(rules []ttl.Rule, opts Options) (*Rewriter, error) {
	for i := range rules {
		if err := rules[i].Validate(); err != nil {
			return nil, err
		}
	}
	if opts.MaxStatementBytes <= 0 {
		opts.MaxStatementBytes = DefaultMaxStatementBytes
	}
	if opts.MaxNestingDepth <= 0 {
		opts.MaxNestingDepth = DefaultMaxNestingDepth
	}
	if opts.CacheSize == 0 {
		opts.CacheSize = DefaultCacheSize
	}
	rw := &Rewriter{
		trusted: trustedSet(opts.TrustedFunctions),
		bypass:  trustedSet(opts.BypassRoles),
		rules:   rules,
		opts:    opts,
		byKey:   make(map[relKey]*ttl.Rule, len(rules)),
		byName:  make(map[string][]*ttl.Rule, len(rules)),

		byQualified: make(map[string]*ttl.Rule, len(rules)),
	}
	for i := range rules {
		r := &rules[i]
		k := relKey{r.SchemaName(), r.Table}
		if _, dup := rw.byKey[k]; dup {
			return nil, fmt.Errorf("table %s has two rules", r.QualifiedName())
		}
		rw.byKey[k] = r
		rw.byQualified[r.QualifiedName()] = r
		if len(rw.byName[r.Table]) == 0 {
			rw.names = append(rw.names, r.Table)
		}
		rw.byName[r.Table] = append(rw.byName[r.Table], r)
		for _, m := range []*matcher{&rw.quick, &rw.tables} {
			m.add(r.Table, i)
			// A name holding a double quote is written with it doubled.
			if strings.Contains(r.Table, `"`) {
				m.add(strings.ReplaceAll(r.Table, `"`, `""`), i)
			}
		}
		if r.RuleKind() == ttl.KindSidecar && r.SidecarTable != "" {
			rw.quick.add(r.SidecarTable, i)
			if strings.Contains(r.SidecarTable, `"`) {
				rw.quick.add(strings.ReplaceAll(r.SidecarTable, `"`, `""`), i)
			}
			if rw.registries == nil {
				rw.registries, rw.registryNames = map[relKey]*ttl.Rule{}, map[string]struct{}{}
			}
			rw.registries[relKey{r.SidecarSchemaName(), r.SidecarTable}] = r
			rw.registryNames[r.SidecarTable] = struct{}{}
			rw.registryText.add(r.SidecarTable, i)
		}
		rw.hasColumns = rw.hasColumns || len(r.Columns) > 0
	}
	sortStrings(rw.names)
	rw.quick.add(`u&"`, -1)
	if opts.CacheSize > 0 {
		rw.cache = newCache(opts.CacheSize)
	}
	return rw, nil
}

// Options returns the Rewriter's options, defaults applied.
func (rw *Rewriter) Options() Options { return rw.opts }

// Rules returns the rules the Rewriter was built with.
func (rw *Rewriter) Rules() []ttl.Rule { return rw.rules }

// Rewrite returns the SQL to send for sql (one Query message's text, possibly
// several statements, or one Parse message's text) in the session state st
// (nil: the default session), or an *Error.
//
// A statement that cannot name a TTL table comes back unchanged without being
// parsed. Otherwise the text is parsed and edited in place: reads of a TTL
// table get a live-row filter at the table reference, UPDATE and DELETE get it
// in their WHERE, INSERT and UPDATE get the expiry stamped. Anything that
// touches a TTL table in a way the rewriter does not handle is rejected.
func (rw *Rewriter) Rewrite(sql string, st *State) (Result, error) {
	if st == nil {
		st = defaultState
	}
	s := &st.s
	if (s.Bypass && !rw.mayLeaveBypass(sql, s)) || len(rw.rules) == 0 || (rw.quick.find(sql) < 0 && !rw.mentionsCatalogName(sql, s) && !mentionsServerReader(sql) && !mentionsStatsView(sql)) {
		if len(rw.rules) == 0 || !mentionsTTLSetting(sql) {
			return Result{SQL: sql}, nil
		}
		return rw.settingsOnly(sql)
	}
	if len(sql) > rw.opts.MaxStatementBytes {
		return Result{}, errStatementTooLong(len(sql), rw.opts.MaxStatementBytes)
	}
	if rw.cache != nil && len(sql) <= maxCachedStatementBytes {
		return rw.cachedRewrite(sql, st)
	}
	if e := rw.checkNesting(sql); e != nil {
		return Result{}, e
	}
	lits, lexed := lexLiterals(sql)
	p := rw.rewriteParsed(sql, s, lits, lexed)
	return p.res, toError(p.err)
}

// MayNameTTL reports whether sql may name a TTL table, one of its
// children, a view or function reading one, or a function reading rows
// inside the server, under any reading of its bytes: the cheap check
// Rewrite starts with, which compares bytes, literals and comments
// included, with the names' (Unicode escapes count as a name). A text for
// which it is false comes back from Rewrite unchanged, however the server
// will read it.
func (rw *Rewriter) MayNameTTL(sql string, st *State) bool {
	if st == nil {
		st = defaultState
	}
	return len(rw.rules) > 0 && (rw.quick.find(sql) >= 0 || rw.mentionsCatalogName(sql, &st.s) || mentionsServerReader(sql))
}

// mayLeaveBypass reports whether sql, in a session bypassed through its
// current role only (a SET ROLE to a bypass role from a login that is not
// one), may leave the bypass: such a text is rewritten statement by
// statement (followStates). A login in BypassRoles stays bypassed whatever
// role it takes.
func (rw *Rewriter) mayLeaveBypass(sql string, s *Session) bool {
	return s.SessionUser != "" && !rw.bypass[s.SessionUser] && SessionStateMayChange(sql)
}

// checkNesting rejects a text nested too deeply to parse safely. It runs
// just before the parser: a cached rewrite needs no check, since a text of
// the same shape has the same brackets and operator chains outside its
// literals.
func (rw *Rewriter) checkNesting(sql string) *Error {
	if brackets, chain := nesting(sql); brackets > rw.opts.MaxNestingDepth || chain > chainFactor*rw.opts.MaxNestingDepth {
		return errNestedTooDeeply(rw.opts.MaxNestingDepth)
	}
	return nil
}

// parsed is the outcome of a full rewrite.
type parsed struct {
	res Result
	err *Error
	// literal reports that the outcome may depend on the value of a literal
	// of the text: the text is not a single SELECT, INSERT, UPDATE, DELETE
	// or MERGE (function bodies and SET values are read only in other
	// statements), or the ttlproxy.ttl check read a set_config argument.
	// Such a text must not share a rewrite with other texts of its shape
	// (shape.go).
	literal bool
	// anchored reports that slots holds where each literal given to
	// rewriteParsed stands in res.SQL (for a result that is not Rewritten,
	// the literals' own spans): no edit touched a literal's text.
	anchored bool
	slots    []span
}

// rewriteParsed is Rewrite after the cheap checks: parse, walk, splice,
// verify. The result is a pure function of sql and the session facts that
// the session fingerprint holds. lits are sql's literals when lexed
// (appendShape); they anchor the shape template and keep the rewrite blind to
// what the literals hold.
func (rw *Rewriter) rewriteParsed(sql string, s *Session, lits []literal, lexed bool) parsed {
	tree, err := pg.Parse(sql)
	if err != nil {
		res, e := rw.parseFailed(sql, err)
		return parsed{res: res, err: e, literal: true}
	}
	p := parsed{res: Result{Parsed: true}, literal: !literalBlind(tree.Stmts)}
	if mentionsTTLSetting(sql) || indexFold(sql, "set_config") >= 0 || indexFold(sql, "u&") >= 0 {
		for _, raw := range tree.Stmts {
			e, read := checkSettings(raw.Stmt)
			p.literal = p.literal || read
			if e != nil {
				p.err = e
				return p
			}
		}
	}
	states, e := rw.followStates(sql, tree.Stmts, s)
	if e != nil {
		p.err = e
		return p
	}
	w := newWalker(rw, sql, s, lits)
	for i, raw := range tree.Stmts {
		w.s = states[i]
		if w.s.Bypass {
			continue
		}
		w.rawStmt(raw)
		if w.err != nil {
			p.err = w.err
			return p
		}
	}
	p.literal = p.literal || w.literal
	p.res.SQL = sql
	if len(w.edits) > 0 {
		out, e := splice(sql, w.edits, len(tree.Stmts))
		if e != nil {
			p.err = e
			return p
		}
		p.res.SQL, p.res.Rewritten = out, true
	}
	if lexed {
		p.slots, p.anchored = mapLiterals(w.edits, lits)
	}
	return p
}

// splice applies edits to sql, a text of n statements. The output must
// parse, and into as many statements: a rewrite that broke the text or its
// statement boundaries is never sent. The parser's statement split checks
// that without building the tree again.
func splice(sql string, edits []edit, n int) (string, *Error) {
	out, ok := applyEdits(sql, edits)
	if !ok {
		return "", internalError("overlapping edits")
	}
	check, err := pg.SplitWithParser(out, false)
	if err != nil {
		return "", internalError("rewritten text does not parse: " + err.Error())
	}
	if len(check) != n {
		return "", internalError("rewritten text has a different number of statements")
	}
	return out, nil
}

// literalBlind reports whether the rewrite of stmts never reads the value of
// a literal in them: a single SELECT, INSERT, UPDATE, DELETE or MERGE, whose
// walk reads names, structure and locations only. A text of several
// statements is not: whether one of them may change the session state is
// judged from its words, literals included (followStates).
func literalBlind(stmts []*pg.RawStmt) bool {
	if len(stmts) != 1 {
		return false
	}
	switch stmts[0].GetStmt().GetNode().(type) {
	case *pg.Node_SelectStmt, *pg.Node_InsertStmt, *pg.Node_UpdateStmt, *pg.Node_DeleteStmt, *pg.Node_MergeStmt:
		return true
	}
	return false
}

// lexLiterals returns sql's literals, and whether the shape lexer could read
// sql (appendShape).
func lexLiterals(sql string) ([]literal, bool) {
	_, lits, ok := appendShape(nil, nil, sql)
	if !ok {
		return nil, false
	}
	return lits, true
}

// settingsOnly checks the ttlproxy.ttl settings of a text that names no TTL
// table (or of any text in a bypass session): it comes back unchanged or is
// rejected. Text over the parse limits, or that does not parse, passes: the
// limits protect the parser, and the server rejects what it cannot parse.
func (rw *Rewriter) settingsOnly(sql string) (Result, error) {
	if len(sql) > rw.opts.MaxStatementBytes {
		return Result{SQL: sql}, nil
	}
	if brackets, chain := nesting(sql); brackets > rw.opts.MaxNestingDepth || chain > chainFactor*rw.opts.MaxNestingDepth {
		return Result{SQL: sql}, nil
	}
	var key []byte
	if rw.cache != nil && len(sql) <= maxCachedStatementBytes {
		// The outcome depends on the text alone, not on the session.
		key = appendKeyHeader(nil, keySettings, 0)
		key = append(key, sql...)
		if c := rw.cache.get(key); c != nil {
			return c.exact()
		}
	}
	res := Result{SQL: sql, Parsed: true}
	var rerr *Error
	if tree, err := pg.Parse(sql); err == nil {
		var edits []edit
		for _, raw := range tree.Stmts {
			if rerr, _ = checkSettings(raw.Stmt); rerr != nil {
				res = Result{Parsed: true}
				break
			}
			if e, ok := showTTLEdit(sql, raw); ok {
				e.seq = len(edits)
				edits = append(edits, e)
			}
		}
		if rerr == nil && len(edits) > 0 {
			if out, ok := applyEdits(sql, edits); ok {
				res = Result{SQL: out, Rewritten: true, Parsed: true}
			} else {
				res, rerr = Result{Parsed: true}, internalError("overlapping edits")
			}
		}
	}
	if key != nil {
		rw.cache.put(key, &cached{res: res, err: rerr})
	}
	return res, toError(rerr)
}

// parseFailed handles text the parser rejects. If a TTL table name appears
// among its identifiers (not only in strings or comments) the text is
// rejected with the parser's message; otherwise it is passed through for the
// server to reject.
func (rw *Rewriter) parseFailed(sql string, perr error) (Result, *Error) {
	msg := perr.Error()
	var pe *parser.Error
	if errors.As(perr, &pe) {
		msg = pe.Message
	}
	if strings.Contains(msg, "recursion depth") || strings.Contains(msg, "stack depth") {
		return Result{Parsed: true}, errNestedTooDeeply(0)
	}
	res, serr := pg.Scan(sql)
	if serr == nil {
		mentions := false
		for _, t := range res.Tokens {
			switch t.Token {
			case pg.Token_SCONST, pg.Token_USCONST, pg.Token_BCONST, pg.Token_XCONST,
				pg.Token_SQL_COMMENT, pg.Token_C_COMMENT, pg.Token_ICONST, pg.Token_FCONST, pg.Token_PARAM:
				continue
			}
			if rw.quick.find(sql[t.Start:t.End]) >= 0 {
				mentions = true
				break
			}
		}
		if !mentions {
			return Result{SQL: sql, Parsed: true}, nil
		}
	}
	return Result{Parsed: true}, errSyntax(msg)
}

// sessionTTLUsable is called where a stamp is about to be written: when the
// session's ttlproxy.ttl holds a value the proxy could not read
// (Session.TTLInvalid), the statement fails closed instead of silently
// stamping with default_ttl.
func (w *walker) sessionTTLUsable(r *ttl.Rule) bool {
	if w.s.TTLInvalid == "" {
		return true
	}
	w.fail(errSessionTTLInvalid(r, w.s.TTLInvalid))
	return false
}

// ttlFor returns the lifetime stamped on INSERT into the rule's table in
// session s, and whether INSERT stamping applies.
func ttlFor(r *ttl.Rule, s *Session) (time.Duration, bool) {
	lifetime := r.DefaultTTL
	if s.TTL != nil {
		lifetime = *s.TTL
	}
	return lifetime, lifetime > 0 && r.StampColumn() != ""
}

// refreshFor returns the lifetime an UPDATE refreshes the expiry to, and
// whether refresh applies: the rule asks for it and has a default lifetime.
func refreshFor(r *ttl.Rule, s *Session) (time.Duration, bool) {
	if !r.RefreshOnUpdate || r.DefaultTTL <= 0 || r.StampColumn() == "" {
		return 0, false
	}
	lifetime := r.DefaultTTL
	if s.TTL != nil && *s.TTL > 0 {
		lifetime = *s.TTL
	}
	return lifetime, true
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}
