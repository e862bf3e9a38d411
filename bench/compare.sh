#!/usr/bin/env bash
# ttlproxy against a direct connection and against PgBouncer, doing the same
# work: pgbench on one throw-away PostgreSQL cluster, in interleaved rounds,
# medians printed as Markdown tables. Optionally a second ttlproxy binary
# (BASELINE) runs alongside, to measure a change of the proxy itself.
#
#   bench/compare.sh                         # scale 10, 10 s per run, 3 rounds
#   SMOKE=1 bench/compare.sh                 # does every run succeed? (CI)
#   ROUNDS=5 DURATION=30 bench/compare.sh
#   BASELINE=/tmp/ttlproxy-main bench/compare.sh   # this checkout against it
#
# Targets (each on its own free port, found at run time):
#   direct     pgbench -> PostgreSQL
#   ttlproxy   pgbench -> ttlproxy (go build of this checkout, or TTLPROXY;
#              `serve --config`) -> PostgreSQL. pgbench_accounts is a TTL
#              table (expires_at timestamptz; 10% of the rows expire in a
#              day, the rest are NULL, so every row is live) and
#              pgbench_history is a TTL table with default_ttl 1h, which the
#              proxy stamps on INSERT. pgbench runs its built-in scripts; the
#              proxy adds the filter. No sweeper.
#   baseline   only when BASELINE is set: the binary BASELINE with the same
#              configuration as ttlproxy (its own port and admin port),
#              started and measured the same way.
#   pgbouncer  pgbench -> PgBouncer (pool_mode = session) -> PostgreSQL.
#   floor, floor-epoll
#              only with FLOOR=1: pgbench -> bench/relayfloor (a byte relay
#              that does nothing per message; -engine goroutine, ttlproxy's
#              engine, and -engine epoll, an event loop of its own) ->
#              PostgreSQL. What an engine alone costs: ttlproxy's CPU per
#              transaction minus floor's is ttlproxy's own work per message,
#              floor's minus floor-epoll's what an event loop would save.
#              Not in the TLS row.
#
# Same work on every target. ttlproxy rewrites pgbench's statements as
# `ttlproxy rewrite` shows (the script logs it at start):
#   SELECT ... FROM pgbench_accounts  -> the row must also satisfy
#       ("pgbench_accounts"."expires_at" IS NULL OR ... >= now())
#   UPDATE pgbench_accounts ... WHERE (aid = $n) AND (<same predicate>)
#   INSERT INTO pgbench_history (...) -> adds expires_at = now() + 1h
# The direct, PgBouncer and floor targets run custom scripts (-f) equal to the
# built-in select-only and tpcb-like scripts but with that filter written
# into the SQL by hand, and pgbench_history.expires_at has the column DEFAULT
# now() + interval '3600 seconds', so the server does the same work as behind
# ttlproxy (the script checks that the plans match). Direct therefore runs
# the hand-filtered scripts too: it is the floor, what the filter costs with
# no proxy at all; it is NOT pgbench's unfiltered built-in workload.
#
# Workloads, each against every target (-c/-j fixed where a number is given):
#   select-only (-S)       -M simple, extended, prepared   -c CLIENTS -j JOBS
#   tpcb-like              -M simple, extended             -c CLIENTS -j JOBS
#   select-only (-S)       -M prepared                     -c 32 -j 2
#   select-only (-S)       -M prepared                     -c 100 -j 2
#   select-only (-S), TLS  -M prepared                     -c 8 -j 2
#   select-only (-S)       -M simple, prepared             -c 1 -j 1 (latency, p99)
#   select-only (-S)       -M prepared                     -c 8 -j 2 (p99), twice:
#       "no scraping", then "/metrics every 100 ms + reload": during the
#       latter a background loop GETs the running ttlproxy's (or baseline's)
#       http://127.0.0.1:ADMIN/metrics about every 100 ms and sends it a
#       POST /-/reload every tenth time (once a second, the first after
#       0.5 s). A reload of an unchanged file is not a no-op: Server.Reload
#       (proxy/reload.go) always installs a new rule set with a new
#       generation and an empty catalog cache, so every session adopts it at
#       its next statement, reads its state again (one catalog read per
#       database per reload, shared by the sessions), and prepares its
#       prepared statements again. The script logs the scrapes and reloads
#       made and the proxy's ttlproxy_proxy_session_refreshes_total over the
#       run (about clients x reloads). Against PgBouncer the loop runs
#       `SHOW STATS` on its admin console (psql) every 100 ms instead;
#       against direct it runs nothing.
# The TLS row runs against separate instances: PostgreSQL has ssl = on (a
# self-signed certificate made with openssl), pgbench connects with
# PGSSLMODE=require to every target (direct: the server's TLS), and the
# proxies take client TLS and connect to the server with TLS as well: a
# ttlproxy (and a baseline) with `tls:` and `upstream_tls: {sslmode:
# require}`, a PgBouncer with client_tls_sslmode and server_tls_sslmode
# require, each on its own port. Every other row runs with PGSSLMODE=disable
# against instances whose server leg is plain too (upstream_tls sslmode
# disable; PgBouncer without server TLS), so those rows are unchanged by the
# server's ssl = on; the script checks both legs with pg_stat_ssl, and that
# the TLS ttlproxy still accepts a plain client. Without openssl the TLS row
# is skipped (with a warning).
# Before each tpcb-like run the script does what pgbench does unless -n:
# VACUUM pgbench_branches, pgbench_tellers and TRUNCATE pgbench_history
# (directly, outside the timed run). pgbench always runs with -n.
#
# Rounds: in each of ROUNDS rounds every workload runs against direct,
# ttlproxy, baseline (when set) and pgbouncer in turn, so that noise on a
# shared machine hits all targets alike. The tables show medians over the
# rounds; ratios and added latencies are computed from those medians, the
# per-transaction figures are medians of each run's figure. Per-run figures
# go to standard error as they come, and as a raw table at the end.
#
# Table 1, throughput and CPU: tps per target, ratios (ttlproxy/baseline
# when BASELINE is set), CPU µs/tx of the proxy processes, and for the -c 1
# rows the average latency, direct, and what each proxy adds to it.
# CPU per transaction: utime+stime of the proxy process (/proc/PID/stat, all
# threads) before and after each run against it, in microseconds, divided by
# the transactions pgbench reports. The resolution is one clock tick
# (getconf CLK_TCK, usually 10 ms) per run.
#
# Table 2, counters and latency, one line per workload and proxy target
# (direct too on the rows that have a p99):
#   syscalls/tx          raw_syscalls:sys_enter of the proxy process
#   ctxsw/tx             context-switches (voluntary and involuntary)
#   futex+nanosleep/tx   syscalls:sys_enter_futex + sys_enter_nanosleep +
#                        sys_enter_clock_nanosleep (those the kernel has)
#   p99 µs               99th percentile (nearest rank) of the latencies in
#                        pgbench's per-transaction log (-l, 3rd field); only
#                        on the -c 1 rows and the "-c 8 ... scraping" pair,
#                        the rows that run with -l
# each divided by the transactions of the run; "–" where not measured. The
# counters come from `perf stat -x, -p PID` over the proxy's process,
# started disabled and enabled (through its --control fifo, acknowledged)
# just before pgbench starts, disabled right after pgbench exits, then
# stopped with SIGINT: the window includes pgbench's connection set-up and
# teardown, which the transactions do not. perf stat -p attaches to the
# threads that exist when it starts; threads created later (Go starts OS
# threads on demand) inherit the counters (perf's default inherit), and a
# thread that exits adds its counts on exit, so all threads are counted
# (checked with a process that starts threads after perf attached). The
# tracepoints cost the counted process a little per system call, and while
# perf counts, the kernel sends every thread on the machine through its
# syscall tracing path: the proxies' tps and CPU µs/tx are measured with
# that overhead, direct's without it; compare with PERF=0. Without
# perf, or when an event is not supported (tracepoints need root or
# kernel.perf_event_paranoid = -1), the column prints "–" and the script
# says so once at start; PERF=0 turns the counters off. As a cross-check,
# the raw table also has ctxsw_proc_per_tx: the sum of voluntary_ctxt_switches
# and nonvoluntary_ctxt_switches over /proc/PID/task/*/status before and
# after the run (threads that exit during the run are missed there); each
# run's log (KEEP=1) ends with both counts and the process's thread count
# before and after the run.
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
#              succeeds (CI), the new rows included; timings are printed,
#              never checked
#   KEEP=1     keep the work directory (configurations, every pgbench log,
#              perf's output)
#   PG_BINDIR  directory of initdb/pg_ctl/postgres (default: PATH, then the
#              newest /usr/lib/postgresql/*/bin)
#   TTLPROXY   a ttlproxy binary to use instead of building this checkout
#   BASELINE   a second ttlproxy binary, the target "baseline" (optional)
#   COLUMN=1   the target "baseline" is this checkout's binary with, besides
#              the row rule, an expiring column on pgbench_accounts (filler,
#              its expiry in filler_expires_at, NULL: never expires), which
#              no pgbench statement names: what a column rule costs the
#              statements that do not read it (docs/design/column-ttl.md §8).
#              Not with BASELINE.
#   FLOOR=1    the targets floor and floor-epoll too (bench/relayfloor)
#   RLS=1      the targets app and rls too: what the row-security policies
#              of `ttlproxy install --row-security` cost beside the rewrite.
#              Both are this checkout's ttlproxy, with pgbench logging in as
#              bench_app, an ordinary role (superusers bypass row security)
#              that owns its own copy of the tables (pgbench -i, the same
#              TTL columns): app on database bench_app, without policies;
#              rls on database bench_rls, with the policies installed (FORCE:
#              they apply to the owner) and `row_security: required` (DDL
#              events installed there too). rls/app is the policies' cost.
#              Not in the TLS row.
#   PERF=0     no perf counters (default: used when perf works)
#   ONLY       comma-separated workload ids to run, the others skipped (the
#              ids: S-simple, S-extended, S-prepared, B-simple, B-extended,
#              S-prepared-c32, S-prepared-c100, S-prepared-tls, S-simple-c1,
#              S-prepared-c1, S-prepared-quiet, S-prepared-scrape), for more
#              rounds of the rows a change is about
#
# Needs: the PostgreSQL server binaries, pgbench and psql, Go (unless
# TTLPROXY is set) and pgbouncer; openssl for the TLS row; perf (optional)
# for the counters. Run as root, it installs pgbouncer and openssl with
# apt-get when they are missing and runs PostgreSQL and PgBouncer as the
# postgres OS user (runuser). PostgreSQL runs with max_connections =
# 2 * max(CLIENTS, 100) + 50: PgBouncer (session mode) keeps the server
# connections of its largest run open while the other targets run. It stops
# every process it started.
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
if [ -n "${BASELINE:-}" ] && [ ! -x "$BASELINE" ]; then
	usage_die "BASELINE=$BASELINE is not an executable"
