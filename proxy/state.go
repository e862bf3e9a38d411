package proxy

import (
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ttlproxy/ttlproxy/internal/wire"
	"github.com/ttlproxy/ttlproxy/rewrite"
	"github.com/ttlproxy/ttlproxy/ttl"
)

// Session state tracking.
//
// What a statement means depends on settings the client can change at any
// time: search_path, ttlproxy.ttl, the current role, and temporary tables
// that shadow a TTL table name. PostgreSQL does not report search_path in
// ParameterStatus before version 18, and a SET may be LOCAL, rolled back,
// made by set_config(), RESET ALL or DISCARD ALL, so the proxy does not try
// to interpret statements: when one may have changed the state (a cheap
// text check, rewrite.SessionStateMayChange), the session is marked dirty,
// and before the next statement is rewritten the proxy asks the server
// (buildStateQuery) and builds a new rewrite.State.
//
// The question is asked where nothing is outstanding, so that the answer
// reflects every statement sent before: before a Query or the Parse that
// starts an extended-protocol batch, once every earlier Query and Sync has
// been answered by ReadyForQuery. A client that pipelines past a statement
// that may change the state is made to wait for the answers it is owed
// before its next statement is forwarded: simpler and safer than guessing
// the state between pipelined statements, and it costs a round trip only
// after such a statement.
//
// Outside a transaction block (status 'I') nothing can revert what the
// server said, so the session is clean again. Inside one (status 'T') a
// ROLLBACK or the end of a SET LOCAL may still revert it, so it stays dirty
// and every statement re-reads the state until the transaction ends. In a
// failed transaction (status 'E') the server rejects every statement but
// ROLLBACK, which needs no state, so nothing is asked.
//
// sessionState owns what the proxy knows about one session's state and
// offers the two pumps named hooks; refresh.go holds the exchange with the
// server that reads it, prepared.go what is done with prepared statements
// when it changes. Adding a setting the rewrite depends on touches
// stateRow (its column in the state query and its decoding), sessionState's
// apply, and rewrite.Session.

// stateRow is one row of the state query, decoded.
type stateRow struct {
	// SearchPath is current_setting('search_path').
	SearchPath string
	// TTL is current_setting('ttlproxy.ttl', true); "" when unset.
	TTL string
	// CurrentUser and SessionUser are the roles in force.
	CurrentUser, SessionUser string
	// ResetSearchPath and ResetTTL are what RESET restores
	// (pg_settings.reset_val; "" for an unset ttlproxy.ttl).
	ResetSearchPath, ResetTTL string
	// TempShadows are the TTL table names the session's temporary schema
	// holds a relation of.
	TempShadows []string
	// NoUsage are the schemas holding a relation named like a TTL table on
	// which current_user has no USAGE (rewrite.Session.NoUsage).
	NoUsage []string
}

// stateColumns are the state query's columns in order (stateRow); the last
// but one is the 1-based positions, in the TTL table name list, of the
// names held by the session's temporary schema, comma-separated; the last
// the schemas holding one of the names that current_user may not use, as
// a list of identifiers.
var stateColumns = [...]string{
	`pg_catalog.current_setting('search_path')`,
	`pg_catalog.current_setting('ttlproxy.ttl', true)`,
	`current_user`,
	`session_user`,
	`(SELECT s.reset_val FROM pg_catalog.pg_settings s WHERE s.name OPERATOR(pg_catalog.=) 'search_path')`,
	`COALESCE((SELECT s.reset_val FROM pg_catalog.pg_settings s WHERE s.name OPERATOR(pg_catalog.=) 'ttlproxy.ttl'), '')`,
	`TEMP_SHADOWS`,
	`NO_USAGE`,
}

