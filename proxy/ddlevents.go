package proxy

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ttlproxy/ttlproxy/internal/wire"
	"github.com/ttlproxy/ttlproxy/rewrite"
	"github.com/ttlproxy/ttlproxy/ttl"
)

// DDL events: DDL made outside the proxy reaches every session before its
// next statement.
//
// `ttlproxy install --ddl-events` puts an event trigger into the database
// that calls pg_notify(DDLEventsChannel, …) at the end of every DDL command
// (ddl_command_end and sql_drop). Per database its sessions use, the proxy
// keeps two connections of its own, with Config.DDLEventsDSN's login: one
// LISTENs (listen), the other reads the catalog (readLoop). A notification
// bumps the database's generation; the reader then reads the catalog (at
// most once per ddlDebounce, however many notifications arrived) and
// publishes the snapshot tagged with the generation it read at. A session
// compares its snapshot's tag with the generation before each statement (an
// atomic load, ageCatalog); when they differ it takes the reader's next
// snapshot, also inside a transaction block: the reader's connection sees
// committed DDL whatever the client's isolation level, and the client's
// transaction is not touched.
//
// PostgreSQL delivers a notification only once the notifying transaction is
// visible as committed (asyncQueueProcessPageEntries skips entries of
// transactions still in progress), so a read started after it sees the DDL.
// Notifications sent while the listening connection is down are lost: until
// it is back, snapshots age by CatalogTTL as without DDL events, and when it
// is back every snapshot is stale (the generation is bumped).

// DDLEventsChannel is the channel the event trigger of `ttlproxy install
// --ddl-events` notifies.
const DDLEventsChannel = "ttlproxy_ddl"

// DDLEventTriggers are the names of the event triggers that install
// creates, on ddl_command_end and on sql_drop.
var DDLEventTriggers = [2]string{"ttlproxy_ddl_command_end", "ttlproxy_sql_drop"}

const (
	// ddlDebounce spaces the reader's catalog reads of one database: a
	// migration's burst of DDL costs one read per period, not one per
	// statement.
	ddlDebounce = 100 * time.Millisecond
	// ddlWait bounds how long a statement waits for a fresh snapshot.
	ddlWait = 5 * time.Second
	// ddlHeartbeat is how often the reader checks that the event triggers
	// are still installed and enabled and the listening backend is alive:
	// DROP and ALTER EVENT TRIGGER fire no event trigger.
	ddlHeartbeat = time.Second
	// ddlRetryMax caps the wait between attempts to (re)connect.
	ddlRetryMax = 10 * time.Second
	// DDLListenerApplicationName names the listening connections in
	// pg_stat_activity (ttlproxy check counts them);
	// ddlReaderApplicationName the catalog readers.
	DDLListenerApplicationName = "ttlproxy ddl events"
	ddlReaderApplicationName   = "ttlproxy catalog"
	// ddlProbe is the payload of ttlproxy check's probe (install.ProbePayload).
	ddlProbe = "probe"
)

// installedQuery reports whether both event triggers are installed and
// enabled (ALWAYS, as installed, or ORIGIN; REPLICA fires only under
// session_replication_role = replica), and which release the server is.
var installedQuery = `SELECT (SELECT pg_catalog.count(*) FROM pg_catalog.pg_event_trigger
         WHERE evtname IN ('` + DDLEventTriggers[0] + `', '` + DDLEventTriggers[1] + `') AND evtenabled IN ('O', 'A')) OPERATOR(pg_catalog.=) 2,
       pg_catalog.version()`

// ddlEvents holds the Server's per-database listeners.
type ddlEvents struct {
	srv *Server
	// conf is the login the connections use (database replaced); nil
	// without Config.DDLEventsDSN.
	conf *pgx.ConnConfig

	mu      sync.Mutex
	ctx     context.Context // Serve's; nil before Serve and after stop
	cancel  context.CancelFunc
	dbs     map[string]*dbEvents
	stopped bool
	wg      sync.WaitGroup
}

