#!/usr/bin/env bash
# Soak: mixed traffic through ttlproxy for DURATION seconds (default an
# hour) while the proxy is reloaded, the server restarted and the sweeper
# works, with a live-row check and a sample of the proxy's resources every
# INTERVAL seconds. Prints one Markdown table (a line per interval) and a
# pass/fail summary; exits 1 when a criterion fails.
#
#   bench/soak.sh                                 # an hour
#   SMOKE=1 bench/soak.sh                         # two minutes, every event at least twice (CI)
#   SMOKE=1 POOL_MODE=transaction bench/soak.sh   # the same through a transaction pool (CI)
#   DURATION=1200 RESTART_EVERY=300 bench/soak.sh
#
# Traffic, each client looping until the end (a client that fails, as every
# one does when the server restarts, starts again after 0.5 s):
#   bench      pgbench -M prepared, tpcb-like and select-only (1:3), -c 4,
#              -R RATE_BENCH: prepared statements; pgbench_accounts is a
#              TTL table (10% of its rows expire in a day, the rest never),
#              pgbench_history one with default_ttl 2m
#   ttl        pgbench -M simple -f (script below), -c 2, -R RATE_TTL: SET
#              ttlproxy.ttl to 5-90 s, an INSERT into events (stamped with
#              that TTL), reads through a view created through the proxy and
#              through a view created directly (which the proxy expands)
#   connect    pgbench -C -M extended select-only, two of -c 1, -R RATE_CONNECT in all:
#              a new connection per transaction
#   copy       psql every COPY_EVERY s: COPY into events of COPY_ROWS/2 rows
#              expiring in 10-120 s and of rows expired a minute ago, from
#              COPY_ROWS/2 a batch at the start up to 2 * COPY_ROWS at the
#              end (COPY FROM is not stamped: the rows carry their expiry)
#   inflow     pgbench -M simple -R INFLOW/20 through the proxy: INSERT into
#              events of 20 rows expiring 1-10 s later: INFLOW rows/s that
#              expire all along, which the sweeper must keep up with
#   writer     psql, one session: INSERT INTO ledger … RETURNING id, about 50
#              a second; writer-c: the same with a new psql per row, about 5
#              a second. A row is acknowledged when its id comes back.
# Events, at fixed times from the start:
#   reload     every RELOAD_EVERY s, SIGHUP with the configuration switched
#              between two that differ in events' default_ttl (30s/40s) and
#              the sweeper's batch_size, so each reload changes the rules
#              and re-prepares the sessions' statements; the reload must
#              succeed (ttlproxy_config_last_reload_success_timestamp_seconds
#              moves within 5 s)
#   restart    every RESTART_EVERY s (half an INTERVAL later, off the
#              samples), `pg_ctl restart -m fast`: every session loses its
#              server
#   sample     every INTERVAL s: /metrics (RSS, goroutines, fds, client
#              connections), the backlog and the rows swept (read directly),
#              then the live-row check
# The sweeper (interval 10 s, batch_pause 20ms) works on events, which
# starts with BACKLOG rows expired an hour ago and gets new expired rows all
# along, at a rate that grows over the run (COPY's expired rows four times
# as many at the end as at the start; the ttl script's rows,
# pgbench_history's), while it paces itself against the foreground.
#
# Pass criteria:
#   expired rows served 0
#       The check reads events through the proxy in one REPEATABLE READ
#       transaction five ways (a query, a PREPAREd statement, the view made
#       through the proxy, the view made directly, COPY (…) TO STDOUT), each
#       returning ids (the query also expires_at), along with now() and the
#       snapshot (pg_current_snapshot()). The five must return the same ids,
#       and no row with expires_at < now() — the filter's own now(), so
#       there is no boundary race. Then the reference: directly, as a role
#       whose row-security policy is the rule's live condition at now()
#       (the differential oracle of tests/ does the same), in a transaction
#       of its own a moment later. A row served but not in the reference
#       must have expired in between (its expires_at before the reference's
#       now()); a row in the reference but not served must have been
#       committed after the proxy's snapshot (its xmin not visible in it).
#       Anything else counts: served rows that were not live, or live rows
#       that were hidden.
#   acknowledged writes lost 0
#       ledger rows have a TTL of a day (default_ttl, stamped by the proxy),
#       so none expires; at the end every acknowledged id must be in the
#       table (read directly) and carry an expiry (the stamp).
#   resources flat after warm-up
#       least-squares line through the samples after WARMUP s (samples
#       within RESTART_GRACE s of a restart left out); the growth the line
#       gives over that span must stay under RSS_GROWTH_MIB (default 16),
#       GOROUTINE_GROWTH (default 40) and FD_GROWTH (default 20): see
#       "Thresholds" in bench/README.md.
#   sweeper keeps up
#       the backlog's age (now() less the expiry of the oldest expired row
#       still present in events and pgbench_history, read directly) must
#       not grow after WARMUP s: the least-squares line through the samples
#       (as for the resources) may rise by at most AGE_GROWTH s (default 30,
#       three sweeper intervals). A sweeper that keeps up deletes every row
#       within about an interval and a run of its expiry, whatever the
#       inflow, so the age stays flat even while the inflow grows; one that
#       falls behind leaves rows that age a second per second.
#   errors only inside restart windows
#       every line a client writes to standard error is stamped with its
#       time; it must fall between 1 s before a restart began and
#       RESTART_GRACE s (default 10) after the server accepted connections
#       again. The live-row check and the reloads must never fail; the
#       proxy must stay up and log no panic.
#
# Environment:
#   SMOKE=1        the short form CI runs: the defaults become DURATION 120,
#                  INTERVAL 10, RELOAD_EVERY 20, RESTART_EVERY 50, WARMUP 30,
#                  BACKLOG 20000 (each can still be set)
#   DURATION       seconds of traffic (default 3600)
#   INTERVAL       seconds between samples and checks, one table line each (default 60)
#   RELOAD_EVERY   seconds between reloads (default 60)
#   RESTART_EVERY  seconds between server restarts (default 600)
#   RESTART_GRACE  seconds after a restart in which client errors are expected (default 10)
#   WARMUP         seconds before the samples the slopes are fitted to (default 300)
#   POOL_MODE      session (default) or transaction: the proxy's pool_mode; in
#                  transaction mode clients log in to the proxy (auth_type
#                  trust, an auth_file naming postgres), on default_pool_size
#                  POOL (default 20) server connections, and a restart must
#                  cost them no more than it does in session mode
#   SCALE          pgbench scale (default 2)
#   BACKLOG        expired rows in events at the start (default 200000)
#   RATE_BENCH, RATE_TTL, RATE_CONNECT   pgbench -R of each client group (default 100, 40, 10)
#   COPY_EVERY, COPY_ROWS                seconds between COPY batches, rows per batch (default 5, 1000)
#   INFLOW         rows/s of the inflow client, a multiple of 20 (default 200)
#   AGE_GROWTH     pass threshold of the backlog's age, seconds (default 30)
#   RSS_GROWTH_MIB, GOROUTINE_GROWTH, FD_GROWTH   pass thresholds (default 16, 40, 20)
#   PG_BINDIR, KEEP   see lib.sh (KEEP=1 keeps the logs, configurations and samples)
set -euo pipefail