// buildStateQuery returns the statement that reads the session state.
// names are the TTL table names, inlined as literals (a simple Query has no
// parameters); the temporary schema is looked up only through the
// pg_class index on (relname, relnamespace).
func buildStateQuery(names []string) string {
	shadows, noUsage := `NULL::pg_catalog.text`, `NULL::pg_catalog.text`
	if len(names) > 0 {
		lits := make([]string, len(names))
		for i, n := range names {
			lits[i] = ttl.QuoteLiteral(n)
		}
		shadows = `(SELECT pg_catalog.string_agg(u.i::pg_catalog.text, ',' ORDER BY u.i)
   FROM pg_catalog.unnest(ARRAY[` + strings.Join(lits, ", ") + `]::pg_catalog.text[]) WITH ORDINALITY AS u(n, i)
  WHERE EXISTS (SELECT FROM pg_catalog.pg_class c
                 WHERE c.relname OPERATOR(pg_catalog.=) u.n::pg_catalog.name
                   AND c.relnamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema()))`
		noUsage = `(SELECT pg_catalog.string_agg(pg_catalog.quote_ident(n.nspname), ',')
   FROM pg_catalog.pg_namespace n
  WHERE EXISTS (SELECT FROM pg_catalog.pg_class c
                 WHERE c.relname OPERATOR(pg_catalog.=) ANY (ARRAY[` + strings.Join(lits, ", ") + `]::pg_catalog.name[])
                   AND c.relnamespace OPERATOR(pg_catalog.=) n.oid)
    AND NOT pg_catalog.has_schema_privilege(n.oid, 'USAGE'))`
	}
	cols := stateColumns
	cols[len(cols)-2], cols[len(cols)-1] = shadows, noUsage
	return `SELECT ` + strings.Join(cols[:], ", ")
}

// decodeStateRow decodes one row of the state query; names are the TTL
// table names the query was built with. ok is false for a row of another
// shape.
func decodeStateRow(row []string, names []string) (stateRow, bool) {
	if len(row) != len(stateColumns) {
		return stateRow{}, false
	}
	r := stateRow{SearchPath: row[0], TTL: row[1], CurrentUser: row[2], SessionUser: row[3],
		ResetSearchPath: row[4], ResetTTL: row[5]}
	for _, f := range strings.Split(row[6], ",") {
		if i, err := strconv.Atoi(f); err == nil && i >= 1 && i <= len(names) {
			r.TempShadows = append(r.TempShadows, names[i-1])
		}
	}
	r.NoUsage = ttl.SplitIdentifiers(row[7])
	return r, true
}

// stateResult reports whether results (one Query's result sets) start with
// one state row, and decodes it.
func stateResult(results [][][]string, names []string) (stateRow, bool) {
	if len(results) == 0 || len(results[0]) != 1 {
		return stateRow{}, false
	}
	return decodeStateRow(results[0][0], names)
}

// tempSchema is the name under which a session's temporary schema appears
// in rewrite.Session.SearchPath and the catalog's schemas. PostgreSQL
// accepts it as an alias of the session's own pg_temp_N schema.
const tempSchema = "pg_temp"

// sessionState is what the proxy knows about one session's state, and the
// rewriter's input built from it. Owned by clientToServer (by
// serverToClient during startup).
type sessionState struct {
	log    *slog.Logger
	rw     *rewrite.Rewriter
	bypass map[string]bool
	// guard is the link's (redact.go), published set on it: the rewriter
	// and catalog the server pump reads to strip constraint DETAILs.
	guard     *atomic.Pointer[detailGuard]
	published *detailGuard
	// track is set at startup when statements are rewritten at all.
	track bool
	// cur is the rewriter's input; gen counts the changes of its
	// fingerprint; bypassing is cur's Bypass.
	cur       *rewrite.State
	gen       uint64
	bypassing bool
	// base is the database's catalog; shadowed is base with the temporary
	// schema holding shadows, built when shadows change.
	base        *rewrite.Catalog
	shadows     []string
	shadowed    *rewrite.Catalog
	tempShadows []string
	// dirty: the state may differ from cur, read it before the next
	// statement. unseen: a statement that may change the state was
	// forwarded since the state was last read. catalogStale: DDL went
	// through this session, read the catalog again too.
	dirty, unseen, catalogStale bool
	// catalogAt is when base was read (refresh.go's ageCatalog), and
	// catalogGen the generation of the database's DDL events it was read
	// at; events is nil without DDL events (ddlevents.go).
	catalogAt  time.Time
	catalogGen uint64
	events     *dbEvents
	// stateStmts are the prepared statements that may change the state,
	// and txStmts those that may end a transaction, with their texts.
	stateStmts, txStmts map[string]string
	// follower follows, until the state is read again, the changes the
	// statements forwarded since determine (rewrite.Follower): a pipeline
	// that sets search_path and then reads is rewritten under the new path.
	follower *rewrite.Follower
	// prepared holds the extended-protocol statements whose rewrite
	// depends on the state, by name (prepared.go).
	prepared map[string]*preparedStmt
}

