package proxy

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/ttlproxy/ttlproxy/internal/pgtest"
	"github.com/ttlproxy/ttlproxy/rewrite"
	"github.com/ttlproxy/ttlproxy/ttl"
)

func TestMayChangeState(t *testing.T) {
	for _, c := range []struct {
		sql  string
		want bool
	}{
		{"SELECT 1", false},
		{"SELECT * FROM items WHERE note = 'x'", false},
		{"SET search_path = other", true},
		{"set SEARCH_PATH to other, public", true},
		{`SET "search_path" = other`, true},
		{"SET LOCAL search_path = other", true},
		{"SELECT pg_catalog.set_config('search_path', 'other', false)", true},
		{"SELECT SET_CONFIG('x', 'y', true)", true},
		{"RESET ALL", true},
		{"reset search_path", true},
		{"DISCARD ALL", true},
		{"SET ttlproxy.ttl = '10 minutes'", true},
		{"SET ROLE app", true},
		{"SET SESSION ROLE app", true},
		{"SET LOCAL ROLE app", true},
		{"SELECT role FROM users", false},
		{"SET SESSION AUTHORIZATION app", true},
		{"SELECT authorization FROM t", false},
		{"SET SCHEMA 'other'", true},
		{"CREATE SCHEMA other", false},
		{"SELECT * FROM information_schema.tables", false},
		{"CREATE TEMP TABLE items (id int)", true},
		{"create temporary table items (id int)", true},
		{"CREATE GLOBAL TEMPORARY TABLE items (id int)", true},
		{"CREATE LOCAL TEMP TABLE items (id int)", true},
		{"CREATE OR REPLACE TEMP VIEW items AS SELECT 1", true},
		{"SELECT * INTO TEMP items FROM src", true},
		{"CREATE TABLE pg_temp.items (id int)", true},
		{"SELECT temp FROM readings", false},
		{"SELECT * FROM template_items", false},
		{"SELECT 1; SET search_path = x", true},
	} {
		if got := rewrite.SessionStateMayChange(c.sql); got != c.want {
			t.Errorf("SessionStateMayChange(%q) = %v, want %v", c.sql, got, c.want)
		}
	}
}

// stateRules: public.items and ttl2.items are TTL tables; other.items is
// not.
var stateRules = []ttl.Rule{
	{Table: "items", DefaultTTL: time.Hour},
	{Schema: "ttl2", Table: "items", DefaultTTL: time.Hour},
}

const stateSchema = `
CREATE SCHEMA other;
CREATE SCHEMA ttl2;
CREATE TABLE public.items (id int PRIMARY KEY, expires_at timestamptz);
CREATE TABLE other.items (id int PRIMARY KEY, expires_at timestamptz);
CREATE TABLE ttl2.items (id int PRIMARY KEY, expires_at timestamptz);
INSERT INTO public.items VALUES (1, NULL), (2, now() - interval '1 hour');
INSERT INTO other.items VALUES (1, NULL), (2, now() - interval '1 hour'), (3, now() - interval '1 hour');
INSERT INTO ttl2.items VALUES (1, NULL), (2, NULL), (3, now() - interval '1 hour'), (4, now() - interval '1 hour');
`

// Row counts through the proxy: public.items and ttl2.items filtered,
// other.items not.
const (
	countPublic = 1
	countOther  = 3
	countTTL2   = 2
)

