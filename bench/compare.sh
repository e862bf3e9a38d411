#!/usr/bin/env bash
# ttlproxy against a direct connection and against PgBouncer, doing the same
# work: pgbench on one throw-away PostgreSQL cluster, in interleaved rounds,
# medians printed as a Markdown table.
#
#   bench/compare.sh                         # scale 10, 10 s per run, 3 rounds
#   SMOKE=1 bench/compare.sh                 # does every run succeed? (CI)
#   ROUNDS=5 DURATION=30 bench/compare.sh
#
# Targets (each on its own free port, found at run time):
#   direct     pgbench -> PostgreSQL
#   ttlproxy   pgbench -> ttlproxy (go build of this checkout, `serve
#              --config`) -> PostgreSQL. pgbench_accounts is a TTL table
#              (expires_at timestamptz; 10% of the rows expire in a day, the
#              rest are NULL, so every row is live) and pgbench_history is a
#              TTL table with default_ttl 1h, which the proxy stamps on INSERT.
#              pgbench runs its built-in scripts; the proxy adds the filter.
#              No sweeper.
#   pgbouncer  pgbench -> PgBouncer (pool_mode = session) -> PostgreSQL.
#
# Same work on every target. ttlproxy rewrites pgbench's statements as
# `ttlproxy rewrite` shows (the script logs it at start):
#   SELECT ... FROM pgbench_accounts  -> the row must also satisfy
#       ("pgbench_accounts"."expires_at" IS NULL OR ... >= now())
#   UPDATE pgbench_accounts ... WHERE (aid = $n) AND (<same predicate>)
#   INSERT INTO pgbench_history (...) -> adds expires_at = now() + 1h
# The direct and PgBouncer targets run custom scripts (-f) equal to the
# built-in select-only and tpcb-like scripts but with that filter written
# into the SQL by hand, and pgbench_history.expires_at has the column DEFAULT
# now() + interval '3600 seconds', so the server does the same work as behind
# ttlproxy (the script checks that the plans match). Direct therefore runs
# the hand-filtered scripts too: it is the floor, what the filter costs with
# no proxy at all; it is NOT pgbench's unfiltered built-in workload.
#
# Workloads, each against every target:
#   select-only (-S)       -M simple, extended, prepared   -c CLIENTS -j JOBS
#   tpcb-like              -M simple, extended             -c CLIENTS -j JOBS
#   select-only (-S)       -M simple, prepared             -c 1 -j 1 (latency)
# Before each tpcb-like run the script does what pgbench does unless -n:
# VACUUM pgbench_branches, pgbench_tellers and TRUNCATE pgbench_history
# (directly, outside the timed run). pgbench always runs with -n.
#
# Rounds: in each of ROUNDS rounds every workload runs against direct,
# ttlproxy and pgbouncer in turn, so that noise on a shared machine hits all
# targets alike. The table shows medians over the rounds; ratios and added
# latencies are computed from those medians. Per-run figures go to standard
# error as they come, and as a raw table at the end.
#
# CPU per transaction: utime+stime of the ttlproxy process and of the
# PgBouncer process (/proc/PID/stat, all threads) before and after each run
# against it, in microseconds, divided by the transactions pgbench reports.
# The resolution is one clock tick (getconf CLK_TCK, usually 10 ms) per run.
#
# Environment:
#   SCALE      pgbench scale factor (default 10)
#   DURATION   seconds per pgbench run (default 10)
#   ROUNDS     interleaved rounds (default 3)
#   CLIENTS    pgbench -c of the throughput workloads (default 8)
#   JOBS       pgbench -j of the throughput workloads (default 2)
#   WARMUP     seconds of select-only against each target before round 1
#              (default 2; 0 skips)
#   SMOKE=1    scale 1, 1 s runs, 1 round, no warm-up: proves that every run
#              succeeds (CI); timings are printed, never checked
#   KEEP=1     keep the work directory (configurations, every pgbench log)
#   PG_BINDIR  directory of initdb/pg_ctl/postgres (default: PATH, then the
#              newest /usr/lib/postgresql/*/bin)
#   TTLPROXY   a ttlproxy binary to use instead of building this checkout
#
# Needs: the PostgreSQL server binaries, pgbench and psql, Go (unless
# TTLPROXY is set) and pgbouncer; run as root, it installs pgbouncer with
# apt-get when it is missing and runs PostgreSQL and PgBouncer as the
# postgres OS user (runuser). It stops every process it started.
#
# Exit status: 0 when every run succeeded; 1 when anything failed (a pgbench
# run that exits non-zero or reports failed transactions prints its log);
# 2 for a bad setting.
set -euo pipefail

