package tests

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ttlproxy/ttlproxy/install"
	"github.com/ttlproxy/ttlproxy/internal/pgtest"
	"github.com/ttlproxy/ttlproxy/proxy"
	"github.com/ttlproxy/ttlproxy/ttl"
)

// TestPoolIsolation is the state-isolation fuzz test of transaction pooling
// (docs/design/pooling.md §7, step 13): no session state crosses clients,
// and every client sees what a dedicated session would.
//
// The proxy runs in transaction mode whatever TTLPROXY_TEST_POOL_MODE says,
// with default_pool_size 1 and then 2, authenticating clients through the
// installed auth query (so that ALTER ROLE … SET makes a new pool for the
// next login). Its database holds three TTL tables named items (public, s1
// and s2, with default TTLs of an hour, a day and none). Each fuzz client
// (isolationClients of them, most sharing one pool, so that nearly every
// transaction on a pool of 1 is a hand-over) has a twin: a dedicated session
// straight to a reference database with the same schema and the same roles,
// where row-level security policies give the rules' live condition (as the
// oracle's do) and a BEFORE INSERT trigger stamps now() + ttlproxy.ttl (or
// the table's default) unless the session is a bypass one. The two
// databases keep each side's writes apart.
//
// Every client runs in its own goroutine with its own generator (seed +
// client number), so its sequence of transactions is reproducible while the
// interleaving is the scheduler's. A transaction is generated once and run on
// the proxy, then on the twin, statement by statement: SET, SET LOCAL,
// SET TIME ZONE, SET ROLE (bypass and non-bypass roles), RESET, RESET ROLE,
// RESET ALL, DISCARD ALL, set_config(…, false|true), INSERTs into the TTL
// tables, SELECTs and SHOW, in autocommit, in BEGIN … COMMIT|ROLLBACK
// blocks, in multi-statement Query strings and in pgx batches (one Sync),
// over the simple protocol and the extended one (unnamed statements,
// pgx's named statement cache, cached descriptions). Some clients log in
// with -c startup options and a search_path startup parameter (a pool of
// their own), two as a bypass login, one as a role whose settings it
// changes with ALTER ROLE … SET before reconnecting. Pinning statements
// (a temporary table shadowing items, an advisory lock, LISTEN, SQL
// PREPARE, set_config with a parameter as the name) run alone in their
// transaction, followed by a few transactions, DISCARD ALL, and a
// reconnect, so that a pool of 1 is not held for long. Every statement's
// result (rows, or SQLSTATE) must be the same on both sides; after every
// transaction the ParameterStatus values each side was sent last (TimeZone
// and the other reported parameters) must agree, and a check statement
// reads search_path, TimeZone,
// statement_timeout, work_mem, ttlproxy.ttl, app.x, app.y, current_user,
// session_user, role, and the client's rows of items with their stamped
// lifetimes (expires_at - created, created defaulting to now(), so the
// stamping statement's now() cancels out), and both sides must agree.
//
// Two things are compared more loosely, as documented in known-limits.md:
// a placeholder that was never defined on a dedicated session reads NULL,
// and ” on a server another client defined it on, so placeholders are
// read with coalesce(…, ”); and settings changed inside a function
// (fz_fn sets app.fn and lock_timeout with set_config, which the proxy's
// text check does not see) are kept while the client keeps its server and
// lost when it moves: there the proxy may show the twin's value, a value
// the client itself set earlier, or the default, never another client's
// (every client's values are its own).
//
// The generator keeps clear of what the proxy refuses by design
// (known-limits.md: session state): in a batch the changes come after the
// reads and at most one of them; in a string set_config and the changes the
// proxy does not follow come after the reads, and while a temporary table
// shadows items no change comes before one. After DISCARD ALL both sides
// call pgx's DeallocateAll, as an application must. It also keeps clear of
// one defect, in session mode too, reported rather than fixed here: a bypass
// session with a shadowing temporary table cannot end a failed transaction
// block (see roleTarget).
//
// By default -isolation.n is 1000 generated transactions per pool size
// (about a minute on a shared two-core machine); -isolation.n=5000 is the
// full run of 10,000. Reproduce a run with -isolation.seed=S (one pool size
// with -isolation.size); -isolation.clients sets the clients (at least 6).
// A difference prints the client's history.
func TestPoolIsolation(t *testing.T) {
	seed := *isolationSeed
	switch {
	case seed != 0:
	case os.Getenv("CI") == "true":
		seed = ciOracleSeed
	default:
		seed = uint64(time.Now().UnixNano())
	}
	if *isolationClients < 6 {
		t.Fatalf("-isolation.clients=%d: at least 6 (plain, startup options, bypass, ALTER ROLE)", *isolationClients)
	}
	t.Logf("seed %d: rerun with -isolation.seed=%d", seed, seed)
	total, checks, differences := 0, 0, 0
	for _, size := range []int{1, 2} {
		if *isolationSize != 0 && size != *isolationSize {
			continue
		}
		ok := t.Run(fmt.Sprintf("pool_size_%d", size), func(t *testing.T) {
			f := newIsolationFuzz(t, size, seed)
			n, c := f.run(*isolationN)
			total += n
			checks += c
		})
		if !ok {
			differences++ // a pool size stops at its first
		}
	}
	t.Logf("%d transactions generated and compared, %d checks after them, %d differences", total, checks, differences)
}

var (
	isolationSeed    = flag.Uint64("isolation.seed", 0, "TestPoolIsolation: generator seed; 0 picks one from the clock, or ciOracleSeed with CI=true")
	isolationN       = flag.Int("isolation.n", 1000, "TestPoolIsolation: generated transactions per pool size (the full run: 5000)")
	isolationSize    = flag.Int("isolation.size", 0, "TestPoolIsolation: run only this pool size (1 or 2); 0 runs both")
	isolationClients = flag.Int("isolation.clients", 12, "TestPoolIsolation: clients per pool size")
)

