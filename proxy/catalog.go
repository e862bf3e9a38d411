package proxy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/ttlproxy/ttlproxy/internal/wire"
	"github.com/ttlproxy/ttlproxy/rewrite"
	"github.com/ttlproxy/ttlproxy/ttl"
)

// catalogTimeout bounds the proxy's own startup query.
const catalogTimeout = 30 * time.Second

// catalogCache holds one catalog snapshot per database. Snapshots are
// immutable and shared by that database's sessions.
type catalogCache struct {
	mu sync.Mutex
	m  map[string]catalogEntry
}

type catalogEntry struct {
	cat *rewrite.Catalog
	at  time.Time
	// gen is the database's DDL events generation (ddlevents.go) the
	// snapshot was read at.
	gen uint64
}

// get returns db's catalog snapshot, when it was read and the DDL events
// generation it was read at, or nil when there is none younger than ttl.
func (c *catalogCache) get(db string, ttl time.Duration) (*rewrite.Catalog, time.Time, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[db]
	if !ok || time.Since(e.at) > ttl {
		return nil, time.Time{}, 0
	}
	return e.cat, e.at, e.gen
}

// put records cat, read at at and at DDL events generation gen, as db's
// snapshot, unless the one held was read at a later generation.
func (c *catalogCache) put(db string, cat *rewrite.Catalog, at time.Time, gen uint64) {
	c.mu.Lock()
	if e, ok := c.m[db]; !ok || e.gen <= gen {
		c.m[db] = catalogEntry{cat: cat, at: at, gen: gen}
	}
	c.mu.Unlock()
}

// catalogQueries are the proxy's own queries, encoded once.
type catalogQueries struct {
	// state: the session state (buildStateQuery) as a simple Query.
	state []byte
	// refresh: the same in the extended protocol (encodeRefresh).
	refresh []byte
	// full: state, then catalogSQL, as a simple Query (at startup).
	full []byte
	// reload: full in the extended protocol, in a transaction block
	// (reloadResults result sets; after DDL, outside a transaction block).
	reload []byte
	// catalog: catalogSQL alone as a simple Query, for the proxy's own
	// connection (ddlevents.go); a result set per statement that returns
	// rows.
	catalog string
	// names are the distinct TTL table names, in the order the state query
	// numbers them.
	names []string
}

func buildCatalogQueries(rules []ttl.Rule) catalogQueries {
	var pairs []string
	seen := map[string]bool{}
	for i := range rules {
		r := &rules[i]
		q := r.QualifiedName()
		if seen[q] {
			continue
		}
		seen[q] = true
		pairs = append(pairs, "("+ttl.QuoteLiteral(r.SchemaName())+", "+ttl.QuoteLiteral(r.Table)+")")
	}
	var plain []string
	for i := range rules {
		if !slices.Contains(plain, rules[i].Table) {
			plain = append(plain, rules[i].Table)
		}
	}
	stateQuery := buildStateQuery(plain)
	q := catalogQueries{state: appendQuery(nil, stateQuery), refresh: encodeStatements(stateQuery), names: plain}
	if len(pairs) == 0 {
		q.full, q.reload = q.state, q.refresh
		return q
	}
	// JIT compiling the recursive catalog statements would cost more than
	// running them (hundreds of milliseconds against about ten): off for
	// this transaction only.
	// The catalog statements run under a search_path of pg_catalog alone,
	// after the state query has read the session's: an operator or
	// function of the client's own in a schema before pg_catalog cannot
	// change what they find, and the view definitions and column types
	// are printed with every other name qualified, so that they mean the
	// same in any session's statement.
	cat := catalogSQL(strings.Join(pairs, ", "))
	stmts := append([]string{"SET LOCAL jit = off", stateQuery, catalogPath}, cat...)
	q.full = appendQuery(nil, strings.Join(stmts, ";\n"))
	q.catalog = strings.Join(slices.Concat([]string{"SET LOCAL jit = off", catalogPath}, cat), ";\n")
	q.reload = encodeStatements(append(append([]string{"BEGIN"}, stmts...), "COMMIT")...)
	return q
}

