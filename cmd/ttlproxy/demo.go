package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/config"
	"github.com/ttlproxy/ttlproxy/internal/pgcluster"
)

// The demo's fixed choices.
const (
	demoDatabase      = "demo"
	demoTTL           = 10 * time.Second
	demoSweepInterval = 5 * time.Second
	// checkTTL is the lifetime of the row the self-check inserts.
	checkTTL = 2 * time.Second
	// checkPoll is how often the self-check looks at the row.
	checkPoll = 100 * time.Millisecond
)

const demoSchema = `
CREATE TABLE public.sessions (
	id         serial PRIMARY KEY,
	user_name  text NOT NULL,
	expires_at timestamptz
);
-- Lets the sweeper find expired rows without reading the whole table.
CREATE INDEX sessions_expires_at ON public.sessions (expires_at);
`

// demoConfig is the configuration the demo runs with; upstream, listen and
// dsn are filled in.
const demoConfig = `upstream: %s
listen: %s
tables:
  - table: public.sessions
    column: expires_at
    default_ttl: %s
    refresh_on_update: true
sweeper:
  dsn: %s
  interval: %s
`

type demoOptions struct {
	port     int
	duration time.Duration
	check    bool
	logLevel string
}

func parseDemoFlags(args []string, stderr io.Writer) (demoOptions, int, bool) {
	var o demoOptions
	fs := newFlagSet("demo", "[--port 6432] [--duration D] [--check]", stderr)
	fs.IntVar(&o.port, "port", 6432, "proxy `port` on 127.0.0.1 (a free port is used when it is taken; 0 picks one)")
	fs.DurationVar(&o.duration, "duration", 0, "stop after this `duration` (default: run until Ctrl-C)")
	fs.BoolVar(&o.check, "check", false, "run a non-interactive self-check, then exit (0 on success)")
	fs.StringVar(&o.logLevel, "log-level", "warn", "log `level` of the proxy and sweeper: debug, info, warn or error")
	if code, ok := parseFlags(fs, args); !ok {
		return o, code, false
	}
	if fs.NArg() > 0 {
		return o, usageError(fs, "unexpected argument %q", fs.Arg(0)), false
	}
	if o.port < 0 || o.port > 65535 {
		return o, usageError(fs, "--port %d: out of range", o.port), false
	}
	if o.duration < 0 {
		return o, usageError(fs, "--duration must not be negative"), false
	}
	return o, exitOK, true
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, code, ok := parseDemoFlags(args, stderr)
	if !ok {
		return code
	}
	log, err := newLogger(stderr, o.logLevel, "text")
	if err != nil {
		fmt.Fprintf(stderr, "ttlproxy demo: %v\n", err)
		return exitUsage
	}
	if err := demo(ctx, o, log, stdout); err != nil {
		if ctx.Err() != nil {
			// Ctrl-C before the demo was up: the start-up error is noise.
			fmt.Fprintln(stderr, "ttlproxy demo: interrupted")
			return exitFailure
		}
		fmt.Fprintf(stderr, "ttlproxy demo: %v\n", err)
		return exitFailure
	}
	return exitOK
}