PROG=bench/compare.sh
log() { printf '== %s\n' "$*" >&2; }
warn() { printf '%s: WARNING: %s\n' "$PROG" "$*" >&2; }
die() { printf '%s: %s\n' "$PROG" "$*" >&2; exit 1; }
usage_die() { printf '%s: %s\n' "$PROG" "$*" >&2; exit 2; }

if [ "${SMOKE:-}" = 1 ]; then
	SCALE=1 DURATION=1 ROUNDS=1 WARMUP=0
fi
SCALE=${SCALE:-10}
DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-3}
CLIENTS=${CLIENTS:-8}
JOBS=${JOBS:-2}
WARMUP=${WARMUP:-2}
for v in SCALE DURATION ROUNDS CLIENTS JOBS; do
	case ${!v} in
	'' | *[!0-9]* | 0*) usage_die "$v must be a positive integer, got '${!v}'" ;;
	esac
done
case $WARMUP in '' | *[!0-9]*) usage_die "WARMUP must be a whole number of seconds, got '$WARMUP'" ;; esac
[ "$JOBS" -le "$CLIENTS" ] || usage_die "JOBS ($JOBS) must not exceed CLIENTS ($CLIENTS)"

# Connection settings from the caller's environment must not leak into the
# runs: every connection here names its host, port, user and database.
unset PGSERVICE PGSERVICEFILE PGOPTIONS PGPASSWORD PGPASSFILE PGSSLMODE PGHOST PGHOSTADDR PGPORT PGUSER PGDATABASE
export PGSSLMODE=disable PGCONNECT_TIMEOUT=10

ROOT=$(cd "$(dirname "$0")/.." && pwd)
IS_ROOT=
[ "$(id -u)" = 0 ] && IS_ROOT=1

WORK=
PG_STARTED=
PROXY_PID=
BOUNCER_PID=
BIN=

# as_pg runs a command as the postgres OS user when we are root: PostgreSQL
# and PgBouncer refuse to run as root.
as_pg() {
	if [ -n "$IS_ROOT" ]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

# alive PID: the process exists and is not a zombie.
alive() {
	local st
	[ -r "/proc/$1/stat" ] || return 1
	st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
	[ -n "$st" ] && [ "$st" != Z ]
}

# stop_pid PID: SIGTERM, up to 5 s to exit, then SIGKILL; reaps it when it is
# our child.
stop_pid() {
	local pid=$1
	[ -n "$pid" ] || return 0
	kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 50); do
		alive "$pid" || break
		sleep 0.1
	done
	if alive "$pid"; then
		kill -KILL "$pid" 2>/dev/null || true
	fi
	wait "$pid" 2>/dev/null || true
}

cleanup() {
	local rc=$? pid
	set +e
	trap - EXIT INT TERM HUP
	if [ -n "$BOUNCER_PID" ]; then
		stop_pid "$BOUNCER_PID"
	fi
	if [ -n "$PROXY_PID" ]; then
		stop_pid "$PROXY_PID"
	fi
	if [ -n "$PG_STARTED" ]; then
		as_pg "$BIN/pg_ctl" -D "$WORK/data" -m immediate -w -t 30 stop >/dev/null 2>&1
		if [ -f "$WORK/data/postmaster.pid" ]; then
			pid=$(head -n 1 "$WORK/data/postmaster.pid" 2>/dev/null)
			if [ -n "$pid" ] && alive "$pid"; then
				kill -KILL "$pid" 2>/dev/null
			fi
		fi
	fi
	if [ -n "$WORK" ] && [ -d "$WORK" ]; then
		if [ "${KEEP:-}" = 1 ]; then
			log "kept $WORK"
		else
			rm -rf "$WORK"
		fi
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

find_bindir() {
	local d
	if [ -n "${PG_BINDIR:-}" ]; then
		BIN=$PG_BINDIR
	elif command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
		BIN=$(dirname "$(readlink -f "$(command -v initdb)")")
	else
		d=$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -type d -name bin 2>/dev/null | sort -V | tail -n 1)
		[ -n "$d" ] || die "PostgreSQL server binaries not found (apt-get install postgresql, or set PG_BINDIR)"
		BIN=$d
	fi
	local t
	for t in initdb pg_ctl postgres; do
		[ -x "$BIN/$t" ] || die "$BIN/$t not found (set PG_BINDIR)"
	done
}

