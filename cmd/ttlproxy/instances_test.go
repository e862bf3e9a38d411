package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/ttlproxy/ttlproxy/sweeper"
)

// runMainEnv makes the test binary run ttlproxy's main instead of the tests,
// so that a test can start ttlproxy processes and kill them.
const runMainEnv = "TTLPROXY_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// instance is a `ttlproxy serve` process started by the test.
type instance struct {
	name  string
	admin string
	cmd   *exec.Cmd
	out   bytes.Buffer
}

// startInstance runs `ttlproxy serve --config cfg` (and flags) as a
// process of its own; its sweeper connects with application_name name
// (PGAPPNAME).
func startInstance(t *testing.T, ctx context.Context, name, cfg string, flags ...string) *instance {
	t.Helper()
	in := &instance{name: name, admin: freeAddr(t)}
	args := append([]string{"serve", "--config", cfg, "--admin-listen", in.admin}, flags...)
	in.cmd = exec.CommandContext(ctx, os.Args[0], args...) //nolint:gosec // runs the test binary itself as ttlproxy
	in.cmd.Env = append(os.Environ(), runMainEnv+"=1", "PGAPPNAME="+name)
	in.cmd.Stdout, in.cmd.Stderr = &in.out, &in.out
	if err := in.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = in.cmd.Process.Kill()
		_ = in.cmd.Wait()
		if t.Failed() {
			t.Logf("%s's output:\n%s", name, in.out.String())
		}
	})
	waitHTTP(t, "http://"+in.admin+"/healthz")
	return in
}

// tables returns the instance's sweeper state per table (/status).
func (in *instance) tables(t *testing.T) map[string]sweeper.TableStatus {
	t.Helper()
	resp, err := http.Get("http://" + in.admin + "/status")
	if err != nil {
		t.Fatalf("%s: %v", in.name, err)
	}
	defer resp.Body.Close()
	var st adminStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("%s: /status: %v", in.name, err)
	}
	m := map[string]sweeper.TableStatus{}
	for _, ts := range st.Sweeper.Tables {
		m[ts.Table] = ts
	}
	return m
}