if [ "${SMOKE:-}" = 1 ]; then
	: "${DURATION:=120}" "${INTERVAL:=10}" "${RELOAD_EVERY:=20}" "${RESTART_EVERY:=50}" "${WARMUP:=30}" "${BACKLOG:=20000}"
fi
DURATION=${DURATION:-3600}
INTERVAL=${INTERVAL:-60}
RELOAD_EVERY=${RELOAD_EVERY:-60}
RESTART_EVERY=${RESTART_EVERY:-600}
RESTART_GRACE=${RESTART_GRACE:-10}
WARMUP=${WARMUP:-300}
SCALE=${SCALE:-2}
POOL_MODE=${POOL_MODE:-session}
POOL=${POOL:-20}
BACKLOG=${BACKLOG:-200000}
RATE_BENCH=${RATE_BENCH:-100}
RATE_TTL=${RATE_TTL:-40}
RATE_CONNECT=${RATE_CONNECT:-10}
COPY_EVERY=${COPY_EVERY:-5}
COPY_ROWS=${COPY_ROWS:-1000}
INFLOW=${INFLOW:-200}
AGE_GROWTH=${AGE_GROWTH:-30}
RSS_GROWTH_MIB=${RSS_GROWTH_MIB:-16}
GOROUTINE_GROWTH=${GOROUTINE_GROWTH:-40}
FD_GROWTH=${FD_GROWTH:-20}

PROG=soak.sh
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

for v in DURATION INTERVAL RELOAD_EVERY RESTART_EVERY RESTART_GRACE SCALE POOL RATE_BENCH RATE_TTL RATE_CONNECT COPY_EVERY COPY_ROWS INFLOW AGE_GROWTH; do
	case ${!v} in '' | *[!0-9]* | 0*) die "$v must be a positive integer, got '${!v}'" ;; esac
done
[ $((INFLOW % 20)) = 0 ] || die "INFLOW must be a multiple of 20, got $INFLOW"
[ "$RATE_CONNECT" -ge 2 ] || die "RATE_CONNECT must be at least 2 (two clients), got $RATE_CONNECT"
for v in WARMUP BACKLOG RSS_GROWTH_MIB GOROUTINE_GROWTH FD_GROWTH; do
	case ${!v} in '' | *[!0-9]*) die "$v must be a whole number, got '${!v}'" ;; esac
done
case $POOL_MODE in session | transaction) ;; *) die "POOL_MODE must be session or transaction, got '$POOL_MODE'" ;; esac
[ "$WARMUP" -lt "$DURATION" ] || die "WARMUP ($WARMUP) must be shorter than DURATION ($DURATION)"
command -v pgbench >/dev/null || die "pgbench not found (install postgresql-client or postgresql-contrib)"

unset PGSERVICE PGSERVICEFILE PGOPTIONS PGPASSWORD PGPASSFILE PGHOST PGHOSTADDR PGPORT PGUSER PGDATABASE
export PGSSLMODE=disable PGCONNECT_TIMEOUT=5

start_cluster fsync=off shared_buffers=128MB max_connections=200
log "pgbench -i -s $SCALE"
pgbench -i -q -s "$SCALE" -h 127.0.0.1 -p "$PGPORT" -U postgres bench >"$WORK/pgbench-init.log" 2>&1 ||
	die "pgbench -i failed: $(cat "$WORK/pgbench-init.log")"