func newDDLEvents(srv *Server, dsn string) (*ddlEvents, error) {
	e := &ddlEvents{srv: srv, dbs: map[string]*dbEvents{}}
	if dsn == "" {
		return e, nil
	}
	conf, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgconn's parse errors do not repeat the password.
		return nil, fmt.Errorf("proxy: DDLEventsDSN: %w", err)
	}
	// A catalog read waiting for a lock (pg_get_viewdef locks the tables a
	// view reads) gives up instead of holding statements back.
	conf.RuntimeParams["lock_timeout"] = "2s"
	conf.RuntimeParams["statement_timeout"] = "10s"
	// The proxy's own questions mean the same whatever search_path the
	// login's role or database sets.
	conf.RuntimeParams["search_path"] = "pg_catalog"
	conf.DialFunc = srv.cfg.UpstreamTCP.DialFunc()
	e.conf = conf
	return e, nil
}

// start lets listeners run until stop, which it returns: stop ends them
// and waits. ctx gives them its values only.
func (e *ddlEvents) start(ctx context.Context) (stop func()) {
	e.mu.Lock()
	// Not cancelled with ctx: the sessions draining after it still follow
	// DDL; Serve calls stop once they are gone.
	e.ctx, e.cancel = context.WithCancel(context.WithoutCancel(ctx))
	e.mu.Unlock()
	return func() {
		e.mu.Lock()
		e.stopped = true
		e.cancel()
		e.mu.Unlock()
		e.wg.Wait()
	}
}

// forDB returns database db's events, starting its listener and reader
// the first time; nil without a DSN or when the server is not serving.
func (e *ddlEvents) forDB(db string) *dbEvents {
	if e == nil || e.conf == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if d := e.dbs[db]; d != nil {
		return d
	}
	if e.ctx == nil || e.stopped {
		return nil
	}
	d := &dbEvents{ev: e, name: db, wake: make(chan struct{}, 1), restart: make(chan struct{}, 1)}
	d.snap.Store(&eventSnapshot{next: make(chan struct{})})
	d.reason = "not connected yet"
	e.dbs[db] = d
	m := e.srv.metrics
	d.flowingGauge = m.DDLFlowing.WithLabelValues(db)
	d.eventsTotal = m.DDLEvents.WithLabelValues(db)
	d.readsOK = m.DDLReads.WithLabelValues(db, "ok")
	d.readsFailed = m.DDLReads.WithLabelValues(db, "failed")
	d.missingGauge = m.TTLMissing.WithLabelValues(db)
	d.flowingGauge.Set(0)
	e.wg.Add(2)
	go func() { defer e.wg.Done(); d.listen(e.ctx) }()
	go func() { defer e.wg.Done(); d.readLoop(e.ctx) }()
	return d
}

// status lists the databases' events, by name.
func (e *ddlEvents) status() []DDLEventsStatus {
	e.mu.Lock()
	dbs := make([]*dbEvents, 0, len(e.dbs))
	for _, d := range e.dbs {
		dbs = append(dbs, d)
	}
	e.mu.Unlock()
	out := make([]DDLEventsStatus, 0, len(dbs))
	for _, d := range dbs {
		out = append(out, d.status())
	}
	return out
}

// dbEvents is one database's listener, reader and newest snapshot.
type dbEvents struct {
	ev   *ddlEvents
	name string
	// gen counts the notifications (and the listener's starts): a
	// snapshot read before the last bump may miss DDL.
	gen     atomic.Uint64
	flowing atomic.Bool
	// snap is the reader's newest snapshot; its next is closed when a newer
	// one is published.
	snap atomic.Pointer[eventSnapshot]
	// wake asks the reader for a snapshot; restart asks the listener to
	// reconnect (the heartbeat failed).
	wake, restart chan struct{}
	// pid is the listening backend's process ID (0: none).
	pid atomic.Uint32

	mu                     sync.Mutex
	reason                 string // why events are not flowing
	since, lastEvent       time.Time
	events, reads, failure uint64

	flowingGauge interface{ Set(float64) }
	eventsTotal  interface{ Inc() }
	readsOK      interface{ Inc() }
	readsFailed  interface{ Inc() }
	missingGauge interface{ Set(float64) }
	// missing is what the last catalog read found missing (readLoop's).
	missing []string
}