func newSessionState(log *slog.Logger, rw *rewrite.Rewriter, bypass map[string]bool) sessionState {
	return sessionState{log: log, rw: rw, bypass: bypass, cur: rewrite.NewState(rewrite.Session{})}
}

// needsRefresh reports that the state must be read before the next
// statement is rewritten.
func (st *sessionState) needsRefresh() bool { return st.track && st.dirty }

// markDirty records that the state may have changed.
func (st *sessionState) markDirty() { st.dirty, st.unseen = true, true }

// eventsGen returns the database's DDL events generation, 0 without them:
// load it before reading the catalog.
func (st *sessionState) eventsGen() uint64 {
	if st.events == nil {
		return 0
	}
	return st.events.gen.Load()
}

// setCatalog sets the database's catalog (nil: unknown), read at at.
func (st *sessionState) setCatalog(cat *rewrite.Catalog, at time.Time) {
	st.base, st.shadows, st.shadowed, st.catalogStale = cat, nil, nil, false
	st.catalogAt = at
	st.apply(nil)
}

// apply replaces the rewriter's input with one built from row (nil: keep
// the last settings, e.g. for a new catalog) and reports whether its
// fingerprint changed; a change bumps gen, so that statements prepared for
// the old one are prepared again (prepared.go).
func (st *sessionState) apply(row *stateRow) bool {
	ns := st.cur.Session()
	ns.Catalog = st.base
	if row != nil {
		ns.SearchPath = ttl.ParseSearchPath(row.SearchPath, row.CurrentUser)
		lifetime, err := ttl.ParseTTLSetting(row.TTL)
		ns.TTL, ns.TTLInvalid = lifetime, ""
		if err != nil {
			// Set where the proxy could not check it (ALTER ROLE … SET, a
			// parameter to set_config): statements that would stamp are
			// rejected until it is corrected.
			st.log.Warn("invalid ttlproxy.ttl: statements that stamp an expiry are rejected", "value", row.TTL, "err", err)
			ns.TTLInvalid = row.TTL
		}
		ns.Bypass = st.bypass[row.CurrentUser] || st.bypass[row.SessionUser]
		ns.SearchPathSetting, ns.CurrentUser, ns.SessionUser = row.SearchPath, row.CurrentUser, row.SessionUser
		ns.ResetSearchPath, ns.ResetTTL, ns.ResetKnown = row.ResetSearchPath, row.ResetTTL, true
		st.tempShadows = row.TempShadows
		ns.NoUsage, ns.UsageUnknown = row.NoUsage, false
		st.unseen, st.follower = false, nil
	}
	if len(st.tempShadows) > 0 {
		// pg_temp is searched first for relations unless the path names it.
		if !slices.Contains(ns.SearchPath, tempSchema) {
			ns.SearchPath = append([]string{tempSchema}, ns.SearchPath...)
		}
		if st.base != nil {
			if !slices.Equal(st.shadows, st.tempShadows) || st.shadowed == nil {
				st.shadows, st.shadowed = slices.Clone(st.tempShadows), withTempRelations(st.base, st.tempShadows)
			}
			ns.Catalog = st.shadowed
		}
	}
	next := rewrite.NewState(ns)
	if g := (detailGuard{rw: st.rw, cat: st.base, bypass: ns.Bypass}); st.guard != nil && (st.published == nil || *st.published != g) {
		st.published = &g
		st.guard.Store(st.published)
	}
	changed := next.Fingerprint() != st.cur.Fingerprint()
	if changed {
		st.gen++
	}
	st.cur, st.bypassing = next, ns.Bypass
	return changed
}

