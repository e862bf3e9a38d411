package proxy

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// Reading the session state (state.go) from the server: clientToServer
// asks, with nothing outstanding, and serverToClient hands it the answer
// instead of relaying it to the client.

// Names of the proxy's own statement and portal: named, so that the
// client's unnamed statement and portal survive a refresh (a simple Query
// would drop the unnamed statement).
const (
	refreshStatement = "ttlproxy_state"
	refreshPortal    = "ttlproxy_state"
)

// encodeStatements encodes queries in the extended protocol, each through
// the proxy's own named statement and portal, up to one Sync: the server
// answers each with CloseComplete, ParseComplete, BindComplete, its
// DataRows, CommandComplete and CloseComplete twice, and the whole with one
// ReadyForQuery (readResults counts one result set per BindComplete). The
// first Close clears a statement left by an exchange that failed halfway.
func encodeStatements(queries ...string) []byte {
	var b []byte
	for _, q := range queries {
		b = appendStatement(b, q)
	}
	return endStatements(b)
}

// appendStatement appends query, with its text parameters, through the
// proxy's own named statement and portal: Close, Parse, Bind, Execute,
// Close (answered by one result set).
func appendStatement(b []byte, query string, params ...string) []byte {
	bind := &pgproto3.Bind{DestinationPortal: refreshPortal, PreparedStatement: refreshStatement}
	for _, p := range params {
		bind.Parameters = append(bind.Parameters, []byte(p))
	}
	var err error
	for _, m := range []pgproto3.FrontendMessage{
		&pgproto3.Close{ObjectType: 'S', Name: refreshStatement},
		&pgproto3.Parse{Name: refreshStatement, Query: query},
		bind,
		&pgproto3.Execute{Portal: refreshPortal},
		&pgproto3.Close{ObjectType: 'P', Name: refreshPortal},
	} {
		if b, err = m.Encode(b); err != nil {
			panic(err) // fixed shapes; a parameter is bounded by the client's own messages
		}
	}
	return b
}

// endStatements appends the Close of the proxy's statement and a Sync.
func endStatements(b []byte) []byte {
	var err error
	for _, m := range []pgproto3.FrontendMessage{&pgproto3.Close{ObjectType: 'S', Name: refreshStatement}, &pgproto3.Sync{}} {
		if b, err = m.Encode(b); err != nil {
			panic(err)
		}
	}
	return b
}

// syncState reads the session state (buildStateQuery) and applies it. Called by
// clientToServer before it announces a Query or a batch-starting Parse;
// awaitIdle must have returned first.
func (s *clientConn) syncState() error {
	status := byte(s.link.txStatus.Load())
	if status == 'E' {
		return nil
	}
	if s.st.catalogStale && status == 'I' {
		if len(s.rs.Load().rules) > 0 {
			return s.reloadCatalog()
		}
		s.st.setCatalog(nil, time.Now()) // no TTL tables, no catalog
	}
	res, err := s.link.ask(s.rs.Load().queries.refresh, 1, s.quit)
	if err != nil {
		return err
	}
	s.srv.metrics.SessionRefreshes.Inc()
	row, ok := stateResult(res.results, s.rs.Load().queries.names)
	if res.qerr != nil || len(res.results) != 1 || !ok {
		msg := "unexpected result"
		if res.qerr != nil {
			msg = res.qerr.Code + ": " + res.qerr.Message
		}
		s.log.Warn("reading session state failed; will retry before the next statement", "err", msg)
		return nil
	}
	return s.applyRefresh(row, res.status)
}

// rollbackMsgs ends a failed reload's transaction block: a simple Query,
// since the failed Execute left the reload's portal open until then.
var rollbackMsgs = appendQuery(nil, "ROLLBACK")

