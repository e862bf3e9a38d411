#!/usr/bin/env bash
# Transaction pooling (pool_mode: transaction) against session mode, against
# PgBouncer in transaction mode and against a direct connection: pgbench on
# one throw-away cluster, in interleaved rounds, medians and their ratios
# printed as Markdown tables (issue 16's "Measured by").
#
#   bench/pooling.sh                      # scale 10, 10 s per run, 3 rounds
#   ROUNDS=3 DURATION=5 bench/pooling.sh  # about 7 minutes
#   SMOKE=1 bench/pooling.sh              # does every run succeed? (timings never checked)
#
# Roles and authentication. The server has two login roles: bench_scram
# (a password, pg_hba scram-sha-256) and bench_trust (pg_hba trust: in
# transaction mode with auth_type trust the proxy has no password to log in
# to the server with). The userlist both poolers read holds bench_scram's
# SCRAM verifier from pg_authid and "" for bench_trust.
#
# Targets (each on its own free port):
#   direct         pgbench -> PostgreSQL
#   session        ttlproxy, pool_mode session (the server authenticates
#                  the client through the relay)
#   txn-scram      ttlproxy, pool_mode transaction, auth_type scram-sha-256,
#                  auth_file, default_pool_size POOL (20)
#   txn-trust      the same with auth_type trust
#   pgb-scram      PgBouncer, pool_mode transaction, auth_type scram-sha-256,
#                  the same userlist, default_pool_size POOL
#   pgb-trust      the same with auth_type trust
# Same work on every target, as in compare.sh: pgbench_accounts is a TTL
# table for ttlproxy (expires_at; 10% of the rows expire in a day, the rest
# are NULL, every row is live), which runs pgbench's built-in select-only
# script and adds the filter; direct and PgBouncer run that script with the
# filter written in by hand.
#
# Rows, every run select-only (-S), pgbench -n:
#   1. connect per transaction: -C -c 4 -j 1 -M simple, as bench_scram
#      (SCRAM) against direct, session, txn-scram, pgb-scram, and as
#      bench_trust (trust) against direct, session, txn-trust, pgb-trust.
#      tps here is connections per second (pgbench's "including
#      reconnection times"); pgbench's average connection time includes the
#      client's own SCRAM work.
#   2. -c 8 -j 2 in -M simple, extended, prepared, as bench_scram, against
#      direct, session, txn-scram and pgb-scram. In transaction mode
#      -M prepared's named statements move with each client (they do not
#      pin it; with 8 clients on a pool of 20 each keeps its server, so
#      none is parsed again). PgBouncer 1.18 has
#      no prepared statements in transaction mode (max_prepared_statements
#      is 1.21+): its prepared cell is not run unless the PgBouncer found is
#      1.21 or later, which then gets max_prepared_statements = 200.
#   3. many clients on a small pool: -c MANY (1000) -j 4 -T MANY_DURATION
#      (10) -M simple -P MANY_DURATION (pgbench prints the latency stddev
#      only with -P), as bench_scram, through txn-scram and (for
#      reference) pgb-scram, each with default_pool_size POOL (20), against
#      max_connections 100. Reported: failed transactions and aborted
#      clients (summed over the rounds; must be 0), pgbench's latency
#      average and stddev, the p99 of its per-transaction log (-l), and the
#      most server connections of the target seen in pg_stat_activity
#      (sampled every 0.5 s; each target's clients have an application_name
#      of their own), and for ttlproxy the p99 of its pool wait
#      (ttlproxy_proxy_pool_wait_seconds: the histogram's change over the
#      run, scraped from /metrics; the upper bound of the bucket holding
#      it, in ms). pgbench's -T counts from before the clients
#      connect, which takes seconds here: tps is pgbench's "without initial
#      connection time", over what is left of the run.
#
# Rounds: in each round every row runs against each of its targets in
# turn, so that noise on a shared machine hits them alike; the tables show
# medians over the rounds, and ratios of medians. A proxy's CPU per
# transaction is utime+stime of its process (/proc/PID/stat) over the run
# divided by pgbench's transactions (one clock tick resolution). The
# server's side: pg_stat_statements (reset before each run) counts the
# statements run in database bench, and the proxy's resets before a server
# serves another client (counted by their RESET ROLE: each statement of
# the complete reset, DISCARD ALL's parts, counts in the statements), per
# pgbench transaction. A run that
# fails (non-zero exit, failed transactions, aborted clients, no
# transactions) prints its log and the tail of the target's log, its cell
# shows FAILED, the row is not run against that target again, and the
# script exits 1 at the end.
#
# Environment:
#   SCALE          pgbench scale (default 10)
#   DURATION       seconds per run of rows 1 and 2 (default 10)
#   ROUNDS         interleaved rounds (default 3)
#   MANY           clients of row 3 (default 1000)
#   MANY_DURATION  seconds of row 3's runs (default 10)
#   POOL           default_pool_size of every pooler (default 20)
#   SMOKE=1        scale 1, 1 s runs (row 3 keeps 10 s), 1 round: every run must
#                  succeed; timings are printed, never checked
#   FLOOR=1        row 1's trust line also through bench/poolfloor, the least
#                  a transaction pooler can do (fixed welcome, each Query
#                  relayed on a pooled server, nothing else): floor (a
#                  goroutine per client, ttlproxy's engine), floor-hybrid
#                  (the same sessions over client sockets of its own: raw
#                  accept, read, write, close, an epoll set of its own),
#                  floor-epoll (an epoll loop of its own), and each with
#                  -reset (ttlproxy's RESET ROLE; RESET ALL before a server
#                  serves another client): floor-reset, floor-hybrid-reset,
#                  floor-epoll-reset; a table of its own
#   BOUNCER_RESET=1  row 3 also through a PgBouncer (pgb-reset, SCRAM) with
#                  server_reset_query = RESET ROLE; RESET ALL and
#                  server_reset_query_always = 1: the round trip ttlproxy
#                  makes before a server serves another client, for
#                  comparison (its statements per transaction: raw table)
#   PROXY_LOG_LEVEL  ttlproxy's --log-level (default warn, as compare.sh;
#                  PgBouncer runs with log_connections = 0)
#   PG_BINDIR, KEEP  see lib.sh (KEEP=1 keeps configurations and logs)
# Needs the server binaries, pgbench, psql, Go and pgbouncer.
set -euo pipefail