fi
if [ "${COLUMN:-}" = 1 ]; then
	[ -z "${BASELINE:-}" ] || usage_die "COLUMN=1 uses the target baseline: not with BASELINE"
fi
# The largest -c of any run: PgBouncer's pool and PostgreSQL's
# max_connections are sized for it.
MAXC=$((CLIENTS > 100 ? CLIENTS : 100))

# Connection settings from the caller's environment must not leak into the
# runs: every connection here names its host, port, user and database. TLS
# only where a run asks for it (PGSSLMODE=require for the TLS row).
unset PGSERVICE PGSERVICEFILE PGOPTIONS PGPASSWORD PGPASSFILE PGSSLMODE PGHOST PGHOSTADDR PGPORT PGUSER PGDATABASE
export PGSSLMODE=disable PGCONNECT_TIMEOUT=10

ROOT=$(cd "$(dirname "$0")/.." && pwd)
IS_ROOT=
[ "$(id -u)" = 0 ] && IS_ROOT=1

WORK=
PG_STARTED=
BIN=
# Processes to stop at exit: the proxies (our children) and the PgBouncers
# (daemons, from their pid files); a perf or scraping loop of a run.
STOP_PIDS=()
PERF_PID=
SCRAPER_PID=

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

# stop_pid PID [SIGNAL]: SIGNAL (default TERM), up to 5 s to exit, then
# SIGKILL; reaps it when it is our child.
stop_pid() {
	local pid=$1 sig=${2:-TERM}
	[ -n "$pid" ] || return 0
	kill "-$sig" "$pid" 2>/dev/null || true
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
	stop_pid "$SCRAPER_PID"
	stop_pid "$PERF_PID" INT
	for pid in "${STOP_PIDS[@]}"; do
		stop_pid "$pid"
	done
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

# apt_install PACKAGE: apt-get install, with an update when the first try
# fails; false when that is not possible here or fails.
apt_install() {
	[ -n "$IS_ROOT" ] && command -v apt-get >/dev/null 2>&1 || return 1
	log "installing $1 (apt-get install -y $1)"
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y -qq "$1" >/dev/null 2>&1; then
		apt-get update -qq >/dev/null 2>&1 || return 1
		apt-get install -y -qq "$1" >/dev/null 2>&1 || return 1
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

# proc_ctxsw PID prints the context switches (voluntary and involuntary) of
# the process's live threads so far, from /proc/PID/task/*/status.
proc_ctxsw() {
	{ cat "/proc/$1/task/"*/status 2>/dev/null || true; } |
		awk '/^(voluntary|nonvoluntary)_ctxt_switches:/ { s += $2 } END { print s + 0 }'
}

# http_req PORT METHOD PATH prints the response (status line, headers,
# body) of an HTTP/1.0 request to 127.0.0.1:PORT.
http_req() {
	(
		exec 3<>"/dev/tcp/127.0.0.1/$1" &&
			printf '%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n' "$2" "$3" >&3 &&
			cat <&3
	)
}

# ------------------------------------------------------- perf counters ---

PERF_WANT=(raw_syscalls:sys_enter context-switches syscalls:sys_enter_futex syscalls:sys_enter_nanosleep syscalls:sys_enter_clock_nanosleep)
PERF_EVENTS= # those perf counts here, comma-separated; empty: no counters
PERF_BIN=

# perf_probe sets PERF_EVENTS to the events of PERF_WANT that perf counts
# here, and says which it does not.
perf_probe() {
	local ev missing=() f=$WORK/perf-probe.csv
	if [ "${PERF:-}" = 0 ]; then
		log "perf counters off (PERF=0): syscalls/tx, ctxsw/tx and futex+nanosleep/tx print –"
		return
	fi
	PERF_BIN=$(command -v perf 2>/dev/null || true)
	if [ -z "$PERF_BIN" ]; then
		log "perf not found: syscalls/tx, ctxsw/tx and futex+nanosleep/tx print – (apt-get install linux-perf)"
		return
	fi
	# perf stat -h exits non-zero after printing its options.
	case $("$PERF_BIN" stat -h 2>&1 || true) in
	*--control*) ;;
	*)
		log "perf ($PERF_BIN) has no stat --control (perf 5.10 or later needed): syscalls/tx, ctxsw/tx and futex+nanosleep/tx print –"
		return
		;;
	esac
	for ev in "${PERF_WANT[@]}"; do
		if "$PERF_BIN" stat -x, -e "$ev" -o "$f" -- true >/dev/null 2>&1 &&
			awk -F, -v e="$ev" '$3 == e && $1 ~ /^[0-9]+$/ { ok = 1 } END { exit !ok }' "$f"; then
			PERF_EVENTS=${PERF_EVENTS:+$PERF_EVENTS,}$ev
		else
			missing+=("$ev")
		fi
	done
	if [ -z "$PERF_EVENTS" ]; then
		log "perf ($PERF_BIN) counts none of ${PERF_WANT[*]} here (root or kernel.perf_event_paranoid = -1 needed for tracepoints): syscalls/tx, ctxsw/tx and futex+nanosleep/tx print –"
	elif [ ${#missing[@]} -gt 0 ]; then
		log "perf counts ${PERF_EVENTS//,/ }; not ${missing[*]}: their columns print – (futex+nanosleep/tx sums those counted)"
	else
		log "perf counts ${PERF_EVENTS//,/ } of the proxy processes"
	fi
}

PERF_CTL_FD=
PERF_ACK_FD=
PERF_OUT=

# perf_start PID NAME attaches perf stat to PID, its events disabled, and
# enables them: when it returns, perf counts. Without perf it does nothing.
perf_start() {
	local pid=$1 name=$2 ack
	PERF_PID=
	[ -n "$PERF_EVENTS" ] || return 0
	local ctl=$WORK/runs/$name.perf-ctl ackf=$WORK/runs/$name.perf-ack
	PERF_OUT=$WORK/runs/$name.perf.csv
	mkfifo "$ctl" "$ackf"
	"$PERF_BIN" stat -x, -D -1 --control "fifo:$ctl,$ackf" -e "$PERF_EVENTS" -p "$pid" -o "$PERF_OUT" \
		>"$WORK/runs/$name.perf.err" 2>&1 &
	PERF_PID=$!
	# Read-write opens of a fifo do not block, whether or not perf has it open.
	exec {PERF_CTL_FD}<>"$ctl" {PERF_ACK_FD}<>"$ackf"
	echo enable >&"$PERF_CTL_FD"
	ack=
	for _ in $(seq 30); do
		read -r -t 0.5 ack <&"$PERF_ACK_FD" && break
		alive "$PERF_PID" || break
	done
	if [ "$ack" != ack ]; then
		warn "perf stat did not start counting on PID $pid ($(tr '\n' ' ' <"$WORK/runs/$name.perf.err")): counters off from here on"
		PERF_EVENTS=
		perf_close
		stop_pid "$PERF_PID" INT
		PERF_PID=
	fi
}

perf_close() {
	exec {PERF_CTL_FD}>&- {PERF_ACK_FD}>&-
	rm -f "$WORK/runs/"*.perf-ctl "$WORK/runs/"*.perf-ack
}

# perf_stop disables the counters, stops perf and sets R_SYSCALLS, R_CTXSW
# and R_SLEEPS (futex + nanosleep + clock_nanosleep, those counted) to the
# counts of the run, each empty when not counted.
perf_stop() {
	R_SYSCALLS='' R_CTXSW='' R_SLEEPS=''
	[ -n "$PERF_PID" ] || return 0
	local ack=
	echo disable >&"$PERF_CTL_FD"
	read -r -t 15 ack <&"$PERF_ACK_FD" || true
	perf_close
	# perf stat exits with 130 on SIGINT, after writing its counts.
	stop_pid "$PERF_PID" INT
	PERF_PID=
	[ "$ack" = ack ] || warn "perf stat did not acknowledge disable: the counts may include the time after the run"
	R_SYSCALLS=$(perf_count raw_syscalls:sys_enter)
	R_CTXSW=$(perf_count context-switches)
	R_SLEEPS=$(perf_count syscalls:sys_enter_futex)
	if [ -n "$R_SLEEPS" ]; then
		R_SLEEPS=$((R_SLEEPS + $(perf_count syscalls:sys_enter_nanosleep 0) + $(perf_count syscalls:sys_enter_clock_nanosleep 0)))
	fi
}

# perf_count EVENT [DEFAULT] prints EVENT's count in perf's output of the
# run, or DEFAULT (nothing) when it was not counted.
perf_count() {
	awk -F, -v e="$1" -v d="${2:-}" '$3 == e && $1 ~ /^[0-9]+$/ { v = $1 } END { print (v == "" ? d : v) }' "$PERF_OUT"
}

# ---------------------------------------------------------- scraping ---

# scrape_loop KIND PORT OUT, in the background: every 100 ms (by the clock,
# not 100 ms after the previous one ended) for KIND ttlproxy, GET /metrics
# on admin port PORT, and every tenth time (from the fifth: 0.5 s, 1.5 s...)
# POST /-/reload; for KIND pgbouncer, SHOW STATS on PgBouncer's admin
# console at PORT. One line per request to OUT: "scrape ok|fail",
# "reload ok|fail".
scrape_loop() {
	local kind=$1 port=$2 out=$3 i=0 next now d resp
	next=${EPOCHREALTIME/[.,]/}
	while :; do
		if [ "$kind" = pgbouncer ]; then
			if "$PSQL" -X -q -A -t -h 127.0.0.1 -p "$port" -U postgres -d pgbouncer -c 'SHOW STATS' >/dev/null 2>&1; then
				echo "scrape ok"
			else
				echo "scrape fail"
			fi >>"$out"
		else
			resp=$(http_req "$port" GET /metrics 2>/dev/null) || resp=
			case $resp in "HTTP/1."?" 200"*) echo "scrape ok" ;; *) echo "scrape fail" ;; esac >>"$out"
			if [ $((i % 10)) = 5 ]; then
				resp=$(http_req "$port" POST /-/reload 2>/dev/null) || resp=
				case $resp in "HTTP/1."?" 200"*) echo "reload ok" ;; *) echo "reload fail" ;; esac >>"$out"
			fi
		fi
		i=$((i + 1))
		next=$((next + 100000))
		now=${EPOCHREALTIME/[.,]/}
		d=$((next - now))
		if [ "$d" -gt 0 ]; then
			sleep "$(printf '0.%06d' "$d")"
		else
			next=$now
		fi
	done
}