// withTempRelations returns cat with the temporary schema holding a
// relation of each of names.
func withTempRelations(cat *rewrite.Catalog, names []string) *rewrite.Catalog {
	d := cat.Data()
	if d.Schemas == nil {
		d.Schemas = map[string][]string{}
	}
	for _, n := range names {
		d.Schemas[n] = append([]string{tempSchema}, d.Schemas[n]...)
	}
	return rewrite.NewCatalog(d)
}

// refreshed records a state read at transaction status status: outside a
// transaction block nothing can revert it, so the session is clean.
func (st *sessionState) refreshed(status byte) {
	if status == 'I' && !st.catalogStale {
		st.dirty = false
	}
}

// sensitive reports whether the rewrite of a statement may differ in
// another session state: it names a TTL table, or the rewriter was bypassed.
func (st *sessionState) sensitive(res rewrite.Result) bool {
	return res.Parsed || res.Rewritten || st.bypassing
}

// onQuery is the hook for a Query whose text sql was rewritten into res,
// err; it returns the error to answer instead (a statement on a TTL table
// pipelined after a possible state change is rejected).
func (st *sessionState) onQuery(sql string, res rewrite.Result, err error) error {
	if !st.track {
		return err
	}
	if err == nil && st.unseen && st.sensitive(res) && !isTransactionControl(sql) {
		err = errStalePipeline
	}
	st.onStatement(sql)
	return err
}

// onParse is the hook for a Parse of statement name (text sql, parameter
// types oids as raw big-endian) rewritten into res, err; it returns the
// error to answer instead.
func (st *sessionState) onParse(name []byte, sql string, oids []byte, res rewrite.Result, err error) error {
	if !st.track {
		return err
	}
	st.stateStmts = remember(st.stateStmts, name, sql, rewrite.SessionStateMayChange(sql))
	st.txStmts = remember(st.txStmts, name, sql, mayEndTransaction(sql))
	if st.base != nil && mayChangeCatalog(sql) {
		// Read before the next statement; the statements pipelined behind
		// this one are rewritten under the old catalog.
		st.catalogStale, st.dirty = true, true
	}
	plain := !st.sensitive(res)
	if err == nil && !plain && st.unseen && !isTransactionControl(sql) {
		err = errStalePipeline
	}
	st.notePrepared(name, sql, oids, err == nil, plain)
	return err
}

// onStatement records that a statement is being forwarded: sql may change
// the session state. While a temporary table shadows a TTL table, any
// statement may drop or rename it (DROP, ALTER, ON COMMIT DROP at COMMIT),
// so every statement counts.
func (st *sessionState) onStatement(sql string) {
	if len(st.tempShadows) > 0 {
		st.markDirty()
	}
	switch {
	case rewrite.SessionStateMayChange(sql):
		st.dirty = true
		st.follow(sql)
	case st.following():
		// A COMMIT or ROLLBACK may undo a followed change.
		st.follow(sql)
	}
	if st.base != nil && mayChangeCatalog(sql) {
		// Read before the next statement; the statements pipelined behind
		// this one are rewritten under the old catalog.
		st.catalogStale, st.dirty = true, true
	}
	if len(st.prepared) > 0 && mayDeallocate(sql) {
		for _, p := range st.prepared {
			p.doubtful = true
		}
	}
}

// follow records that sql is about to run while the state is followed: a
// change the text determines moves the rewriter's input (and the
// generation) on; any other makes the statements pipelined behind it
// rejected (unseen) until the state is read again.
func (st *sessionState) follow(sql string) {
	if st.unseen {
		return
	}
	if st.follower == nil {
		st.follower = st.rw.NewFollower(st.cur)
	}
	next := st.follower.Statement(sql)
	if next == nil {
		st.unseen = true
		return
	}
	if next.Fingerprint() != st.cur.Fingerprint() {
		st.cur = next
		st.gen++
	}
}

// following reports that forwarded statements are being followed.
func (st *sessionState) following() bool { return st.follower != nil && !st.unseen }

// remember sets or clears name's text in m by keep, allocating m when
// needed.
func remember(m map[string]string, name []byte, sql string, keep bool) map[string]string {
	if keep {
		if m == nil {
			m = make(map[string]string)
		}
		m[string(name)] = sql
	} else if len(m) > 0 {
		delete(m, string(name))
	}
	return m
}