// LeakPathStatements returns the catalog statements that list, for rules'
// tables, the views, materialized views and rules on other tables that read
// them inside the server, and the functions whose bodies do (the columns
// BuildLeakPaths reads), for ttlproxy check. Run the views statement under
// search_path pg_catalog, as the proxy does, for definitions with every
// name qualified.
func LeakPathStatements(rules []ttl.Rule) (views, functions string) {
	var pairs []string
	seen := map[string]bool{}
	for i := range rules {
		r := &rules[i]
		if q := r.QualifiedName(); !seen[q] {
			seen[q] = true
			pairs = append(pairs, "("+ttl.QuoteLiteral(r.SchemaName())+", "+ttl.QuoteLiteral(r.Table)+")")
		}
	}
	cat := catalogSQL(strings.Join(pairs, ", "))
	return cat[viewsStatement], cat[viewsStatement+1]
}

// LeakPaths are the paths inside the server LeakPathStatements found.
type LeakPaths struct {
	// Views as the rewriter takes them.
	Views map[string]rewrite.View
	// Rules lists "table reads relation" for rules on other tables.
	Rules []string
	// Functions maps "schema.function" to what its body reads;
	// TriggerTables to the tables whose triggers run it.
	Functions, TriggerTables map[string]string
}

// BuildLeakPaths reads the rows (as text) of LeakPathStatements' statements.
func BuildLeakPaths(views, functions [][]string) LeakPaths {
	results := make([][][]string, catalogStatements)
	results[viewsStatement], results[viewsStatement+1] = views, functions
	cat := buildCatalogData(slog.New(slog.DiscardHandler), results)
	lp := LeakPaths{Views: cat.Views, Functions: cat.Functions, TriggerTables: map[string]string{}}
	for _, row := range views {
		if len(row) == 9 && row[0] != "v" && row[0] != "m" {
			lp.Rules = append(lp.Rules, row[1]+"."+row[2]+" reads "+row[3]+"."+row[4])
		}
	}
	for _, row := range functions {
		if len(row) == 4 && row[3] != "" {
			lp.TriggerTables[row[0]+"."+row[1]] = row[3]
		}
	}
	return lp
}

// catalogPath is the search_path the catalog statements run under.
const catalogPath = "SET LOCAL search_path = pg_catalog"

// LivePolicyComment is a SQL expression over the pg_class row c: the
// comment of the live policy as ttlproxy install --row-security creates it
// on c (RESTRICTIVE, FOR ALL, TO PUBLIC), empty when it has none, NULL when
// no such policy exists.
const LivePolicyComment = `(SELECT COALESCE(pg_catalog.obj_description(p.oid, 'pg_policy'), '')
          FROM pg_catalog.pg_policy p
         WHERE p.polrelid = c.oid AND p.polname = '` + rowSecurityPolicy + `' AND NOT p.polpermissive
           AND p.polcmd = '*' AND p.polroles = '{0}'::pg_catalog.oid[])`

// catalogStatements is the number of statements catalogSQL returns.
const catalogStatements = 8

// viewsStatement is the index of the views statement in catalogSQL.
const viewsStatement = 4

// catalogResults returns the result sets of the catalog statements from the
// answer to full (simple Query: a result set per statement that returns
// rows) or to reload (extended protocol: one per statement, SET, BEGIN and
// COMMIT included); ok is false for an answer of another shape.
func catalogResults(results [][][]string, extended bool) (state [][][]string, cat [][][]string, ok bool) {
	if !extended {
		if len(results) != 1+catalogStatements {
			return nil, nil, false
		}
		return results[:1], results[1:], true
	}
	// BEGIN, SET jit, state, SET search_path, the catalog statements,
	// COMMIT.
	if len(results) != 4+catalogStatements+1 {
		return nil, nil, false
	}
	return results[2:3], results[4 : 4+catalogStatements], true
}