if [ "${SMOKE:-}" = 1 ]; then
	SCALE=1 DURATION=1 ROUNDS=1 MANY_DURATION=10
fi
SCALE=${SCALE:-10}
DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-3}
MANY=${MANY:-1000}
MANY_DURATION=${MANY_DURATION:-10}
POOL=${POOL:-20}
for v in SCALE DURATION ROUNDS MANY MANY_DURATION POOL; do
	case ${!v} in '' | *[!0-9]* | 0*) echo "pooling.sh: $v must be a positive integer, got '${!v}'" >&2; exit 2 ;; esac
done

# Every connection names its host, port, user and database.
unset PGSERVICE PGSERVICEFILE PGOPTIONS PGPASSFILE PGHOST PGHOSTADDR PGPORT PGUSER PGDATABASE PGAPPNAME
export PGSSLMODE=disable PGCONNECT_TIMEOUT=30 PGPASSWORD=bench

PROG=pooling.sh
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

# pgbench -c MANY needs a descriptor per client, the proxy two per client.
want_fds=$((3 * MANY + 200))
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt "$want_fds" ]; then
	ulimit -n "$want_fds" 2>/dev/null || ulimit -n "$(ulimit -Hn)"
	[ "$(ulimit -n)" = unlimited ] || [ "$(ulimit -n)" -ge "$want_fds" ] ||
		die "ulimit -n is $(ulimit -n), $want_fds needed for $MANY clients (raise the hard limit)"
fi

PGBOUNCER=$(command -v pgbouncer 2>/dev/null || echo /usr/sbin/pgbouncer)
[ -x "$PGBOUNCER" ] || die "pgbouncer not found (apt-get install pgbouncer)"
BOUNCER_VERSION=$("$PGBOUNCER" --version | awk 'NR == 1 { print $NF }')
BOUNCER_PREPARED=
if printf '1.21.0\n%s\n' "$BOUNCER_VERSION" | sort -V -C; then
	BOUNCER_PREPARED=1
fi

start_cluster fsync=off synchronous_commit=off full_page_writes=off max_connections=100 \
	shared_preload_libraries=pg_stat_statements
PGBENCH=$(command -v pgbench 2>/dev/null || echo "$BIN/pgbench")
CLK_TCK=$(getconf CLK_TCK)