# client_tool NAME: the server's own pgbench/psql when present, else PATH's.
client_tool() {
	if [ -x "$BIN/$1" ]; then
		echo "$BIN/$1"
	elif command -v "$1" >/dev/null 2>&1; then
		command -v "$1"
	else
		die "$1 not found (apt-get install postgresql-client postgresql-contrib)"
	fi
}

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# free_port VAR sets VAR to a TCP port on 127.0.0.1 that nothing listens on,
# below the kernel's ephemeral range (so that no outgoing connection takes it
# before it is bound) and not handed out before by this script.
USED_PORTS=" "
free_port() {
	local lo=32768 base=20000 span p
	if [ -r /proc/sys/net/ipv4/ip_local_port_range ]; then
		read -r lo _ </proc/sys/net/ipv4/ip_local_port_range || lo=32768
	fi
	if [ "$lo" -gt 12000 ]; then
		base=10000 span=$((lo - 10000))
	else
		span=40000
	fi
	for _ in $(seq 500); do
		p=$((base + (RANDOM * 32768 + RANDOM) % span))
		case $USED_PORTS in *" $p "*) continue ;; esac
		if ! port_in_use "$p"; then
			USED_PORTS="$USED_PORTS$p "
			printf -v "$1" '%s' "$p"
			return
		fi
	done
	die "no free TCP port found"
}

# wait_port PORT PID: until something listens on PORT (at most 20 s); fails
# early when PID (the process that should listen) has exited.
wait_port() {
	local port=$1 pid=${2:-}
	for _ in $(seq 200); do
		port_in_use "$port" && return 0
		if [ -n "$pid" ] && ! alive "$pid"; then
			return 1
		fi
		sleep 0.1
	done
	return 1
}

# cpu_ticks PID prints utime+stime of the process (all its threads) in
# clock ticks.
cpu_ticks() {
	local rest
	rest=$(sed 's/.*) //' "/proc/$1/stat") || die "cannot read /proc/$1/stat: the process is gone"
	# After "pid (comm) ", field 1 is the state; utime and stime are the 12th
	# and 13th (fields 14 and 15 of proc(5)).
	awk '{ print $12 + $13 }' <<<"$rest"
}

# ---------------------------------------------------------------- setup ---

find_bindir
PGBENCH=$(client_tool pgbench)
PSQL=$(client_tool psql)
CLK_TCK=$(getconf CLK_TCK)
[ -d /proc/self ] || die "needs /proc (Linux): CPU time is read from /proc/PID/stat"

if [ -n "$IS_ROOT" ]; then
	id postgres >/dev/null 2>&1 || die "running as root needs a postgres OS user (apt-get install postgresql creates it)"
fi

PGBOUNCER=$(command -v pgbouncer 2>/dev/null || true)
if [ -z "$PGBOUNCER" ] && [ -x /usr/sbin/pgbouncer ]; then
	PGBOUNCER=/usr/sbin/pgbouncer
fi
if [ -z "$PGBOUNCER" ]; then
	if [ -n "$IS_ROOT" ] && command -v apt-get >/dev/null 2>&1; then
		log "installing pgbouncer (apt-get install -y pgbouncer)"
		export DEBIAN_FRONTEND=noninteractive
		if ! apt-get install -y -qq pgbouncer >/dev/null 2>&1; then
			apt-get update -qq >/dev/null || die "apt-get update failed"
			apt-get install -y -qq pgbouncer >/dev/null || die "apt-get install pgbouncer failed"
		fi
		PGBOUNCER=$(command -v pgbouncer 2>/dev/null || echo /usr/sbin/pgbouncer)
		[ -x "$PGBOUNCER" ] || die "pgbouncer installed but not found"
	else
		die "pgbouncer not found: install it (apt-get install pgbouncer) or run as root to have it installed"
	fi
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/ttlproxy-compare.XXXXXX")
mkdir "$WORK/runs"
if [ -n "$IS_ROOT" ]; then
	chmod 755 "$WORK"
	chown postgres "$WORK"
	runuser -u postgres -- test -w "$WORK" ||
		die "the postgres OS user cannot write to $WORK: set TMPDIR to a directory it can reach"
