#!/usr/bin/env bash
# Is the sweeper gentle under load? pgbench runs through ttlproxy at a fixed
# rate (half the maximum measured through the proxy) while the sweeper
# works through a large backlog (issue 8's goal 2: pgbench's p99 latency at
# most 10% higher with the sweeper, and the sweeper still making progress).
#
#   bench/sweep-load.sh                              # 4 pairs of 5 s periods, 4,000,000 expired rows
#   PAIRS=2 BACKLOG=1000000 bench/sweep-load.sh      # a quick check
#
# One pgbench run, the sweeper switched on and off during it: every PERIOD
# seconds the proxy is reloaded (SIGHUP) with a configuration with the
# sweeper (default settings, interval 1s) or without it (the reload stops it
# after its batch in flight), in the order off on on off off on on off …
# (each condition comes first in a pair as often as the other). A
# transaction counts for the period it ended in, leaving out the first
# SETTLE seconds of each period (the sweeper starting, or finishing its
# batch). Both conditions thus share one run and the machine's state: a
# neighbour's burst of work, a checkpoint or the kernel writing back dirty
# pages falls into both alike over many short periods, where separate runs
# a minute apart differed by more than the effect measured.
#
# Before pgbench starts, public.events gets BACKLOG rows expired an hour ago
# and as many live ones, an index on expires_at, VACUUM ANALYZE and a
# CHECKPOINT, and the kernel's dirty pages are written out (sync).
#
# Environment:
#   PAIRS     pairs of periods, one with the sweeper and one without (default 4)
#   PERIOD    seconds per period (default 5)
#   SETTLE    seconds left out at the start of each period (default 1)
#   WARMUP    seconds of pgbench before the first period (default 5)
#   BACKLOG   expired rows (default 4000000): enough that the sweeper
#             never runs out; the script warns when it does
#   SCALE     pgbench scale (default 10)
#   CLIENTS   pgbench -c (default 4)
#   JOBS      pgbench -j (default 2)
#   RATE      pgbench -R; default half the tps of a 10 s unthrottled run
#             through the proxy, measured first
#   SCRIPT    pgbench's built-in script (default tpcb-like; select-only has
#             no row-lock waits between clients)
#   SWEEPER_YAML      extra sweeper keys (YAML flow style without braces),
#                     e.g. "min_rows_per_second: 20000"
#   UNLOADED          the sweeper's rate without load in rows/s (bench/sweep.sh's
#                     rows over its time to the last row), to report the share
#                     of it kept under load
#   PG_SETTINGS       extra server settings (name=value, space-separated)
#   PROXY_LOG_LEVEL   ttlproxy's --log-level (default info; debug logs each batch)
#   PG_BINDIR, KEEP   see lib.sh (KEEP=1 keeps the logs)
set -euo pipefail

PAIRS=${PAIRS:-4}
PERIOD=${PERIOD:-5}
SETTLE=${SETTLE:-1}
WARMUP=${WARMUP:-5}
BACKLOG=${BACKLOG:-4000000}
SCALE=${SCALE:-10}
CLIENTS=${CLIENTS:-4}
JOBS=${JOBS:-2}
RATE=${RATE:-}
SCRIPT=${SCRIPT:-tpcb-like}
SWEEPER_YAML=${SWEEPER_YAML:-}

PROG=sweep-load.sh
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

command -v pgbench >/dev/null || die "pgbench not found (install postgresql-client or postgresql-contrib)"
# shellcheck disable=SC2086
start_cluster fsync=off synchronous_commit=off shared_buffers=256MB ${PG_SETTINGS:-}
log "pgbench -i -s $SCALE"
pgbench -i -q -s "$SCALE" -h 127.0.0.1 -p "$PGPORT" -U postgres bench >"$WORK/pgbench-init.log" 2>&1 ||
	die "pgbench -i failed: $(cat "$WORK/pgbench-init.log")"

PROXY_PORT=$(free_port)
ADMIN_PORT=$(free_port)
base_config() {
	cat <<EOF
listen: 127.0.0.1:$PROXY_PORT
admin_listen: 127.0.0.1:$ADMIN_PORT
upstream: 127.0.0.1:$PGPORT
tables:
  - table: public.events
EOF
}
base_config >"$WORK/off.yaml"
{
	base_config
	printf "sweeper: {dsn: '%s', interval: 1s%s}\n" "$DSN" "${SWEEPER_YAML:+, $SWEEPER_YAML}"
} >"$WORK/on.yaml"