// startStateProxy runs the proxy with the real rewriter in front of a
// database holding stateSchema.
func startStateProxy(t *testing.T, cfg Config) (*testProxy, string) {
	t.Helper()
	rw, err := rewrite.New(stateRules, rewrite.Options{BypassRoles: cfg.BypassRoles})
	if err != nil {
		t.Fatal(err)
	}
	probe, err := rw.Rewrite("SELECT count(*) FROM items", rewrite.NewState(rewrite.Session{
		Catalog: rewrite.NewCatalog(rewrite.CatalogData{
			Tables:  map[string]*rewrite.TableInfo{"public.items": {Columns: []rewrite.Column{{Name: "id", Type: "integer"}, {Name: "expires_at", Type: "timestamp with time zone"}}}},
			Schemas: map[string][]string{"items": {"public"}},
		}),
	}))
	if err != nil || !probe.Rewritten {
		t.Fatalf("the rewriter does not filter the probe (rewritten=%v, err=%v)", probe.Rewritten, err)
	}
	db := pgtest.NewDatabase(t)
	execDirect(t, db, stateSchema)
	cfg.Rewriter, cfg.rewriter = rw, rw
	return startProxy(t, cfg), db
}

func countItems(t *testing.T, conn *pgx.Conn) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(testContext(t), "SELECT count(*) FROM items").Scan(&n); err != nil {
		t.Fatalf("count: %v", err)
	}
	return n
}

func requireCount(t *testing.T, conn *pgx.Conn, want int, what string) {
	t.Helper()
	if got := countItems(t, conn); got != want {
		t.Fatalf("%s: count(*) FROM items = %d, want %d", what, got, want)
	}
}

func TestSearchPathTracking(t *testing.T) {
	p, db := startStateProxy(t, Config{})
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			conn := p.connect(t, db, m.mode)
			requireCount(t, conn, countPublic, "default path")

			mustExec(t, conn, "SET search_path = other")
			requireCount(t, conn, countOther, "path other (non-TTL table)")
			mustExec(t, conn, "SET search_path = ttl2, public")
			requireCount(t, conn, countTTL2, "path ttl2 (TTL table)")
			mustExec(t, conn, "RESET search_path")
			requireCount(t, conn, countPublic, "after RESET")

			// A rolled-back SET leaves the old path.
			mustExec(t, conn, "BEGIN")
			mustExec(t, conn, "SET search_path = other")
			requireCount(t, conn, countOther, "SET inside a transaction")
			mustExec(t, conn, "ROLLBACK")
			requireCount(t, conn, countPublic, "after ROLLBACK")

			// SET LOCAL reverts at COMMIT.
			mustExec(t, conn, "BEGIN")
			mustExec(t, conn, "SET LOCAL search_path = other")
			requireCount(t, conn, countOther, "SET LOCAL")
			mustExec(t, conn, "COMMIT")
			requireCount(t, conn, countPublic, "after COMMIT of SET LOCAL")

			mustExec(t, conn, "SELECT pg_catalog.set_config('search_path', 'other', false)")
			requireCount(t, conn, countOther, "set_config")
			mustExec(t, conn, "RESET ALL")
			requireCount(t, conn, countPublic, "after RESET ALL")
			mustExec(t, conn, "SET search_path = ttl2")
			mustExec(t, conn, "DISCARD ALL")
			if m.mode == pgx.QueryExecModeCacheStatement {
				// DISCARD ALL deallocated pgx's cached statement behind
				// its back: the next use fails, as without the proxy, and
				// pgx prepares it again.
				var n int
				if err := conn.QueryRow(testContext(t), "SELECT count(*) FROM items").Scan(&n); err == nil {
					t.Fatalf("statement deallocated by DISCARD ALL still ran (count %d)", n)
				}
			}
			requireCount(t, conn, countPublic, "after DISCARD ALL")
		})
	}
}

// TestSearchPathSetConfigPrepared: a prepared set_config statement executed
// again (only Bind and Execute reach the proxy) still marks the session.
func TestSearchPathSetConfigPrepared(t *testing.T) {
	p, db := startStateProxy(t, Config{})
	conn := p.connect(t, db, pgx.QueryExecModeCacheStatement)
	const setPath = "SELECT pg_catalog.set_config('search_path', $1, false)"
	for range 2 {
		mustExec(t, conn, setPath, "other")
		requireCount(t, conn, countOther, "set_config other")
		mustExec(t, conn, setPath, "public")
		requireCount(t, conn, countPublic, "set_config public")
	}
}