fi
RAW=$WORK/raw.tsv

if [ -n "${TTLPROXY:-}" ]; then
	[ -x "$TTLPROXY" ] || die "TTLPROXY=$TTLPROXY is not an executable"
	cp "$TTLPROXY" "$WORK/ttlproxy"
else
	command -v go >/dev/null 2>&1 || die "go not found: needed to build ttlproxy (or set TTLPROXY)"
	log "building ttlproxy"
	(cd "$ROOT" && go build -o "$WORK/ttlproxy" ./cmd/ttlproxy) || die "go build failed"
fi

free_port PG_PORT
log "starting PostgreSQL ($BIN) on port $PG_PORT"
as_pg "$BIN/initdb" -D "$WORK/data" -U postgres -A trust -E UTF8 --locale C --no-sync >"$WORK/initdb.log" 2>&1 ||
	die "initdb failed: $(cat "$WORK/initdb.log")"
PG_STARTED=1
as_pg "$BIN/pg_ctl" -D "$WORK/data" -l "$WORK/postgres.log" -w -t 60 start \
	-o "-p $PG_PORT -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=100" \
	>/dev/null || die "PostgreSQL did not start: $(cat "$WORK/postgres.log" 2>/dev/null)"

psql_at() { # psql_at PORT ARGS...: one connection to database bench
	local port=$1
	shift
	"$PSQL" -X -q -A -t -h 127.0.0.1 -p "$port" -U postgres -d bench -v ON_ERROR_STOP=1 "$@"
}
"$PSQL" -X -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 -c "CREATE DATABASE bench" >/dev/null

log "pgbench -i -s $SCALE, then the TTL columns"
"$PGBENCH" -i -q -s "$SCALE" -h 127.0.0.1 -p "$PG_PORT" -U postgres bench >"$WORK/pgbench-init.log" 2>&1 ||
	die "pgbench -i failed: $(cat "$WORK/pgbench-init.log")"
psql_at "$PG_PORT" >/dev/null <<'SQL'
ALTER TABLE pgbench_accounts ADD COLUMN expires_at timestamptz;
-- 10% of the rows expire in a day, the others never: every row is live.
UPDATE pgbench_accounts SET expires_at = now() + interval '1 day' WHERE aid % 10 = 0;
-- ttlproxy stamps now() + default_ttl (1h) on INSERT; direct and PgBouncer
-- get the same value from the column default.
ALTER TABLE pgbench_history ADD COLUMN expires_at timestamptz DEFAULT (now() + interval '3600 seconds');
VACUUM ANALYZE;
CHECKPOINT;
SQL

# The hand-filtered scripts of the direct and PgBouncer targets: pgbench's
# built-in select-only and tpcb-like (pgbench --show-script) with ttlproxy's
# predicate written in.
LIVE="(expires_at IS NULL OR expires_at >= now())"
cat >"$WORK/select-only-filtered.sql" <<EOF
\\set aid random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :aid AND $LIVE;
EOF
cat >"$WORK/tpcb-like-filtered.sql" <<EOF
\\set aid random(1, 100000 * :scale)
\\set bid random(1, 1 * :scale)
\\set tid random(1, 10 * :scale)
\\set delta random(-5000, 5000)
BEGIN;
UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid AND $LIVE;
SELECT abalance FROM pgbench_accounts WHERE aid = :aid AND $LIVE;
UPDATE pgbench_tellers SET tbalance = tbalance + :delta WHERE tid = :tid;
UPDATE pgbench_branches SET bbalance = bbalance + :delta WHERE bid = :bid;
INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (:tid, :bid, :aid, :delta, CURRENT_TIMESTAMP);
END;
EOF

# ttlproxy
free_port PROXY_PORT
free_port ADMIN_PORT
cat >"$WORK/ttlproxy.yaml" <<EOF
listen: 127.0.0.1:$PROXY_PORT
upstream: 127.0.0.1:$PG_PORT
admin_listen: 127.0.0.1:$ADMIN_PORT
shutdown_timeout: 1s
tables:
  - table: public.pgbench_accounts
    column: expires_at
  - table: public.pgbench_history
    column: expires_at
    default_ttl: 1h