// eventSnapshot is a catalog the reader read, and the generation it read
// at.
type eventSnapshot struct {
	rs   *ruleSet
	cat  *rewrite.Catalog
	at   time.Time
	gen  uint64
	err  error
	next chan struct{}
}

// poke wakes the reader.
func (d *dbEvents) poke() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// setFlowing records whether notifications flow, and why not.
func (d *dbEvents) setFlowing(ok bool, reason string) {
	d.mu.Lock()
	changed := d.flowing.Load() != ok || d.reason != reason
	d.reason = reason
	if changed {
		d.since = time.Now()
	}
	d.mu.Unlock()
	d.flowing.Store(ok)
	if ok {
		d.flowingGauge.Set(1)
	} else {
		d.flowingGauge.Set(0)
	}
	if !changed {
		return
	}
	log := d.ev.srv.log
	if ok {
		log.Info("DDL events flowing: the catalog follows DDL made outside the proxy", "database", d.name)
	} else {
		log.Warn("DDL events not flowing: DDL made outside the proxy reaches sessions within catalog_ttl",
			"database", d.name, "reason", reason)
	}
}

// connect opens one of the proxy's own connections to the database, named
// app in pg_stat_activity.
func (d *dbEvents) connect(ctx context.Context, app string) (*pgx.Conn, error) {
	conf := d.ev.conf.Copy()
	conf.Database = d.name
	conf.RuntimeParams["application_name"] = app
	ctx, cancel := context.WithTimeout(ctx, d.ev.srv.cfg.DialTimeout+catalogTimeout)
	defer cancel()
	return pgx.ConnectConfig(ctx, conf)
}

// listen keeps a connection LISTENing on DDLEventsChannel and bumps gen
// per notification, until ctx ends.
func (d *dbEvents) listen(ctx context.Context) {
	retry := time.Duration(0)
	for ctx.Err() == nil {
		if retry > 0 && !sleepCtx(ctx, retry) {
			break
		}
		retry = min(max(2*retry, 500*time.Millisecond), ddlRetryMax)
		reason, listened, final := d.listenOnce(ctx)
		if ctx.Err() != nil {
			break
		}
		d.setFlowing(false, reason)
		if final {
			return
		}
		if listened {
			// It worked until now: try again at once.
			retry = 0
		}
	}
	d.setFlowing(false, "proxy stopped")
}

// listenOnce connects, checks, LISTENs and waits for notifications until
// the connection fails; it returns why events stopped, whether they had
// flowed, and final when retrying cannot help (YugabyteDB).
func (d *dbEvents) listenOnce(ctx context.Context) (reason string, listened, final bool) {
	conn, err := d.connect(ctx, DDLListenerApplicationName)
	if err != nil {
		return "connecting: " + err.Error(), false, false
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var installed bool
	var version string
	if err := conn.QueryRow(ctx, installedQuery).Scan(&installed, &version); err != nil {
		return "checking the event triggers: " + err.Error(), false, false
	}
	if isYugabyte(version) {
		// YugabyteDB's support for event triggers and LISTEN/NOTIFY varies
		// by release: not relied on.
		return "YugabyteDB: DDL events are not used; the catalog follows DDL within catalog_ttl", false, true
	}
	if !installed {
		return "event triggers not installed or disabled (ttlproxy install --ddl-events)", false, false
	}
	if _, err := conn.Exec(ctx, "LISTEN "+DDLEventsChannel); err != nil {
		return "LISTEN: " + err.Error(), false, false
	}
	d.pid.Store(conn.PgConn().PID())
	defer d.pid.Store(0)
	// Notifications sent before LISTEN are lost: every snapshot is stale.
	d.gen.Add(1)
	d.setFlowing(true, "")
	d.poke()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-d.restart:
			cancel()
		case <-wctx.Done():
		}
	}()
	for {
		n, err := conn.WaitForNotification(wctx)
		if err != nil {
			if wctx.Err() != nil && ctx.Err() == nil {
				d.mu.Lock()
				r := d.reason
				d.mu.Unlock()
				return r, true, false
			}
			return "listening connection lost: " + err.Error(), true, false
		}
		d.eventsTotal.Inc()
		d.mu.Lock()
		d.events++
		d.lastEvent = time.Now()
		d.mu.Unlock()
		if n.Payload == ddlProbe {
			continue // ttlproxy check's probe: no DDL
		}
		d.gen.Add(1)
		d.poke()
	}
}