func demo(ctx context.Context, o demoOptions, log *slog.Logger, out io.Writer) (err error) {
	fmt.Fprintln(out, "Starting a throw-away PostgreSQL cluster...")
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{})
	if err != nil {
		return fmt.Errorf("starting PostgreSQL: %w", err)
	}
	defer func() {
		if stopErr := cluster.Stop(); stopErr != nil && err == nil {
			err = fmt.Errorf("stopping PostgreSQL: %w", stopErr)
		}
		fmt.Fprintln(out, "Stopped PostgreSQL and removed its data directory.")
	}()
	if err := createDemoDatabase(ctx, cluster); err != nil {
		return err
	}

	ln, note, err := listenDemo(ctx, o.port)
	if err != nil {
		return err
	}
	adminLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = ln.Close()
		return err
	}
	cfg, err := config.Parse(fmt.Appendf(nil, demoConfig, cluster.Addr(), ln.Addr(),
		demoTTL, strconv.Quote(cluster.ConnString(demoDatabase)), demoSweepInterval))
	if err != nil {
		panic("demo configuration: " + err.Error()) // a bug in demoConfig
	}
	cfg.AdminListen = adminLn.Addr().String()
	st, err := newStack(cfg, log)
	if err != nil {
		_ = ln.Close()
		_ = adminLn.Close()
		return err
	}
	runCtx, stopStack := context.WithCancel(ctx)
	defer stopStack()
	stackDone := make(chan error, 1)
	go func() { stackDone <- st.run(runCtx, ln, adminLn) }()
	defer func() {
		stopStack()
		if runErr := <-stackDone; runErr != nil && err == nil {
			err = runErr
		}
	}()

	proxyPort := ln.Addr().(*net.TCPAddr).Port
	env := demoEnv{
		proxyURL:    demoURL(cluster, net.JoinHostPort("127.0.0.1", strconv.Itoa(proxyPort))),
		upstreamURL: cluster.ConnString(demoDatabase),
		adminURL:    "http://" + adminLn.Addr().String(),
	}
	if err := insertSampleRows(ctx, env.proxyURL); err != nil {
		return err
	}
	printDemoBanner(out, cluster, env, proxyPort, note, o.check)

	if o.check {
		return demoCheck(ctx, env, out)
	}
	var timeout <-chan time.Time
	if o.duration > 0 {
		t := time.NewTimer(o.duration)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-ctx.Done():
		fmt.Fprintln(out, "\nInterrupted: shutting down.")
	case <-timeout:
		fmt.Fprintf(out, "\n%s elapsed: shutting down.\n", o.duration)
	case err := <-stackDone:
		stackDone <- err // for the deferred wait
		if err == nil {
			err = errors.New("proxy stopped unexpectedly")
		}
		return err
	}
	return nil
}

// demoEnv is where the demo's pieces can be reached.
type demoEnv struct {
	proxyURL    string // the demo database through the proxy
	upstreamURL string // the demo database directly
	adminURL    string // the admin HTTP server
}