// catalogSQL returns the catalog statements for the TTL tables given as
// (schema, table) literal pairs: the columns, then the unique keys of the
// TTL tables and of their inheritance children and partitions at any
// depth; the schemas holding a relation named like one of those or like a
// view below; the children with the TTL table whose rule each follows (a
// child that is a TTL table itself keeps its own rule; one under two TTL
// tables follows the first by name); the views, materialized views and
// rules on other tables that read one of those relations inside the server,
// at any depth through views (pg_depend on pg_rewrite), with the view's
// definition; and the functions and procedures whose bodies read one of
// those relations or views (pg_depend for SQL-standard bodies; otherwise the
// name in prosrc, which errs toward listing) or call such a function, with
// the tables whose triggers run them (the functions of package install,
// schema ttlproxy, are its own); then the inheritance parents of those
// relations at any depth that are not among them, each with a TTL
// descendant (rewrite.CatalogData.Ancestors), which the views, schemas and
// functions statements count as read too; last, the row-level security of
// the TTL tables and their children, with the comment of the live policy of
// ttlproxy install --row-security when they carry it as installed
// (RESTRICTIVE, FOR ALL, TO PUBLIC). Each statement repeats the relations
// CTE: the statements of one Query do not share it.
func catalogSQL(tables string) []string {
	rels := `WITH RECURSIVE ttl AS (
  SELECT c.oid, n.nspname::pg_catalog.text || '.' || c.relname::pg_catalog.text AS rule
    FROM pg_catalog.pg_class c
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
   WHERE (n.nspname::pg_catalog.text, c.relname::pg_catalog.text) IN (VALUES ` + tables + `)
), tree AS (
  SELECT i.inhrelid AS oid, t.rule FROM pg_catalog.pg_inherits i JOIN ttl t ON i.inhparent = t.oid
  UNION
  SELECT i.inhrelid, tr.rule FROM pg_catalog.pg_inherits i JOIN tree tr ON i.inhparent = tr.oid
), rels AS (
  SELECT oid FROM ttl UNION SELECT oid FROM tree
), anc AS (
  SELECT i.inhparent AS oid, i.inhrelid AS via FROM pg_catalog.pg_inherits i JOIN rels r ON i.inhrelid = r.oid
  UNION
  SELECT i.inhparent, a.via FROM pg_catalog.pg_inherits i JOIN anc a ON i.inhrelid = a.oid
), reach AS (
  SELECT oid FROM rels UNION SELECT oid FROM anc
), deps AS (
  SELECT r.ev_class AS oid, d.refobjid AS reads
    FROM pg_catalog.pg_depend d
    JOIN pg_catalog.pg_rewrite r ON r.oid = d.objid
   WHERE d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass
     AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
     AND d.refobjid IN (SELECT oid FROM reach) AND r.ev_class <> d.refobjid
  UNION
  SELECT r.ev_class, d.refobjid
    FROM deps
    JOIN pg_catalog.pg_class v ON v.oid = deps.oid AND v.relkind IN ('v', 'm')
    JOIN pg_catalog.pg_depend d ON d.refobjid = deps.oid
    JOIN pg_catalog.pg_rewrite r ON r.oid = d.objid
   WHERE d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass
     AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
     AND r.ev_class <> d.refobjid
)
`
	return []string{
		rels + `SELECT n.nspname, c.relname, a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod)
  FROM pg_catalog.pg_attribute a
  JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 WHERE c.oid IN (SELECT oid FROM rels)
   AND a.attnum > 0 AND NOT a.attisdropped
 ORDER BY n.nspname, c.relname, a.attnum`,
		rels + `SELECT n.nspname, c.relname, i.indexrelid::pg_catalog.int8, a.attname
  FROM pg_catalog.pg_index i
  JOIN pg_catalog.pg_class c ON c.oid = i.indrelid
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 CROSS JOIN LATERAL pg_catalog.unnest(i.indkey::pg_catalog.int2[]) WITH ORDINALITY AS k(attnum, ord)
  JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
 WHERE c.oid IN (SELECT oid FROM rels)
   AND i.indisunique AND i.indisvalid AND i.indpred IS NULL AND i.indexprs IS NULL
   AND k.ord <= i.indnkeyatts
 ORDER BY 1, 2, 3, k.ord`,
		rels + `SELECT c.relname, n.nspname
  FROM pg_catalog.pg_class c
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relname IN (SELECT r.relname FROM pg_catalog.pg_class r WHERE r.oid IN (SELECT oid FROM reach) OR r.oid IN (SELECT oid FROM deps))
   AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
   AND n.nspname !~ '^pg_(toast_)?temp_'
 ORDER BY 1, 2`,
		rels + `SELECT DISTINCT ON (n.nspname, c.relname) n.nspname, c.relname, tr.rule
  FROM tree tr
  JOIN pg_catalog.pg_class c ON c.oid = tr.oid
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 WHERE tr.oid NOT IN (SELECT oid FROM ttl)
 ORDER BY n.nspname, c.relname, tr.rule`,
		rels + `SELECT DISTINCT c.relkind, n.nspname, c.relname, rn.nspname, rc.relname,
       CASE WHEN c.relkind = 'v' THEN pg_catalog.pg_get_viewdef(c.oid) END,
       (SELECT pg_catalog.string_agg(pg_catalog.quote_ident(a.attname), ', ' ORDER BY a.attnum)
          FROM pg_catalog.pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped),
       COALESCE(pg_catalog.array_to_string(c.reloptions, ','), ''), rc.relrowsecurity
  FROM deps
  JOIN pg_catalog.pg_class c ON c.oid = deps.oid
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
  JOIN pg_catalog.pg_class rc ON rc.oid = deps.reads
  JOIN pg_catalog.pg_namespace rn ON rn.oid = rc.relnamespace
 ORDER BY 2, 3, 4, 5`,
		rels + `, names AS (
  SELECT pg_catalog.lower(c.relname::pg_catalog.text) AS name FROM pg_catalog.pg_class c
   WHERE c.oid IN (SELECT oid FROM reach)
      OR c.oid IN (SELECT d.oid FROM deps d JOIN pg_catalog.pg_class v ON v.oid = d.oid AND v.relkind IN ('v', 'm'))
), src AS (
  SELECT p.oid, pg_catalog.lower(p.proname::pg_catalog.text) AS name, pg_catalog.lower(p.prosrc) AS body
    FROM pg_catalog.pg_proc p
    JOIN pg_catalog.pg_namespace pn ON pn.oid = p.pronamespace
   WHERE pn.nspname NOT IN ('pg_catalog', 'information_schema') AND p.prolang NOT IN (12, 13)
), funcs AS (
  SELECT d.objid AS oid, rc.relname::pg_catalog.text AS reads
    FROM pg_catalog.pg_depend d
    JOIN pg_catalog.pg_class rc ON rc.oid = d.refobjid
   WHERE d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass
     AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
     AND (d.refobjid IN (SELECT oid FROM reach) OR d.refobjid IN (SELECT oid FROM deps))
  UNION
  SELECT s.oid, x.name FROM src s JOIN names x ON pg_catalog.strpos(s.body, x.name) > 0
  UNION
  SELECT s.oid, f.name
    FROM funcs
    JOIN src f ON f.oid = funcs.oid
    JOIN src s ON s.oid <> f.oid AND pg_catalog.strpos(s.body, f.name) > 0
)
SELECT DISTINCT ON (n.nspname, p.proname) n.nspname, p.proname, funcs.reads,
       (SELECT pg_catalog.string_agg(DISTINCT tn.nspname::pg_catalog.text || '.' || tc.relname::pg_catalog.text, ',')
          FROM pg_catalog.pg_trigger t
          JOIN pg_catalog.pg_class tc ON tc.oid = t.tgrelid
          JOIN pg_catalog.pg_namespace tn ON tn.oid = tc.relnamespace
         WHERE t.tgfoid = p.oid AND NOT t.tgisinternal)
  FROM funcs
  JOIN pg_catalog.pg_proc p ON p.oid = funcs.oid
  JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname <> 'ttlproxy'
 ORDER BY n.nspname, p.proname, funcs.reads`,
		rels + `SELECT DISTINCT ON (n.nspname, c.relname) n.nspname, c.relname, vn.nspname::pg_catalog.text || '.' || v.relname::pg_catalog.text
  FROM anc
  JOIN pg_catalog.pg_class c ON c.oid = anc.oid
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
  JOIN pg_catalog.pg_class v ON v.oid = anc.via
  JOIN pg_catalog.pg_namespace vn ON vn.oid = v.relnamespace
 WHERE anc.oid NOT IN (SELECT oid FROM rels)
 ORDER BY n.nspname, c.relname, 3`,
		rels + `SELECT n.nspname, c.relname, c.relrowsecurity, c.relforcerowsecurity,
       ` + LivePolicyComment + `
  FROM rels
  JOIN pg_catalog.pg_class c ON c.oid = rels.oid
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 ORDER BY 1, 2`,
	}
}