// TestSearchPathRefreshOnlyWhenNeeded: statements that cannot change the
// state cost no extra round trip; one that may costs exactly one, before
// the next statement.
func TestSearchPathRefreshOnlyWhenNeeded(t *testing.T) {
	p, db := startStateProxy(t, Config{})
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			conn := p.connect(t, db, m.mode)
			refreshes := func() float64 {
				return counterValue(t, p.reg, "ttlproxy_proxy_session_refreshes_total")
			}
			before := refreshes()
			for range 5 {
				requireCount(t, conn, countPublic, "plain reads")
				mustExec(t, conn, "INSERT INTO items VALUES (100, now()) ON CONFLICT (id) DO NOTHING")
			}
			if got := refreshes(); got != before {
				t.Fatalf("%v refreshes for statements that cannot change the state", got-before)
			}
			mustExec(t, conn, "SET search_path = other")
			requireCount(t, conn, countOther, "after SET")
			requireCount(t, conn, countOther, "again")
			if got := refreshes(); got != before+1 {
				t.Fatalf("%v refreshes after one SET outside a transaction, want 1", got-before)
			}
			mustExec(t, conn, "RESET search_path")
			requireCount(t, conn, countPublic, "after RESET")
		})
	}
}

func TestTTLSettingTracking(t *testing.T) {
	p, db := startStateProxy(t, Config{})
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			conn := p.connect(t, db, m.mode)
			other := p.connect(t, db, m.mode)
			base := map[string]int{"extended_cache": 1000, "extended_describe": 2000, "simple": 3000}[m.name]
			lifetime := func(id int) float64 {
				t.Helper()
				direct := connectDirect(t, db, pgx.QueryExecModeSimpleProtocol)
				var secs float64
				if err := direct.QueryRow(testContext(t),
					"SELECT extract(epoch FROM expires_at - now()) FROM public.items WHERE id = $1", id).Scan(&secs); err != nil {
					t.Fatalf("row %d: %v", id, err)
				}
				return secs
			}
			near := func(id int, want time.Duration) {
				t.Helper()
				if got := lifetime(id); got < want.Seconds()-60 || got > want.Seconds()+5 {
					t.Fatalf("row %d expires in %.0fs, want about %v", id, got, want)
				}
			}
			mustExec(t, conn, "SET ttlproxy.ttl = '10 minutes'")
			mustExec(t, conn, "INSERT INTO items (id) VALUES ($1)", base+1)
			mustExec(t, other, "INSERT INTO items (id) VALUES ($1)", base+2)
			near(base+1, 10*time.Minute)
			near(base+2, time.Hour)
			mustExec(t, conn, "RESET ttlproxy.ttl")
			mustExec(t, conn, "INSERT INTO items (id) VALUES ($1)", base+3)
			near(base+3, time.Hour)
		})
	}
}

func TestRoleTracking(t *testing.T) {
	ensureRole(t, `DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'ttl_bypass_role') THEN CREATE ROLE ttl_bypass_role; END IF;
END $$`)
	p, db := startStateProxy(t, Config{BypassRoles: []string{"ttl_bypass_role"}})
	execDirect(t, db, "GRANT SELECT ON ALL TABLES IN SCHEMA public TO ttl_bypass_role")
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			conn := p.connect(t, db, m.mode)
			requireCount(t, conn, countPublic, "as postgres")
			mustExec(t, conn, "SET ROLE ttl_bypass_role")
			requireCount(t, conn, 2, "as a bypass role")
			mustExec(t, conn, "RESET ROLE")
			requireCount(t, conn, countPublic, "after RESET ROLE")
		})
	}
	// In one Query string, a role change is followed statement by
	// statement, in and out of the bypass.
	conn := p.connect(t, db, pgx.QueryExecModeSimpleProtocol)
	for _, c := range []struct {
		sql  string
		want string
	}{
		{"SET ROLE ttl_bypass_role; SELECT count(*) FROM items", "2"},
		{"RESET ROLE; SELECT count(*) FROM items", itoa(countPublic)},
		{"SET ROLE ttl_bypass_role; RESET ROLE; SELECT count(*) FROM items", itoa(countPublic)},
	} {
		results, err := conn.PgConn().Exec(testContext(t), c.sql).ReadAll()
		if err != nil {
			t.Fatalf("%s: %v", c.sql, err)
		}
		last := results[len(results)-1]
		if len(last.Rows) != 1 || string(last.Rows[0][0]) != c.want {
			t.Errorf("%s: %v, want %s", c.sql, last.Rows, c.want)
		}
	}
}

