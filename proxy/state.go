package proxy

import (
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"

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
// (stateQuery) and replaces its rewrite.Session.
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

// stateColumns is the number of columns stateQuery returns: search_path,
// ttlproxy.ttl, current_user, session_user, and the 1-based positions in the
// server's TTL table name list of the names held by the session's temporary
// schema, comma-separated.
const stateColumns = 5

// buildStateQuery returns the statement that reads the session state.
// names are the TTL table names, inlined as literals (a simple Query has no
// parameters); the temporary schema is looked up only through the
// pg_class index on (relname, relnamespace).
func buildStateQuery(names []string) string {
	q := `SELECT pg_catalog.current_setting('search_path'), pg_catalog.current_setting('ttlproxy.ttl', true), current_user, session_user, `
	if len(names) == 0 {
		return q + `NULL::pg_catalog.text`
	}
	lits := make([]string, len(names))
	for i, n := range names {
		lits[i] = ttl.QuoteLiteral(n)
	}
	return q + `(SELECT pg_catalog.string_agg(u.i::pg_catalog.text, ',' ORDER BY u.i)
   FROM pg_catalog.unnest(ARRAY[` + strings.Join(lits, ", ") + `]::pg_catalog.text[]) WITH ORDINALITY AS u(n, i)
  WHERE EXISTS (SELECT FROM pg_catalog.pg_class c
                 WHERE c.relname = u.n::pg_catalog.name
                   AND c.relnamespace = pg_catalog.pg_my_temp_schema()))`
}

// Names of the proxy's own statement and portal: named, so that the
// client's unnamed statement and portal survive a refresh (a simple Query
// would drop the unnamed statement).
const (
	refreshStatement = "ttlproxy_state"
	refreshPortal    = "ttlproxy_state"
)

// encodeRefresh encodes stateQuery in the extended protocol, answered by
// CloseComplete, ParseComplete, BindComplete, DataRow, CommandComplete,
// CloseComplete twice and ReadyForQuery. The first Close clears a statement
// left by a refresh that failed halfway.
func encodeRefresh(query string) []byte {
	var b []byte
	var err error
	for _, m := range []pgproto3.FrontendMessage{
		&pgproto3.Close{ObjectType: 'S', Name: refreshStatement},
		&pgproto3.Parse{Name: refreshStatement, Query: query},
		&pgproto3.Bind{DestinationPortal: refreshPortal, PreparedStatement: refreshStatement},
		&pgproto3.Execute{Portal: refreshPortal},
		&pgproto3.Close{ObjectType: 'P', Name: refreshPortal},
		&pgproto3.Close{ObjectType: 'S', Name: refreshStatement},
		&pgproto3.Sync{},
	} {
		if b, err = m.Encode(b); err != nil {
			panic(err)
		}
	}
	return b
}

// tempSchema is the name under which a session's temporary schema appears
// in rewrite.Session.SearchPath and rewrite.Catalog.Schemas. PostgreSQL
// accepts it as an alias of the session's own pg_temp_N schema.
const tempSchema = "pg_temp"

// applyState returns a new rewrite.Session for one row of stateQuery.
// Sessions are never modified in place: the rewriter and its cache may still
// hold the previous one.
func (s *session) applyState(prev *rewrite.Session, row []string) *rewrite.Session {
	srv := s.srv
	ns := &rewrite.Session{Catalog: s.baseCatalog}
	if prev != nil {
		*ns = *prev
		ns.Catalog = s.baseCatalog
	}
	ns.SearchPath = parseSearchPath(row[0], row[2])
	ttl, err := ttl.ParseTTLSetting(row[1])
	ns.TTLInvalid = ""
	if err != nil {
		// Set where the proxy could not check it (ALTER ROLE … SET, a
		// parameter to set_config): statements that would stamp are
		// rejected until it is corrected.
		s.log.Warn("invalid ttlproxy.ttl: statements that stamp an expiry are rejected", "value", row[1], "err", err)
		ns.TTLInvalid = row[1]
	}
	ns.TTL = ttl
	ns.Bypass = srv.bypass[row[2]] || srv.bypass[row[3]]

	var shadows []string
	for _, f := range strings.Split(row[4], ",") {
		i, err := strconv.Atoi(f)
		if err == nil && i >= 1 && i <= len(srv.queries.names) {
			shadows = append(shadows, srv.queries.names[i-1])
		}
	}
	s.tempShadows = shadows
	if len(shadows) > 0 {
		// pg_temp is searched first for relations unless the path names it.
		if !slices.Contains(ns.SearchPath, tempSchema) {
			ns.SearchPath = append([]string{tempSchema}, ns.SearchPath...)
		}
		if cat := s.baseCatalog; cat != nil {
			ns.Catalog = withTempRelations(cat, shadows)
		}
	}
	// Statements rewritten under another fingerprint would rewrite
	// differently now: prepared ones are prepared again (prepared.go).
	if fp := srv.cfg.Rewriter.Fingerprint(ns); fp != s.stateFP {
		s.stateFP = fp
		s.gen++
	}
	return ns
}

// withTempRelations returns a copy of cat in which the temporary schema
// holds a relation of each of names. The maps of cat are not modified.
func withTempRelations(cat *rewrite.Catalog, names []string) *rewrite.Catalog {
	c := *cat
	c.Schemas = make(map[string][]string, len(cat.Schemas)+len(names))
	for k, v := range cat.Schemas {
		c.Schemas[k] = v
	}
	for _, n := range names {
		c.Schemas[n] = append([]string{tempSchema}, cat.Schemas[n]...)
	}
	return &c
}

// refreshResult is what serverToClient hands clientToServer after reading
// the answer to stateQuery.
type refreshResult struct {
	results [][][]string
	qerr    *pgproto3.ErrorResponse
	status  byte
	err     error
}

// syncState runs stateQuery if the session is dirty. Called by
// clientToServer before it announces a Query or a batch-starting Parse;
// awaitIdle must have returned first.
func (s *session) syncState() error {
	status := byte(s.txStatus.Load())
	if status == 'E' {
		return nil
	}
	res, err := s.ask(s.srv.queries.refresh, 1)
	if err != nil {
		return err
	}
	s.srv.metrics.sessionRefreshes.Inc()
	if res.qerr != nil || len(res.results) != 1 || len(res.results[0]) != 1 || len(res.results[0][0]) != stateColumns {
		msg := "unexpected result"
		if res.qerr != nil {
			msg = res.qerr.Code + ": " + res.qerr.Message
		}
		s.log.Warn("reading session state failed; will retry before the next statement", "err", msg)
		return nil
	}
	s.rw = s.applyState(s.rw, res.results[0][0])
	s.unseen = false
	s.log.Debug("session state", "search_path", s.rw.SearchPath, "bypass", s.rw.Bypass,
		"ttl_override", s.rw.TTL != nil, "temp_shadows", s.tempShadows, "tx_status", string(res.status))
	if res.status == 'I' {
		s.dirty = false
		return s.reprepare()
	}
	return nil
}

// ask sends msgs, which the server answers with n ReadyForQuery messages,
// and returns the last answer. serverToClient reads the answers (readState)
// instead of relaying them. Nothing else may be outstanding.
func (s *session) ask(msgs []byte, n int) (refreshResult, error) {
	s.refreshing.Store(int32(n))
	if err := s.write(msgs); err != nil {
		return refreshResult{}, err
	}
	if err := s.uw.Flush(); err != nil {
		return refreshResult{}, &writeError{err}
	}
	var res refreshResult
	for range n {
		select {
		case res = <-s.refreshed:
		case <-s.quit:
			return res, errQuit
		}
		if res.err != nil {
			// serverToClient has ended the session.
			return res, errQuit
		}
	}
	return res, nil
}

// readState is serverToClient's side of ask: it reads one answer up to its
// ReadyForQuery and hands it over.
func (s *session) readState() error {
	results, qerr, status, err := readResults(s)
	if err == nil {
		s.txStatus.Store(uint32(status))
		s.refreshing.Add(-1)
	} else {
		s.refreshing.Store(0)
	}
	s.refreshed <- refreshResult{results: results, qerr: qerr, status: status, err: err}
	return err
}

// awaitIdle waits until the server has answered every Query, FunctionCall
// and Sync sent so far. The caller must not have an extended-protocol batch
// open, whose ReadyForQuery waits for a Sync not yet sent.
func (s *session) awaitIdle() error {
	if s.pending.Load() <= 0 {
		return nil
	}
	if err := s.uw.Flush(); err != nil {
		return &writeError{err}
	}
	s.idleWait.Store(true)
	defer s.idleWait.Store(false)
	for {
		if v := s.pending.Load(); v <= 0 {
			return nil
		}
		select {
		case <-s.idle:
		case <-s.quit:
			return errQuit
		}
	}
}

// noteIdle wakes awaitIdle; called by serverToClient when a ReadyForQuery
// leaves nothing outstanding.
func (s *session) noteIdle() {
	if s.idleWait.Load() {
		select {
		case s.idle <- struct{}{}:
		default:
		}
	}
}

// noteStatement records that a statement is being forwarded: sql may change
// the session state. While a temporary table shadows a TTL table, any
// statement may drop or rename it (DROP, ALTER, ON COMMIT DROP at COMMIT),
// so every statement counts.
func (s *session) noteStatement(sql string) {
	if len(s.tempShadows) > 0 || rewrite.SessionStateMayChange(sql) {
		s.dirty, s.unseen = true, true
	}
	if len(s.prepared) > 0 && mayDeallocate(sql) {
		for _, p := range s.prepared {
			p.doubtful = true
		}
	}
}

// noteParse remembers prepared statements that may change the state, so
// that binding one marks the session dirty.
func (s *session) noteParse(name []byte, sql string) {
	if rewrite.SessionStateMayChange(sql) {
		if s.stateStmts == nil {
			s.stateStmts = make(map[string]struct{})
		}
		s.stateStmts[string(name)] = struct{}{}
	} else if len(s.stateStmts) > 0 {
		delete(s.stateStmts, string(name))
	}
}

// noteBind marks the session dirty when a Bind (whose body starts at body,
// possibly truncated to what is buffered) executes a statement that may
// change the state.
func (s *session) noteBind(body []byte) {
	if len(s.tempShadows) > 0 {
		s.dirty, s.unseen = true, true
		return
	}
	if len(s.stateStmts) == 0 {
		return
	}
	_, rest, ok := cstring(body)
	var name []byte
	if ok {
		name, _, ok = cstring(rest)
	}
	if !ok {
		// Names longer than the buffer: assume the worst.
		s.dirty, s.unseen = true, true
		return
	}
	if _, hit := s.stateStmts[string(name)]; hit {
		s.dirty, s.unseen = true, true
	}
}