func demoURL(c *pgcluster.Cluster, hostPort string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(c.User, c.Password),
		Host:     hostPort,
		Path:     "/" + demoDatabase,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// listenDemo listens on 127.0.0.1:port, or on a free port when that one is
// taken; note explains a fallback.
func listenDemo(ctx context.Context, port int) (ln net.Listener, note string, err error) {
	var lc net.ListenConfig
	ln, err = lc.Listen(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err == nil || port == 0 {
		return ln, "", err
	}
	ln, err2 := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err2 != nil {
		return nil, "", err
	}
	return ln, fmt.Sprintf("(port %d is not available: %v)", port, errors.Unwrap(err)), nil
}

func createDemoDatabase(ctx context.Context, c *pgcluster.Cluster) error {
	conn, err := pgx.Connect(ctx, c.ConnString("postgres"))
	if err != nil {
		return fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+demoDatabase)
	conn.Close(ctx)
	if err != nil {
		return fmt.Errorf("creating database %s: %w", demoDatabase, err)
	}
	conn, err = pgx.Connect(ctx, c.ConnString(demoDatabase))
	if err != nil {
		return fmt.Errorf("connecting to database %s: %w", demoDatabase, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, demoSchema); err != nil {
		return fmt.Errorf("creating table public.sessions: %w", err)
	}
	return nil
}

// insertSampleRows inserts, through the proxy, one row that never expires
// and one that the proxy stamps with the default TTL.
func insertSampleRows(ctx context.Context, proxyURL string) error {
	conn, err := pgx.Connect(ctx, proxyURL)
	if err != nil {
		return fmt.Errorf("connecting through the proxy: %w", err)
	}
	defer conn.Close(ctx)
	for _, q := range []string{
		"INSERT INTO sessions (user_name, expires_at) VALUES ('alice', NULL)",
		"INSERT INTO sessions (user_name) VALUES ('bob')",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

func printDemoBanner(out io.Writer, c *pgcluster.Cluster, env demoEnv, proxyPort int, note string, check bool) {
	w := bufio.NewWriter(out)
	defer w.Flush()
	p := func(format string, a ...any) { fmt.Fprintf(w, format+"\n", a...) }
	p("")
	p("ttlproxy demo is running.")
	p("")
	p("  PostgreSQL   %s (throw-away cluster, user postgres, password %s)", c.Addr(), c.Password)
	p("  database     %s, table public.sessions(id serial primary key, user_name text not null, expires_at timestamptz)", demoDatabase)
	p("  ttlproxy     %s", strings.TrimSpace(fmt.Sprintf("127.0.0.1:%d %s", proxyPort, note)))
	p("               public.sessions is a TTL table: column expires_at, default_ttl %s, refresh_on_update", demoTTL)
	p("  sweeper      deletes expired rows every %s", demoSweepInterval)
	p("  metrics      %s/metrics   (also /healthz and /readyz)", env.adminURL)
	p("")
	p("Two sample rows were inserted through the proxy:")
	p("  alice   expires_at NULL: never expires")
	p("  bob     no expires_at given: the proxy stamped now() + %s", demoTTL)
	p("")
	p("Connect through the proxy:")
	p("  psql %q", env.proxyURL)
	p("")
	p("and try:")
	p("  INSERT INTO sessions (user_name, expires_at) VALUES ('carol', now() + interval '5 seconds');")
	p("  SELECT * FROM sessions;      -- carol is there")
	p("  SELECT pg_sleep(6);")
	p("  SELECT * FROM sessions;      -- carol (and bob, after %s) are gone", demoTTL)
	p("  INSERT INTO sessions (user_name) VALUES ('dave');   -- stamped with now() + %s", demoTTL)
	p("  UPDATE sessions SET user_name = 'dave2' WHERE user_name = 'dave';  -- pushes dave's expiry out again")
	p("")
	p("The expired rows are still in the table until the sweeper deletes them; look directly:")
	p("  psql %q -c 'SELECT *, expires_at < now() AS expired FROM sessions'", env.upstreamURL)
	if !check {
		p("")
		p("Press Ctrl-C to stop everything and remove the cluster.")
	}
}

// demoCheck proves the soft TTL contract end to end and prints each step.
func demoCheck(ctx context.Context, env demoEnv, out io.Writer) error {
	start := time.Now()
	step := func(format string, a ...any) {
		fmt.Fprintf(out, "[%5.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, a...))
	}
	fmt.Fprintln(out, "\nSelf-check:")
	viaProxy, err := pgx.Connect(ctx, env.proxyURL)
	if err != nil {
		return fmt.Errorf("connecting through the proxy: %w", err)
	}
	defer viaProxy.Close(context.WithoutCancel(ctx))
	direct, err := pgx.Connect(ctx, env.upstreamURL)
	if err != nil {
		return fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	defer direct.Close(context.WithoutCancel(ctx))
	count := func(conn *pgx.Conn, id int) (int, error) {
		var n int
		err := conn.QueryRow(ctx, "SELECT count(*) FROM sessions WHERE id = $1", id).Scan(&n)
		return n, err
	}

	// The sample rows as stored: alice NULL, bob stamped by the proxy.
	var aliceNull bool
	var bobSeconds float64
	if err := direct.QueryRow(ctx, `SELECT
		(SELECT expires_at IS NULL FROM sessions WHERE user_name = 'alice'),
		(SELECT coalesce(extract(epoch FROM expires_at - now()), -1)::float8 FROM sessions WHERE user_name = 'bob')`).
		Scan(&aliceNull, &bobSeconds); err != nil {
		return fmt.Errorf("reading the sample rows: %w", err)
	}
	bobLeft := time.Duration(bobSeconds * float64(time.Second))
	if !aliceNull {
		return errors.New("sample row alice: expires_at should be NULL")
	}
	if bobLeft <= 0 || bobLeft > demoTTL {
		return fmt.Errorf("sample row bob: expected expires_at stamped about %s ahead, got %s", demoTTL, bobLeft)
	}
	step("sample rows upstream: alice expires_at NULL (never expires); bob stamped by the proxy, expires in %.1fs", bobLeft.Seconds())

	var id int
	insert := fmt.Sprintf("INSERT INTO sessions (user_name, expires_at) VALUES ('check', now() + interval '%d seconds') RETURNING id", int(checkTTL.Seconds()))
	if err := viaProxy.QueryRow(ctx, insert).Scan(&id); err != nil {
		return fmt.Errorf("%s: %w", insert, err)
	}
	inserted := time.Now()
	step("through the proxy: %s -> id %d", insert, id)

	if n, err := count(viaProxy, id); err != nil {
		return fmt.Errorf("row %d should be visible through the proxy: %w", id, err)
	} else if n != 1 {
		return fmt.Errorf("row %d should be visible through the proxy: count %d", id, n)
	}
	step("through the proxy: SELECT count(*) FROM sessions WHERE id = %d -> 1 (visible)", id)

	hiddenAt, stillUpstream, err := waitFor(ctx, checkTTL+10*time.Second, func() (bool, bool, error) {
		n, err := count(viaProxy, id)
		if err != nil || n != 0 {
			return false, false, err
		}
		u, err := count(direct, id)
		return true, u == 1, err
	})
	if err != nil {
		return fmt.Errorf("waiting for row %d to be hidden through the proxy: %w", id, err)
	}
	if hiddenAt.Sub(inserted) < checkTTL-time.Second/2 {
		// The filter uses the server's now(), so allow for clock skew
		// between the check and the database, but not for an early hide.
		return fmt.Errorf("row %d was hidden %s after insert, before its %s TTL", id, hiddenAt.Sub(inserted).Round(time.Millisecond), checkTTL)
	}
	if stillUpstream {
		step("through the proxy: row %d hidden (count 0) %.1fs after insert; directly upstream: still present (count 1)", id, hiddenAt.Sub(inserted).Seconds())
	} else {
		step("through the proxy: row %d hidden %.1fs after insert; the sweeper had already deleted it upstream", id, hiddenAt.Sub(inserted).Seconds())
	}

	if stillUpstream {
		deletedAt, _, err := waitFor(ctx, 3*demoSweepInterval, func() (bool, bool, error) {
			n, err := count(direct, id)
			return err == nil && n == 0, false, err
		})
		if err != nil {
			return fmt.Errorf("waiting for the sweeper to delete row %d: %w", id, err)
		}
		step("directly upstream: row %d deleted by the sweeper %.1fs after insert", id, deletedAt.Sub(inserted).Seconds())
	}

	if n, err := countUser(ctx, viaProxy, "alice"); err != nil {
		return fmt.Errorf("alice (never expires) should be visible through the proxy: %w", err)
	} else if n != 1 {
		return fmt.Errorf("alice (never expires) should be visible through the proxy: count %d", n)
	}
	step("through the proxy: alice (expires_at NULL) still visible")

	metrics, err := scrape(ctx, env.adminURL+"/metrics", "ttlproxy_sweeper_rows_deleted_total", "ttlproxy_proxy_statements_total")
	if err != nil {
		return err
	}
	step("metrics at %s/metrics:", env.adminURL)
	for _, l := range metrics {
		fmt.Fprintf(out, "          %s\n", l)
	}
	fmt.Fprintln(out, "Self-check passed.")
	return nil
}

func countUser(ctx context.Context, conn *pgx.Conn, user string) (int, error) {
	var n int
	err := conn.QueryRow(ctx, "SELECT count(*) FROM sessions WHERE user_name = $1", user).Scan(&n)
	return n, err
}

// waitFor polls cond every checkPoll until it reports done, fails, or
// timeout passes; it returns the time cond was first done and cond's flag.
func waitFor(ctx context.Context, timeout time.Duration, cond func() (done, flag bool, err error)) (time.Time, bool, error) {
	deadline := time.Now().Add(timeout)
	for {
		done, flag, err := cond()
		if err != nil {
			return time.Time{}, false, err
		}
		if done {
			return time.Now(), flag, nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, false, fmt.Errorf("not done after %s", timeout)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, false, ctx.Err()
		case <-time.After(checkPoll):
		}
	}
}

// scrape fetches a Prometheus text page and returns the sample lines of the
// named metrics; a metric without samples is an error.
func scrape(ctx context.Context, url string, names ...string) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetching metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetching metrics: %s", resp.Status)
	}
	var lines []string
	found := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		for _, n := range names {
			if strings.HasPrefix(l, n+"{") || strings.HasPrefix(l, n+" ") {
				lines = append(lines, l)
				found[n] = true
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading metrics: %w", err)
	}
	for _, n := range names {
		if !found[n] {
			return nil, fmt.Errorf("metrics: no samples of %s", n)
		}
	}
	return lines, nil
}