EOF
log "starting ttlproxy on port $PROXY_PORT (admin $ADMIN_PORT)"
"$WORK/ttlproxy" serve --config "$WORK/ttlproxy.yaml" --log-level warn >"$WORK/ttlproxy.log" 2>&1 &
PROXY_PID=$!
wait_port "$PROXY_PORT" "$PROXY_PID" ||
	die "ttlproxy did not start listening on port $PROXY_PORT: $(cat "$WORK/ttlproxy.log")"

# PgBouncer, session mode, daemonized; its pid comes from its pidfile.
free_port BOUNCER_PORT
echo '"postgres" ""' >"$WORK/userlist.txt"
cat >"$WORK/pgbouncer.ini" <<EOF
[databases]
bench = host=127.0.0.1 port=$PG_PORT dbname=bench

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $BOUNCER_PORT
unix_socket_dir =
auth_type = trust
auth_file = $WORK/userlist.txt
pool_mode = session
max_client_conn = 200
default_pool_size = $((CLIENTS + 2))
ignore_startup_parameters = extra_float_digits
log_connections = 0
log_disconnections = 0
logfile = $WORK/pgbouncer.log
pidfile = $WORK/pgbouncer.pid
EOF
log "starting PgBouncer on port $BOUNCER_PORT"
as_pg "$PGBOUNCER" -d "$WORK/pgbouncer.ini" >"$WORK/pgbouncer.out" 2>&1 ||
	die "pgbouncer did not start: $(cat "$WORK/pgbouncer.out" "$WORK/pgbouncer.log" 2>/dev/null)"
for _ in $(seq 50); do
	[ -s "$WORK/pgbouncer.pid" ] && break
	sleep 0.1
done
BOUNCER_PID=$(cat "$WORK/pgbouncer.pid" 2>/dev/null || true)
if [ -z "$BOUNCER_PID" ] || ! alive "$BOUNCER_PID"; then
	die "pgbouncer wrote no pidfile: $(cat "$WORK/pgbouncer.log" 2>/dev/null)"
fi
wait_port "$BOUNCER_PORT" "$BOUNCER_PID" ||
	die "pgbouncer did not start listening on port $BOUNCER_PORT: $(cat "$WORK/pgbouncer.log" 2>/dev/null)"

# ----------------------------------------------------------- checks ---

target_port() {
	case $1 in
	direct) echo "$PG_PORT" ;;
	ttlproxy) echo "$PROXY_PORT" ;;
	pgbouncer) echo "$BOUNCER_PORT" ;;
	esac
}
target_pid() {
	case $1 in
	ttlproxy) echo "$PROXY_PID" ;;
	pgbouncer) echo "$BOUNCER_PID" ;;
	*) echo "" ;;
	esac
}
TARGETS="direct ttlproxy pgbouncer"

# What ttlproxy sends for pgbench's statements (as in -M extended/prepared).
# shellcheck disable=SC2016 # $1, $2...: parameters, not shell expansions
{
	echo "ttlproxy rewrites pgbench's statements to:"
	for q in 'SELECT abalance FROM pgbench_accounts WHERE aid = $1;' \
		'UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2;' \
		'INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP);'; do
		printf '  %s\n  -> %s\n' "$q" "$("$WORK/ttlproxy" rewrite --config "$WORK/ttlproxy.yaml" "$q" 2>&1)"
	done
	echo "direct and PgBouncer run instead:"
	grep -E '^(SELECT|UPDATE pgbench_accounts)' "$WORK/tpcb-like-filtered.sql" | sed 's/^/  /'
} >&2

# Every target sees every row (they are all live).
want=$((100000 * SCALE))
for t in $TARGETS; do
	n=$(psql_at "$(target_port "$t")" -c "SELECT count(*) FROM pgbench_accounts") ||
		die "cannot query pgbench_accounts through $t"
	[ "$n" = "$want" ] || die "$t sees $n rows of pgbench_accounts, want $want"
done