// readLoop reads the catalog when woken, at most once per ddlDebounce,
// and checks the listener once per ddlHeartbeat while events flow.
func (d *dbEvents) readLoop(ctx context.Context) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.WithoutCancel(ctx))
		}
	}()
	heartbeat := time.NewTicker(ddlHeartbeat)
	defer heartbeat.Stop()
	var last time.Time
	var good *eventSnapshot // the last read that succeeded
	for {
		select {
		case <-ctx.Done():
			return
		case <-heartbeat.C:
			if d.flowing.Load() {
				d.heartbeat(ctx, &conn)
			}
			continue
		case <-d.wake:
		}
		if wait := ddlDebounce - time.Since(last); wait > 0 && !sleepCtx(ctx, wait) {
			return
		}
		last = time.Now()
		gen, rs := d.gen.Load(), d.ev.srv.set.Load()
		if s := d.snap.Load(); s.rs == rs && s.gen >= gen && s.err == nil {
			continue
		}
		cat, err := d.read(ctx, &conn, rs)
		if ctx.Err() != nil {
			return
		}
		at := time.Now()
		if err != nil {
			d.readsFailed.Inc()
			d.ev.srv.log.Warn("reading the catalog after DDL failed", "database", d.name, "err", err)
		} else {
			d.readsOK.Inc()
			if good != nil && good.rs == rs && sameCatalog(good.cat, cat) {
				// DDL that changed nothing the catalog holds: keep the
				// snapshot, so that sessions' rewrite state (and their
				// prepared statements) stay as they are.
				cat = good.cat
			}
			rs.catalogs.put(d.name, cat, at, gen)
			d.reportMissing(rs.rules, cat)
		}
		d.mu.Lock()
		d.reads++
		if err != nil {
			d.failure++
		}
		d.mu.Unlock()
		snap := &eventSnapshot{rs: rs, cat: cat, at: at, gen: gen, err: err, next: make(chan struct{})}
		if err == nil {
			good = snap
		}
		close(d.snap.Swap(snap).next)
	}
}

// reportMissing sets the missing gauge to the rule tables cat lacks
// (missingRules) and logs at warn level when that set changes: a TTL table
// renamed, moved or reshaped outside the proxy (DDL through it is refused)
// is read unfiltered under its new name. An empty set after a non-empty
// one is logged at info level.
func (d *dbEvents) reportMissing(rules []ttl.Rule, cat *rewrite.Catalog) {
	if cat == nil {
		return
	}
	missing := missingRules(rules, cat.Data())
	d.missingGauge.Set(float64(len(missing)))
	if slices.Equal(missing, d.missing) {
		return
	}
	d.missing = missing
	log := d.ev.srv.log
	if len(missing) == 0 {
		log.Info("every TTL rule table is in the catalog again", "database", d.name)
		return
	}
	log.Warn("TTL rule tables missing from the catalog or lacking a rule column: renamed, moved, dropped or altered outside the proxy; under a new name their rows are served unfiltered until the rules follow",
		"database", d.name, "tables", strings.Join(missing, ", "))
}