log "pgbench -i -s $SCALE, the TTL column, roles bench_scram and bench_trust"
"$PGBENCH" -i -q -s "$SCALE" -h 127.0.0.1 -p "$PGPORT" -U postgres bench >"$WORK/pgbench-init.log" 2>&1 ||
	die "pgbench -i failed: $(cat "$WORK/pgbench-init.log")"
psql_q -d postgres -c 'CREATE EXTENSION pg_stat_statements' >/dev/null
psql_q -d bench >/dev/null <<'SQL'
ALTER TABLE pgbench_accounts ADD COLUMN expires_at timestamptz;
UPDATE pgbench_accounts SET expires_at = now() + interval '1 day' WHERE aid % 10 = 0;
SET password_encryption = 'scram-sha-256';
CREATE ROLE bench_scram LOGIN PASSWORD 'bench';
CREATE ROLE bench_trust LOGIN;
GRANT SELECT ON ALL TABLES IN SCHEMA public TO bench_scram, bench_trust;
VACUUM ANALYZE;
CHECKPOINT;
SQL
cat >"$DATA/pg_hba.conf" <<'HBA'
host all postgres    127.0.0.1/32 trust
host all bench_trust 127.0.0.1/32 trust
host all bench_scram 127.0.0.1/32 scram-sha-256
HBA
as_pg "$BIN/pg_ctl" -D "$DATA" reload >/dev/null
sleep 0.5
PGPASSWORD=wrong psql -X -q -h 127.0.0.1 -p "$PGPORT" -U bench_scram -d bench -c 'SELECT 1' >/dev/null 2>&1 &&
	die "pg_hba.conf not in effect: bench_scram logged in with a wrong password"

VERIFIER=$(psql_q -d bench -A -t -c "SELECT rolpassword FROM pg_authid WHERE rolname = 'bench_scram'")
case $VERIFIER in SCRAM-SHA-256\$*) ;; *) die "bench_scram has no SCRAM verifier: $VERIFIER" ;; esac
printf '"bench_scram" "%s"\n"bench_trust" ""\n' "$VERIFIER" >"$WORK/userlist.txt"

LIVE="(expires_at IS NULL OR expires_at >= now())"
printf '\\set aid random(1, 100000 * :scale)\nSELECT abalance FROM pgbench_accounts WHERE aid = :aid AND %s;\n' \
	"$LIVE" >"$WORK/select-only-filtered.sql"

declare -A T_PORT T_PID T_LOG T_ADMIN
T_PORT[direct]=$PGPORT

# wait_buckets TARGET: ttlproxy's pool wait histogram, "le count" a line
# (cumulative, as /metrics gives it); nothing for other targets.
wait_buckets() {
	[ -n "${T_ADMIN[$1]:-}" ] || return 0
	http_req "${T_ADMIN[$1]}" GET /metrics 2>/dev/null |
		awk -F'[{}" ]+' '/^ttlproxy_proxy_pool_wait_seconds_bucket/ { for (i = 1; i <= NF; i++) if ($i ~ /^le=/) le = $(i + 1); print le, $NF }' ||
		true
}

# wait_p99 BEFORE AFTER: the upper bound, in ms, of the bucket holding the
# 99th percentile of the waits observed between two wait_buckets.
wait_p99() {
	paste -d' ' "$1" "$2" | awk '{ le[NR] = $1; n[NR] = $4 - $2 } END {
		total = n[NR]; if (total <= 0) exit
		for (i = 1; i <= NR; i++) if (n[i] >= 0.99 * total) { if (le[i] == "+Inf") print "inf"; else printf "%.3f", le[i] * 1000; exit } }'
}