// rowSecurityPolicy is the name of the live policy of ttlproxy install
// --row-security (install.ApplyRowSecurity).
const rowSecurityPolicy = "ttlproxy_live"

// finishStartup runs after the server's first ReadyForQuery, before it is
// relayed: it learns what the rewriter needs about this session and hands
// the rewrite session to clientToServer. An error means the upstream
// connection failed; a failed query only leaves the catalog unknown.
func (s *clientConn) finishStartup() error {
	if len(s.rs.Load().rules) > 0 && !s.replication {
		s.st.track = true
		if s.link.lex.bits.Load()&lexHighBytes != 0 {
			b := startupLexRefusal()
			s.fatal.CompareAndSwap(nil, &b)
			s.endUpstreamAtBoundary()
			return errUnsafeEncoding
		}
		if err := s.loadCatalog(s.askDirect); err != nil {
			return err
		}
	}
	close(s.ready)
	return nil
}

// catalogAsker sends the catalog query and returns its answer as
// readResults does.
type catalogAsker func(query []byte) (results [][][]string, qerr *pgproto3.ErrorResponse, status byte, err error)

// askDirect is the catalogAsker of session mode's startup, on the server
// pump before the relay starts: it writes the query to the server and
// reads the answer itself. clientToServer writes nothing until ready is
// closed, so the write cannot interleave with a client message.
func (s *clientConn) askDirect(query []byte) ([][][]string, *pgproto3.ErrorResponse, byte, error) {
	up := s.link.server.conn()
	if up == nil {
		return nil, nil, 0, errors.New("no upstream connection")
	}
	_ = up.SetDeadline(time.Now().Add(catalogTimeout))
	defer func() { _ = up.SetDeadline(time.Time{}) }()
	if _, err := up.Write(query); err != nil {
		return nil, nil, 0, fmt.Errorf("sending catalog query: %w", err)
	}
	results, qerr, status, err := readResults(s.link.server.r, s.link.cw, nil, &s.link.lex)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("reading catalog query results: %w", err)
	}
	return results, qerr, status, nil
}