// read reads rs's catalog on the reader's connection, (re)connecting when
// needed.
func (d *dbEvents) read(ctx context.Context, conn **pgx.Conn, rs *ruleSet) (*rewrite.Catalog, error) {
	if len(rs.rules) == 0 {
		return nil, nil
	}
	if *conn == nil || (*conn).IsClosed() {
		c, err := d.connect(ctx, ddlReaderApplicationName)
		if err != nil {
			return nil, fmt.Errorf("connecting: %w", err)
		}
		*conn = c
	}
	results, err := (*conn).PgConn().Exec(ctx, rs.queries.catalog).ReadAll()
	if err != nil {
		if !(*conn).PgConn().IsClosed() && (*conn).PgConn().TxStatus() != 'I' {
			(*conn).Close(ctx)
		}
		return nil, err
	}
	var sets [][][]string
	for _, r := range results {
		if !r.CommandTag.Select() {
			continue // SET LOCAL
		}
		rows := make([][]string, len(r.Rows))
		for i, row := range r.Rows {
			rows[i] = make([]string, len(row))
			for j, v := range row {
				rows[i][j] = string(v)
			}
		}
		sets = append(sets, rows)
	}
	if len(sets) != catalogStatements {
		return nil, fmt.Errorf("catalog query: %d result sets, want %d", len(sets), catalogStatements)
	}
	cat := buildCatalog(d.ev.srv.log, sets)
	rs.noteRowSecurity(d.ev.srv.log, d.name, cat)
	return cat, nil
}

// heartbeat checks that the event triggers are still installed and enabled
// and the listening backend is still there; if not, the listener starts
// over (and events stop flowing until it is back).
func (d *dbEvents) heartbeat(ctx context.Context, conn **pgx.Conn) {
	if *conn == nil || (*conn).IsClosed() {
		c, err := d.connect(ctx, ddlReaderApplicationName)
		if err != nil {
			return // the listener's own connection reports a down server
		}
		*conn = c
	}
	var installed, alive bool
	var version string
	err := (*conn).QueryRow(ctx, installedQuery+`, EXISTS (SELECT FROM pg_catalog.pg_stat_activity WHERE pid = $1)`,
		int32(d.pid.Load())).Scan(&installed, &version, &alive)
	reason := ""
	switch {
	case err != nil:
		var pe *pgconn.PgError
		if errors.As(err, &pe) || (*conn).IsClosed() {
			reason = "checking the event triggers: " + err.Error()
		}
	case !installed:
		reason = "event triggers dropped or disabled"
	case !alive && d.pid.Load() != 0:
		reason = "the listening backend is gone"
	}
	if reason == "" {
		return
	}
	d.setFlowing(false, reason)
	select {
	case d.restart <- struct{}{}:
	default:
	}
}

// fresh returns a snapshot of rs's catalog read at generation gen or
// later, waiting for the reader at most ddlWait; false when there is none
// (the read failed twice or took too long) or quit was closed.
func (d *dbEvents) fresh(rs *ruleSet, gen uint64, quit <-chan struct{}) (*eventSnapshot, bool) {
	var deadline <-chan time.Time
	retried := false
	for {
		s := d.snap.Load()
		if s.rs == rs && s.gen >= gen {
			if s.err == nil {
				return s, true
			}
			if retried {
				return s, false
			}
			// One read failed (a lock timeout, a lost connection): ask
			// for another before giving up.
			retried = true
		}
		d.poke()
		if deadline == nil {
			t := time.NewTimer(ddlWait)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-s.next:
		case <-deadline:
			return nil, false
		case <-quit:
			return nil, false
		}
	}
}

// DDLEventsStatus is one database's DDL events, for /status.
type DDLEventsStatus struct {
	Database string `json:"database"`
	// Flowing: the listening connection is up and the event triggers are
	// installed; otherwise Reason says why, and DDL made outside the proxy
	// reaches sessions within catalog_ttl.
	Flowing bool      `json:"flowing"`
	Reason  string    `json:"reason,omitempty"`
	Since   time.Time `json:"since"`
	// Events counts the notifications received, LastEvent the newest.
	Events    uint64     `json:"events"`
	LastEvent *time.Time `json:"last_event,omitempty"`
	// CatalogReads counts the reader's catalog reads, failed ones
	// included (CatalogReadFailures).
	CatalogReads        uint64 `json:"catalog_reads"`
	CatalogReadFailures uint64 `json:"catalog_read_failures"`
}