# metric_of TEXT NAME prints the value of metric NAME in a /metrics text.
metric_of() { awk -v m="$2" '$1 == m { v = $2 } END { print (v == "" ? "" : v + 0) }' <<<"$1"; }

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
	apt_install pgbouncer ||
		die "pgbouncer not found: install it (apt-get install pgbouncer) or run as root to have it installed"
	PGBOUNCER=$(command -v pgbouncer 2>/dev/null || echo /usr/sbin/pgbouncer)
	[ -x "$PGBOUNCER" ] || die "pgbouncer installed but not found"
fi

OPENSSL=$(command -v openssl 2>/dev/null || true)
if [ -z "$OPENSSL" ] && apt_install openssl; then
	OPENSSL=$(command -v openssl 2>/dev/null || true)
fi
TLS=
if [ -n "$OPENSSL" ]; then
	TLS=1
else
	warn "openssl not found (apt-get install openssl): the TLS row is skipped"
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
if [ -n "${BASELINE:-}" ]; then
	cp "$BASELINE" "$WORK/ttlproxy-baseline"
elif [ "${COLUMN:-}" = 1 ]; then
	cp "$WORK/ttlproxy" "$WORK/ttlproxy-baseline"
	BASELINE=$WORK/ttlproxy-baseline
fi
if [ "${FLOOR:-}" = 1 ]; then
	command -v go >/dev/null 2>&1 || die "go not found: needed to build bench/relayfloor (FLOOR=1)"
	(cd "$ROOT" && go build -o "$WORK/relayfloor" ./bench/relayfloor) || die "go build of bench/relayfloor failed"