func TestTempTableShadowsTTLTable(t *testing.T) {
	p, db := startStateProxy(t, Config{})
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			conn := p.connect(t, db, m.mode)
			requireCount(t, conn, countPublic, "before")
			// No expiry column: a filter would fail loudly.
			mustExec(t, conn, "CREATE TEMP TABLE items (id int)")
			mustExec(t, conn, "INSERT INTO items VALUES (1), (2), (3), (4), (5)")
			requireCount(t, conn, 5, "temporary table")
			if got := queryString(t, conn, "SELECT count(*)::text FROM public.items"); got != "1" {
				t.Fatalf("public.items = %s, want 1", got)
			}
			mustExec(t, conn, "DROP TABLE items")
			requireCount(t, conn, countPublic, "after DROP of the temporary table")

			mustExec(t, conn, "BEGIN")
			mustExec(t, conn, "CREATE TEMP TABLE items (id int) ON COMMIT DROP")
			requireCount(t, conn, 0, "ON COMMIT DROP table")
			mustExec(t, conn, "COMMIT")
			requireCount(t, conn, countPublic, "after COMMIT")

			mustExec(t, conn, "SELECT 1 AS id INTO TEMP items")
			requireCount(t, conn, 1, "SELECT INTO TEMP")
			mustExec(t, conn, "DISCARD TEMP")
			requireCount(t, conn, countPublic, "after DISCARD TEMP")
		})
	}
}

// TestPipelineWaitsForState: a client that pipelines past a SET has its
// next statement held until the SET is answered, so that it is rewritten
// for the new path.
func TestPipelineWaitsForState(t *testing.T) {
	p, db := startStateProxy(t, Config{})
	conn := p.connect(t, db, pgx.QueryExecModeSimpleProtocol)
	fe := conn.PgConn().Frontend()
	fe.Send(&pgproto3.Query{String: "SET search_path = other"})
	fe.Send(&pgproto3.Query{String: "SELECT count(*) FROM items"})
	fe.Send(&pgproto3.Query{String: "RESET search_path"})
	fe.Send(&pgproto3.Query{String: "SELECT count(*) FROM items"})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	var counts []string
	for z := 0; z < 4; {
		msg, err := fe.Receive()
		if err != nil {
			t.Fatal(err)
		}
		switch m := msg.(type) {
		case *pgproto3.DataRow:
			counts = append(counts, string(m.Values[0]))
		case *pgproto3.ErrorResponse:
			t.Fatalf("error: %s", m.Message)
		case *pgproto3.ReadyForQuery:
			z++
		}
	}
	if want := []string{itoa(countOther), itoa(countPublic)}; !slices.Equal(counts, want) {
		t.Fatalf("pipelined counts %v, want %v", counts, want)
	}
}