# Same plan for the proxy's rewrite (EXPLAIN through ttlproxy is rewritten
# too) as for the hand-filtered statement sent directly. Column names are
# compared without their table prefix: EXPLAIN VERBOSE qualifies the output
# columns of the proxy's form (a join with an empty subquery, which the
# planner removes) and not those of the hand-written one.
unqualify() { sed -E 's/(^|[^a-z_.])pgbench_(accounts|history)\./\1/g' <<<"$1"; }
PLANS_DIFFER=
for pair in "SELECT abalance FROM pgbench_accounts WHERE aid = 42|SELECT abalance FROM pgbench_accounts WHERE aid = 42 AND $LIVE" \
	"UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = 42|UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = 42 AND $LIVE" \
	"INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (1, 1, 42, 1, CURRENT_TIMESTAMP)|INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (1, 1, 42, 1, CURRENT_TIMESTAMP)"; do
	p_proxy=$(psql_at "$PROXY_PORT" -c "EXPLAIN (COSTS OFF, VERBOSE) ${pair%%|*}") || die "EXPLAIN through ttlproxy failed: ${pair%%|*}"
	p_direct=$(psql_at "$PG_PORT" -c "EXPLAIN (COSTS OFF, VERBOSE) ${pair#*|}") || die "EXPLAIN failed: ${pair#*|}"
	if [ "$(unqualify "$p_proxy")" != "$(unqualify "$p_direct")" ]; then
		PLANS_DIFFER=1
		warn "plans differ for ${pair%%|*}"
		printf 'through ttlproxy:\n%s\nhand-filtered, direct:\n%s\n' "$p_proxy" "$p_direct" >&2
	fi
done
[ -n "$PLANS_DIFFER" ] || log "plans of the rewritten and the hand-filtered statements match"

# ------------------------------------------------------------- runs ---

# Workloads: id|label|script|protocol|clients|jobs
WORKLOADS=(
	"S-simple|select-only simple -c $CLIENTS|select-only|simple|$CLIENTS|$JOBS"
	"S-extended|select-only extended -c $CLIENTS|select-only|extended|$CLIENTS|$JOBS"
	"S-prepared|select-only prepared -c $CLIENTS|select-only|prepared|$CLIENTS|$JOBS"
	"B-simple|tpcb-like simple -c $CLIENTS|tpcb-like|simple|$CLIENTS|$JOBS"
	"B-extended|tpcb-like extended -c $CLIENTS|tpcb-like|extended|$CLIENTS|$JOBS"
	"S-simple-c1|select-only simple -c 1|select-only|simple|1|1"
	"S-prepared-c1|select-only prepared -c 1|select-only|prepared|1|1"
)

printf 'round\tworkload\ttarget\ttps\tlatency_us\ttransactions\tcpu_us\tcpu_us_per_tx\tconnect_ms\n' >"$RAW"