log "building public.events: $BACKLOG expired rows and as many live ones"
psql_q -d bench <<SQL
DROP TABLE IF EXISTS events;
CREATE TABLE events (id bigint PRIMARY KEY, expires_at timestamptz, payload text);
INSERT INTO events SELECT g, CASE WHEN g % 2 = 0 THEN now() - interval '1 hour' ELSE now() + interval '1 day' END, 'event ' || g
	FROM generate_series(1, 2 * $BACKLOG) AS g;
CREATE INDEX ON events (expires_at);
VACUUM ANALYZE events;
VACUUM ANALYZE pgbench_branches, pgbench_tellers, pgbench_accounts;
CHECKPOINT;
SQL
sync

cp "$WORK/off.yaml" "$WORK/run.yaml"
"$WORK/ttlproxy" serve --config "$WORK/run.yaml" --log-level "${PROXY_LOG_LEVEL:-info}" >"$WORK/proxy.log" 2>&1 &
PROXY_PID=$!
PIDS+=("$PROXY_PID")
wait_port "$PROXY_PORT" ttlproxy

# pgbench_run DURATION PREFIX [ARGS...] runs pgbench through the proxy,
# logging each transaction to PREFIX.*; prints its output.
pgbench_run() {
	local duration=$1 prefix=$2
	shift 2
	pgbench -h 127.0.0.1 -p "$PROXY_PORT" -U postgres -n -M simple -b "$SCRIPT" -c "$CLIENTS" -j "$JOBS" -T "$duration" \
		"$@" --log --log-prefix="$prefix" bench 2>&1
}

if [ -z "$RATE" ]; then
	log "the maximum through the proxy: pgbench -c $CLIENTS -j $JOBS -T 10, unthrottled"
	out=$(pgbench_run 10 "$WORK/max") || die "pgbench failed: $out"
	max_tps=$(printf '%s\n' "$out" | sed -n 's/^tps = \([0-9.]*\).*/\1/p' | tail -1)
	RATE=$(awk -v t="$max_tps" 'BEGIN { printf "%d", t / 2 }')
	log "maximum $max_tps tps: running at -R $RATE"
fi

# server_counters prints the cluster's cumulative "wal_bytes wal_fpi
# buffers_backend": the sweeper's deletes write WAL (a full-page image for
# each page first changed after a checkpoint) and dirty pages that
# backends may have to write out to find a free buffer.
server_counters() {
	psql_q -d bench -At -F ' ' -c "SELECT w.wal_bytes::bigint, w.wal_fpi, b.buffers_backend
		FROM pg_stat_wal w, pg_stat_bgwriter b"
}

periods=$((2 * PAIRS))
duration=$((WARMUP + periods * PERIOD + 1))
log "pgbench -R $RATE for $duration s: $periods periods of $PERIOD s after $WARMUP s, the sweeper off, on, on, off, …"
pgbench_run "$duration" "$WORK/tx" -R "$RATE" >"$WORK/pgbench.out" &
BENCH_PID=$!
sleep "$WARMUP"
# PERIODS: "index state start_ms end_ms wal_bytes wal_fpi buffers_backend"
# per period, the counters as deltas over the period.
: >"$WORK/periods"
read -r wal0 fpi0 backend0 < <(server_counters)
for i in $(seq 0 $((periods - 1))); do
	case $((i % 4)) in
	1 | 2) state=on ;;
	*) state=off ;;
	esac
	cp "$WORK/$state.yaml" "$WORK/run.yaml"
	start=$(now_ms)
	kill -HUP "$PROXY_PID"
	sleep "$PERIOD"
	end=$(now_ms)
	read -r wal1 fpi1 backend1 < <(server_counters)
	echo "$i $state $start $end $((wal1 - wal0)) $((fpi1 - fpi0)) $((backend1 - backend0))" >>"$WORK/periods"
	wal0=$wal1 fpi0=$fpi1 backend0=$backend1
done
cp "$WORK/off.yaml" "$WORK/run.yaml"
kill -HUP "$PROXY_PID"
wait "$BENCH_PID" || die "pgbench failed: $(cat "$WORK/pgbench.out")"
left=$(psql_q -d bench -At -c "SELECT count(*) FROM events WHERE expires_at < now()")