# start_ttlproxy NAME POOL_MODE AUTH_TYPE
start_ttlproxy() {
	local name=$1 mode=$2 auth=$3 port admin
	port=$(free_port)
	admin=$(free_port)
	[ "$admin" != "$port" ] || admin=$(free_port)
	cat >"$WORK/$name.yaml" <<YAML
listen: 127.0.0.1:$port
upstream: 127.0.0.1:$PGPORT
admin_listen: 127.0.0.1:$admin
shutdown_timeout: 1s
upstream_tls: {sslmode: disable}
tables:
  - table: public.pgbench_accounts
    column: expires_at
YAML
	if [ "$mode" = transaction ]; then
		printf 'pool_mode: transaction\nauth_type: %s\nauth_file: %s\ndefault_pool_size: %s\n' \
			"$auth" "$WORK/userlist.txt" "$POOL" >>"$WORK/$name.yaml"
	fi
	log "starting $name (ttlproxy, $mode${auth:+, $auth}) on port $port"
	"$WORK/ttlproxy" serve --config "$WORK/$name.yaml" --log-level "${PROXY_LOG_LEVEL:-warn}" >"$WORK/$name.log" 2>&1 &
	T_PID[$name]=$!
	PIDS+=("${T_PID[$name]}")
	T_PORT[$name]=$port T_LOG[$name]=$WORK/$name.log
	[ "$mode" != transaction ] || T_ADMIN[$name]=$admin
	wait_port "$port" "$name"
}

# start_pgbouncer NAME AUTH_TYPE [RESET]: transaction mode, daemonized; with
# RESET=1, ttlproxy's reset after every transaction.
start_pgbouncer() {
	local name=$1 auth=$2 reset=${3:-} port
	port=$(free_port)
	cat >"$WORK/$name.ini" <<INI
[databases]
bench = host=127.0.0.1 port=$PGPORT dbname=bench

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = $auth
auth_file = $WORK/userlist.txt
pool_mode = transaction
max_client_conn = $((MANY + 100))
default_pool_size = $POOL
ignore_startup_parameters = extra_float_digits
log_connections = 0
log_disconnections = 0
logfile = $WORK/$name.log
pidfile = $WORK/$name.pid
INI
	[ -z "$BOUNCER_PREPARED" ] || echo "max_prepared_statements = 200" >>"$WORK/$name.ini"
	[ -z "$reset" ] || printf 'server_reset_query = RESET ROLE; RESET ALL\nserver_reset_query_always = 1\n' >>"$WORK/$name.ini"
	log "starting $name (PgBouncer $BOUNCER_VERSION, transaction, $auth) on port $port"
	# runuser's pam_limits sets the soft descriptor limit back to 1024.
	as_pg bash -c 'ulimit -n "$1" && exec "$2" -d "$3"' _ "$(ulimit -n)" "$PGBOUNCER" "$WORK/$name.ini" >"$WORK/$name.out" 2>&1 ||
		die "$name did not start: $(cat "$WORK/$name.out" "$WORK/$name.log" 2>/dev/null)"
	PIDFILES+=("$WORK/$name.pid")
	for _ in $(seq 50); do
		[ -s "$WORK/$name.pid" ] && break
		sleep 0.1
	done
	T_PID[$name]=$(cat "$WORK/$name.pid")
	T_PORT[$name]=$port T_LOG[$name]=$WORK/$name.log
	wait_port "$port" "$name"
}

# start_floor NAME: bench/poolfloor for one run (run starts and stops it,
# so that its servers are not held beside the other targets' pools within
# max_connections), four servers logged in as bench_trust (trust) to
# database bench; the engine and -reset follow from NAME (floor,
# floor-hybrid, floor-epoll, each with -reset at the end).
start_floor() {
	local name=$1 engine=goroutine reset='' port
	case $name in *-epoll*) engine=epoll ;; *-hybrid*) engine=hybrid ;; esac
	case $name in *-reset) reset=1 ;; esac
	port=$(free_port)
	"$WORK/poolfloor" -listen "127.0.0.1:$port" -upstream "127.0.0.1:$PGPORT" -user bench_trust -database bench \
		-pool 4 -engine "$engine" ${reset:+-reset} >"$WORK/$name.log" 2>&1 &
	T_PID[$name]=$!
	PIDS+=("${T_PID[$name]}")
	T_PORT[$name]=$port T_LOG[$name]=$WORK/$name.log
	wait_port "$port" "$name"
}

start_ttlproxy session session ""
start_ttlproxy txn-scram transaction scram-sha-256
start_ttlproxy txn-trust transaction trust
start_pgbouncer pgb-scram scram-sha-256
start_pgbouncer pgb-trust trust
FLOOR_T=
if [ "${FLOOR:-}" = 1 ]; then
	(cd "$ROOT" && go build -o "$WORK/poolfloor" ./bench/poolfloor) || die "go build of bench/poolfloor failed"
	FLOOR_T=" floor floor-hybrid floor-epoll floor-reset floor-hybrid-reset floor-epoll-reset"