log "building events ($BACKLOG expired rows), ledger, the reference role"
psql_q -d bench <<SQL
ALTER TABLE pgbench_accounts ADD COLUMN expires_at timestamptz;
UPDATE pgbench_accounts SET expires_at = now() + interval '1 day' WHERE aid % 10 = 0;
-- Every TTL table has an index on its expiry column: without one the
-- sweeper walks the table's blocks, paced under load, on every run (a
-- minute and more for pgbench_accounts here), and each reload that changes
-- the tables starts the run again from the first table.
CREATE INDEX ON pgbench_accounts (expires_at);
ALTER TABLE pgbench_history ADD COLUMN expires_at timestamptz;
CREATE INDEX ON pgbench_history (expires_at);
CREATE TABLE events (id bigserial PRIMARY KEY, aid int NOT NULL, payload text, expires_at timestamptz);
INSERT INTO events (aid, payload, expires_at)
	SELECT g % 1000, 'backlog', now() - interval '1 hour' FROM generate_series(1, $BACKLOG) AS g;
CREATE INDEX ON events (expires_at);
CREATE INDEX ON events (aid);
CREATE TABLE ledger (id bigint PRIMARY KEY, writer text NOT NULL, expires_at timestamptz);
CREATE INDEX ON ledger (expires_at);
-- The reference: rows a role sees under a policy that is the rule's live
-- condition at now(), as tests/oraclegen_test.go builds it.
CREATE ROLE soak_reader NOLOGIN;
GRANT SELECT ON events, ledger TO soak_reader;
ALTER TABLE events ENABLE ROW LEVEL SECURITY;
CREATE POLICY live ON events FOR ALL TO soak_reader USING (expires_at IS NULL OR expires_at >= now());
-- A view made directly, which the proxy expands (security_invoker: the
-- table has row security).
CREATE VIEW events_dv WITH (security_invoker = true) AS SELECT id, aid, payload FROM events;
VACUUM ANALYZE;
SQL

PROXY_PORT=$(free_port)
ADMIN_PORT=$(free_port)
# config TTL BATCH: the proxy's configuration; reloads switch between two.
config() {
	cat <<EOF
listen: 127.0.0.1:$PROXY_PORT
admin_listen: 127.0.0.1:$ADMIN_PORT
upstream: 127.0.0.1:$PGPORT
upstream_tls: {sslmode: disable}
tables:
  - table: public.pgbench_accounts
  - table: public.pgbench_history
    default_ttl: 2m
  - table: public.events
    default_ttl: $1
  - table: public.ledger
    default_ttl: 1d
sweeper: {dsn: '$DSN', interval: 10s, batch_size: $2, batch_pause: 20ms}
EOF
	if [ "$POOL_MODE" = transaction ]; then
		printf 'pool_mode: transaction\nauth_type: trust\nauth_file: %s\ndefault_pool_size: %s\n' \
			"$WORK/userlist.txt" "$POOL"
	fi
}
printf '"postgres" ""\n' >"$WORK/userlist.txt"
# start_proxy: starts ttlproxy on PROXY_PORT and ADMIN_PORT; false when it
# exits first (a port taken since free_port looked: the machine is shared).
start_proxy() {
	config 30s 1000 >"$WORK/a.yaml"
	config 40s 500 >"$WORK/b.yaml"
	cp "$WORK/a.yaml" "$WORK/run.yaml"
	"$WORK/ttlproxy" serve --config "$WORK/run.yaml" >"$WORK/proxy.log" 2>&1 &
	PROXY_PID=$!
	PIDS+=("$PROXY_PID")
	for _ in $(seq 100); do
		kill -0 "$PROXY_PID" 2>/dev/null || return 1
		if (exec 3<>"/dev/tcp/127.0.0.1/$PROXY_PORT") 2>/dev/null &&
			(exec 3<>"/dev/tcp/127.0.0.1/$ADMIN_PORT") 2>/dev/null; then
			return 0
		fi
		sleep 0.1
	done
	die "ttlproxy did not start listening on ports $PROXY_PORT and $ADMIN_PORT: $(tail -3 "$WORK/proxy.log")"
}
tries=0
until start_proxy; do
	tries=$((tries + 1))
	[ "$tries" -lt 5 ] || die "ttlproxy did not start: $(tail -3 "$WORK/proxy.log")"
	log "ttlproxy exited at start ($(tail -1 "$WORK/proxy.log")): trying other ports"
	PROXY_PORT=$(free_port)
	ADMIN_PORT=$(free_port)
done
# metrics: the proxy's /metrics (curl, or bash's /dev/tcp without it).
metrics() {
	if command -v curl >/dev/null; then
		curl -sf --max-time 5 "http://127.0.0.1:$ADMIN_PORT/metrics"
		return
	fi
	local fd
	exec {fd}<>"/dev/tcp/127.0.0.1/$ADMIN_PORT" || return 1
	printf 'GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&"$fd"
	timeout 5 cat <&"$fd" | tr -d '\r' | sed '1,/^$/d'
	exec {fd}<&-
}

# psql_proxy ARGS...: psql through the proxy.
psql_proxy() { psql -X -q -h 127.0.0.1 -p "$PROXY_PORT" -U postgres -d bench -v ON_ERROR_STOP=1 "$@"; }