// loadCatalog reads the session state, and the catalog unless a fresh
// shared one is at hand, with ask.
func (s *clientConn) loadCatalog(ask catalogAsker) error {
	rs := s.rs.Load()
	cat, at, gen := s.startupCatalog(rs)
	query := rs.queries.state
	if cat == nil {
		query = rs.queries.full
	}
	results, qerr, status, err := ask(query)
	if err != nil {
		return err
	}
	if qerr != nil {
		s.log.Warn("catalog query failed; statements that need the catalog will be rejected",
			"sqlstate", qerr.Code, "err", qerr.Message)
	}
	s.link.txStatus.Store(uint32(status))
	if _, r, ok := catalogResults(results, false); cat == nil && qerr == nil && ok {
		cat, at = buildCatalog(s.log, r), time.Now()
		rs.catalogs.put(s.database, cat, at, gen)
		rs.noteRowSecurity(s.log, s.database, cat)
	}
	if at.IsZero() {
		// The catalog query failed: try again when a snapshot would
		// have expired (ageCatalog), not before every statement.
		at = time.Now()
	}
	s.st.setCatalog(cat, at)
	s.st.catalogGen = gen
	if row, ok := stateResult(results, rs.queries.names); ok {
		s.st.apply(&row)
	} else {
		// Without the state, refresh before the first statement.
		s.st.markDirty()
	}
	if s.log.Enabled(context.Background(), slog.LevelDebug) {
		cur := s.st.cur.Session()
		s.log.Debug("session catalog", "search_path", cur.SearchPath, "bypass", cur.Bypass, "catalog_known", cat != nil)
	}
	return nil
}