fi
RESET_T=
if [ "${BOUNCER_RESET:-}" = 1 ]; then
	start_pgbouncer pgb-reset scram-sha-256 1
	RESET_T=" pgb-reset"
fi

# Rows: id|label|user|pgbench options|seconds|targets. Each target runs the
# row's options; ttlproxy the built-in script, the others the filtered one.
ROWS=(
	"C-scram|-C -c 4, SCRAM|bench_scram|-C -c 4 -j 1 -M simple|$DURATION|direct session txn-scram pgb-scram"
	"C-trust|-C -c 4, trust|bench_trust|-C -c 4 -j 1 -M simple|$DURATION|direct session txn-trust pgb-trust$FLOOR_T"
	"S-simple|-c 8 simple|bench_scram|-c 8 -j 2 -M simple|$DURATION|direct session txn-scram pgb-scram"
	"S-extended|-c 8 extended|bench_scram|-c 8 -j 2 -M extended|$DURATION|direct session txn-scram pgb-scram"
	"S-prepared|-c 8 prepared|bench_scram|-c 8 -j 2 -M prepared|$DURATION|direct session txn-scram${BOUNCER_PREPARED:+ pgb-scram}"
	"many|-c $MANY -j 4 simple, pool $POOL|bench_scram|-c $MANY -j 4 -M simple -P $MANY_DURATION|$MANY_DURATION|txn-scram pgb-scram$RESET_T"
)

RAW=$WORK/raw.tsv
printf 'round\trow\ttarget\ttps\tconn_ms\tlat_ms\tstddev_ms\tp99_ms\ttx\tfailed\taborted\tcpu_us_per_tx\tservers\tstmts_per_tx\tresets_per_tx\twait_p99_ms\n' >"$RAW"
declare -A FAILED
ANY_FAILED=

# count_servers APPNAME OUT, in the background: every 0.5 s, the server
# connections whose application_name is APPNAME, one count a line.
count_servers() {
	while :; do
		psql_q -d postgres -A -t -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = '$1'" >>"$2" 2>/dev/null || true
		sleep 0.5
	done
}

cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'; }