const isolationPassword = "fuzz pass"

// isolationFuzz is one pool size's run: the proxy, the two databases, the
// roles.
type isolationFuzz struct {
	t        *testing.T
	s        *stack
	seed     uint64
	size     int
	refDSN   string // the reference database, as the superuser
	app, ops string // login roles: plain, bypass
	solo     string // a login role the client using it alters
	r, rb    string // SET ROLE targets: plain, bypass
	bypass   []string
	failed   atomic.Bool
	ctx      context.Context // bounds the run
	pins     atomic.Int64    // pinning statements run
	refused  atomic.Int64    // pinning statements the proxy refused with 53000
}

func newIsolationFuzz(t *testing.T, size int, seed uint64) *isolationFuzz {
	suffix := fmt.Sprintf("%d_%d", os.Getpid(), size)
	f := &isolationFuzz{t: t, seed: seed, size: size,
		app: "fz_app_" + suffix, ops: "fz_ops_" + suffix, solo: "fz_solo_" + suffix,
		r: "fz_r_" + suffix, rb: "fz_rb_" + suffix}
	lookup := "fz_lookup_" + suffix
	srv := pgtest.Server(t)
	bypass := []string{f.ops, f.rb}
	f.bypass = bypass
	rules := []ttl.Rule{
		{Schema: "public", Table: "items", DefaultTTL: time.Hour},
		{Schema: "s1", Table: "items", DefaultTTL: 24 * time.Hour},
		{Schema: "s2", Table: "items"},
	}
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, srv.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	roles := []string{f.app, f.ops, f.solo, f.r, f.rb, lookup}
	t.Cleanup(func() {
		for _, r := range roles {
			_, _ = admin.Exec(context.Background(), "DROP ROLE IF EXISTS "+r)
		}
		admin.Close(context.Background())
	})
	// After the roles' cleanup is registered, so that the databases, which
	// hold their privileges, are dropped first.
	refDB := pgtest.NewDatabase(t)
	f.refDSN = srv.ConnString(refDB)
	for _, q := range []string{
		"SET password_encryption = 'scram-sha-256'",
		"CREATE ROLE " + f.app + " LOGIN PASSWORD '" + isolationPassword + "'",
		"CREATE ROLE " + f.ops + " LOGIN PASSWORD '" + isolationPassword + "'",
		"CREATE ROLE " + f.solo + " LOGIN PASSWORD '" + isolationPassword + "'",
		"CREATE ROLE " + lookup + " LOGIN PASSWORD '" + isolationPassword + "'",
		"CREATE ROLE " + f.r + " NOLOGIN",
		"CREATE ROLE " + f.rb + " NOLOGIN",
		"GRANT " + f.r + ", " + f.rb + " TO " + f.app + ", " + f.ops + ", " + f.solo,
		// Role defaults a RESET returns to, the same for both databases.
		"ALTER ROLE " + f.app + " SET statement_timeout = '45s'",
		"ALTER ROLE " + f.ops + " SET work_mem = '5MB'",
		"ALTER ROLE " + f.ops + " SET app.x = 'ops-default'",
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	schema := []string{
		`CREATE SCHEMA s1`, `CREATE SCHEMA s2`,
		`GRANT USAGE ON SCHEMA s1, s2 TO PUBLIC`,
	}
	for _, sch := range []string{"public", "s1", "s2"} {
		schema = append(schema,
			`CREATE TABLE `+sch+`.items (id bigint PRIMARY KEY, owner int NOT NULL, v text, expires_at timestamptz, created timestamptz DEFAULT now())`,
			// Rows of nobody's: live, expired, never expiring.
			`INSERT INTO `+sch+`.items (id, owner, v, expires_at) SELECT i, 0, '`+sch+`-' || i,
				CASE i % 3 WHEN 0 THEN now() - interval '1 day' WHEN 1 THEN now() + interval '1 day' END
				FROM generate_series(1, 12) AS i`,
			`GRANT ALL ON `+sch+`.items TO PUBLIC`,
		)
	}
	schema = append(schema,
		// A function that changes settings where the proxy's text check
		// cannot see it.
		`CREATE FUNCTION public.fz_fn(a text, b text) RETURNS text LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_catalog.set_config('app.fn', a, false); PERFORM pg_catalog.set_config('lock_timeout', b, false); RETURN a; END $$`,
	)
	quoted := "'" + strings.Join(bypass, "', '") + "'"
	ref := slices.Clone(schema)
	ref = append(ref,
		`CREATE FUNCTION public.fz_stamp() RETURNS trigger LANGUAGE plpgsql AS $$
		DECLARE t text := nullif(current_setting('ttlproxy.ttl', true), '');
		BEGIN
			IF session_user::text IN (`+quoted+`) OR current_user::text IN (`+quoted+`) THEN RETURN NEW; END IF;
			t := coalesce(t, nullif(TG_ARGV[0], ''));
			IF t IS NOT NULL THEN
				NEW.expires_at := now() + make_interval(secs => extract(epoch FROM t::interval));
			END IF;
			RETURN NEW;
		END $$`)
	for i, r := range rules {
		def := ""
		if r.DefaultTTL > 0 {
			def = fmt.Sprintf("%d seconds", int(r.DefaultTTL.Seconds()))
		}
		name := r.QuotedName()
		ref = append(ref,
			`CREATE TRIGGER fz_stamp BEFORE INSERT ON `+name+` FOR EACH ROW EXECUTE FUNCTION public.fz_stamp('`+def+`')`,
			`ALTER TABLE `+name+` ENABLE ROW LEVEL SECURITY`,
			fmt.Sprintf(`CREATE POLICY live%d ON %s FOR ALL TO PUBLIC USING (%s OR session_user::text IN (%s) OR current_user::text IN (%s))`,
				i, name, r.LiveCondition(ttl.QuoteIdent(r.Table), "now()"), quoted, quoted),
		)
	}
	refConn, err := pgx.Connect(ctx, f.refDSN)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range ref {
		if _, err := refConn.Exec(ctx, q); err != nil {
			t.Fatalf("reference setup %q: %v", q, err)
		}
	}
	// The auth query function lives in the reference database: pg_authid
	// is shared, and the settings hash is computed for the client's
	// database ($2).
	if _, err := install.ApplyAuthQuery(ctx, refConn, lookup, false); err != nil {
		t.Fatal(err)
	}
	refConn.Close(ctx)
	u, _ := url.Parse(f.refDSN)
	u.User = url.UserPassword(lookup, isolationPassword)
	f.s = newStack(t, stackOptions{setup: schema, rules: rules, bypassRoles: bypass,
		pool: &proxy.PoolSettings{DefaultPoolSize: size}, auth: proxy.AuthConfig{DSN: u.String()}})
	var cancel context.CancelFunc
	f.ctx, cancel = context.WithTimeout(ctx, 20*time.Minute)
	t.Cleanup(cancel)
	return f
}

// run runs n generated transactions spread over the clients and returns the
// transactions generated and the checks made.
func (f *isolationFuzz) run(n int) (txns, checks int) {
	nc := *isolationClients
	var wg sync.WaitGroup
	var done, checked atomic.Int64
	for i := range nc {
		per := n / nc
		if i < n%nc {
			per++
		}
		c := f.newClient(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.close()
			c.loop(per, &done, &checked)
		}()
	}
	wg.Wait()
	f.t.Logf("pool size %d: %d clients, %d transactions, %d checks, %d pinning statements (%d refused with 53000)",
		f.size, nc, done.Load(), checked.Load(), f.pins.Load(), f.refused.Load())
	return int(done.Load()), int(checked.Load())
}

// isolationClient is one fuzz client: a session through the proxy and its
// twin, a dedicated session to the reference database.
type isolationClient struct {
	f        *isolationFuzz
	id       int
	user     string
	params   map[string]string // startup parameters
	solo     bool              // alters its login role now and then
	rng      *rand.Rand
	prx, ref *pgx.Conn
	history  []string
	nextID   int64
	fnVals   map[string]bool // values this client passed to fz_fn
	// After a pinning statement: transactions left before DISCARD ALL,
	// then before a reconnect; -1 when not counting.
	pinLeft, reconnectIn int
	n                    int  // transactions generated
	bypassing            bool // the last check's session or current user is a bypass role
	temp                 bool // a temporary table may shadow items
}

// isolationStartupOptions are the -c options and search_path of the clients
// of the second pool.
var isolationStartupOptions = map[string]string{
	"options":     `-c work_mem=3000kB -c app.x=from-options -c statement_timeout=50s`,
	"search_path": "s1, public",
}

func (f *isolationFuzz) newClient(id int) *isolationClient {
	nc := *isolationClients
	c := &isolationClient{f: f, id: id, user: f.app, fnVals: map[string]bool{}, pinLeft: -1, reconnectIn: -1,
		rng:    rand.New(rand.NewPCG(f.seed, uint64(f.size*1000+id))), //nolint:gosec // a seeded generator: a failing run must be reproducible
		nextID: int64(f.size*100+id+1) * 1_000_000}
	switch id {
	case nc - 1:
		c.user, c.solo = f.solo, true
	case nc - 2, nc - 3:
		c.user = f.ops
	case nc - 4, nc - 5:
		c.params = isolationStartupOptions
	}
	c.connect()
	return c
}

func (c *isolationClient) config(dsn string) *pgx.ConnConfig {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		c.f.t.Fatal(err)
	}
	cfg.User, cfg.Password = c.user, isolationPassword
	for k, v := range c.params {
		cfg.RuntimeParams[k] = v
	}
	return cfg
}