# A transaction's log line: client, number, latency µs (schedule lag
# included, as pgbench reports it under -R), script, end time s, µs, lag.
# period_stats prints, per period, "index state count p50 p99 wal fpi
# backend", then per state the pooled "state count p50 p99".
cat "$WORK"/tx.* | awk -v settle="$((SETTLE * 1000))" '
	NR == FNR { idx[NR] = $1; st[NR] = $2; from[NR] = $3 + settle; to[NR] = $4; rest[NR] = $5 " " $6 " " $7; n = NR; next }
	{
		end_ms = $5 * 1000 + $6 / 1000
		for (i = 1; i <= n; i++) if (end_ms >= from[i] && end_ms < to[i]) { print idx[i], st[i], $3 / 1000, rest[i]; break }
	}' "$WORK/periods" - >"$WORK/classed"

quantiles() { sort -g | awk '{ v[NR] = $1 } END {
	if (NR == 0) { print 0, 0, 0; exit }
	i50 = int(NR * 0.50); if (i50 < 1) i50 = 1
	i99 = int(NR * 0.99); if (i99 < 1) i99 = 1
	printf "%d %.2f %.2f\n", NR, v[i50], v[i99] }'; }

printf '\n| period | sweeper | transactions | p50 ms | p99 ms | WAL MB | full-page images | buffers written by backends |\n'
printf '|---|---|---|---|---|---|---|---|\n'
p99_on=() p99_off=()
while read -r i state _ _ wal fpi backend; do
	read -r count p50 p99 < <(awk -v i="$i" '$1 == i { print $3 }' "$WORK/classed" | quantiles)
	printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$i" "$state" "$count" "$p50" "$p99" \
		"$((wal / 1048576))" "$fpi" "$backend"
	if [ "$state" = on ]; then p99_on+=("$p99"); else p99_off+=("$p99"); fi
done <"$WORK/periods"

printf '\n| sweeper | transactions | p50 ms | p99 ms | median of the periods'"'"' p99 ms |\n|---|---|---|---|---|\n'
for state in on off; do
	read -r count p50 p99 < <(awk -v s="$state" '$2 == s { print $3 }' "$WORK/classed" | quantiles)
	if [ "$state" = on ]; then m=$(median "${p99_on[@]}"); pooled_on=$p99; else m=$(median "${p99_off[@]}"); pooled_off=$p99; fi
	printf '| %s | %s | %s | %s | %s |\n' "$state" "$count" "$p50" "$p99" "$m"
done
m_on=$(median "${p99_on[@]}")
m_off=$(median "${p99_off[@]}")
printf '\np99 with the sweeper vs without: pooled %s\n' \
	"$(awk -v a="$pooled_on" -v b="$pooled_off" 'BEGIN { printf "%+.1f%%", (a / b - 1) * 100 }')"
printf 'median of the periods: %s (periods with: %s–%s ms, without: %s–%s ms)\n' \
	"$(awk -v a="$m_on" -v b="$m_off" 'BEGIN { printf "%+.1f%%", (a / b - 1) * 100 }')" \
	"$(printf '%s\n' "${p99_on[@]}" | sort -g | head -1)" "$(printf '%s\n' "${p99_on[@]}" | sort -g | tail -1)" \
	"$(printf '%s\n' "${p99_off[@]}" | sort -g | head -1)" "$(printf '%s\n' "${p99_off[@]}" | sort -g | tail -1)"
rate=$(((BACKLOG - left) / (PAIRS * PERIOD)))
printf 'expired rows deleted: %s of %s in %s s with the sweeper on: %s rows/s%s\n' "$((BACKLOG - left))" "$BACKLOG" \
	"$((PAIRS * PERIOD))" "$rate" "${UNLOADED:+, $(awk -v r="$rate" -v u="$UNLOADED" 'BEGIN { printf "%.1f%%", 100 * r / u }') of $UNLOADED rows/s unloaded}"
if [ "$left" = 0 ]; then
	printf 'warning: the backlog ran out: later periods with the sweeper had nothing to delete; raise BACKLOG\n'
fi
printf 'pgbench -R %s (-c %s -j %s, %s, -M simple, scale %s) through ttlproxy; PostgreSQL %s, %s cores, load %s; sweeper: defaults%s\n' \
	"$RATE" "$CLIENTS" "$JOBS" "$SCRIPT" "$SCALE" "$(psql_q -d bench -At -c 'SHOW server_version')" "$(nproc)" \
	"$(cut -d' ' -f1-3 /proc/loadavg)" "${SWEEPER_YAML:+ + $SWEEPER_YAML}"