# run ROUND ROW TARGET: one pgbench run; appends a line to RAW, or marks
# the row FAILED for the target.
run() {
	local round=$1 row=$2 t=$3 id label user opts secs targets out pid t0=0 t1=0 rc=0 sampler='' appname
	local -a script lg=()
	IFS='|' read -r id label user opts secs targets <<<"$row"
	out=$WORK/runs/r$round-$id-$t.log
	mkdir -p "$WORK/runs"
	case $t in
	session | txn-*) script=(-b select-only) ;;
	*) script=(-s "$SCALE" -f "$WORK/select-only-filtered.sql") ;;
	esac
	appname=pooling-$id-$t
	if [ "$id" = many ]; then
		wait_buckets "$t" >"$out.wait0"
		lg=(-l --log-prefix="$WORK/runs/r$round-$id-$t.tx")
		: >"$out.servers"
		count_servers "$appname" "$out.servers" &
		sampler=$!
	fi
	case $t in floor*) start_floor "$t" ;; esac
	psql_q -d postgres -c 'SELECT pg_stat_statements_reset()' >/dev/null
	pid=${T_PID[$t]:-}
	[ -z "$pid" ] || t0=$(cpu_ticks "$pid")
	# shellcheck disable=SC2086 # opts is a list of options
	PGAPPNAME=$appname timeout -k 10 $((secs + 120)) "$PGBENCH" -h 127.0.0.1 -p "${T_PORT[$t]}" -U "$user" -n \
		"${script[@]}" $opts -T "$secs" "${lg[@]}" bench >"$out" 2>&1 || rc=$?
	[ -z "$pid" ] || t1=$(cpu_ticks "$pid")
	case $t in floor*) stop_pid "$pid" ;; esac
	if [ -n "$sampler" ]; then
		kill "$sampler" 2>/dev/null || true
		wait "$sampler" 2>/dev/null || true
	fi
	local tx failed aborted tps conn lat sd p99='' cpu='' servers='' waitp99=''
	if [ "$id" = many ] && [ -n "${T_ADMIN[$t]:-}" ]; then
		wait_buckets "$t" >"$out.wait1"
		waitp99=$(wait_p99 "$out.wait0" "$out.wait1")
	fi
	tx=$(awk -F': *' '/^number of transactions actually processed:/ { split($2, a, "/"); print a[1] }' "$out")
	failed=$(awk -F': *' '/^number of failed transactions:/ { split($2, a, " "); print a[1] }' "$out")
	aborted=$(grep -c 'client [0-9]* aborted' "$out" || true)
	tps=$(awk '/^tps = / { print $3 }' "$out" | tail -n 1)
	conn=$(awk '/^(average|initial) connection time = / { print $5 }' "$out")
	lat=$(awk '/^latency average = / { print $4 }' "$out")
	sd=$(awk '/^latency stddev = / { print $4 }' "$out")
	if [ "$rc" != 0 ] || [ "${failed:-0}" != 0 ] || [ "$aborted" != 0 ] || [ -z "$tx" ] || [ "$tx" = 0 ] || [ -z "$tps" ]; then
		{
			echo "---- $out"
			tail -n 40 "$out"
			if [ -n "${T_LOG[$t]:-}" ]; then
				echo "---- ${T_LOG[$t]} (tail)"
				tail -n 40 "${T_LOG[$t]}"
			fi
			echo "---- postgres log (tail)"
			tail -n 20 "$WORK/postgres.log"
		} >&2
		[ "$rc" != 124 ] || log "pgbench did not finish within $((secs + 120))s: killed"
		log "FAILED: round $round, $label, $t (exit status $rc, failed ${failed:-?}, aborted clients $aborted, transactions ${tx:-?}): not run again"
		FAILED[$id/$t]="exit $rc, failed ${failed:-?}, aborted $aborted"
		ANY_FAILED=1
		return
	fi
	# What the server ran for the run, per pgbench transaction: every
	# statement in database bench, and the proxy's resets (their RESET ROLE).
	local stmts resets
	read -r stmts resets < <(psql_q -d postgres -A -t -F ' ' -c "SELECT coalesce(sum(calls), 0),
		coalesce(sum(calls) FILTER (WHERE query ~* '^RESET ROLE'), 0)
		FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = 'bench')")
	stmts=$(awk -v a="$stmts" -v n="$tx" 'BEGIN { printf "%.2f", a / n }')
	resets=$(awk -v a="$resets" -v n="$tx" 'BEGIN { printf "%.2f", a / n }')
	[ -z "$pid" ] || cpu=$(awk -v d=$((t1 - t0)) -v hz="$CLK_TCK" -v n="$tx" 'BEGIN { printf "%.1f", d * 1e6 / hz / n }')
	if [ ${#lg[@]} -gt 0 ]; then
		p99=$(cat "$WORK/runs/r$round-$id-$t.tx".* | awk '{ print $3 }' | sort -n |
			awk '{ v[NR] = $1 } END { if (NR) { i = int(NR * 0.99); if (i < NR * 0.99) i++; printf "%.3f", v[i] / 1000 } }')
		rm -f "$WORK/runs/r$round-$id-$t.tx".*
		servers=$(sort -n "$out.servers" | tail -n 1)
	fi
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$id" "$t" "$tps" "$conn" "$lat" "$sd" "$p99" \
		"$tx" "${failed:-0}" "$aborted" "$cpu" "$servers" "$stmts" "$resets" "$waitp99" >>"$RAW"
	printf '[round %s/%s] %-26s %-9s tps %9.1f  connection %s ms  latency %s ms%s%s\n' "$round" "$ROUNDS" "$label" "$t" \
		"$tps" "${conn:-?}" "${lat:-?}" "${cpu:+  CPU $cpu us/tx}" "${p99:+  p99 $p99 ms  servers $servers}" >&2
	log "  server statements/tx $stmts, of which RESET ROLE; RESET ALL $resets"
}

START=$(date +%s)
for round in $(seq "$ROUNDS"); do
	for row in "${ROWS[@]}"; do
		IFS='|' read -r id _ _ _ _ targets <<<"$row"
		for t in $targets; do
			[ -z "${FAILED[$id/$t]:-}" ] || continue
			run "$round" "$row" "$t"
		done
	done
done
ELAPSED=$(($(date +%s) - START))

for t in session txn-scram txn-trust; do
	if ! kill -0 "${T_PID[$t]}" 2>/dev/null; then
		ANY_FAILED=1
		log "$t (ttlproxy) exited during the runs: $(tail -n 20 "${T_LOG[$t]}")"
	elif grep -q 'panic' "${T_LOG[$t]}"; then
		ANY_FAILED=1
		log "$t (ttlproxy) logged a panic: see ${T_LOG[$t]} (KEEP=1)"
	fi
done

echo "raw per-run figures:" >&2
column -t -s "$(printf '\t')" "$RAW" >&2 2>/dev/null || cat "$RAW" >&2

# med ROW TARGET COLUMN: the median of that column over the rounds, FAILED
# when the row failed against the target, empty when not run.
med() {
	if [ -n "${FAILED[$1/$2]:-}" ]; then
		echo FAILED
		return
	fi
	awk -F'\t' -v r="$1" -v t="$2" -v c="$3" 'NR > 1 && $2 == r && $3 == t && $c != "" { print $c }' "$RAW" |
		sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) exit; if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
total() { awk -F'\t' -v r="$1" -v t="$2" -v c="$3" 'NR > 1 && $2 == r && $3 == t { s += $c } END { print s + 0 }' "$RAW"; }
fmt() { # fmt FORMAT VALUE: "–" when empty, FAILED as it is
	case $2 in '') printf -- '–' ;; FAILED) printf FAILED ;; *) awk -v f="$1" -v v="$2" 'BEGIN { printf f, v }' ;; esac
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && b > 0) printf "%.2f", a / b; else printf "–" }'; }
row() { printf '|'; printf ' %s |' "$@"; printf '\n'; }