# run_pgbench NAME TARGET SCRIPT PROTOCOL CLIENTS JOBS SECONDS runs one
# pgbench and sets R_TPS, R_LAT_US, R_TX, R_CONN_MS (pgbench's initial
# connection time) and R_CPU_US (CPU of the target's proxy process during the
# run, empty for direct). Dies with the run's log when pgbench fails.
run_pgbench() {
	local name=$1 target=$2 script=$3 proto=$4 c=$5 j=$6 secs=$7
	local port pid out rc=0 t0=0 t1=0 w0 w1 wall failed
	local -a wl
	port=$(target_port "$target")
	pid=$(target_pid "$target")
	out=$WORK/runs/$name.log
	if [ "$target" = ttlproxy ]; then
		wl=(-b "$script") # pgbench's own script; the proxy adds the filter
	else
		wl=(-s "$SCALE" -f "$WORK/$script-filtered.sql")
	fi
	if [ "$script" = tpcb-like ]; then
		# What pgbench does before a run unless -n, done directly.
		psql_at "$PG_PORT" -c "VACUUM pgbench_branches" -c "VACUUM pgbench_tellers" -c "TRUNCATE pgbench_history" >/dev/null ||
			die "preparing $name failed"
	fi
	[ -z "$pid" ] || t0=$(cpu_ticks "$pid")
	w0=$(date +%s%N)
	# timeout: a statement that never returns must fail the run, not hang it.
	timeout -k 10 $((secs + 60)) "$PGBENCH" -h 127.0.0.1 -p "$port" -U postgres -n "${wl[@]}" -M "$proto" \
		-c "$c" -j "$j" -T "$secs" bench >"$out" 2>&1 || rc=$?
	w1=$(date +%s%N)
	[ -z "$pid" ] || t1=$(cpu_ticks "$pid")
	wall=$(awk -v a="$w0" -v b="$w1" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')
	echo "($PROG: pgbench exit status $rc after ${wall}s wall-clock)" >>"$out"
	R_TX=$(awk -F': *' '/^number of transactions actually processed:/ { split($2, a, "/"); print a[1] }' "$out")
	failed=$(awk -F': *' '/^number of failed transactions:/ { split($2, a, " "); print a[1] }' "$out")
	R_TPS=$(awk '/^tps = / && /(without initial connection time|excluding connections establishing)/ { print $3 }' "$out" | tail -n 1)
	R_LAT_US=$(awk '/^latency average = / { printf "%.1f", $4 * 1000 }' "$out")
	R_CONN_MS=$(awk '/^initial connection time = / { print $5 }' "$out")
	if [ "$rc" != 0 ] || [ "${failed:-0}" != 0 ] || [ -z "$R_TX" ] || [ "$R_TX" = 0 ] || [ -z "$R_TPS" ]; then
		{
			echo "---- $out"
			cat "$out"
			echo "----"
			if [ "$target" = ttlproxy ]; then
				echo "---- ttlproxy log (tail)"
				tail -n 40 "$WORK/ttlproxy.log"
			elif [ "$target" = pgbouncer ]; then
				echo "---- pgbouncer log (tail)"
				tail -n 40 "$WORK/pgbouncer.log"
			fi
			echo "---- postgres log (tail)"
			tail -n 40 "$WORK/postgres.log"
		} >&2
		[ "$rc" != 124 ] || echo "pgbench did not finish within $((secs + 60))s: killed" >&2
		die "pgbench failed: $name (exit status $rc, failed transactions ${failed:-?}, transactions ${R_TX:-?}, ${wall}s wall-clock)"
	fi
	R_CPU_US=
	if [ -n "$pid" ]; then
		R_CPU_US=$(awk -v d=$((t1 - t0)) -v hz="$CLK_TCK" 'BEGIN { printf "%.0f", d * 1000000 / hz }')
	fi
}

if [ "$WARMUP" -gt 0 ]; then
	for t in $TARGETS; do
		log "warm-up: select-only prepared, ${WARMUP}s, $t"
		run_pgbench "warmup-$t" "$t" select-only prepared "$CLIENTS" "$JOBS" "$WARMUP"
	done
fi

NRUNS=$((ROUNDS * ${#WORKLOADS[@]} * 3))
log "$ROUNDS round(s) x ${#WORKLOADS[@]} workloads x 3 targets, ${DURATION}s each (about $((NRUNS * DURATION / 60 + 1)) min)"
START=$(date +%s)
for round in $(seq "$ROUNDS"); do
	for w in "${WORKLOADS[@]}"; do
		IFS='|' read -r wid label script proto c j <<<"$w"
		for t in $TARGETS; do
			run_pgbench "r$round-$wid-$t" "$t" "$script" "$proto" "$c" "$j" "$DURATION"
			cpu_tx=
			if [ -n "$R_CPU_US" ]; then
				cpu_tx=$(awk -v u="$R_CPU_US" -v n="$R_TX" 'BEGIN { printf "%.2f", u / n }')
			fi
			printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$wid" "$t" "$R_TPS" "$R_LAT_US" "$R_TX" "$R_CPU_US" "$cpu_tx" "$R_CONN_MS" >>"$RAW"
			printf '[round %s/%s] %-27s %-9s tps %9.1f  latency %8.1f us  %7s tx  connect %7s ms%s\n' \
				"$round" "$ROUNDS" "$label" "$t" "$R_TPS" "$R_LAT_US" "$R_TX" "${R_CONN_MS:-?}" \
				"${cpu_tx:+  CPU $cpu_tx us/tx}" >&2
		done
	done
done
ELAPSED=$(($(date +%s) - START))

# The proxy's own account: nothing rejected, and (when the build has the
# metric) no shape-template mismatches, which would be a rewriter bug.
metrics=$(
	exec 3<>"/dev/tcp/127.0.0.1/$ADMIN_PORT" &&
		printf 'GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3 &&
		cat <&3
) || die "cannot read ttlproxy's /metrics on port $ADMIN_PORT"
metric() { awk -v m="$1" '$1 == m { v = $2 } END { print (v == "" ? "" : v + 0) }' <<<"$metrics"; }
REWRITTEN=$(metric 'ttlproxy_proxy_statements_total{outcome="rewritten"}')
REJECTED=$(metric 'ttlproxy_proxy_statements_total{outcome="rejected"}')
MISMATCH=$(metric ttlproxy_proxy_rewrite_shape_mismatches_total)
log "ttlproxy metrics: statements rewritten ${REWRITTEN:-?}, rejected ${REJECTED:-0}, shape mismatches ${MISMATCH:-n/a}"
[ "${REWRITTEN:-0}" != 0 ] || die "ttlproxy reports no rewritten statement: the TTL tables were not filtered"
[ "${REJECTED:-0}" = 0 ] || die "ttlproxy rejected ${REJECTED} statements (see $WORK/ttlproxy.log; KEEP=1 keeps it)"
if [ -n "$MISMATCH" ] && [ "$MISMATCH" != 0 ]; then
	warn "ttlproxy_proxy_rewrite_shape_mismatches_total = $MISMATCH: a rewriter bug, please report it"
fi

# ----------------------------------------------------------- report ---

echo "raw per-run figures (also in $RAW when KEEP=1):" >&2
column -t -s "$(printf '\t')" "$RAW" >&2 2>/dev/null || cat "$RAW" >&2

# median WID TARGET COLUMN prints the median of that column over the rounds,
# or nothing when it has no values.
median() {
	awk -F'\t' -v w="$1" -v t="$2" -v c="$3" 'NR > 1 && $2 == w && $3 == t && $c != "" { print $c }' "$RAW" |
		sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) exit; if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
fmt() { # fmt FORMAT VALUE: printf, or "–" when VALUE is empty
	if [ -n "$2" ]; then
		awk -v f="$1" -v v="$2" 'BEGIN { printf f, v }'
	else
		printf -- '–'
	fi
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b > 0) printf "%.2f", a / b; else printf "–" }'; }
diff_us() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b != "") printf "%+.0f", a - b; else printf "–" }'; }

PG_VERSION=$("$BIN/postgres" --version | awk '{ print $3 }')
BOUNCER_VERSION=$("$PGBOUNCER" --version 2>/dev/null | awk 'NR == 1 { print $NF }')
PROXY_VERSION=$("$WORK/ttlproxy" version 2>/dev/null | awk 'NR == 1 { print $NF }')
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ -n "$(git -C "$ROOT" status --porcelain 2>/dev/null)" ]; then
	COMMIT="$COMMIT+dirty"