fi

perf_probe

# A self-signed certificate for the server and the proxies' client side.
if [ -n "$TLS" ]; then
	"$OPENSSL" req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=127.0.0.1" \
		-keyout "$WORK/server.key" -out "$WORK/server.crt" >"$WORK/openssl.log" 2>&1 ||
		die "openssl could not make a certificate: $(cat "$WORK/openssl.log")"
	chmod 600 "$WORK/server.key"
	if [ -n "$IS_ROOT" ]; then
		chown postgres "$WORK/server.key" "$WORK/server.crt"
	fi
fi

free_port PG_PORT
PG_MAX_CONN=$((2 * MAXC + 50))
PG_OPTS="-p $PG_PORT -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=$PG_MAX_CONN"
if [ -n "$TLS" ]; then
	PG_OPTS="$PG_OPTS -c ssl=on -c ssl_cert_file=$WORK/server.crt -c ssl_key_file=$WORK/server.key"
fi
log "starting PostgreSQL ($BIN) on port $PG_PORT (max_connections $PG_MAX_CONN${TLS:+, ssl on})"
as_pg "$BIN/initdb" -D "$WORK/data" -U postgres -A trust -E UTF8 --locale C --no-sync >"$WORK/initdb.log" 2>&1 ||
	die "initdb failed: $(cat "$WORK/initdb.log")"
PG_STARTED=1
as_pg "$BIN/pg_ctl" -D "$WORK/data" -l "$WORK/postgres.log" -w -t 60 start -o "$PG_OPTS" \
	>/dev/null || die "PostgreSQL did not start: $(cat "$WORK/postgres.log" 2>/dev/null)"

psql_at() { # psql_at PORT ARGS...: one connection to database bench (PSQL_DB, as PSQL_USER)
	local port=$1
	shift
	"$PSQL" -X -q -A -t -h 127.0.0.1 -p "$port" -U "${PSQL_USER:-postgres}" -d "${PSQL_DB:-bench}" -v ON_ERROR_STOP=1 "$@"
}
"$PSQL" -X -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 -c "CREATE DATABASE bench" >/dev/null

# bench_db DB USER: pgbench -i into DB as USER, then the TTL columns.
bench_db() {
	log "pgbench -i -s $SCALE into $1 (as $2), then the TTL columns"
	"$PGBENCH" -i -q -s "$SCALE" -h 127.0.0.1 -p "$PG_PORT" -U "$2" "$1" >"$WORK/pgbench-init-$1.log" 2>&1 ||
		die "pgbench -i failed: $(cat "$WORK/pgbench-init-$1.log")"
	PSQL_DB=$1 PSQL_USER=$2 psql_at "$PG_PORT" >/dev/null <"$WORK/ttl-columns.sql"
}
cat >"$WORK/ttl-columns.sql" <<'SQL'
ALTER TABLE pgbench_accounts ADD COLUMN expires_at timestamptz;
ALTER TABLE pgbench_accounts ADD COLUMN filler_expires_at timestamptz;
-- 10% of the rows expire in a day, the others never: every row is live.
UPDATE pgbench_accounts SET expires_at = now() + interval '1 day' WHERE aid % 10 = 0;
-- ttlproxy stamps now() + default_ttl (1h) on INSERT; direct and PgBouncer
-- get the same value from the column default.
ALTER TABLE pgbench_history ADD COLUMN expires_at timestamptz DEFAULT (now() + interval '3600 seconds');
VACUUM ANALYZE pgbench_accounts, pgbench_branches, pgbench_tellers, pgbench_history;
SQL
bench_db bench postgres
if [ "${RLS:-}" = 1 ]; then
	"$PSQL" -X -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 \
		-c "CREATE ROLE bench_app LOGIN" -c "CREATE DATABASE bench_app OWNER bench_app" \
		-c "CREATE DATABASE bench_rls OWNER bench_app" >/dev/null
	bench_db bench_app bench_app
	bench_db bench_rls bench_app
fi
psql_at "$PG_PORT" -c CHECKPOINT >/dev/null

# The hand-filtered scripts of the direct and PgBouncer targets: pgbench's
# built-in select-only and tpcb-like (pgbench --show-script) with ttlproxy's
# predicate written in.
LIVE="(expires_at IS NULL OR expires_at >= now())"
cat >"$WORK/select-only-filtered.sql" <<SQL
\\set aid random(1, 100000 * :scale)
SELECT abalance FROM pgbench_accounts WHERE aid = :aid AND $LIVE;
SQL
cat >"$WORK/tpcb-like-filtered.sql" <<SQL
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
SQL

# Instances. T_PORT, T_PID and T_ADMIN (ttlproxy's admin port) by instance:
# a target's instance is the target's name, with the suffix "-tls" for the
# TLS row (direct-tls is PostgreSQL itself).
declare -A T_PORT T_PID T_ADMIN T_DB T_USER
T_PORT[direct]=$PG_PORT
T_PORT[direct-tls]=$PG_PORT