PG_VERSION=$("$BIN/postgres" --version | awk '{ print $3 }')
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -z "$(git -C "$ROOT" status --porcelain 2>/dev/null)" ] || COMMIT="$COMMIT+dirty"
{
	echo
	printf 'pgbench scale %s, %s s per run (row 3: %s s), %s round(s) (medians), %s CPUs, PostgreSQL %s (max_connections 100), PgBouncer %s, ttlproxy %s, default_pool_size %s%s\n' \
		"$SCALE" "$DURATION" "$MANY_DURATION" "$ROUNDS" "$(nproc)" "$PG_VERSION" "$BOUNCER_VERSION" "$COMMIT" "$POOL" \
		"$([ "${SMOKE:-}" != 1 ] || echo '. SMOKE run: the figures mean nothing')"
	echo
	echo "Connect per transaction (pgbench -C -S -c 4 -j 1; tps = connections per second):"
	echo
	row auth 'direct tps' 'session tps' 'transaction tps' 'pgbouncer tps' transaction/session transaction/pgbouncer \
		'connection ms direct / session / transaction / pgbouncer' 'CPU µs/conn session / transaction / pgbouncer'
	echo '|---|--:|--:|--:|--:|--:|--:|--:|--:|'
	for a in scram trust; do
		d=$(med "C-$a" direct 4) s=$(med "C-$a" session 4) x=$(med "C-$a" "txn-$a" 4) b=$(med "C-$a" "pgb-$a" 4)
		row "$a" "$(fmt %.0f "$d")" "$(fmt %.0f "$s")" "$(fmt %.0f "$x")" "$(fmt %.0f "$b")" "$(ratio "$x" "$s")" "$(ratio "$x" "$b")" \
			"$(fmt %.2f "$(med "C-$a" direct 5)") / $(fmt %.2f "$(med "C-$a" session 5)") / $(fmt %.2f "$(med "C-$a" "txn-$a" 5)") / $(fmt %.2f "$(med "C-$a" "pgb-$a" 5)")" \
			"$(fmt %.0f "$(med "C-$a" session 12)") / $(fmt %.0f "$(med "C-$a" "txn-$a" 12)") / $(fmt %.0f "$(med "C-$a" "pgb-$a" 12)")"
	done
	if [ -n "$FLOOR_T" ]; then
		echo
		echo "Connect per transaction, trust, against bench/poolfloor (the least a transaction pooler can do; reset: ttlproxy's RESET ROLE; RESET ALL before a server serves another client):"
		echo
		row target tps 'of pgbouncer' 'CPU µs/conn' 'server statements per tx'
		echo '|---|--:|--:|--:|--:|'
		b=$(med C-trust pgb-trust 4)
		for t in pgb-trust txn-trust$FLOOR_T; do
			x=$(med C-trust "$t" 4)
			row "$t" "$(fmt %.0f "$x")" "$(ratio "$x" "$b")" "$(fmt %.0f "$(med C-trust "$t" 12)")" "$(fmt %.2f "$(med C-trust "$t" 14)")"
		done
	fi
	echo
	echo "Select-only, pgbench -c 8 -j 2, SCRAM logins (transaction: ttlproxy pool_mode transaction; named statements move with their client there):"
	echo
	row protocol 'direct tps' 'session tps' 'transaction tps' 'pgbouncer tps' transaction/session transaction/pgbouncer \
		'CPU µs/tx session' 'CPU µs/tx transaction' 'CPU µs/tx pgbouncer'
	echo '|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|'
	for p in simple extended prepared; do
		d=$(med "S-$p" direct 4) s=$(med "S-$p" session 4) x=$(med "S-$p" txn-scram 4) b=$(med "S-$p" pgb-scram 4)
		row "$p" "$(fmt %.0f "$d")" "$(fmt %.0f "$s")" "$(fmt %.0f "$x")" "$(fmt %.0f "$b")" "$(ratio "$x" "$s")" "$(ratio "$x" "$b")" \
			"$(fmt %.1f "$(med "S-$p" session 12)")" "$(fmt %.1f "$(med "S-$p" txn-scram 12)")" "$(fmt %.1f "$(med "S-$p" pgb-scram 12)")"
	done
	[ -n "$BOUNCER_PREPARED" ] || echo "(PgBouncer $BOUNCER_VERSION has no prepared statements in transaction mode: not run with -M prepared.)"
	echo
	echo "$MANY clients on $POOL server connections (pgbench -c $MANY -j 4 -S -M simple -T $MANY_DURATION, SCRAM logins; errors summed over the rounds, the rest medians):"
	echo
	row target tps 'failed tx' 'aborted clients' 'latency avg ms' 'latency stddev ms' 'latency p99 ms' 'initial connection ms' 'server connections (max seen)' 'pool wait p99'
	echo '|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|'
	for t in txn-scram pgb-scram$RESET_T; do
		case $t in
		txn-scram) name=ttlproxy-transaction ;;
		pgb-scram) name=pgbouncer-transaction ;;
		pgb-reset) name="pgbouncer-transaction, RESET ROLE; RESET ALL after every transaction" ;;
		esac
		if [ -n "${FAILED[many/$t]:-}" ]; then
			row "$name" "FAILED (${FAILED[many/$t]})" – – – – – – – –
			continue
		fi
		row "$name" "$(fmt %.0f "$(med many "$t" 4)")" "$(total many "$t" 10)" "$(total many "$t" 11)" \
			"$(fmt %.3f "$(med many "$t" 6)")" "$(fmt %.3f "$(med many "$t" 7)")" "$(fmt %.3f "$(med many "$t" 8)")" \
			"$(fmt %.0f "$(med many "$t" 5)")" "$(fmt %.0f "$(med many "$t" 13)")" "$([ "$t" = txn-scram ] && fmt %.3f "$(med many "$t" 16)" || echo –)"
	done
	echo
	echo "Statements the server ran per pgbench transaction (pg_stat_statements, database bench; RESET: the proxy's reset before a server serves another client, each of its statements counted in statements):"
	echo
	row row 'direct' 'session' 'transaction' 'pgbouncer' 'transaction: RESET per tx'
	echo '|---|--:|--:|--:|--:|--:|'
	for r in "${ROWS[@]}"; do
		IFS='|' read -r id label _ _ _ targets <<<"$r"
		cells=("$label")
		for kind in direct session txn pgb; do
			c=–
			for t in $targets; do
				case $t in "$kind" | "$kind"-scram | "$kind"-trust) c=$(fmt %.2f "$(med "$id" "$t" 14)") ;; esac
			done
			cells+=("$c")
		done
		c=–
		for t in $targets; do
			case $t in txn-*) c=$(fmt %.2f "$(med "$id" "$t" 15)") ;; esac
		done
		row "${cells[@]}" "$c"
	done
	echo
}
log "all runs done in ${ELAPSED}s"
if [ -n "$ANY_FAILED" ]; then
	log "some runs FAILED (see above)"
	exit 1
fi