// connect opens both sessions; an error ends the run.
func (c *isolationClient) connect() bool {
	ctx, cancel := context.WithTimeout(c.f.ctx, 2*time.Minute)
	defer cancel()
	var err error
	if c.prx, err = pgx.ConnectConfig(ctx, c.config(c.f.s.proxied)); err != nil {
		c.fail("connect through the proxy: %v", err)
		return false
	}
	if c.ref, err = pgx.ConnectConfig(ctx, c.config(c.f.refDSN)); err != nil {
		c.fail("connect to the reference: %v", err)
		return false
	}
	c.log("connected as %s %v", c.user, c.params)
	return true
}

func (c *isolationClient) close() {
	for _, conn := range []*pgx.Conn{c.prx, c.ref} {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
	}
	c.prx, c.ref = nil, nil
}

func (c *isolationClient) log(format string, args ...any) {
	c.history = append(c.history, fmt.Sprintf(format, args...))
	if len(c.history) > 60 {
		c.history = c.history[len(c.history)-60:]
	}
}

// fail reports a difference (or a broken run) with the client's history and
// stops every client.
func (c *isolationClient) fail(format string, args ...any) {
	if c.f.failed.Swap(true) {
		return
	}
	c.f.t.Errorf("pool size %d, client %d (%s), transaction %d, seed %d: %s\nhistory, oldest first:\n  %s",
		c.f.size, c.id, c.user, c.n, c.f.seed, fmt.Sprintf(format, args...), strings.Join(c.history, "\n  "))
}

func (c *isolationClient) loop(n int, done, checked *atomic.Int64) {
	if c.prx == nil {
		return
	}
	for c.n = 0; c.n < n && !c.f.failed.Load(); c.n++ {
		tx := c.generate()
		if !c.runTxn(tx) {
			return
		}
		done.Add(1)
		if !c.check() {
			return
		}
		checked.Add(1)
		if tx.reconnect {
			if tx.alter != "" {
				if err := c.alterRole(tx.alter); err != nil {
					c.fail("%s: %v", tx.alter, err)
					return
				}
			}
			c.close()
			c.temp = false
			if !c.connect() {
				return
			}
		}
	}
}