psql_proxy -c "CREATE VIEW events_v WITH (security_invoker = true) AS SELECT id, aid, payload, expires_at FROM events" ||
	die "creating the view events_v through the proxy failed"

cat >"$WORK/inflow.sql" <<'EOF'
INSERT INTO events (aid, payload, expires_at)
	SELECT g % 1000, 'inflow', now() + (1 + random() * 9) * interval '1 second' FROM generate_series(1, 20) AS g;
EOF

cat >"$WORK/ttl.sql" <<'EOF'
\set ttl random(5, 90)
\set aid random(1, 1000)
SET ttlproxy.ttl = ':ttl seconds';
INSERT INTO events (aid, payload) VALUES (:aid, 'ttl :ttl');
SELECT count(*) FROM events_v WHERE aid = :aid;
SELECT count(*) FROM events_dv WHERE aid = :aid;
EOF

# sample [FILE]: one line of FILE (default samples), "time rss goroutines
# fds sessions backlog deleted reload_ok age": the first five from the
# proxy's /metrics; the backlog (rows expired and not yet deleted in events
# and pgbench_history), the rows deleted from them (pg_stat_user_tables'
# n_tup_del: only the sweeper deletes there) and the backlog's age in
# seconds (0: none) read directly, since the sweeper's own counters start
# again from 0 at every reload.
: >"$WORK/samples"
: >"$WORK/problems"
: >"$WORK/reloads"
: >"$WORK/restarts"
sample() {
	local m out=${1:-$WORK/samples}
	local m db t
	t=$(date +%s)
	m=$(metrics) || { echo "$t metrics unavailable" >>"$WORK/problems"; return; }
	db=$(psql_q -d bench -At -F ' ' -c "SELECT
		(SELECT count(*) FROM events WHERE expires_at < now()) + (SELECT count(*) FROM pgbench_history WHERE expires_at < now()),
		(SELECT sum(n_tup_del) FROM pg_stat_user_tables WHERE relname IN ('events', 'pgbench_history')),
		coalesce(extract(epoch FROM now() - least((SELECT min(expires_at) FROM events), (SELECT min(expires_at) FROM pgbench_history)))::int, 0)") ||
		{ echo "$t backlog unavailable" >>"$WORK/problems"; return; }
	printf '%s\n' "$m" | awk -v t="$t" -v db="$db" '
		$1 == "process_resident_memory_bytes" { rss = $2 }
		$1 == "go_goroutines" { g = $2 }
		$1 == "process_open_fds" { fd = $2 }
		$1 == "ttlproxy_proxy_client_connections" { s = $2 }
		$1 == "ttlproxy_config_last_reload_successful" { ok = $2 }
		END { split(db, d, " "); printf "%d %.0f %d %d %d %s %s %d %d\n", t, rss, g, fd, s, d[1], d[2], ok, (d[3] > 0 ? d[3] : 0) }' >>"$out"
}

# At rest before the traffic: compared with the figures after it.
sample "$WORK/rest"
START=$(date +%s)
END=$((START + DURATION))
mkdir -p "$WORK/out" "$WORK/tx"
ERRLOG=$WORK/errors.log
: >"$ERRLOG"

# stamp NAME: copies standard input to ERRLOG, each line prefixed with the
# Unix time it arrived and NAME.
stamp() {
	local line
	while IFS= read -r line; do
		printf '%(%s)T %s %s\n' -1 "$1" "$line"
	done >>"$ERRLOG"
}

# nap SECONDS: sleep without a process.
exec {NAPFD}<> <(:)
nap() { read -r -t "$1" -u "$NAPFD" || true; }

# client NAME COMMAND...: runs COMMAND again and again until END (after a
# failure, 0.5 s later), its standard error stamped into ERRLOG, its output
# appended to out/NAME. "{T}" in the arguments becomes the seconds left and
# "{N}" the run's number. The command runs in a process group of its own
# (setsid), its pid in NAME.pid: at exit the loop is stopped, then that
# group (a psql pipeline has several processes).
CLIENTS=()
stop_clients() {
	local name pid
	for pid in "${CLIENT_LOOPS[@]}"; do
		stop_pid "$pid"
	done
	for name in "${CLIENTS[@]}"; do
		[ -f "$WORK/$name.pid" ] || continue
		pid=$(cat "$WORK/$name.pid")
		kill -TERM -- "-$pid" 2>/dev/null || true
	done
	CLIENT_LOOPS=() CLIENTS=()
}
CLIENT_LOOPS=()
trap 'stop_clients; cleanup' EXIT
client() {
	local name=$1
	shift
	CLIENTS+=("$name")
	(
		local n=0 left a args rc
		while left=$((END - $(date +%s))) && [ "$left" -gt 0 ]; do
			n=$((n + 1))
			args=()
			for a in "$@"; do
				a=${a//\{T\}/$left}
				args+=("${a//\{N\}/$n}")
			done
			setsid "${args[@]}" >>"$WORK/out/$name" 2> >(stamp "$name") &
			echo $! >"$WORK/$name.pid"
			rc=0
			wait $! || rc=$?
			[ "$rc" = 0 ] || nap 0.5
		done
	) &
	CLIENT_LOOPS+=("$!")
}

PGB=(pgbench -h 127.0.0.1 -p "$PROXY_PORT" -U postgres -n -T '{T}' --log)
client bench "${PGB[@]}" -M prepared -b tpcb-like@1 -b select-only@3 -c 4 -j 1 -R "$RATE_BENCH" \
	--log-prefix="$WORK/tx/bench-{N}" bench
client ttl "${PGB[@]}" -M simple -f "$WORK/ttl.sql" -c 2 -j 1 -R "$RATE_TTL" \
	--log-prefix="$WORK/tx/ttl-{N}" bench
# Not logged: the inflow is load for the sweeper, not traffic measured.
client inflow pgbench -h 127.0.0.1 -p "$PROXY_PORT" -U postgres -n -T '{T}' -M simple -f "$WORK/inflow.sql" -c 1 -j 1 \
	-R "$((INFLOW / 20))" bench
# One pgbench per client here: a client between two connections may miss a
# restart that aborts the other, and pgbench would go on with fewer clients
# until its end, and report "Run was aborted" then.
for i in 1 2; do
	client "connect$i" "${PGB[@]}" -C -M extended -b select-only -c 1 -j 1 -R "$(((RATE_CONNECT + 2 - i) / 2))" \
		--log-prefix="$WORK/tx/connect$i-{N}" bench
done

# copy_batch: one COPY into events: COPY_ROWS/2 rows expiring in 10-120 s
# and rows expired a minute ago, COPY_ROWS/2 at START growing linearly to
# 2 * COPY_ROWS at END (their expiry in the data: COPY FROM is not stamped).
copy_batch() {
	awk -v n="$COPY_ROWS" -v now="$(date +%s)" -v start="$START" -v end="$END" -v seed="$RANDOM" 'BEGIN {
		srand(seed)
		live = int(n / 2); expired = int(n / 2 * (1 + 3 * (now - start) / (end - start)))
		for (i = 0; i < live + expired; i++) {
			e = i < live ? now + 10 + int(rand() * 110) : now - 60
			printf "%d\tcopy\t%s\n", int(rand() * 1000), strftime("%Y-%m-%d %H:%M:%S+00", e, 1)
		}
	}' | psql_proxy -c "COPY events (aid, payload, expires_at) FROM STDIN"
}
# writer ID STEP: one psql session inserting ledger rows ID+1, ID+2, …
# every STEP seconds; prints each id the server acknowledged.
writer() {
	local id=$1 step=$2
	while [ "$(date +%s)" -lt "$END" ]; do
		id=$((id + 1))
		printf "INSERT INTO ledger (id, writer) VALUES (%d, 'writer') RETURNING id;\n" "$id"
		nap "$step"
	done | psql_proxy -At
}
# writer_c ID STEP: the same with a new connection per row.
writer_c() {
	local id=$1 step=$2
	while [ "$(date +%s)" -lt "$END" ]; do
		id=$((id + 1))
		psql_proxy -At -c "INSERT INTO ledger (id, writer) VALUES ($id, 'writer-c') RETURNING id" || return 1
		nap "$step"
	done
}
# Ids: writer run N writes from N * 10^9, writer-c's from 10^15 + N * 10^9.
client writer bash -c "$(declare -f nap writer psql_proxy); exec {NAPFD}<> <(:); END=$END PROXY_PORT=$PROXY_PORT writer \$((\$1 * 1000000000)) 0.02" writer '{N}'
client writer-c bash -c "$(declare -f nap writer_c psql_proxy); exec {NAPFD}<> <(:); END=$END PROXY_PORT=$PROXY_PORT writer_c \$((1000000000000000 + \$1 * 1000000000)) 0.2" writer-c '{N}'
client copy bash -c "$(declare -f copy_batch psql_proxy nap); exec {NAPFD}<> <(:); START=$START END=$END PROXY_PORT=$PROXY_PORT COPY_ROWS=$COPY_ROWS
	while [ \$(date +%s) -lt $END ]; do copy_batch || exit 1; nap $COPY_EVERY; done"


# check: the live-row check (see the header); one line of CHECKS, "time
# served expired_served forms_differ not_live hidden", or a line in
# problems when it could not run.
: >"$WORK/checks"
check() {
	local t=$1 p r snap tp tr cand hidden=0
	p=$WORK/check-proxy r=$WORK/check-ref
	if ! timeout 60 psql -X -q -h 127.0.0.1 -p "$PROXY_PORT" -U postgres -d bench -v ON_ERROR_STOP=1 \
		-At -F ' ' >"$p" 2>"$p.err" <<'SQL'; then
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT 'now', (extract(epoch FROM now()) * 1000000)::bigint, pg_current_snapshot();
SELECT 'q', id, (extract(epoch FROM expires_at) * 1000000)::bigint FROM events;
PREPARE soak_check(bigint) AS SELECT 'p', id FROM events WHERE id > $1;
EXECUTE soak_check(0);
SELECT 'v', id FROM events_v;
SELECT 'w', id FROM events_dv;
COPY (SELECT 'c', id FROM events) TO STDOUT WITH (DELIMITER ' ');
COMMIT;
SQL
		echo "$t check through the proxy failed: $(head -c 300 "$p.err")" >>"$WORK/problems"
		return
	fi
	if ! timeout 60 psql -X -q -h 127.0.0.1 -p "$PGPORT" -U postgres -d bench -v ON_ERROR_STOP=1 \
		-At -F ' ' >"$r" 2>"$r.err" <<'SQL'; then
BEGIN ISOLATION LEVEL REPEATABLE READ;
SET LOCAL ROLE soak_reader;
SELECT 'now', (extract(epoch FROM now()) * 1000000)::bigint;
SELECT 'r', id, (extract(epoch FROM expires_at) * 1000000)::bigint FROM events;
COMMIT;
SQL
		echo "$t reference read failed: $(head -c 300 "$r.err")" >>"$WORK/problems"
		return
	fi
	read -r _ tp snap < <(grep '^now ' "$p")
	read -r _ tr < <(grep '^now ' "$r")
	# The proxy's forms against its query, its rows against its now() and
	# against the reference; prints "served expired forms_differ not_live",
	# then the ids only the reference has, one a line.
	awk -v tp="$tp" -v tr="$tr" '
		FNR == 1 { f++ }
		f == 1 && $1 == "q" { q[$2] = $3; nq++; if ($3 != "" && $3 < tp) expired++ }
		f == 1 && ($1 == "p" || $1 == "v" || $1 == "w" || $1 == "c") { seen[$1, $2] = 1; n[$1]++ }
		f == 2 && $1 == "r" { ref[$2] = $3 }
		END {
			for (id in q) for (k = 1; k <= 4; k++) { form = substr("pvwc", k, 1); if (!((form, id) in seen)) differ++ }
			for (k = 1; k <= 4; k++) { form = substr("pvwc", k, 1); if (n[form] != nq) differ++ }
			for (id in q) if (!(id in ref) && !(q[id] != "" && q[id] < tr)) notlive++
			printf "%d %d %d %d\n", nq, expired, differ, notlive
			for (id in ref) if (!(id in q)) print id
		}' "$p" "$r" >"$WORK/check-result"
	cand=$(tail -n +2 "$WORK/check-result" | paste -sd, -)
	if [ -n "$cand" ]; then
		hidden=$(psql_q -d bench -At <<<"SELECT count(*) FROM events WHERE id = ANY ('{$cand}'::bigint[])
			AND pg_visible_in_snapshot(xmin::text::xid8, '$snap'::pg_snapshot)") || {
			echo "$t reference snapshot query failed" >>"$WORK/problems"
			return
		}
	fi
	echo "$t $(head -1 "$WORK/check-result") $hidden" >>"$WORK/checks"
}

reload() {
	local t=$1 which=$2 before after
	cp "$WORK/$which.yaml" "$WORK/run.yaml"
	before=$(metrics | awk '$1 == "ttlproxy_config_last_reload_success_timestamp_seconds" { print $2 }') || true
	kill -HUP "$PROXY_PID"
	for _ in $(seq 50); do
		nap 0.1
		after=$(metrics | awk '$1 == "ttlproxy_config_last_reload_success_timestamp_seconds" { print $2 }') || true
		if [ -n "$after" ] && [ "$after" != "$before" ]; then
			echo "$t $which" >>"$WORK/reloads"
			return
		fi
	done
	echo "$t reload to $which.yaml did not succeed within 5 s" >>"$WORK/problems"
}

restart() {
	local t0 t1
	t0=$(date +%s)
	as_pg "$BIN/pg_ctl" -D "$DATA" -m fast -w -t 60 restart >>"$WORK/restart.log" 2>&1 ||
		echo "$t0 pg_ctl restart failed: $(tail -3 "$WORK/restart.log")" >>"$WORK/problems"
	t1=$(date +%s)
	echo "$t0 $t1" >>"$WORK/restarts"
}

log "soak for $DURATION s: reload every $RELOAD_EVERY s, restart every $RESTART_EVERY s, sample every $INTERVAL s"
next_sample=$((START + INTERVAL))
next_reload=$((START + RELOAD_EVERY))
# Restarts half an interval off the samples, so that no sample falls in
# a restart's window (those are left out of the slopes).
next_restart=$((START + RESTART_EVERY + INTERVAL / 2))
reloads=0
while now=$(date +%s) && [ "$now" -lt "$END" ]; do
	kill -0 "$PROXY_PID" 2>/dev/null || {
		echo "$now ttlproxy exited" >>"$WORK/problems"
		stop_clients
		break
	}
	if [ "$now" -ge "$next_restart" ]; then
		log "restarting PostgreSQL ($((now - START)) s)"
		restart
		next_restart=$((next_restart + RESTART_EVERY))
	fi
	if [ "$now" -ge "$next_reload" ]; then
		reloads=$((reloads + 1))
		reload "$now" "$([ $((reloads % 2)) = 1 ] && echo b || echo a)"
		next_reload=$((next_reload + RELOAD_EVERY))
	fi
	if [ "$now" -ge "$next_sample" ]; then
		sample
		check "$now"
		next_sample=$((next_sample + INTERVAL))
	fi
	nap 0.5
done
log "waiting for the clients to finish"
for pid in "${CLIENT_LOOPS[@]}"; do
	wait "$pid" || true
done
CLIENT_LOOPS=()
nap 2
sample
sample "$WORK/rest"
check "$(date +%s)"

# --- the figures ---------------------------------------------------------
[ -s "$WORK/samples" ] || die "no sample of the proxy's metrics was taken: $(cat "$WORK/problems")"
psql_q -d bench -At -c "SELECT id FROM ledger WHERE expires_at IS NOT NULL" | sort -u >"$WORK/ledger-stamped"
psql_q -d bench -At -c "SELECT id FROM ledger" | sort -u >"$WORK/ledger-all"
cat "$WORK/out/writer" "$WORK/out/writer-c" 2>/dev/null | grep -E '^[0-9]+$' | sort -u >"$WORK/acked" || true
acked=$(wc -l <"$WORK/acked")
lost=$(comm -23 "$WORK/acked" "$WORK/ledger-all" | wc -l)
unstamped=$(comm -23 "$WORK/ledger-all" "$WORK/ledger-stamped" | wc -l)
panics=$(grep -c 'panic' "$WORK/proxy.log" || true)

# Every time line of the run, one file per kind, "time …", sorted.
# BUCKETS: the sample times; a line belongs to the first sample at or after
# it (the last sample also takes what came after it).
cut -d' ' -f1 "$WORK/samples" >"$WORK/buckets"
# bucket FILE: prefixes each line of FILE (first field a Unix time) with its
# bucket's index (1-based).
bucket() {
	awk 'NR == FNR { b[++n] = $1; next }
		{ i = 1; while (i < n && $1 > b[i]) i++; print i, $0 }' "$WORK/buckets" "$1"
}
# restart windows: "from to" in Unix seconds.
awk -v g="$RESTART_GRACE" '{ print $1 - 1, $2 + g }' "$WORK/restarts" >"$WORK/windows"
# errors: "time in|out client line". pgbench's closing "Run was aborted"
# sums up errors stamped already.
awk 'NR == FNR { from[++n] = $1; to[n] = $2; next }
	/Run was aborted; the above results are incomplete/ { next }
	{ w = "out"; for (i = 1; i <= n; i++) if ($1 >= from[i] && $1 <= to[i]) w = "in"; $1 = $1 " " w; print }' \
	"$WORK/windows" "$ERRLOG" >"$WORK/errors"
errors_in=$(awk '$2 == "in"' "$WORK/errors" | wc -l)
errors_out=$(awk '$2 == "out"' "$WORK/errors" | wc -l)
# transactions: "end_time latency_ms" from every pgbench log. Under -R
# pgbench's latency counts from the scheduled start; the schedule lag (the
# last field) is taken off, so that a client starved of CPU on a busy
# machine does not pass for a slow proxy.
find "$WORK/tx" -type f -exec cat {} + |
	awk '$3 ~ /^[0-9]+$/ { printf "%d %.3f\n", $5, ($3 - (NF >= 7 ? $7 : 0)) / 1000 }' >"$WORK/latencies"
bucket "$WORK/latencies" | sort -k1,1n -k3,3g | awk '
	{ if ($1 != b) { flush(); b = $1; n = 0 } v[++n] = $3 }
	function flush() { if (n) { i = int(n * 0.99 + 0.999999); if (i > n) i = n; print b, n, v[i] } }
	END { flush() }' >"$WORK/tx-buckets"
bucket "$WORK/errors" | awk '{ c[$1]++ } END { for (b in c) print b, c[b] }' >"$WORK/error-buckets"
awk '{ print $1, "reload" }' "$WORK/reloads" | bucket /dev/stdin >"$WORK/event-buckets"
awk '{ print $1, "restart" }' "$WORK/restarts" | bucket /dev/stdin >>"$WORK/event-buckets"
bucket "$WORK/checks" >"$WORK/check-buckets"

printf '\n| at s | tx | p99 ms | RSS MiB | goroutines | fds | sessions | backlog | backlog age s | swept | served | errors | events |\n'
printf '|---|---|---|---|---|---|---|---|---|---|---|---|---|\n'
awk -v start="$START" -v d0="$(head -1 "$WORK/rest" | cut -d' ' -f7)" '
	FILENAME ~ /tx-buckets$/ { tx[$1] = $2; p99[$1] = $3; next }
	FILENAME ~ /error-buckets$/ { err[$1] = $2; next }
	FILENAME ~ /event-buckets$/ { ev[$1] = ev[$1] (ev[$1] == "" ? "" : ", ") $3; next }
	FILENAME ~ /check-buckets$/ { served[$1] = $3; next }
	{
		i = FNR
		if (FNR == 1) prev = d0
		# (n_tup_del starts again from 0 if the server loses its statistics)
		swept = $7 >= prev ? $7 - prev : $7
		printf "| %d | %d | %s | %.1f | %d | %d | %d | %d | %d | %d | %s | %d | %s |\n", $1 - start, tx[i],
			(i in p99) ? sprintf("%.1f", p99[i]) : "–", $2 / 1048576, $3, $4, $5, $6, $9, swept,
			(i in served) ? served[i] : "–", err[i], ev[i]
		prev = $7
	}' "$WORK/tx-buckets" "$WORK/error-buckets" "$WORK/event-buckets" "$WORK/check-buckets" "$WORK/samples"

# slope COLUMN SCALE: the growth over the fitted span of the least-squares
# line through the samples' COLUMN (divided by SCALE) after WARMUP,
# leaving out samples inside restart windows and the one after the traffic;
# "n/a" below 3 samples. Prints
# "growth samples".
slope() {
	awk -v c="$1" -v s="$2" -v from="$((START + WARMUP))" -v end="$END" '
		NR == FNR { wf[++w] = $1; wt[w] = $2; next }
		$1 >= from && $1 <= end {
			for (i = 1; i <= w; i++) if ($1 >= wf[i] && $1 <= wt[i]) next
			n++; x = $1 - from; y = $c / s; sx += x; sy += y; sxx += x * x; sxy += x * y
			if (n == 1) x0 = x; x1 = x
		}
		END {
			if (n < 3) { print "n/a", n; exit }
			d = n * sxx - sx * sx
			printf "%.1f %d\n", (n * sxy - sx * sy) / d * (x1 - x0), n
		}' "$WORK/windows" "$WORK/samples"
}
fail=0
verdict() { # NAME OK(0/1) TEXT
	if [ "$2" = 1 ]; then printf -- '- pass: %s: %s\n' "$1" "$3"; else printf -- '- FAIL: %s: %s\n' "$1" "$3"; fail=1; fi
}
# sum FIELD: the sum of CHECKS' FIELD.
sum() { awk -v f="$1" '{ s += $f } END { print s + 0 }' "$WORK/checks"; }
checks=$(wc -l <"$WORK/checks")
served_total=$(sum 2)
expired=$(($(sum 3) + $(sum 5)))
hidden=$(($(sum 6) + $(sum 4)))
printf '\n'
verdict "expired rows served" "$([ "$expired" = 0 ] && [ "$checks" -gt 0 ] && echo 1)" \
	"$expired in $checks checks of events ($served_total live rows served in all)"
verdict "live rows hidden" "$([ "$hidden" = 0 ] && echo 1)" "$hidden (rows the reference had and the proxy's snapshot should have, or forms of the read that differ)"
verdict "acknowledged writes lost" "$([ "$lost" = 0 ] && [ "$acked" -gt 0 ] && [ "$unstamped" = 0 ] && echo 1)" \
	"$lost of $acked ledger rows ($unstamped rows without the stamped expiry)"
read -r g_rss n_rss < <(slope 2 1048576)
read -r g_gor _ < <(slope 3 1)
read -r g_fd _ < <(slope 4 1)
flat() { [ "$1" != n/a ] && awk -v g="$1" -v m="$2" 'BEGIN { exit !(g <= m) }' && echo 1; }
verdict "RSS flat" "$(flat "$g_rss" "$RSS_GROWTH_MIB")" "fitted growth $g_rss MiB after warm-up ($n_rss samples; limit $RSS_GROWTH_MIB)"
verdict "goroutines flat" "$(flat "$g_gor" "$GOROUTINE_GROWTH")" "fitted growth $g_gor (limit $GOROUTINE_GROWTH)"
verdict "fds flat" "$(flat "$g_fd" "$FD_GROWTH")" "fitted growth $g_fd (limit $FD_GROWTH)"
read -r g_age n_age < <(slope 9 1)
verdict "sweeper keeps up" "$(flat "$g_age" "$AGE_GROWTH")" \
	"the backlog's age grew $g_age s after warm-up ($n_age samples; limit $AGE_GROWTH), last $(tail -1 "$WORK/samples" | cut -d' ' -f9) s, with $INFLOW rows/s expiring from the inflow client and more from COPY, ttl and pgbench_history"
verdict "errors only inside restart windows" "$([ "$errors_out" = 0 ] && echo 1)" \
	"$errors_in inside $(wc -l <"$WORK/restarts") restart windows, $errors_out outside"
if [ "$errors_out" != 0 ]; then
	awk '$2 == "out"' "$WORK/errors" | head -10 | sed 's/^/    /'
fi
nproblems=$(wc -l <"$WORK/problems")
verdict "checks, reloads, proxy" "$([ "$nproblems" = 0 ] && [ "$panics" = 0 ] && echo 1)" \
	"$(wc -l <"$WORK/reloads") reloads, $nproblems problems, $panics panics in the proxy's log"
if [ "$nproblems" != 0 ]; then
	head -10 "$WORK/problems" | sed 's/^/    /'
fi
read -r _ rss0 gor0 fd0 _ < <(head -1 "$WORK/rest")
read -r _ rss1 gor1 fd1 sess1 _ < <(tail -1 "$WORK/rest")
printf -- '- at rest, before the traffic and 2 s after it: RSS %s → %s MiB, goroutines %s → %s, fds %s → %s (%s client connections left)\n' \
	"$((rss0 / 1048576))" "$((rss1 / 1048576))" "$gor0" "$gor1" "$fd0" "$fd1" "$sess1"
printf '\n%s s; reload every %s s, restart every %s s (grace %s s), warm-up %s s; pgbench -R %s/%s/%s, scale %s; PostgreSQL %s, %s cores\n' \
	"$DURATION" "$RELOAD_EVERY" "$RESTART_EVERY" "$RESTART_GRACE" "$WARMUP" "$RATE_BENCH" "$RATE_TTL" "$RATE_CONNECT" "$SCALE" \
	"$(psql_q -d bench -At -c 'SHOW server_version')" "$(nproc)"
if [ "$fail" = 1 ]; then
	printf 'soak: FAIL\n'
	exit 1
fi
printf 'soak: pass\n'