# start_ttlproxy INSTANCE BINARY TLS [COLUMNS [RLSDB]]: writes INSTANCE's
# configuration (the same tables for every instance, with COLUMNS=1 the
# expiring column of COLUMN=1; with TLS=1, client TLS and TLS to the
# server, else a plain server leg) and starts BINARY on free ports. With
# RLSDB, `row_security: required` and DDL events, after installing both
# into database RLSDB.
start_ttlproxy() {
	local inst=$1 binary=$2 tls=$3 columns=${4:-0} rlsdb=${5:-} port admin pid
	free_port port
	free_port admin
	{
		printf 'listen: 127.0.0.1:%s\nupstream: 127.0.0.1:%s\nadmin_listen: 127.0.0.1:%s\nshutdown_timeout: 1s\n' \
			"$port" "$PG_PORT" "$admin"
		if [ "$tls" = 1 ]; then
			printf 'tls:\n  cert_file: %s\n  key_file: %s\nupstream_tls:\n  sslmode: require\n' \
				"$WORK/server.crt" "$WORK/server.key"
		else
			# The server has ssl = on: without this the default (prefer)
			# would put TLS on the server leg of the plain rows.
			printf 'upstream_tls:\n  sslmode: disable\n'
		fi
		cat <<'YAML'
tables:
  - table: public.pgbench_accounts
    column: expires_at
YAML
		if [ "$columns" = 1 ]; then
			printf '    columns:\n      - column: filler\n        expires_at_column: filler_expires_at\n'
		fi
		cat <<'YAML'
  - table: public.pgbench_history
    column: expires_at
    default_ttl: 1h
YAML
	} >"$WORK/$inst.yaml"
	# The scraping row reloads through POST /-/reload, which a proxy with
	# the admin: section answers only when enabled; a binary older than
	# that section refuses the key and answers the reload anyway.
	printf 'admin:\n  enable_lifecycle: true\n' >>"$WORK/$inst.yaml"
	if ! "$binary" rewrite --config "$WORK/$inst.yaml" "SELECT 1" >/dev/null 2>&1; then
		sed -i '/^admin:$/,$d' "$WORK/$inst.yaml"
	fi
	if [ -n "$rlsdb" ]; then
		local dsn="postgres://postgres@127.0.0.1:$PG_PORT/$rlsdb?sslmode=disable"
		printf 'row_security: required\nddl_events_dsn: %s\n' "$dsn" >>"$WORK/$inst.yaml"
		"$binary" install --config "$WORK/$inst.yaml" --dsn "$dsn" --ddl-events >"$WORK/$inst-install.log" 2>&1 &&
			"$binary" install --config "$WORK/$inst.yaml" --dsn "$dsn" --row-security >>"$WORK/$inst-install.log" 2>&1 ||
			die "ttlproxy install into $rlsdb failed: $(cat "$WORK/$inst-install.log")"
	fi
	log "starting $inst ($(basename "$binary")) on port $port (admin $admin)"
	"$binary" serve --config "$WORK/$inst.yaml" --log-level warn >"$WORK/$inst.log" 2>&1 &
	pid=$!
	STOP_PIDS+=("$pid")
	wait_port "$port" "$pid" ||
		die "$inst did not start listening on port $port: $(cat "$WORK/$inst.log")"
	T_PORT[$inst]=$port T_PID[$inst]=$pid T_ADMIN[$inst]=$admin
}

# start_pgbouncer INSTANCE TLS: PgBouncer, session mode, daemonized; its pid
# comes from its pidfile. With TLS=1, TLS required on both legs.
echo '"postgres" ""' >"$WORK/userlist.txt"
start_pgbouncer() {
	local inst=$1 tls=$2 port pid
	free_port port
	{
		cat <<INI
[databases]
bench = host=127.0.0.1 port=$PG_PORT dbname=bench

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $WORK/userlist.txt
admin_users = postgres
pool_mode = session
max_client_conn = $((MAXC + 50))
default_pool_size = $((MAXC + 2))
ignore_startup_parameters = extra_float_digits
log_connections = 0
log_disconnections = 0
logfile = $WORK/$inst.log
pidfile = $WORK/$inst.pid
INI
		if [ "$tls" = 1 ]; then
			cat <<INI
client_tls_sslmode = require
client_tls_key_file = $WORK/server.key
client_tls_cert_file = $WORK/server.crt
server_tls_sslmode = require
INI
		fi
	} >"$WORK/$inst.ini"
	log "starting $inst on port $port"
	as_pg "$PGBOUNCER" -d "$WORK/$inst.ini" >"$WORK/$inst.out" 2>&1 ||
		die "$inst did not start: $(cat "$WORK/$inst.out" "$WORK/$inst.log" 2>/dev/null)"
	for _ in $(seq 50); do
		[ -s "$WORK/$inst.pid" ] && break
		sleep 0.1
	done
	pid=$(cat "$WORK/$inst.pid" 2>/dev/null || true)
	if [ -z "$pid" ] || ! alive "$pid"; then
		die "$inst wrote no pidfile: $(cat "$WORK/$inst.log" 2>/dev/null)"
	fi
	STOP_PIDS+=("$pid")
	wait_port "$port" "$pid" ||
		die "$inst did not start listening on port $port: $(cat "$WORK/$inst.log" 2>/dev/null)"
	T_PORT[$inst]=$port T_PID[$inst]=$pid
}

# start_floor INSTANCE ENGINE: bench/relayfloor with that engine.
start_floor() {
	local inst=$1 engine=$2 port pid
	free_port port
	log "starting $inst (relayfloor -engine $engine) on port $port"
	"$WORK/relayfloor" -listen "127.0.0.1:$port" -upstream "127.0.0.1:$PG_PORT" -engine "$engine" >"$WORK/$inst.log" 2>&1 &
	pid=$!
	STOP_PIDS+=("$pid")
	wait_port "$port" "$pid" ||
		die "$inst did not start listening on port $port: $(cat "$WORK/$inst.log")"
	T_PORT[$inst]=$port T_PID[$inst]=$pid
}

start_ttlproxy ttlproxy "$WORK/ttlproxy" 0
[ -z "${BASELINE:-}" ] || start_ttlproxy baseline "$WORK/ttlproxy-baseline" 0 "${COLUMN:-0}"
RLS_TARGETS=
if [ "${RLS:-}" = 1 ]; then
	RLS_TARGETS="app rls"
	start_ttlproxy app "$WORK/ttlproxy" 0
	start_ttlproxy rls "$WORK/ttlproxy" 0 0 bench_rls
	T_DB[app]=bench_app T_USER[app]=bench_app T_DB[rls]=bench_rls T_USER[rls]=bench_app
fi
start_pgbouncer pgbouncer 0
FLOORS=
if [ "${FLOOR:-}" = 1 ]; then
	FLOORS="floor floor-epoll"
	start_floor floor goroutine
	start_floor floor-epoll epoll
fi
if [ -n "$TLS" ]; then
	start_ttlproxy ttlproxy-tls "$WORK/ttlproxy" 1
	[ -z "${BASELINE:-}" ] || start_ttlproxy baseline-tls "$WORK/ttlproxy-baseline" 1 "${COLUMN:-0}"
	start_pgbouncer pgbouncer-tls 1
fi

# ----------------------------------------------------------- checks ---

TARGETS="direct ttlproxy${BASELINE:+ baseline}${RLS_TARGETS:+ $RLS_TARGETS} pgbouncer${FLOORS:+ $FLOORS}"
PROXY_INSTANCES="ttlproxy${BASELINE:+ baseline}${RLS_TARGETS:+ $RLS_TARGETS}${TLS:+ ttlproxy-tls}"
if [ -n "$TLS" ] && [ -n "${BASELINE:-}" ]; then
	PROXY_INSTANCES="$PROXY_INSTANCES baseline-tls"
fi

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