func (c *isolationClient) alterRole(sql string) error {
	ctx, cancel := context.WithTimeout(c.f.ctx, time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.f.refDSN)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	c.log("%s", sql)
	return err
}

// Transaction kinds.
const (
	txAuto  = iota // one statement, autocommit
	txBlock        // BEGIN … COMMIT or ROLLBACK
	txMulti        // a multi-statement Query string
	txBatch        // a pgx batch: one Sync
)

// fzStmt is one generated statement.
type fzStmt struct {
	sql  string
	args []any
	mode pgx.QueryExecMode
}

// fzTxn is one generated transaction.
type fzTxn struct {
	kind      int
	stmts     []fzStmt
	end       string // COMMIT or ROLLBACK of a block
	pin       bool   // a pinning statement, alone
	reconnect bool   // reconnect both sides after the check
	alter     string // ALTER ROLE run before the reconnect
}

func (t fzTxn) String() string {
	var b strings.Builder
	b.WriteString([...]string{"auto", "block", "multi", "batch"}[t.kind])
	for _, s := range t.stmts {
		fmt.Fprintf(&b, " | %s", s.sql)
		if len(s.args) > 0 {
			fmt.Fprintf(&b, " %v", s.args)
		}
		if t.kind == txAuto || t.kind == txBlock {
			fmt.Fprintf(&b, " (%s)", s.mode)
		}
	}
	if t.end != "" {
		b.WriteString(" | " + t.end)
	}
	return b.String()
}

func (c *isolationClient) pick(choices ...string) string { return choices[c.rng.IntN(len(choices))] }

// value makes a value that only this client uses.
func (c *isolationClient) value() string { return fmt.Sprintf("c%d_%d", c.id, c.rng.IntN(1000)) }

var isolationPaths = []string{"public", "s1, public", "s2", "s2, s1", `"$user", s1`, "s1", "public, s2"}

var isolationZones = []string{"UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo", "Australia/Adelaide"}

// sessionChange is a statement that changes session-level state.
func (c *isolationClient) sessionChange() string {
	id := c.id
	switch c.rng.IntN(17) {
	case 0:
		return fmt.Sprintf("SET work_mem = '%dkB'", 4096+id*64+c.rng.IntN(64))
	case 1:
		return fmt.Sprintf("SET statement_timeout = '%ds'", 60+id*10+c.rng.IntN(10))
	case 2:
		return fmt.Sprintf("SET TIME ZONE '%s'", c.pick(isolationZones...))
	case 3:
		return "SET search_path = " + c.pick(isolationPaths...)
	case 4:
		return fmt.Sprintf("SET ttlproxy.ttl = '%d minutes'", 20+id*10+c.rng.IntN(10))
	case 5:
		return fmt.Sprintf("SET app.x = '%s'", c.value())
	case 6:
		return fmt.Sprintf("SELECT set_config('app.y', '%s', false)", c.value())
	case 7:
		if c.rng.IntN(2) == 0 {
			return fmt.Sprintf("SELECT set_config('search_path', '%s', false)", c.pick(isolationPaths...))
		}
		return fmt.Sprintf("SELECT set_config('TimeZone', '%s', false)", c.pick(isolationZones...))
	case 8:
		return "SET ROLE " + c.roleTarget()
	case 9:
		return c.pick("RESET ROLE", "SET ROLE NONE", "SELECT set_config('role', '"+c.roleTarget()+"', false)")
	case 10:
		return "RESET " + c.pick("work_mem", "search_path", "app.x", "ttlproxy.ttl", "TIME ZONE", "statement_timeout")
	case 11:
		return c.pick("SET work_mem TO DEFAULT", "SET SCHEMA 's2'", "SET ttlproxy.ttl TO DEFAULT")
	case 12:
		return "RESET ALL"
	case 13:
		return fmt.Sprintf("SELECT public.fz_fn('%s', '%dms')", c.value(), 100001+id*1000+c.rng.IntN(999))
	case 14:
		return fmt.Sprintf("SELECT set_config('ttlproxy.ttl', '%d minutes', false)", 20+id*10+c.rng.IntN(10))
	case 15:
		return fmt.Sprintf("SELECT set_config('work_mem', '%dkB', false)", 4096+id*64+c.rng.IntN(64))
	default:
		return fmt.Sprintf("SET SESSION TIME ZONE '%s'", c.pick(isolationZones...))
	}
}

// localChange is a statement whose change ends with the transaction.
func (c *isolationClient) localChange() string {
	switch c.rng.IntN(5) {
	case 0:
		return fmt.Sprintf("SET LOCAL work_mem = '%dkB'", 4096+c.id*64+c.rng.IntN(64))
	case 1:
		return "SET LOCAL search_path = " + c.pick(isolationPaths...)
	case 2:
		return fmt.Sprintf("SET LOCAL ttlproxy.ttl = '%d minutes'", 20+c.id*10+c.rng.IntN(10))
	case 3:
		return fmt.Sprintf("SELECT set_config('app.x', '%s', true)", c.value())
	default:
		return "SET LOCAL ROLE " + c.roleTarget()
	}
}

// roleTarget is a role for SET ROLE: the bypass one too, unless a temporary
// table shadows items. A bypass session with a shadowing temporary table
// whose transaction block fails cannot COMMIT or ROLLBACK through the proxy
// (the end of the block is refused as stale, and the refusal itself fails
// with 25P02), in session mode too: a defect of the proxy's state tracking
// that the fuzz test steers clear of; see newClient for the bypass logins.
func (c *isolationClient) roleTarget() string {
	if c.temp {
		return c.f.r
	}
	return c.pick(c.f.r, c.f.rb)
}