func (d *dbEvents) status() DDLEventsStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := DDLEventsStatus{Database: d.name, Flowing: d.flowing.Load(), Since: d.since,
		Events: d.events, CatalogReads: d.reads, CatalogReadFailures: d.failure}
	if !st.Flowing {
		st.Reason = d.reason
	}
	if !d.lastEvent.IsZero() {
		t := d.lastEvent
		st.LastEvent = &t
	}
	return st
}

// sameCatalog reports whether a and b hold the same facts.
func sameCatalog(a, b *rewrite.Catalog) bool {
	if a == b {
		return true
	}
	if a == nil || b == nil {
		return false
	}
	return reflect.DeepEqual(a.Data(), b.Data())
}

// isYugabyte reports whether version() names a YugabyteDB server, as the
// sweeper detects it: "-YB-" after the PostgreSQL version, e.g.
// "PostgreSQL 11.2-YB-2.20.0.0-b0 on x86_64-…".
func isYugabyte(version string) bool { return strings.Contains(version, "-YB-") }

// sleepCtx sleeps for d; false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// followDDL is ageCatalog's part for DDL events: the database's generation
// moved past the session's snapshot, so the session takes the reader's
// next snapshot before the statement, in a transaction block too. When
// there is none (the read failed or is late), a session outside a block
// reads the catalog itself before the statement (syncState); one inside a
// block, which the proxy cannot read for without touching the client's
// transaction, is closed rather than served with a catalog that may miss a
// view over a TTL table.
func (s *clientConn) followDDL(d *dbEvents, gen uint64) error {
	rs := s.rs.Load()
	if snap, ok := d.fresh(rs, gen, s.quit); ok {
		if sameCatalog(s.st.base, snap.cat) {
			// Nothing the rewrite depends on changed: keep the state, so
			// that statements prepared under it stay valid (inside a block
			// they could not be prepared again).
			s.st.catalogAt, s.st.catalogGen = snap.at, snap.gen
			return nil
		}
		stale := s.st.catalogStale // DDL through this session, read at the block's end
		s.st.setCatalog(snap.cat, snap.at)
		s.st.catalogGen = snap.gen
		if stale {
			s.st.catalogStale, s.st.dirty = true, true
		}
		return nil
	}
	select {
	case <-s.quit:
		return errQuit
	default:
	}
	if s.link.txStatus.Load() == 'I' {
		s.st.catalogStale, s.st.dirty = true, true
		s.st.catalogGen = gen
		return nil
	}
	s.srv.metrics.DDLClosed.Inc()
	msg := "ttlproxy: the catalog changed (DDL) and could not be read again; the transaction cannot go on safely"
	s.log.Warn("closing client: no fresh catalog after DDL inside a transaction block", "database", s.database)
	s.endWithFatal(codeConnectionFailure, msg)
	return &wire.ProtocolError{Code: codeConnectionFailure, Msg: msg}
}

// startupCatalog returns the catalog snapshot a new session starts from,
// when it was read and the DDL events generation it was read at: a shared
// one younger than CatalogTTL and not older than the generation, or with
// DDL events flowing the reader's next one; nil when there is none, and
// the session reads it on its own connection (at the generation returned).
func (s *clientConn) startupCatalog(rs *ruleSet) (*rewrite.Catalog, time.Time, uint64) {
	d := s.srv.events.forDB(s.database)
	s.st.events = d
	var gen uint64
	if d != nil {
		gen = d.gen.Load()
	}
	if cat, at, cgen := rs.catalogs.get(s.database, s.srv.cfg.CatalogTTL); cat != nil && cgen >= gen {
		return cat, at, cgen
	}
	if d != nil && d.flowing.Load() {
		if snap, ok := d.fresh(rs, gen, s.quit); ok && snap.cat != nil {
			return snap.cat, snap.at, snap.gen
		}
	}
	return nil, time.Time{}, gen
}