fi

NOTE=
[ "${SMOKE:-}" != 1 ] || NOTE=". SMOKE run: the figures mean nothing"
{
	echo
	printf 'pgbench scale %s, %s s per run, %s round(s) (medians), %s CPUs (%s), PostgreSQL %s, PgBouncer %s (session), ttlproxy %s (%s)%s\n' \
		"$SCALE" "$DURATION" "$ROUNDS" "$(nproc)" "$(uname -m)" "$PG_VERSION" "$BOUNCER_VERSION" "$PROXY_VERSION" "$COMMIT" "$NOTE"
	echo
	echo '| workload | direct tps | ttlproxy tps | pgbouncer tps | ttlproxy/pgbouncer | ttlproxy/direct | ttlproxy CPU µs/tx | pgbouncer CPU µs/tx | direct latency µs | ttlproxy added µs | pgbouncer added µs |'
	echo '|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|'
	for w in "${WORKLOADS[@]}"; do
		IFS='|' read -r wid label script proto c j <<<"$w"
		d=$(median "$wid" direct 4)
		p=$(median "$wid" ttlproxy 4)
		b=$(median "$wid" pgbouncer 4)
		pc=$(median "$wid" ttlproxy 8)
		bc=$(median "$wid" pgbouncer 8)
		lat_d='' lat_p='' lat_b=''
		if [ "$c" = 1 ]; then
			lat_d=$(median "$wid" direct 5)
			lat_p=$(median "$wid" ttlproxy 5)
			lat_b=$(median "$wid" pgbouncer 5)
		fi
		printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$label" \
			"$(fmt '%.0f' "$d")" "$(fmt '%.0f' "$p")" "$(fmt '%.0f' "$b")" \
			"$(ratio "$p" "$b")" "$(ratio "$p" "$d")" \
			"$(fmt '%.1f' "$pc")" "$(fmt '%.1f' "$bc")" \
			"$(fmt '%.0f' "$lat_d")" "$(diff_us "$lat_p" "$lat_d")" "$(diff_us "$lat_b" "$lat_d")"
	done
	echo
}
log "$NRUNS pgbench runs succeeded in ${ELAPSED}s"