// read is a statement that shows state: an INSERT into items (stamped), its
// rows, a SHOW.
func (c *isolationClient) read(extended bool) fzStmt {
	switch c.rng.IntN(4) {
	case 0, 1:
		c.nextID++
		if extended {
			return fzStmt{sql: "INSERT INTO items (id, owner, v) VALUES ($1, $2, $3)", args: []any{c.nextID, c.owner(), c.value()}}
		}
		return fzStmt{sql: fmt.Sprintf("INSERT INTO items (id, owner, v) VALUES (%d, %d, '%s')", c.nextID, c.owner(), c.value())}
	case 2:
		if extended {
			return fzStmt{sql: "SELECT id, v, extract(epoch FROM expires_at - created)::text FROM items WHERE owner IN (0, $1) ORDER BY id", args: []any{c.owner()}}
		}
		return fzStmt{sql: fmt.Sprintf("SELECT id, v, extract(epoch FROM expires_at - created)::text FROM items WHERE owner IN (0, %d) ORDER BY id", c.owner())}
	default:
		// Built-in settings only: a placeholder never defined reads as
		// an error (42704) in a dedicated session and '' on a server
		// another client defined it on (documented); the checks read
		// placeholders with coalesce.
		return fzStmt{sql: "SHOW " + c.pick("work_mem", "search_path", "TimeZone", "role", "statement_timeout")}
	}
}

func (c *isolationClient) owner() int { return c.f.size*100 + c.id + 1 }

var isolationModes = []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec,
	pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec}

// generate makes the client's next transaction.
func (c *isolationClient) generate() fzTxn {
	mode := func() pgx.QueryExecMode { return isolationModes[c.rng.IntN(len(isolationModes))] }
	switch {
	case c.pinLeft == 0:
		c.pinLeft, c.reconnectIn = -1, c.rng.IntN(4)
		return fzTxn{kind: txAuto, stmts: []fzStmt{{sql: c.pick("DISCARD ALL", "DISCARD TEMP", "DISCARD ALL"), mode: pgx.QueryExecModeSimpleProtocol}}}
	case c.pinLeft > 0:
		c.pinLeft--
	case c.reconnectIn == 0:
		c.reconnectIn = -1
		tx := c.plain(mode)
		tx.reconnect = true
		return tx
	case c.reconnectIn > 0:
		c.reconnectIn--
	case c.rng.IntN(40) == 0:
		c.pinLeft = 1 + c.rng.IntN(4)
		return c.pinning()
	case c.rng.IntN(100) == 0:
		tx := c.plain(mode)
		tx.reconnect = true
		return tx
	case c.solo && c.rng.IntN(30) == 0:
		tx := c.plain(mode)
		tx.reconnect = true
		tx.alter = "ALTER ROLE " + c.user + " " + c.pick(
			fmt.Sprintf("SET work_mem = '%dkB'", 8192+c.rng.IntN(512)),
			fmt.Sprintf("SET ttlproxy.ttl = '%d minutes'", 500+c.rng.IntN(100)),
			"SET search_path = "+c.pick(isolationPaths...),
			fmt.Sprintf("SET app.x = 'role_%d'", c.rng.IntN(100)),
			"RESET ALL")
		return tx
	}
	return c.plain(mode)
}

// plain makes a transaction without pins.
func (c *isolationClient) plain(mode func() pgx.QueryExecMode) fzTxn {
	switch k := c.rng.IntN(20); {
	case k < 7:
		var st fzStmt
		switch c.rng.IntN(3) {
		case 0:
			st = c.read(c.rng.IntN(2) == 0)
		default:
			st = fzStmt{sql: c.sessionChange()}
			if c.rng.IntN(15) == 0 {
				st.sql = "DISCARD ALL"
			}
		}
		st.mode = mode()
		if len(st.args) > 0 && st.mode == pgx.QueryExecModeSimpleProtocol {
			st.mode = pgx.QueryExecModeExec
		}
		return fzTxn{kind: txAuto, stmts: []fzStmt{st}}
	case k < 13:
		tx := fzTxn{kind: txBlock, end: c.pick("COMMIT", "COMMIT", "ROLLBACK")}
		savepoint := false
		for range 1 + c.rng.IntN(5) {
			var st fzStmt
			switch c.rng.IntN(6) {
			case 0, 1:
				st = fzStmt{sql: c.sessionChange()}
			case 2:
				st = fzStmt{sql: c.localChange()}
			case 3:
				switch {
				case !savepoint:
					st, savepoint = fzStmt{sql: "SAVEPOINT fz"}, true
				default:
					st = fzStmt{sql: c.pick("ROLLBACK TO SAVEPOINT fz", "RELEASE SAVEPOINT fz")}
					savepoint = false
				}
			default:
				st = c.read(c.rng.IntN(2) == 0)
			}
			st.mode = mode()
			if len(st.args) > 0 && st.mode == pgx.QueryExecModeSimpleProtocol {
				st.mode = pgx.QueryExecModeExec
			}
			tx.stmts = append(tx.stmts, st)
		}
		return tx
	default:
		// A string or a pipeline: the changes the proxy cannot follow in a
		// string (RESET ALL, a set_config among others) only after the
		// last read, and in a batch (pgx's statement cache prepares its
		// statements first) every change after the reads, as
		// known-limits.md asks: the proxy refuses the rest (0A000).
		tx := fzTxn{kind: txMulti}
		if k >= 17 {
			tx.kind = txBatch
		}
		var changes []string
		for range 1 + c.rng.IntN(4) {
			switch c.rng.IntN(3) {
			case 0:
				tx.stmts = append(tx.stmts, c.read(tx.kind == txBatch))
			case 1:
				// While a temporary table shadows items no change is
				// followed through a string.
				if tx.kind == txMulti && !c.temp {
					tx.stmts = append(tx.stmts, fzStmt{sql: c.followable()})
				}
			default:
				changes = append(changes, c.sessionChange())
			}
		}
		if c.rng.IntN(4) == 0 {
			tx.stmts = append(tx.stmts, c.read(tx.kind == txBatch))
		}
		if tx.kind == txBatch && c.temp {
			// While a temporary table shadows a TTL table every
			// statement may change what the names mean: a batch of
			// one statement.
			tx.stmts = append(tx.stmts, fzStmt{sql: c.sessionChange()})[:1]
			return tx
		}
		if tx.kind == txBatch && len(changes) > 1 {
			// A statement the rewriter parses (set_config of
			// ttlproxy.ttl, say), or any in a bypass session, prepared
			// before a change and bound after it is refused as stale.
			changes = changes[:1]
		}
		for _, s := range changes {
			tx.stmts = append(tx.stmts, fzStmt{sql: s})
		}
		return tx
	}
}