// readResults reads the answer to one simple Query up to ReadyForQuery:
// the rows of each result set as text (NULL as ""), the server's error if
// there was one, and the transaction status, from r (a server's reader).
// Notices are dropped; asynchronous messages are passed on to the client
// through w, but a ParameterStatus in transaction mode, which view (nil in
// session mode) holds until its release.
func readResults(r *wire.Reader, w *wire.Writer, view *reportedParams, lex *lexRegime) (results [][][]string, qerr *pgproto3.ErrorResponse, status byte, err error) {
	var buf []byte
	for {
		_, length, err := wire.PeekHeader(r)
		if err != nil {
			return nil, nil, 0, err
		}
		if length < 4 || length > 1<<30 {
			return nil, nil, 0, fmt.Errorf("invalid message length %d from upstream", length)
		}
		if buf, err = wire.ReadMessage(r, buf, int(length)+1); err != nil {
			return nil, nil, 0, err
		}
		body := buf[wire.HeaderLen:]
		switch buf[0] {
		case 'T', '2':
			// A result set starts with its RowDescription, or in the
			// extended protocol with BindComplete.
			results = append(results, nil)
		case 'D':
			if len(results) == 0 {
				return nil, nil, 0, errors.New("DataRow before RowDescription")
			}
			row, err := decodeDataRow(body)
			if err != nil {
				return nil, nil, 0, err
			}
			results[len(results)-1] = append(results[len(results)-1], row)
		case 'S', 'A':
			// Asynchronous ParameterStatus and NotificationResponse
			// belong to the client; in transaction mode a ParameterStatus
			// only when it changes the client's view.
			if buf[0] == 'S' {
				lex.note(body)
			}
			if buf[0] == 'S' && view.hold(body) {
				continue
			}
			if _, err := w.Write(buf); err != nil {
				return nil, nil, 0, &wire.WriteError{Err: err}
			}
		case 'E':
			qerr = &pgproto3.ErrorResponse{}
			if err := qerr.Decode(body); err != nil {
				return nil, nil, 0, err
			}
		case 'Z':
			if len(body) > 0 {
				status = body[0]
			}
			return results, qerr, status, nil
		}
	}
}

func decodeDataRow(b []byte) ([]string, error) {
	if len(b) < 2 {
		return nil, errors.New("short DataRow")
	}
	n := int(binary.BigEndian.Uint16(b))
	b = b[2:]
	row := make([]string, n)
	for i := range row {
		if len(b) < 4 {
			return nil, errors.New("short DataRow")
		}
		l := int(int32(binary.BigEndian.Uint32(b)))
		b = b[4:]
		if l < 0 {
			continue
		}
		if len(b) < l {
			return nil, errors.New("short DataRow")
		}
		row[i] = string(b[:l])
		b = b[l:]
	}
	return row, nil
}

// buildCatalog assembles the rows of the catalog query.
// Rules on other tables and triggers whose functions read a TTL table are
// logged: the proxy cannot filter what they read (ttlproxy install
// --row-security can).
func buildCatalog(log *slog.Logger, results [][][]string) *rewrite.Catalog {
	return rewrite.NewCatalog(buildCatalogData(log, results))
}