func TestStateAtStartup(t *testing.T) {
	p, db := startStateProxy(t, Config{})
	execDirect(t, db, `ALTER DATABASE `+db+` SET ttlproxy.ttl = '5 minutes'`)
	cfg, err := pgx.ParseConfig(p.connString(t, db))
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["search_path"] = "other"
	conn := connectConfig(t, cfg)
	requireCount(t, conn, countOther, "search_path from the startup packet")
	mustExec(t, conn, "SET search_path = public")
	mustExec(t, conn, "INSERT INTO items (id) VALUES (500)")
	direct := connectDirect(t, db, pgx.QueryExecModeSimpleProtocol)
	var secs float64
	if err := direct.QueryRow(testContext(t), "SELECT extract(epoch FROM expires_at - now()) FROM public.items WHERE id = 500").Scan(&secs); err != nil {
		t.Fatal(err)
	}
	if secs < 240 || secs > 305 {
		t.Fatalf("row expires in %.0fs, want about 300 (ttlproxy.ttl from ALTER DATABASE)", secs)
	}
}

// TestPipelineSyncGroups: a pipeline that ends each statement with a Sync
// sees the state each earlier statement left.
func TestPipelineSyncGroups(t *testing.T) {
	p, db := startStateProxy(t, Config{})
	conn := p.connect(t, db, pgx.QueryExecModeCacheStatement)
	ctx := testContext(t)
	pl := conn.PgConn().StartPipeline(ctx)
	pl.SendQueryParams("SET search_path = other", nil, nil, nil, nil)
	if err := pl.Sync(); err != nil {
		t.Fatal(err)
	}
	pl.SendQueryParams("SELECT count(*) FROM items", nil, nil, nil, nil)
	if err := pl.Sync(); err != nil {
		t.Fatal(err)
	}
	var counts []string
	for {
		res, err := pl.GetResults()
		if err != nil {
			t.Fatal(err)
		}
		if res == nil {
			break
		}
		switch r := res.(type) {
		case *pgconn.ResultReader:
			rr := r.Read()
			if rr.Err != nil {
				t.Fatal(rr.Err)
			}
			for _, row := range rr.Rows {
				counts = append(counts, string(row[0]))
			}
		case *pgconn.PipelineSync:
		}
	}
	if err := pl.Close(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(counts, []string{itoa(countOther)}) {
		t.Fatalf("counts %v, want [%d]", counts, countOther)
	}
}

// TestBatchAfterStateChange: a pgx.Batch (one Sync for all statements) that
// changes search_path and then reads has the read rewritten for the new
// path, in every protocol: the proxy follows a change the text determines
// through the pipeline (from the non-TTL other.items to the TTL
// public.items, a read rewritten for the old path would show expired rows).
// A SET LOCAL ends with its transaction block; a change the text does not
// determine makes the read rejected, which rolls the batch back.
func TestBatchAfterStateChange(t *testing.T) {
	p, db := startStateProxy(t, Config{})
	for _, m := range append(modes[:len(modes):len(modes)], struct {
		name string
		mode pgx.QueryExecMode
	}{"exec", pgx.QueryExecModeExec}) {
		t.Run(m.name, func(t *testing.T) {
			conn := p.connect(t, db, m.mode)
			for _, c := range []struct {
				name    string
				stmts   []string
				reads   []int // expected counts of the reads, in order
				reject  bool  // the first read is rejected instead
				pathOut int   // the count read after the batch
			}{
				{"SET then read", []string{"SET search_path = public", "READ"}, []int{countPublic}, false, countPublic},
				{"set_config then read", []string{"SELECT pg_catalog.set_config('search_path', 'other', false)", "READ"}, []int{countOther}, false, countOther},
				{"SET LOCAL until COMMIT", []string{"BEGIN", "SET LOCAL search_path = public", "READ", "COMMIT", "READ"},
					[]int{countPublic, countOther}, false, countOther},
				// RESET restores the reset value the proxy read: "$user", public.
				{"RESET then read", []string{"RESET search_path", "READ"}, []int{countPublic}, false, countPublic},
				{"RESET ALL then read", []string{"RESET ALL", "READ"}, nil, true, countOther},
			} {
				mustExec(t, conn, "SET search_path = other")
				requireCount(t, conn, countOther, c.name+": before")
				b := &pgx.Batch{}
				for _, sql := range c.stmts {
					if sql == "READ" {
						b.Queue("SELECT count(*) FROM items WHERE id > $1", 0)
					} else {
						b.Queue(sql)
					}
				}
				br := conn.SendBatch(testContext(t), b)
				var got []int
				var readErr error
				for _, sql := range c.stmts {
					if sql != "READ" {
						if _, err := br.Exec(); err != nil {
							readErr = err
							break
						}
						continue
					}
					var n int
					if err := br.QueryRow().Scan(&n); err != nil {
						readErr = err
						break
					}
					got = append(got, n)
				}
				_ = br.Close()
				if readErr != nil && c.stmts[0] == "BEGIN" {
					// The error left the explicit transaction block aborted.
					mustExec(t, conn, "ROLLBACK")
				}
				// pgx's statement cache prepares the batch's statements in a
				// round trip of their own, before the change runs: a read
				// prepared for another path is rejected as stale rather than
				// run for it, and the rejection rolls the batch back.
				stale := m.mode == pgx.QueryExecModeCacheStatement && readErr != nil && !c.reject
				switch {
				case c.reject || stale:
					requireCode(t, readErr, "0A000")
					requireCount(t, conn, countOther, c.name+": after the rejected batch")
				case readErr != nil || !slices.Equal(got, c.reads):
					t.Errorf("%s: reads %v, %v; want %v", c.name, got, readErr, c.reads)
				default:
					requireCount(t, conn, c.pathOut, c.name+": after the batch")
				}
			}
		})
	}
}

// TestTTLInvalidReachesPreparedStatements: a statement prepared while
// ttlproxy.ttl was valid is prepared again when the session's ttlproxy.ttl
// becomes a value the proxy cannot read (here set through a parameter,
// which the rewriter cannot check), so that it fails with 22023 instead of
// stamping default_ttl.
func TestTTLInvalidReachesPreparedStatements(t *testing.T) {
	p, db := startStateProxy(t, Config{})
	conn := p.connect(t, db, pgx.QueryExecModeCacheStatement)
	const insert = "INSERT INTO items (id) VALUES ($1)"
	mustExec(t, conn, insert, 5001)
	mustExec(t, conn, "SELECT pg_catalog.set_config('ttlproxy.ttl', $1, false)", "forever")
	_, err := conn.Exec(testContext(t), insert, 5002)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "22023" {
		t.Fatalf("INSERT after ttlproxy.ttl became unreadable: %v, want SQLSTATE 22023", err)
	}
	direct := connectDirect(t, db, pgx.QueryExecModeSimpleProtocol)
	var n int
	if err := direct.QueryRow(testContext(t), "SELECT count(*) FROM public.items WHERE id = 5002").Scan(&n); err != nil || n != 0 {
		t.Fatalf("row 5002: count %d, %v; want no row", n, err)
	}
	// A valid value again: the statement stamps with it.
	mustExec(t, conn, "SELECT pg_catalog.set_config('ttlproxy.ttl', $1, false)", "10 minutes")
	mustExec(t, conn, insert, 5003)
}

func TestIsTransactionControl(t *testing.T) {
	for sql, want := range map[string]bool{
		"COMMIT":                             true,
		" rollback ;":                        true,
		"/* c */ ROLLBACK TO SAVEPOINT s1":   true,
		"-- x\nEND":                          true,
		"release s1; -- done":                true,
		"BEGIN ISOLATION LEVEL SERIALIZABLE": true,
		"ROLLBACK; SELECT * FROM items":      false,
		"COMMIT; DELETE FROM items":          false,
		`SAVEPOINT "a;b"`:                    false, // errs toward a check
		"SELECT 1":                           false,
		"COMMITTED":                          false,
		"":                                   false,
	} {
		if got := isTransactionControl(sql); got != want {
			t.Errorf("isTransactionControl(%q) = %v, want %v", sql, got, want)
		}
	}
}