// followable is a change the proxy follows through a string or pipeline.
func (c *isolationClient) followable() string {
	switch c.rng.IntN(5) {
	case 0:
		return "SET search_path = " + c.pick(isolationPaths...)
	case 1:
		return fmt.Sprintf("SET ttlproxy.ttl = '%d minutes'", 20+c.id*10+c.rng.IntN(10))
	case 2:
		return c.pick("SET ROLE "+c.roleTarget(), "RESET ROLE", "RESET search_path", "RESET ttlproxy.ttl")
	case 3:
		// set_config among other statements is not followed (the
		// rewriter refuses a TTL statement after it: 0A000).
		if l := c.localChange(); !strings.Contains(l, "set_config") {
			return l
		}
		return "SET LOCAL work_mem = '4200kB'"
	default:
		return fmt.Sprintf("SET work_mem = '%dkB'", 4096+c.id*64+c.rng.IntN(64))
	}
}

// pinning makes a transaction of one statement that pins the client.
func (c *isolationClient) pinning() fzTxn {
	st := fzStmt{mode: pgx.QueryExecModeSimpleProtocol}
	k := c.rng.IntN(5)
	if k < 2 && (c.bypassing || c.user == c.f.ops) {
		k = 3 // no temporary table in a bypass session: see roleTarget
	}
	switch k {
	case 0, 1:
		// A temporary table that shadows items.
		st.sql = `CREATE TEMP TABLE items (id bigint PRIMARY KEY, owner int NOT NULL, v text, expires_at timestamptz, created timestamptz DEFAULT now())`
	case 2:
		st.sql = fmt.Sprintf("SELECT pg_advisory_lock(%d)", c.owner())
	case 3:
		st.sql = fmt.Sprintf("LISTEN fz_%d", c.id)
	default:
		st = fzStmt{sql: "SELECT set_config($1, $2, false)", args: []any{"app.y", c.value()}, mode: pgx.QueryExecModeExec}
	}
	if c.rng.IntN(3) == 0 && st.args == nil {
		st.mode = pgx.QueryExecModeExec
	}
	return fzTxn{kind: txAuto, stmts: []fzStmt{st}, pin: true}
}

// runTxn runs tx on the proxy, then on the twin, and compares every
// statement's outcome.
func (c *isolationClient) runTxn(tx fzTxn) bool {
	c.log("%d: %s", c.n, tx)
	for _, st := range tx.stmts {
		for _, v := range fnValues(st.sql) {
			c.fnVals[v] = true
		}
	}
	for _, st := range tx.stmts {
		switch {
		case strings.Contains(st.sql, "TEMP TABLE"):
			c.temp = true
		case strings.HasPrefix(st.sql, "DISCARD"):
			c.temp = false // also when it failed: err toward fewer batches
		}
	}
	got, err := c.exec(c.prx, tx)
	if err != nil {
		c.fail("proxy: %v", err)
		return false
	}
	if tx.pin {
		c.f.pins.Add(1)
		if o := outcomes(got); len(o) == 1 && o[0] == "ERROR 53000" {
			// At max_pinned_connections the proxy refuses a pinning
			// statement before it runs: the twin does not run it either.
			c.f.refused.Add(1)
			c.log("   proxy refused the pin (53000)")
			return true
		}
	}
	want, err := c.exec(c.ref, tx)
	if err != nil {
		c.fail("twin: %v", err)
		return false
	}
	if strings.Contains(tx.String(), "DISCARD ALL") {
		// DISCARD ALL drops the statements pgx's caches name: pgx
		// forgets them with DeallocateAll, as an application must.
		perr, rerr := c.prx.DeallocateAll(c.f.ctx), c.ref.DeallocateAll(c.f.ctx)
		if sqlstate(perr) != sqlstate(rerr) || (perr == nil) != (rerr == nil) {
			c.fail("DeallocateAll after DISCARD ALL: proxy %v, twin %v", perr, rerr)
			return false
		}
	}
	c.log("   proxy: %s", strings.ReplaceAll(strings.Join(got, " ; "), "\x00", "message: "))
	if !slices.Equal(outcomes(got), outcomes(want)) {
		c.log("   twin:  %s", strings.ReplaceAll(strings.Join(want, " ; "), "\x00", "message: "))
		c.fail("the transaction's results differ")
		return false
	}
	return true
}

// fnValues returns the values a statement passes to fz_fn.
func fnValues(sql string) []string {
	_, rest, ok := strings.Cut(sql, "fz_fn('")
	if !ok {
		return nil
	}
	a, rest, _ := strings.Cut(rest, "'")
	_, rest, _ = strings.Cut(rest, "'")
	b, _, _ := strings.Cut(rest, "'")
	return []string{a, b}
}