# Every target sees every row (they are all live), and the server leg has
# TLS exactly where it should (pg_stat_ssl of the backend serving the
# query): not in the plain rows, in the TLS row. The TLS ttlproxy still
# serves a client that does not ask for TLS.
want=$((100000 * SCALE))
ssl_q="SELECT count(*) || ' ' || bool_and(ssl) FROM pgbench_accounts, (SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()) s"
check_target() { # check_target INSTANCE SSLMODE WANT_SSL
	local n
	n=$(PGSSLMODE=$2 PSQL_DB=${T_DB[$1]:-bench} PSQL_USER=${T_USER[$1]:-postgres} psql_at "${T_PORT[$1]}" -c "$ssl_q") ||
		die "cannot query pgbench_accounts through $1 (sslmode $2)"
	[ "$n" = "$want $3" ] || die "$1 (sslmode $2): rows and server-side TLS are '$n', want '$want $3'"
}
for t in $TARGETS; do
	check_target "$t" disable false
	case " $FLOORS $RLS_TARGETS " in *" $t "*) continue ;; esac # no TLS instance
	[ -z "$TLS" ] || check_target "$t-tls" require true
done
if [ -n "$TLS" ]; then
	check_target ttlproxy-tls disable true
	log "server leg without TLS in the plain rows, with TLS in the TLS row; ttlproxy with tls: configured serves plain clients too"
fi

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
	p_proxy=$(psql_at "${T_PORT[ttlproxy]}" -c "EXPLAIN (COSTS OFF, VERBOSE) ${pair%%|*}") || die "EXPLAIN through ttlproxy failed: ${pair%%|*}"
	p_direct=$(psql_at "$PG_PORT" -c "EXPLAIN (COSTS OFF, VERBOSE) ${pair#*|}") || die "EXPLAIN failed: ${pair#*|}"
	if [ "$(unqualify "$p_proxy")" != "$(unqualify "$p_direct")" ]; then
		PLANS_DIFFER=1
		warn "plans differ for ${pair%%|*}"
		printf 'through ttlproxy:\n%s\nhand-filtered, direct:\n%s\n' "$p_proxy" "$p_direct" >&2
	fi
done
[ -n "$PLANS_DIFFER" ] || log "plans of the rewritten and the hand-filtered statements match"

# ------------------------------------------------------------- runs ---

# Workloads: id|label|script|protocol|clients|jobs|options, options a
# comma-separated list of: tls (the TLS instances, PGSSLMODE=require), log
# (pgbench -l: p99), scrape (the scraping loop during the run).
WORKLOADS=(
	"S-simple|select-only simple -c $CLIENTS|select-only|simple|$CLIENTS|$JOBS|"
	"S-extended|select-only extended -c $CLIENTS|select-only|extended|$CLIENTS|$JOBS|"
	"S-prepared|select-only prepared -c $CLIENTS|select-only|prepared|$CLIENTS|$JOBS|"
	"B-simple|tpcb-like simple -c $CLIENTS|tpcb-like|simple|$CLIENTS|$JOBS|"
	"B-extended|tpcb-like extended -c $CLIENTS|tpcb-like|extended|$CLIENTS|$JOBS|"
	"S-prepared-c32|select-only prepared -c 32|select-only|prepared|32|2|"
	"S-prepared-c100|select-only prepared -c 100|select-only|prepared|100|2|"
)
if [ -n "$TLS" ]; then
	WORKLOADS+=("S-prepared-tls|select-only prepared -c 8, TLS|select-only|prepared|8|2|tls")
fi
WORKLOADS+=(
	"S-simple-c1|select-only simple -c 1|select-only|simple|1|1|log"
	"S-prepared-c1|select-only prepared -c 1|select-only|prepared|1|1|log"
	"S-prepared-quiet|select-only prepared -c 8, no scraping|select-only|prepared|8|2|log"
	"S-prepared-scrape|select-only prepared -c 8, /metrics every 100 ms + reload|select-only|prepared|8|2|log,scrape"
)