// reloadCatalog reads the state and the database's catalog again (after
// DDL through this session, or when its catalog is older than CatalogTTL),
// outside a transaction block, and shares the new catalog with the
// sessions that start later.
func (s *clientConn) reloadCatalog() error {
	if s.st.events == nil {
		// A session that started without TTL tables, under a reload that
		// brought some.
		s.st.events = s.srv.events.forDB(s.database)
	}
	gen := s.st.eventsGen()
	res, err := s.link.ask(s.rs.Load().queries.reload, 1, s.quit)
	if err != nil {
		return err
	}
	s.srv.metrics.SessionRefreshes.Inc()
	state, r, ok := catalogResults(res.results, true)
	if res.qerr != nil || !ok {
		msg := "unexpected result"
		if res.qerr != nil {
			msg = res.qerr.Code + ": " + res.qerr.Message
		}
		s.log.Warn("reading the catalog again failed; will retry when CatalogTTL has passed", "err", msg)
		// As after a failed first read (loadCatalog): the catalog kept is
		// retried when it ages, not before every statement.
		s.st.catalogStale, s.st.catalogAt = false, time.Now()
		if res.status == 'E' {
			// The reload's own transaction block failed: end it, so that
			// the client, which was idle, is idle again.
			if _, err := s.link.ask(rollbackMsgs, 1, s.quit); err != nil {
				return err
			}
		}
		return nil
	}
	cat, at := buildCatalog(s.log, r), time.Now()
	s.rs.Load().catalogs.put(s.database, cat, at, gen)
	s.rs.Load().noteRowSecurity(s.log, s.database, cat)
	s.st.setCatalog(cat, at)
	s.st.catalogGen = gen
	row, ok := stateResult(state, s.rs.Load().queries.names)
	if !ok {
		s.log.Warn("reading session state failed; will retry before the next statement", "err", "unexpected result")
		return nil
	}
	return s.applyRefresh(row, res.status)
}

// applyRefresh applies a state row read at transaction status status.
func (s *clientConn) applyRefresh(row stateRow, status byte) error {
	s.st.apply(&row)
	s.st.refreshed(status)
	if s.log.Enabled(context.Background(), slog.LevelDebug) {
		cur := s.st.cur.Session()
		s.log.Debug("session state", "search_path", cur.SearchPath, "bypass", cur.Bypass,
			"ttl_override", cur.TTL != nil, "temp_shadows", s.st.tempShadows, "tx_status", string(status))
	}
	if status == 'I' {
		return s.reprepare()
	}
	return nil
}

// ageCatalog bounds how stale a long-lived session's catalog gets: DDL made
// outside the proxy (a view over a TTL table created by a migration tool,
// say) reaches it before its next statement when DDL events flow
// (ddlevents.go: the generation check is one atomic load), and otherwise
// within CatalogTTL, as it reaches new sessions. When the session's
// snapshot is older than that, it takes a younger one another session read
// (no round trip), or, outside a transaction block, reads the catalog again
// before the statement (syncState). Inside a block it waits for the
// block's end: a reload there would cost a round trip per statement until
// then. An error ends the session (followDDL).
func (s *clientConn) ageCatalog() error {
	if !s.st.track {
		return nil
	}
	// In a failed block the server refuses every statement but ROLLBACK:
	// the one after it is checked.
	if d := s.st.events; d != nil && s.link.txStatus.Load() != 'E' {
		if gen := d.gen.Load(); gen != s.st.catalogGen {
			return s.followDDL(d, gen)
		}
	}
	ttl := s.srv.cfg.CatalogTTL
	if s.st.catalogStale || time.Since(s.st.catalogAt) <= ttl {
		return nil
	}
	if cat, at, gen := s.rs.Load().catalogs.get(s.database, ttl); cat != nil && at.After(s.st.catalogAt) {
		s.st.setCatalog(cat, at)
		s.st.catalogGen = gen
		return nil
	}
	if s.link.txStatus.Load() == 'I' {
		s.st.catalogStale, s.st.dirty = true, true
	}
	return nil
}