// exec runs tx on one side and renders each statement's outcome; an error
// is returned only when the connection is lost.
func (c *isolationClient) exec(conn *pgx.Conn, tx fzTxn) ([]string, error) {
	ctx, cancel := context.WithTimeout(c.f.ctx, 3*time.Minute)
	defer cancel()
	var out []string
	switch tx.kind {
	case txAuto, txBlock:
		stmts := tx.stmts
		if tx.kind == txBlock {
			stmts = append([]fzStmt{{sql: "BEGIN", mode: pgx.QueryExecModeSimpleProtocol}}, stmts...)
			stmts = append(stmts, fzStmt{sql: tx.end, mode: pgx.QueryExecModeSimpleProtocol})
		}
		for _, st := range stmts {
			rows, err := conn.Query(ctx, st.sql, append([]any{st.mode}, st.args...)...)
			out = append(out, render(rows, err))
		}
	case txMulti:
		var sqls []string
		for _, st := range tx.stmts {
			sqls = append(sqls, st.sql)
		}
		results, err := conn.PgConn().Exec(ctx, strings.Join(sqls, "; ")).ReadAll()
		for _, r := range results {
			if r.Err != nil {
				out = append(out, "ERROR "+sqlstate(r.Err)+errText(r.Err))
				continue
			}
			var rows []string
			for _, row := range r.Rows {
				var vals []string
				for _, v := range row {
					if v == nil {
						vals = append(vals, "NULL")
					} else {
						vals = append(vals, string(v))
					}
				}
				rows = append(rows, strings.Join(vals, ","))
			}
			out = append(out, r.CommandTag.String()+" ["+strings.Join(rows, "; ")+"]")
		}
		if err != nil {
			out = append(out, "ERROR "+sqlstate(err)+errText(err))
		}
	case txBatch:
		b := &pgx.Batch{}
		for _, st := range tx.stmts {
			b.Queue(st.sql, st.args...)
		}
		br := conn.SendBatch(ctx, b)
		for range tx.stmts {
			rows, err := br.Query()
			out = append(out, render(rows, err))
		}
		if err := br.Close(); err != nil {
			out = append(out, "close: ERROR "+sqlstate(err)+errText(err))
		}
	}
	if conn.IsClosed() {
		return out, fmt.Errorf("connection lost: %s", strings.Join(out, " ; "))
	}
	return out, nil
}

// render collects a statement's rows, or its error's SQLSTATE.
func render(rows pgx.Rows, err error) string {
	if err != nil {
		return "ERROR " + errCode(err) + errText(err)
	}
	var lines []string
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			rows.Close()
			return "ERROR decoding: " + err.Error()
		}
		var parts []string
		for _, v := range vals {
			parts = append(parts, fmt.Sprint(v))
		}
		lines = append(lines, strings.Join(parts, ","))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return "ERROR " + errCode(err) + errText(err)
	}
	return rows.CommandTag().String() + " [" + strings.Join(lines, "; ") + "]"
}

// errText is an error's message, set apart so that outcomes compare by
// SQLSTATE alone (outcome strips it).
func errText(err error) string { return " \x00" + err.Error() }

// outcomes strips the messages errText added.
func outcomes(rendered []string) []string {
	out := make([]string, len(rendered))
	for i, r := range rendered {
		out[i], _, _ = strings.Cut(r, " \x00")
	}
	return out
}

func errCode(err error) string {
	if c := sqlstate(err); c != "" {
		return c
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return "client: " + err.Error()
}

// isolationCheck reads what the comparison covers; %d is the client's owner
// number. Placeholders are coalesced: a dedicated session reads NULL for
// one never defined there, a pooled server ” once another client defined
// it (documented).
const isolationCheck = `SELECT current_setting('search_path'), current_setting('TimeZone'),
 current_setting('statement_timeout'), current_setting('work_mem'),
 coalesce(current_setting('ttlproxy.ttl', true), ''), coalesce(current_setting('app.x', true), ''),
 coalesce(current_setting('app.y', true), ''), current_user::text, session_user::text, current_setting('role'),
 current_setting('lock_timeout'), coalesce(current_setting('app.fn', true), ''),
 (SELECT string_agg(id::text || '/' || coalesce(extract(epoch FROM expires_at - created)::text, '-'), ' ' ORDER BY id)
  FROM items WHERE owner IN (0, %d))`

// isolationCheckColumns names isolationCheck's columns.
var isolationCheckColumns = []string{"search_path", "TimeZone", "statement_timeout", "work_mem", "ttlproxy.ttl",
	"app.x", "app.y", "current_user", "session_user", "role", "lock_timeout", "app.fn", "rows"}

// isolationReported are the reported parameters compared after each
// transaction.
var isolationReported = []string{"TimeZone", "DateStyle", "IntervalStyle", "application_name", "is_superuser",
	"session_authorization", "standard_conforming_strings", "client_encoding"}

// check runs the check statement on both sides and compares.
func (c *isolationClient) check() bool {
	sql := fmt.Sprintf(isolationCheck, c.owner())
	mode := isolationModes[c.rng.IntN(len(isolationModes))]
	read := func(conn *pgx.Conn) ([]string, error) {
		ctx, cancel := context.WithTimeout(c.f.ctx, 3*time.Minute)
		defer cancel()
		vals := make([]string, len(isolationCheckColumns))
		var rows *string
		dest := []any{}
		for i := range vals[:len(vals)-1] {
			dest = append(dest, &vals[i])
		}
		dest = append(dest, &rows)
		err := conn.QueryRow(ctx, sql, mode).Scan(dest...)
		if rows != nil {
			vals[len(vals)-1] = *rows
		}
		return vals, err
	}
	got, gotErr := read(c.prx)
	want, wantErr := read(c.ref)
	switch {
	case gotErr == nil && wantErr == nil:
	case gotErr != nil && wantErr != nil && sqlstate(gotErr) == sqlstate(wantErr) && sqlstate(gotErr) != "":
		// Both failed alike: after DISCARD ALL pgx's statement cache
		// names statements neither server has (26000) until pgx
		// drops them.
		c.log("   check (%s): both failed: %v", mode, gotErr)
		return true
	default:
		c.log("   check (%s): proxy %v", mode, gotErr)
		c.log("   check: twin %v", wantErr)
		c.fail("the check failed on one side")
		return false
	}
	var diffs []string
	// What each session was told: the ParameterStatus values pgx kept.
	for _, name := range isolationReported {
		if g, w := c.prx.PgConn().ParameterStatus(name), c.ref.PgConn().ParameterStatus(name); g != w {
			diffs = append(diffs, fmt.Sprintf("ParameterStatus %s: proxy %q, dedicated session %q", name, g, w))
		}
	}
	for i, name := range isolationCheckColumns {
		if got[i] == want[i] {
			continue
		}
		if (name == "lock_timeout" || name == "app.fn") && c.ownOrDefault(got[i]) {
			// Set inside a function: lost when the client moved.
			continue
		}
		diffs = append(diffs, fmt.Sprintf("%s: proxy %q, dedicated session %q", name, got[i], want[i]))
	}
	c.bypassing = slices.Contains(c.f.bypass, want[7]) || slices.Contains(c.f.bypass, want[8])
	if len(diffs) > 0 {
		c.log("   check (%s): proxy %q", mode, got)
		c.log("   check: twin  %q", want)
		c.fail("after the transaction:\n    %s", strings.Join(diffs, "\n    "))
		return false
	}
	return true
}

// ownOrDefault: v is a default or a value this client set through fz_fn.
func (c *isolationClient) ownOrDefault(v string) bool {
	return v == "" || v == "0" || c.fnVals[v]
}

// TestPoolIsolationBoundSettings: a statement that changes a setting,
// prepared in one transaction and bound in a later one (pgx's statement
// cache prepares in a round trip of its own, then binds; a cached statement
// is only bound), must have its setting read back at the end of the
// transaction that runs it, or the client loses it at its next server. The
// isolation fuzz test found it; this is its smallest form: two clients on
// a pool of one server.
func TestPoolIsolationBoundSettings(t *testing.T) {
	s := newStack(t, stackOptions{
		setup: []string{`CREATE TABLE items (id int, expires_at timestamptz)`},
		rules: []ttl.Rule{{Table: "items", DefaultTTL: time.Hour}},
		pool:  &proxy.PoolSettings{DefaultPoolSize: 1},
	})
	ctx := context.Background()
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec} {
		a, b := s.connectMode(mode), s.connectMode(mode)
		for i, v := range []string{"4227kB", "5123kB", "6001kB"} {
			if _, err := a.Exec(ctx, "SELECT set_config('work_mem', $1, false)", v); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Exec(ctx, "SELECT 1"); err != nil { // takes the server: a reset
				t.Fatal(err)
			}
			if got := ids(t, a, "SHOW work_mem"); got != v {
				t.Errorf("%s, change %d: work_mem %s after another client used the server, want %s", mode, i, got, v)
			}
		}
	}
}