// buildCatalogData is buildCatalog before NewCatalog.
func buildCatalogData(log *slog.Logger, results [][][]string) rewrite.CatalogData {
	columns, keys, schemas, children, views, functions, ancestors, security := results[0], results[1], results[2], results[3], results[4], results[5], results[6], results[7]
	cat := rewrite.CatalogData{
		Tables:  map[string]*rewrite.TableInfo{},
		Schemas: map[string][]string{},
	}
	table := func(schema, name string) *rewrite.TableInfo {
		q := schema + "." + name
		t := cat.Tables[q]
		if t == nil {
			t = &rewrite.TableInfo{}
			cat.Tables[q] = t
		}
		return t
	}
	for _, row := range columns {
		if len(row) != 4 {
			continue
		}
		t := table(row[0], row[1])
		t.Columns = append(t.Columns, rewrite.Column{Name: row[2], Type: row[3]})
	}
	lastIndex := ""
	for _, row := range keys {
		if len(row) != 4 {
			continue
		}
		t := table(row[0], row[1])
		if row[2] != lastIndex || len(t.UniqueKeys) == 0 {
			t.UniqueKeys = append(t.UniqueKeys, nil)
			lastIndex = row[2]
		}
		k := len(t.UniqueKeys) - 1
		t.UniqueKeys[k] = append(t.UniqueKeys[k], row[3])
	}
	for _, row := range security {
		if len(row) != 5 {
			continue
		}
		// No policy as installed reads as "" (decodeDataRow's NULL);
		// the install always comments its policy.
		t := table(row[0], row[1])
		t.RowSecurity = rewrite.RowSecurity{
			Enabled:   row[2] == "t",
			Forced:    row[3] == "t",
			Policy:    strings.HasPrefix(row[4], "ttlproxy:"),
			Condition: ttl.PolicyCondition(row[4]),
		}
	}
	for _, row := range schemas {
		if len(row) != 2 {
			continue
		}
		cat.Schemas[row[0]] = append(cat.Schemas[row[0]], row[1])
	}
	for _, row := range children {
		if len(row) != 3 {
			continue
		}
		if cat.Children == nil {
			cat.Children = map[string]string{}
		}
		cat.Children[row[0]+"."+row[1]] = row[2]
	}
	for _, row := range ancestors {
		if len(row) != 3 {
			continue
		}
		if cat.Ancestors == nil {
			cat.Ancestors = map[string]string{}
		}
		cat.Ancestors[row[0]+"."+row[1]] = row[2]
	}
	for _, row := range views {
		if len(row) != 9 {
			continue
		}
		name, reads := row[1]+"."+row[2], row[3]+"."+row[4]
		switch row[0] {
		case "v", "m":
			if cat.Views == nil {
				cat.Views = map[string]rewrite.View{}
			}
			v := cat.Views[name]
			v.Materialized = row[0] == "m"
			v.Definition = row[5]
			v.Columns = ttl.SplitIdentifiers(row[6])
			for _, o := range strings.Split(row[7], ",") {
				k, val, _ := strings.Cut(o, "=")
				on := val == "true" || val == "on" || val == "1" || val == "yes"
				switch k {
				case "security_barrier":
					v.SecurityBarrier = on
				case "security_invoker":
					v.SecurityInvoker = on
				}
			}
			v.Reads = append(v.Reads, reads)
			if row[8] == "t" {
				v.ReadsRowSecurity = true
			}
			cat.Views[name] = v
		default:
			log.Warn("a rule on this table reads a TTL table inside the server, where the proxy cannot hide expired rows",
				"table", name, "reads", reads)
		}
	}
	for _, row := range functions {
		if len(row) != 4 {
			continue
		}
		if cat.Functions == nil {
			cat.Functions = map[string]string{}
		}
		cat.Functions[row[0]+"."+row[1]] = row[2]
		if row[3] != "" {
			log.Warn("a trigger function reads a TTL table inside the server, where the proxy cannot hide expired rows",
				"function", row[0]+"."+row[1], "reads", row[2], "tables", row[3])
		}
	}
	return cat
}

// missingRules lists, sorted, the rules' tables the catalog data d does not
// hold ("schema.table") and the columns their rules read that it lacks
// ("schema.table.column"): the tables and columns renamed, moved or
// dropped since the rules were written. Tables of no columns at all are
// taken as missing.
func missingRules(rules []ttl.Rule, d rewrite.CatalogData) []string {
	var out []string
	for i := range rules {
		r := &rules[i]
		q := r.QualifiedName()
		t := d.Tables[q]
		if t == nil || len(t.Columns) == 0 {
			if !slices.Contains(out, q) {
				out = append(out, q)
			}
			continue
		}
		for _, col := range ruleColumnNames(r) {
			if !slices.ContainsFunc(t.Columns, func(c rewrite.Column) bool { return c.Name == col }) {
				out = append(out, q+"."+col)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ruleColumnNames are the columns r reads: the row rule's expiry, base,
// interval or key columns, each expiring column and its clock.
func ruleColumnNames(r *ttl.Rule) []string {
	var cols []string
	switch r.RuleKind() {
	case ttl.KindColumn:
		cols = append(cols, r.ExpiryColumn())
	case ttl.KindDerived:
		cols = append(cols, r.BaseColumn)
		if r.IntervalColumn != "" {
			cols = append(cols, r.IntervalColumn)
		}
	case ttl.KindSidecar:
		cols = append(cols, r.KeyColumns...)
	}
	for i := range r.Columns {
		cols = append(cols, r.Columns[i].Column, r.Columns[i].Clock())
	}
	return cols
}