if [ -n "${ONLY:-}" ]; then
	kept=()
	for w in "${WORKLOADS[@]}"; do
		case ,$ONLY, in *,"${w%%|*}",*) kept+=("$w") ;; esac
	done
	[ ${#kept[@]} -gt 0 ] || usage_die "ONLY=$ONLY names no workload"
	WORKLOADS=("${kept[@]}")
fi

printf 'round\tworkload\ttarget\ttps\tlatency_us\ttransactions\tcpu_us\tcpu_us_per_tx\tconnect_ms\tsyscalls_per_tx\tctxsw_per_tx\tfutex_nanosleep_per_tx\tctxsw_proc_per_tx\tp99_us\n' >"$RAW"

# per_tx COUNT TX: COUNT / TX with two decimals, or nothing without COUNT.
per_tx() { [ -z "$1" ] || awk -v u="$1" -v n="$2" 'BEGIN { printf "%.2f", u / n }'; }

# run_pgbench NAME TARGET SCRIPT PROTOCOL CLIENTS JOBS SECONDS [OPTIONS]
# runs one pgbench and sets R_TPS, R_LAT_US, R_TX, R_CONN_MS (pgbench's
# initial connection time), R_CPU_US (CPU of the target's proxy process
# during the run, empty for direct), R_SYSCALLS, R_CTXSW, R_SLEEPS (perf's
# counts, empty without), R_CTXSW_PROC (from /proc) and R_P99_US (with the
# option log). Dies with the run's log when pgbench fails.
run_pgbench() {
	local name=$1 target=$2 script=$3 proto=$4 c=$5 j=$6 secs=$7 opts=,${8:-},
	local inst=$target sslmode=disable port pid admin out rc=0 t0=0 t1=0 x0=0 x1=0 w0 w1 wall failed
	local scrape_out='' scrape_kind='' m0='' m1='' n0=0 n1=0
	local -a wl lg=()
	case $opts in *,tls,*) inst=$target-tls sslmode=require ;; esac
	port=${T_PORT[$inst]}
	pid=${T_PID[$inst]:-}
	admin=${T_ADMIN[$inst]:-}
	out=$WORK/runs/$name.log
	case $target in
	ttlproxy | baseline | app | rls) wl=(-b "$script") ;; # pgbench's own script; the proxy adds the filter
	*) wl=(-s "$SCALE" -f "$WORK/$script-filtered.sql") ;;
	esac
	case $opts in *,log,*) lg=(-l --log-prefix="$WORK/runs/$name.tx") ;; esac
	if [ "$script" = tpcb-like ]; then
		# What pgbench does before a run unless -n, done directly.
		PSQL_DB=${T_DB[$inst]:-bench} PSQL_USER=${T_USER[$inst]:-postgres} \
			psql_at "$PG_PORT" -c "VACUUM pgbench_branches" -c "VACUUM pgbench_tellers" -c "TRUNCATE pgbench_history" >/dev/null ||
			die "preparing $name failed"
	fi
	case $opts in
	*,scrape,*)
		scrape_out=$WORK/runs/$name.scrape
		: >"$scrape_out"
		case $target in
		ttlproxy | baseline | app | rls)
			scrape_kind=ttlproxy
			m0=$(http_req "$admin" GET /metrics) || die "cannot read $inst's /metrics"
			;;
		pgbouncer) scrape_kind=pgbouncer ;;
		esac
		;;
	esac
	if [ -n "$pid" ]; then
		perf_start "$pid" "$name"
		t0=$(cpu_ticks "$pid")
		x0=$(proc_ctxsw "$pid")
		n0=$(find "/proc/$pid/task" -mindepth 1 -maxdepth 1 | wc -l)
	fi
	if [ -n "$scrape_kind" ]; then
		scrape_loop "$scrape_kind" "${admin:-$port}" "$scrape_out" &
		SCRAPER_PID=$!
	fi
	w0=$(date +%s%N)
	# timeout: a statement that never returns must fail the run, not hang it.
	PGSSLMODE=$sslmode timeout -k 10 $((secs + 60)) "$PGBENCH" -h 127.0.0.1 -p "$port" -U "${T_USER[$inst]:-postgres}" -n "${wl[@]}" -M "$proto" \
		-c "$c" -j "$j" -T "$secs" "${lg[@]}" "${T_DB[$inst]:-bench}" >"$out" 2>&1 || rc=$?
	w1=$(date +%s%N)
	if [ -n "$SCRAPER_PID" ]; then
		stop_pid "$SCRAPER_PID"
		SCRAPER_PID=
	fi
	R_CTXSW_PROC='' R_SYSCALLS='' R_CTXSW='' R_SLEEPS=''
	if [ -n "$pid" ]; then
		t1=$(cpu_ticks "$pid")
		x1=$(proc_ctxsw "$pid")
		n1=$(find "/proc/$pid/task" -mindepth 1 -maxdepth 1 | wc -l)
		R_CTXSW_PROC=$((x1 - x0))
		perf_stop
		echo "($PROG: $inst context switches: perf ${R_CTXSW:-n/a}, /proc/$pid/task/*/status $R_CTXSW_PROC; threads $n0 before, $n1 after)" >>"$out"
	fi
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
			if [ -f "$WORK/$inst.log" ]; then
				echo "---- $inst log (tail)"
				tail -n 40 "$WORK/$inst.log"
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
	R_P99_US=
	if [ ${#lg[@]} -gt 0 ]; then
		# One file per pgbench thread: PREFIX.PID and PREFIX.PID.N.
		R_P99_US=$(cat "$WORK/runs/$name.tx".* | awk '$3 ~ /^[0-9]+$/ { print $3 }' | sort -n |
			awk '{ v[NR] = $1 } END { if (NR) { i = int(NR * 0.99); if (i < NR * 0.99) i++; print v[i] } }')
		[ -n "$R_P99_US" ] || die "$name: no latencies in pgbench's transaction log $WORK/runs/$name.tx.*"
	fi
	if [ -n "$scrape_out" ]; then
		local s_ok s_fail r_ok r_fail refreshes=''
		s_ok=$(grep -c '^scrape ok' "$scrape_out" || true)
		s_fail=$(grep -c '^scrape fail' "$scrape_out" || true)
		r_ok=$(grep -c '^reload ok' "$scrape_out" || true)
		r_fail=$(grep -c '^reload fail' "$scrape_out" || true)
		if [ "$scrape_kind" = ttlproxy ]; then
			m1=$(http_req "$admin" GET /metrics) || die "cannot read $inst's /metrics"
			refreshes=$(awk -v a="$(metric_of "$m0" ttlproxy_proxy_session_refreshes_total)" \
				-v b="$(metric_of "$m1" ttlproxy_proxy_session_refreshes_total)" 'BEGIN { if (a != "" && b != "") print b - a }')
			[ "$r_fail" = 0 ] || die "$name: $r_fail of $((r_ok + r_fail)) POST /-/reload failed (see $WORK/$inst.log)"
			[ "$r_ok" -gt 0 ] || warn "$name: the run ended before the first reload (0.5 s)"
		fi
		[ -z "$scrape_kind" ] ||
			log "$name: $s_ok scrapes ($s_fail failed)$([ "$scrape_kind" != ttlproxy ] || echo ", $r_ok reloads, session refreshes ${refreshes:-?}")"
	fi
}

if [ "$WARMUP" -gt 0 ]; then
	for t in $TARGETS; do
		log "warm-up: select-only prepared, ${WARMUP}s, $t"
		run_pgbench "warmup-$t" "$t" select-only prepared "$CLIENTS" "$JOBS" "$WARMUP"
	done
fi

NTARGETS=$(wc -w <<<"$TARGETS")
NRUNS=$((ROUNDS * ${#WORKLOADS[@]} * NTARGETS))
log "$ROUNDS round(s) x ${#WORKLOADS[@]} workloads x $NTARGETS targets, ${DURATION}s each (about $((NRUNS * (DURATION + 1) / 60 + 1)) min)"
START=$(date +%s)
for round in $(seq "$ROUNDS"); do
	for w in "${WORKLOADS[@]}"; do
		IFS='|' read -r wid label script proto c j opts <<<"$w"
		for t in $TARGETS; do
			case ,$opts,/" $FLOORS $RLS_TARGETS " in *,tls,*/*" $t "*) continue ;; esac # floors, app and rls have no TLS
			run_pgbench "r$round-$wid-$t" "$t" "$script" "$proto" "$c" "$j" "$DURATION" "$opts"
			cpu_tx=$(per_tx "$R_CPU_US" "$R_TX")
			sys_tx=$(per_tx "$R_SYSCALLS" "$R_TX")
			cs_tx=$(per_tx "$R_CTXSW" "$R_TX")
			sl_tx=$(per_tx "$R_SLEEPS" "$R_TX")
			csp_tx=$(per_tx "$R_CTXSW_PROC" "$R_TX")
			printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$wid" "$t" "$R_TPS" "$R_LAT_US" "$R_TX" \
				"$R_CPU_US" "$cpu_tx" "$R_CONN_MS" "$sys_tx" "$cs_tx" "$sl_tx" "$csp_tx" "$R_P99_US" >>"$RAW"
			printf '[round %s/%s] %-27s %-9s tps %9.1f  latency %8.1f us  %7s tx  connect %7s ms%s%s%s%s\n' \
				"$round" "$ROUNDS" "$label" "$t" "$R_TPS" "$R_LAT_US" "$R_TX" "${R_CONN_MS:-?}" \
				"${cpu_tx:+  CPU $cpu_tx us/tx}" "${sys_tx:+  syscalls $sys_tx/tx}" \
				"${csp_tx:+  ctxsw ${cs_tx:-?}/tx (/proc $csp_tx)}" "${R_P99_US:+  p99 $R_P99_US us}" >&2
		done
	done
done
ELAPSED=$(($(date +%s) - START))

# The proxies' own account: nothing rejected, and (when the build has the
# metric) no shape-template mismatches, which would be a rewriter bug.
for inst in $PROXY_INSTANCES; do
	metrics=$(http_req "${T_ADMIN[$inst]}" GET /metrics) || die "cannot read $inst's /metrics on port ${T_ADMIN[$inst]}"
	REWRITTEN=$(metric_of "$metrics" 'ttlproxy_proxy_statements_total{outcome="rewritten"}')
	REJECTED=$(metric_of "$metrics" 'ttlproxy_proxy_statements_total{outcome="rejected"}')
	MISMATCH=$(metric_of "$metrics" ttlproxy_proxy_rewrite_shape_mismatches_total)
	log "$inst metrics: statements rewritten ${REWRITTEN:-?}, rejected ${REJECTED:-0}, shape mismatches ${MISMATCH:-n/a}"
	[ "${REWRITTEN:-0}" != 0 ] || die "$inst reports no rewritten statement: the TTL tables were not filtered"
	[ "${REJECTED:-0}" = 0 ] || die "$inst rejected ${REJECTED} statements (see $WORK/$inst.log; KEEP=1 keeps it)"
	if [ -n "$MISMATCH" ] && [ "$MISMATCH" != 0 ]; then
		warn "$inst: ttlproxy_proxy_rewrite_shape_mismatches_total = $MISMATCH: a rewriter bug, please report it"
	fi
done

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
ratio3() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b > 0) printf "%.3f", a / b; else printf "–" }'; }
diff_us() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b != "") printf "%+.0f", a - b; else printf "–" }'; }
# row CELL...: one Markdown table row.
row() {
	printf '|'
	printf ' %s |' "$@"
	printf '\n'
}

PG_VERSION=$("$BIN/postgres" --version | awk '{ print $3 }')
BOUNCER_VERSION=$("$PGBOUNCER" --version 2>/dev/null | awk 'NR == 1 { print $NF }')
PROXY_VERSION=$("$WORK/ttlproxy" version 2>/dev/null | awk 'NR == 1 { print $NF }')
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ -n "$(git -C "$ROOT" status --porcelain 2>/dev/null)" ]; then
	COMMIT="$COMMIT+dirty"
fi
PROXY_DESC="ttlproxy $PROXY_VERSION (${TTLPROXY:-$COMMIT})"
if [ -n "${BASELINE:-}" ]; then
	PROXY_DESC="$PROXY_DESC, baseline $("$WORK/ttlproxy-baseline" version 2>/dev/null | awk 'NR == 1 { print $NF }') (BASELINE=$BASELINE)"
	[ "${COLUMN:-}" != 1 ] || PROXY_DESC="$PROXY_DESC; COLUMN=1: baseline is this checkout with filler an expiring column of pgbench_accounts"
fi
if [ -n "$RLS_TARGETS" ]; then
	PROXY_DESC="$PROXY_DESC; RLS=1: app and rls are this checkout as the ordinary owner bench_app of their tables, rls with the policies of ttlproxy install --row-security and row_security: required"
fi

NOTE=
[ "${SMOKE:-}" != 1 ] || NOTE=". SMOKE run: the figures mean nothing"
PROXIES="ttlproxy${BASELINE:+ baseline}${RLS_TARGETS:+ $RLS_TARGETS} pgbouncer${FLOORS:+ $FLOORS}"
{
	echo
	printf 'pgbench scale %s, %s s per run, %s round(s) (medians), %s CPUs (%s), PostgreSQL %s, PgBouncer %s (session), %s%s%s\n' \
		"$SCALE" "$DURATION" "$ROUNDS" "$(nproc)" "$(uname -m)" "$PG_VERSION" "$BOUNCER_VERSION" "$PROXY_DESC" \
		"$([ -n "$PERF_EVENTS" ] || echo ', no perf counters')" "$NOTE"
	echo
	hdr=(workload 'direct tps' 'ttlproxy tps')
	[ -z "${BASELINE:-}" ] || hdr+=('baseline tps')
	hdr+=('pgbouncer tps' ttlproxy/pgbouncer ttlproxy/direct)
	[ -z "${BASELINE:-}" ] || hdr+=(ttlproxy/baseline)
	hdr+=('ttlproxy CPU µs/tx')
	[ -z "${BASELINE:-}" ] || hdr+=('baseline CPU µs/tx')
	hdr+=('pgbouncer CPU µs/tx')
	for f in $FLOORS; do hdr+=("$f tps" "$f CPU µs/tx"); done
	[ -z "$RLS_TARGETS" ] || hdr+=('app tps' 'rls tps' rls/app rls/direct rls/pgbouncer 'rls CPU µs/tx')
	hdr+=('direct latency µs' 'ttlproxy added µs' 'pgbouncer added µs')
	row "${hdr[@]}"
	sep=('---')
	for _ in $(seq $((${#hdr[@]} - 1))); do sep+=('--:'); done
	echo "|$(IFS='|'; echo "${sep[*]}")|"
	for w in "${WORKLOADS[@]}"; do
		IFS='|' read -r wid label script proto c j opts <<<"$w"
		d=$(median "$wid" direct 4)
		p=$(median "$wid" ttlproxy 4)
		b=$(median "$wid" pgbouncer 4)
		lat_d='' lat_p='' lat_b=''
		if [ "$c" = 1 ]; then
			lat_d=$(median "$wid" direct 5)
			lat_p=$(median "$wid" ttlproxy 5)
			lat_b=$(median "$wid" pgbouncer 5)
		fi
		cells=("$label" "$(fmt '%.0f' "$d")" "$(fmt '%.0f' "$p")")
		if [ -n "${BASELINE:-}" ]; then
			bl=$(median "$wid" baseline 4)
			cells+=("$(fmt '%.0f' "$bl")")
		fi
		cells+=("$(fmt '%.0f' "$b")" "$(ratio "$p" "$b")" "$(ratio "$p" "$d")")
		[ -z "${BASELINE:-}" ] || cells+=("$(ratio "$p" "$bl")")
		cells+=("$(fmt '%.1f' "$(median "$wid" ttlproxy 8)")")
		[ -z "${BASELINE:-}" ] || cells+=("$(fmt '%.1f' "$(median "$wid" baseline 8)")")
		cells+=("$(fmt '%.1f' "$(median "$wid" pgbouncer 8)")")
		for f in $FLOORS; do
			cells+=("$(fmt '%.0f' "$(median "$wid" "$f" 4)")" "$(fmt '%.1f' "$(median "$wid" "$f" 8)")")
		done
		if [ -n "$RLS_TARGETS" ]; then
			ra=$(median "$wid" app 4)
			rr=$(median "$wid" rls 4)
			cells+=("$(fmt '%.0f' "$ra")" "$(fmt '%.0f' "$rr")" "$(ratio3 "$rr" "$ra")" "$(ratio "$rr" "$d")" "$(ratio "$rr" "$b")"
				"$(fmt '%.1f' "$(median "$wid" rls 8)")")
		fi
		cells+=("$(fmt '%.0f' "$lat_d")" "$(diff_us "$lat_p" "$lat_d")" "$(diff_us "$lat_b" "$lat_d")")
		row "${cells[@]}"
	done
	echo
	row workload target syscalls/tx ctxsw/tx futex+nanosleep/tx 'p99 µs'
	echo '|---|---|--:|--:|--:|--:|'
	for w in "${WORKLOADS[@]}"; do
		IFS='|' read -r wid label script proto c j opts <<<"$w"
		ts=$PROXIES
		case ,$opts, in *,log,*) ts="direct $ts" ;; esac
		for t in $ts; do
			row "$label" "$t" "$(fmt '%.1f' "$(median "$wid" "$t" 10)")" "$(fmt '%.2f' "$(median "$wid" "$t" 11)")" \
				"$(fmt '%.2f' "$(median "$wid" "$t" 12)")" "$(fmt '%.0f' "$(median "$wid" "$t" 14)")"
		done
	done
	echo
}
log "$NRUNS pgbench runs succeeded in ${ELAPSED}s"