// TestPoolIsolationStatementNoLongerParses: a client's named statement that
// no longer parses under the client's current search_path is left out when
// the client's statements are parsed again on its next server; the client's
// session goes on, as a dedicated session's does until the statement is
// run. The isolation fuzz test found the session ended ("server refused the
// reset").
func TestPoolIsolationStatementNoLongerParses(t *testing.T) {
	s := newStack(t, stackOptions{
		setup: []string{`CREATE TABLE items (id int, expires_at timestamptz)`, `CREATE SCHEMA s2`,
			`CREATE FUNCTION public.fz_one() RETURNS int LANGUAGE sql AS 'SELECT 1'`},
		rules: []ttl.Rule{{Table: "items", DefaultTTL: time.Hour}},
		pool:  &proxy.PoolSettings{DefaultPoolSize: 1},
	})
	ctx := context.Background()
	a, b := s.connectMode(pgx.QueryExecModeCacheStatement), s.connect(s.proxied)
	// With an argument, so that pgx prepares it (named, cached).
	if _, err := a.Exec(ctx, "SELECT fz_one() + $1::int", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Exec(ctx, "SET search_path = s2"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Exec(ctx, "SELECT 1"); err != nil { // takes the server
		t.Fatal(err)
	}
	if got := ids(t, a, "SELECT 2"); got != "2" {
		t.Errorf("SELECT 2 after the move: %s", got)
	}
	_, err := a.Exec(ctx, "SELECT fz_one() + $1::int", 1)
	// A dedicated session fails the statement when it runs (42883); the
	// proxy left it out, so its Bind fails with 26000 (documented).
	if c := sqlstate(err); c != "42883" && c != "26000" {
		t.Errorf("the statement that no longer parses: %v, want 42883 or 26000", err)
	}
	if got := ids(t, a, "SHOW search_path"); got != "s2" {
		t.Errorf("search_path %s, want s2", got)
	}
}

// TestPoolIsolationDiscardTemp: DISCARD TEMP does not pin, so it runs when
// the pool's clients already hold max_pinned_connections pins, as it runs in
// a dedicated session. The isolation fuzz test found it refused (53000).
func TestPoolIsolationDiscardTemp(t *testing.T) {
	s := newStack(t, stackOptions{
		setup: []string{`CREATE TABLE items (id int, expires_at timestamptz)`},
		rules: []ttl.Rule{{Table: "items", DefaultTTL: time.Hour}},
		pool:  &proxy.PoolSettings{DefaultPoolSize: 2, MaxPinnedConnections: 1},
	})
	ctx := context.Background()
	a, b := s.connect(s.proxied), s.connect(s.proxied)
	if _, err := a.Exec(ctx, "CREATE TEMP TABLE items (id int)"); err != nil { // pins a
		t.Fatal(err)
	}
	for _, q := range []string{"DISCARD TEMP", "DISCARD TEMPORARY", "DISCARD ALL"} {
		if _, err := b.Exec(ctx, q); err != nil {
			t.Errorf("%s while another client is pinned: %v", q, err)
		}
	}
}