// mayEndTransaction reports whether sql may end a transaction block, which
// undoes SET LOCAL (and, rolled back, SET): COMMIT, END, ABORT, ROLLBACK,
// PREPARE TRANSACTION. A cheap word check that errs toward yes.
func mayEndTransaction(sql string) bool {
	return containsFold(sql, "commit") || containsFold(sql, "end") || containsFold(sql, "abort") ||
		containsFold(sql, "rollback") || containsFold(sql, "prepare")
}

// isTransactionControl reports a text that is one statement led by BEGIN,
// START, COMMIT, END, ABORT, ROLLBACK, SAVEPOINT or RELEASE: it reads no
// table, so it is safe in any session state, and a session whose state is
// not yet known must still be able to end a failed block with it (the
// state is read at the ReadyForQuery that follows). A text with anything
// after a semicolon is not.
func isTransactionControl(sql string) bool {
	i := skipSpaceAndComments(sql, 0)
	j := i
	for j < len(sql) && isWordByte(sql[j]) {
		j++
	}
	switch strings.ToLower(sql[i:j]) {
	case "begin", "start", "commit", "end", "abort", "rollback", "savepoint", "release":
	default:
		return false
	}
	if k := strings.IndexByte(sql[j:], ';'); k >= 0 {
		return skipSpaceAndComments(sql, j+k+1) == len(sql)
	}
	return true
}

// skipSpaceAndComments returns the index of the first byte of sql at or
// after i that is not white space or inside a -- or /* */ comment.
func skipSpaceAndComments(sql string, i int) int {
	for i < len(sql) {
		switch {
		case sql[i] == ' ' || sql[i] == '\t' || sql[i] == '\n' || sql[i] == '\r' || sql[i] == '\f':
			i++
		case strings.HasPrefix(sql[i:], "--"):
			for i < len(sql) && sql[i] != '\n' {
				i++
			}
		case strings.HasPrefix(sql[i:], "/*"):
			end := strings.Index(sql[i+2:], "*/")
			if end < 0 {
				return len(sql)
			}
			i += 2 + end + 2
		default:
			return i
		}
	}
	return i
}

// mayChangeCatalog reports whether sql may be DDL that changes what the
// catalog snapshot holds: a view, function, child or column of a TTL table.
func mayChangeCatalog(sql string) bool {
	return containsFold(sql, "create") || containsFold(sql, "alter") || containsFold(sql, "drop")
}

// onFunctionCall is the hook for a FunctionCall, which may be set_config()
// by OID.
func (st *sessionState) onFunctionCall() {
	if st.track {
		st.markDirty()
	}
}

// watchesBindClose reports whether Bind and Close messages must be shown
// to onBind and onClose.
func (st *sessionState) watchesBindClose() bool {
	return st.track && (len(st.prepared) > 0 || len(st.stateStmts) > 0 || len(st.tempShadows) > 0 || st.following())
}

// onBind is the hook for a Bind (body possibly truncated to what is
// buffered): it returns the rejection for a statement that must not run in
// the current state, or marks the session dirty when the statement may
// change the state.
func (st *sessionState) onBind(body []byte) error {
	if len(st.prepared) > 0 {
		if stale := st.staleBind(body); stale != nil {
			return stale
		}
	}
	if len(st.tempShadows) > 0 {
		st.markDirty()
		return nil
	}
	if len(st.stateStmts) == 0 && !st.following() {
		return nil
	}
	name, ok := bindStatement(body)
	if !ok {
		// Names longer than the buffer: assume the worst.
		st.markDirty()
		return nil
	}
	if sql, hit := st.stateStmts[string(name)]; hit {
		st.dirty = true
		st.follow(sql)
	} else if sql, hit := st.txStmts[string(name)]; hit && st.following() {
		st.follow(sql)
	}
	return nil
}

// bindStatement returns the statement name of a Bind body.
func bindStatement(body []byte) ([]byte, bool) {
	_, rest, ok := wire.CString(body)
	if !ok {
		return nil, false
	}
	name, _, ok := wire.CString(rest)
	return name, ok
}