// TestInstancesShareSweeping: three `ttlproxy serve` processes with one
// configuration sweep one database. They never delete from the same slice
// at the same time (the small tables are one slice each; the big one, read
// sequentially because every row is expired, is cut into block slices),
// together they sweep every table, and when one sweeping the big table is
// killed with SIGKILL the others take its slice over at their next run. A
// statement-level trigger logs every DELETE with the instance's
// application_name, its transaction's start and end and the range of ids it
// deleted, which is what the checks read.
func TestInstancesShareSweeping(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cluster, conn := ownCluster(t, ctx)
	dsn := cluster.ConnString("postgres")
	do := func(sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	do(`CREATE TABLE sweep_log (tbl text, pid int, app text, started timestamptz, ended timestamptz, n bigint, min_id bigint, max_id bigint)`)
	do(`CREATE FUNCTION log_delete() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO sweep_log SELECT TG_TABLE_NAME, pg_backend_pid(), current_setting('application_name'),
				transaction_timestamp(), clock_timestamp(), count(*), min(id), max(id) FROM old_rows;
			RETURN NULL;
		END $$`)
	const big, small = 300_000, 1000
	names := []string{"t1", "t2", "t3", "t4", "t5", "t6"}
	for i, tbl := range names {
		n := small
		if i == 0 {
			n = big
		}
		do(fmt.Sprintf(`CREATE TABLE %s (id bigserial PRIMARY KEY, expires_at timestamptz)`, tbl))
		do(fmt.Sprintf(`INSERT INTO %s (expires_at) SELECT now() - interval '1 hour' FROM generate_series(1, %d)`, tbl, n))
		do(fmt.Sprintf(`CREATE INDEX ON %s (expires_at)`, tbl))
		do(fmt.Sprintf(`CREATE TRIGGER log_delete AFTER DELETE ON %s REFERENCING OLD TABLE AS old_rows
			FOR EACH STATEMENT EXECUTE FUNCTION log_delete()`, tbl))
	}
	do("ANALYZE")
	expiredBefore := func(tbl string, at time.Time) int {
		t.Helper()
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+tbl+" WHERE expires_at < $1", at).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	addExpired := func() time.Time {
		t.Helper()
		for _, tbl := range names[1:] {
			do(fmt.Sprintf(`INSERT INTO %s (expires_at) SELECT now() - interval '1 hour' FROM generate_series(1, %d)`, tbl, small))
		}
		return time.Now()
	}

	// Small batches with a pause make the big table take a few seconds, so
	// that an instance holds it long enough to be killed while it does.
	const interval = 2 * time.Second
	cfg := writeFile(t, "instances.yaml", fmt.Sprintf(`upstream: %s
admin: {enable_status: true}
listen: 127.0.0.1:%d
listen_reuseport: true
sweeper:
  dsn: '%s'
  interval: %s
  max_batch_size: 2000
  batch_pause: 10ms
tables:
  - table: t1
  - table: t2
  - table: t3
  - table: t4
  - table: t5
  - table: t6
`, cluster.Addr(), freePort(t), dsn, interval))
	started := time.Now()
	var ins []*instance
	for _, name := range []string{"sweeper_a", "sweeper_b", "sweeper_c"} {
		ins = append(ins, startInstance(t, ctx, name, cfg))
	}

	// Every table is swept, by whichever instance gets it first.
	for _, tbl := range names[1:] {
		for expiredBefore(tbl, started) > 0 {
			if ctx.Err() != nil {
				t.Fatalf("%s was not swept", tbl)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Logf("the small tables were swept %s after the instances started", time.Since(started).Round(time.Millisecond))

	// Wait for an instance to hold a slice of the big table with many rows
	// left in it: its advisory lock (pg_locks: the table's key in classid,
	// the slice in objid) and the expired rows in the slice's 1024 blocks.
	var (
		holder      *instance
		slice       int
		sliceLeft   int64
		lowID, hiID int64
	)
	for holder == nil {
		if ctx.Err() != nil {
			t.Fatal("no instance was found sweeping a slice of the big table with rows left")
		}
		rows, err := conn.Query(ctx, `SELECT a.application_name, l.objid::int,
				(SELECT count(*) FROM t1 WHERE ctid >= format('(%s,0)', l.objid::int * 1024)::tid
					AND ctid < format('(%s,0)', (l.objid::int + 1) * 1024)::tid AND expires_at < now()),
				(SELECT coalesce(min(id), 0) FROM t1 WHERE ctid >= format('(%s,0)', l.objid::int * 1024)::tid
					AND ctid < format('(%s,0)', (l.objid::int + 1) * 1024)::tid AND expires_at < now()),
				(SELECT coalesce(max(id), 0) FROM t1 WHERE ctid >= format('(%s,0)', l.objid::int * 1024)::tid
					AND ctid < format('(%s,0)', (l.objid::int + 1) * 1024)::tid AND expires_at < now())
			FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE l.locktype = 'advisory' AND l.objsubid = 2
				AND l.classid::bigint = (hashtext('ttlproxy.sweeper:public.t1')::bigint & 4294967295)`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var app string
			var sl int
			var left, lo, hi int64
			if err := rows.Scan(&app, &sl, &left, &lo, &hi); err != nil {
				t.Fatal(err)
			}
			if left < 20_000 || holder != nil {
				continue
			}
			for _, in := range ins {
				if in.name == app {
					holder, slice, sliceLeft, lowID, hiID = in, sl, left, lo, hi
				}
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}

	// Kill the holder; its sessions end and its lock with them.
	added := addExpired()
	if err := holder.cmd.Process.Signal(os.Kill); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	_ = holder.cmd.Wait()
	var survivors []*instance
	for _, in := range ins {
		if in != holder {
			survivors = append(survivors, in)
		}
	}
	var gone time.Time
	for {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", holder.name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			gone = time.Now()
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the server kept %s's sessions", holder.name)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The survivors' next runs (each one that starts once the killed
	// instance's sessions are gone) sweep everything, t1 included.
	for _, in := range survivors {
		for {
			all := true
			for _, tbl := range names {
				if ts := in.tables(t)["public."+tbl]; !ts.LastSwept.After(gone) || ts.SlicesHeld > 0 {
					all = false
				}
			}
			if all {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("%s did not finish a run after %s was killed", in.name, holder.name)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for _, tbl := range names {
		at := added
		if tbl == "t1" {
			at = killed
		}
		if n := expiredBefore(tbl, at); n > 0 {
			t.Errorf("%s: %d expired rows left after the survivors' next runs", tbl, n)
		}
	}
	// The first batch of another instance in the killed one's slice.
	var takeover, cleared time.Time
	if err := conn.QueryRow(ctx, `SELECT min(started) FROM sweep_log WHERE tbl = 't1' AND app <> $1 AND started > $2
		AND n > 0 AND max_id >= $3 AND min_id <= $4`, holder.name, killed, lowID, hiID).Scan(&takeover); err != nil {
		t.Fatalf("nobody took %s's slice %d of t1 over: %v", holder.name, slice, err)
	}
	if err := conn.QueryRow(ctx, `SELECT max(ended) FROM sweep_log WHERE tbl = 't1'`).Scan(&cleared); err != nil {
		t.Fatal(err)
	}
	var slices int
	if err := conn.QueryRow(ctx, `SELECT ceil(pg_relation_size('t1') / (1024 * 8192.0))`).Scan(&slices); err != nil {
		t.Fatal(err)
	}
	t.Logf("t1: %d block slices; %s killed at +%s holding slice %d with %d expired rows left; its sessions were gone after %s; another instance's first batch in its slice began %s after the kill (interval %s); t1 was clear %s after the kill",
		slices, holder.name, killed.Sub(started).Round(time.Millisecond), slice, sliceLeft, gone.Sub(killed).Round(time.Millisecond),
		takeover.Sub(killed).Round(time.Millisecond), interval, cleared.Sub(killed).Round(time.Millisecond))

	// Never two instances in one slice at once: no two DELETE transactions
	// of different instances on one table overlap in time and in ids.
	var overlaps int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM sweep_log a JOIN sweep_log b
		ON a.tbl = b.tbl AND a.app < b.app AND a.started < b.ended AND b.started < a.ended
		AND a.min_id <= b.max_id AND b.min_id <= a.max_id`).Scan(&overlaps); err != nil {
		t.Fatal(err)
	}
	if overlaps > 0 {
		t.Errorf("%d pairs of DELETE transactions of different instances overlapped in one slice", overlaps)
	}
	rows, err := conn.Query(ctx, `SELECT app, count(DISTINCT tbl), sum(n) FROM sweep_log GROUP BY app ORDER BY app`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var app string
		var tables int
		var n int64
		if err := rows.Scan(&app, &tables, &n); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s deleted %d rows from %d tables", app, n, tables)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestInstancesCancelThroughPeer: two `ttlproxy serve` processes in
// pool_mode transaction share one configuration file, each told its peer
// id by --peer-id; a statement running through either is cancelled by its
// client's key sent to the other, which forwards it (to_peer in its
// metrics).
func TestInstancesCancelThroughPeer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cluster, conn := ownCluster(t, ctx)
	var verifier string
	if err := conn.QueryRow(ctx, "SELECT rolpassword FROM pg_authid WHERE rolname = 'postgres'").Scan(&verifier); err != nil {
		t.Fatal(err)
	}
	userlist := writeFile(t, "userlist.txt", fmt.Sprintf("%q %q\n", "postgres", verifier))
	ports := []int{freePort(t), freePort(t)}
	cfg := writeFile(t, "peers.yaml", fmt.Sprintf(`upstream: %s
pool_mode: transaction
auth_file: %s
default_pool_size: 2
admin: {enable_status: true}
peers:
  - {id: 1, host: 127.0.0.1, port: %d}
  - {id: 2, host: 127.0.0.1, port: %d}
`, cluster.Addr(), userlist, ports[0], ports[1]))
	var ins []*instance
	for i, name := range []string{"peer_1", "peer_2"} {
		ins = append(ins, startInstance(t, ctx, name, cfg, "--peer-id", strconv.Itoa(i+1),
			"--listen", "127.0.0.1:"+strconv.Itoa(ports[i])))
	}
	for i := range ins {
		via, to := ports[i], ports[1-i]
		u, err := url.Parse(cluster.ConnString("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		u.Host = "127.0.0.1:" + strconv.Itoa(via)
		client, err := pgx.Connect(ctx, u.String())
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close(context.Background())
		// The key's process ID: bit 30 set, the peer id in bits 29–16
		// (proxy/cancel.go).
		if pid := client.PgConn().PID(); pid>>30 != 1 || pid&^(1<<30)>>16 != uint32(i+1) { //nolint:gosec // 1 or 2
			t.Fatalf("%s gave a key with process ID %#x, not of peer %d", ins[i].name, pid, i+1)
		}
		sql := "SELECT pg_sleep(10) -- through " + ins[i].name
		done := make(chan error, 1)
		var ended time.Time
		go func() {
			_, err := client.Exec(context.Background(), sql)
			ended = time.Now()
			done <- err
		}()
		for running := false; !running; {
			if err := conn.QueryRow(ctx, "SELECT count(*) = 1 FROM pg_stat_activity WHERE state = 'active' AND query = $1", sql).Scan(&running); err != nil {
				t.Fatal(err)
			}
			time.Sleep(5 * time.Millisecond)
		}
		key := pgproto3.CancelRequest{ProcessID: client.PgConn().PID(), SecretKey: client.PgConn().SecretKey()}
		pkt, err := key.Encode(nil)
		if err != nil {
			t.Fatal(err)
		}
		sent := time.Now()
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(to))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(pkt); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, _ = c.Read(make([]byte, 1)) // the instance closes it once the peer has taken the request
		c.Close()
		var pe *pgconn.PgError
		if err := <-done; !errors.As(err, &pe) || pe.Code != "57014" {
			t.Fatalf("through %s, cancelled through %s: %v, want 57014", ins[i].name, ins[1-i].name, err)
		}
		t.Logf("a statement through %s was cancelled through %s in %s", ins[i].name, ins[1-i].name, ended.Sub(sent).Round(10*time.Microsecond))
		if _, body := get(t, "http://"+ins[1-i].admin+"/metrics"); !strings.Contains(body, `ttlproxy_proxy_cancel_results_total{result="to_peer"} 1`) {
			t.Errorf("%s's metrics do not count the forward", ins[1-i].name)
		}
	}
	// ttlproxy status: each instance's pool holds its one client (idle,
	// its server back in the pool), and its PEERS table the forward it
	// made to the other instance.
	for i, in := range ins {
		var stOut, stErr bytes.Buffer
		if code := run(ctx, []string{"status", "--admin", "http://" + in.admin}, &stOut, &stErr); code != 0 {
			t.Fatalf("ttlproxy status of %s: %d %s", in.name, code, stErr.String())
		}
		out := stOut.String()
		// The rows of the POOLS and PEERS tables by their first column.
		rows := map[string][]string{}
		for _, table := range strings.Split(out, "\n\n") {
			if !strings.HasPrefix(table, "POOL DATABASE") && !strings.HasPrefix(table, "PEER ") {
				continue
			}
			for _, line := range strings.Split(table, "\n")[1:] {
				if f := strings.Fields(line); len(f) > 0 {
					rows[f[0]] = f
				}
			}
		}
		other := strconv.Itoa(2 - i)
		// POOL DATABASE USER MODE POOLS CLIENTS CL ACTIVE, WAITING, PINNED, SV ACTIVE, IDLE, LOGIN, LONGEST WAIT, SIZE
		pool := strings.Join(rows["postgres"], " ")
		// PEER ADDRESS LAST FORWARD RESULT FORWARDED FAILED
		peer := rows[other]
		if !strings.Contains(out, fmt.Sprintf("pool mode transaction, peer id %d", i+1)) ||
			pool != "postgres postgres transaction 1 1 0 0 0 0 1 0 0s 2" ||
			len(peer) != 6 || peer[1] != "127.0.0.1:"+strconv.Itoa(ports[1-i]) || peer[3] != "to_peer" || peer[4] != "1" || peer[5] != "0" ||
			!strings.Contains(strings.Join(rows[strconv.Itoa(i+1)], " "), "(this instance) - 0 0") {
			t.Errorf("ttlproxy status of %s:\n%s", in.name, out)
		}
	}
}
