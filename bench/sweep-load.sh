#!/usr/bin/env bash
# Is the sweeper gentle under load? pgbench runs through ttlproxy at a fixed
# rate (half the maximum measured through the proxy) while the sweeper works
# through a large backlog, and the same run without the sweeper, in
# interleaved rounds against one throw-away cluster (issue 8's goal 2:
# pgbench's p99 latency at most 10% higher with the sweeper, and the sweeper
# still making progress).
#
#   bench/sweep-load.sh                        # 3 rounds, 2,000,000 expired rows
#   ROUNDS=1 BACKLOG=300000 DURATION=10 bench/sweep-load.sh   # a quick check
#
# Each round runs twice, once with the sweeper and once without, in
# alternating order. A run:
#   1. (re)builds public.events: BACKLOG rows expired an hour ago, as many
#      live ones, an index on expires_at; VACUUM ANALYZE; CHECKPOINT;
#   2. starts `ttlproxy serve` with events as a TTL table and no sweeper;
#   3. starts pgbench through the proxy: the built-in SCRIPT, -M
#      simple, -R RATE, -c CLIENTS -j JOBS, -T DURATION, per-transaction log;
#   4. after WARMUP seconds reloads the proxy (SIGHUP) with a configuration
#      that adds the sweeper (default settings, interval 1s), or, without
#      the sweeper, with the same configuration as before;
#   5. waits for pgbench and counts the expired rows left.
# The latency compared is pgbench's per-transaction latency (schedule lag
# included, as pgbench reports it under -R) of the transactions that ended
# while the sweeper worked: from the reload to the end of its sweep of
# events (from its log), or the end of pgbench when it did not finish. The
# run without the sweeper is measured over the same offsets from its own
# reload. The sweeper paces on its batch times and on the latency of the
# statements the proxy relays (sweeper/pace.go).
#
# Environment:
#   ROUNDS    interleaved rounds (default 3)
#   BACKLOG   expired rows (default 2000000)
#   DURATION  seconds per pgbench run (default 20)
#   WARMUP    seconds of pgbench before the reload (default 3)
#   SCALE     pgbench scale (default 10)
#   CLIENTS   pgbench -c (default 4)
#   JOBS      pgbench -j (default 2)
#   RATE      pgbench -R; default half the tps of an unthrottled run through
#             the proxy measured first
#   SCRIPT    pgbench's built-in script (default tpcb-like; select-only has
#             no row-lock waits between clients, so its tail shows the
#             sweeper's load more than lock convoys)
#   SWEEPER_YAML  extra sweeper keys (YAML flow style without braces)
#   PG_BINDIR, KEEP  see lib.sh
set -euo pipefail

ROUNDS=${ROUNDS:-3}
BACKLOG=${BACKLOG:-2000000}
DURATION=${DURATION:-20}
WARMUP=${WARMUP:-3}
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
base_config >"$WORK/base.yaml"
{
	base_config
	printf "sweeper: {dsn: '%s', interval: 1s%s}\n" "$DSN" "${SWEEPER_YAML:+, $SWEEPER_YAML}"
} >"$WORK/sweeper.yaml"

build_events() {
	psql_q -d bench <<SQL
DROP TABLE IF EXISTS events;
CREATE TABLE events (id bigint PRIMARY KEY, expires_at timestamptz, payload text);
INSERT INTO events SELECT g, CASE WHEN g % 2 = 0 THEN now() - interval '1 hour' ELSE now() + interval '1 day' END, 'event ' || g
	FROM generate_series(1, 2 * $BACKLOG) AS g;
CREATE INDEX ON events (expires_at);
VACUUM ANALYZE events;
VACUUM pgbench_branches, pgbench_tellers;
TRUNCATE pgbench_history;
CHECKPOINT;
SQL
}

PROXY_PID=
start_proxy() {
	cp "$WORK/base.yaml" "$WORK/run.yaml"
	: >"$WORK/proxy.log"
	"$WORK/ttlproxy" serve --config "$WORK/run.yaml" --log-level ${PROXY_LOG_LEVEL:-info} >>"$WORK/proxy.log" 2>&1 &
	PROXY_PID=$!
	PIDS+=("$PROXY_PID")
	wait_port "$PROXY_PORT" ttlproxy
}
stop_proxy() {
	stop_pid "$PROXY_PID"
	wait "$PROXY_PID" 2>/dev/null || true
}

# pgbench_run PREFIX [ARGS...] runs pgbench through the proxy, logging each
# transaction to PREFIX.*; prints its output.
pgbench_run() {
	local prefix=$1
	shift
	pgbench -h 127.0.0.1 -p "$PROXY_PORT" -U postgres -n -M simple -b "$SCRIPT" -c "$CLIENTS" -j "$JOBS" -T "$DURATION" \
		"$@" --log --log-prefix="$prefix" bench 2>&1
}

if [ -z "$RATE" ]; then
	build_events
	start_proxy
	log "the maximum through the proxy: pgbench -c $CLIENTS -j $JOBS -T $DURATION, unthrottled"
	out=$(pgbench_run "$WORK/max") || die "pgbench failed: $out"
	stop_proxy
	max_tps=$(printf '%s\n' "$out" | sed -n 's/^tps = \([0-9.]*\).*/\1/p' | tail -1)
	RATE=$(awk -v t="$max_tps" 'BEGIN { printf "%d", t / 2 }')
	log "maximum $max_tps tps: running at -R $RATE"
fi

# latencies PREFIX FROM_MS TO_MS prints "count p50 p99" (ms) of the
# transactions logged under PREFIX that ended within [FROM_MS, TO_MS].
latencies() {
	cat "$1".* | awk -v from="$2" -v to="$3" '{
		end_ms = $5 * 1000 + $6 / 1000
		if (end_ms >= from && end_ms <= to) print $3 / 1000
	}' | sort -g | awk '{ v[NR] = $1 } END {
		if (NR == 0) { print 0, 0, 0; exit }
		i50 = int(NR * 0.50); if (i50 < 1) i50 = 1
		i99 = int(NR * 0.99); if (i99 < 1) i99 = 1
		printf "%d %.2f %.2f\n", NR, v[i50], v[i99]
	}'
}

# server_counters prints the cluster's cumulative "wal_bytes wal_fpi
# wal_buffers_full buffers_backend": the sweeper's deletes write WAL (a
# full-page image for each page first changed after a checkpoint) that the
# foreground's commits and page evictions may have to write out.
server_counters() {
	psql_q -d bench -At -F ' ' -c "SELECT w.wal_bytes, w.wal_fpi, w.wal_buffers_full, b.buffers_backend
		FROM pg_stat_wal w, pg_stat_bgwriter b"
}

# one_run MODE ROUND runs once, MODE "sweeper" or "none", and prints
# "round mode tps deleted reload_ms window_ms prefix": window_ms is how long
# the sweeper worked after the reload (0 without it).
one_run() {
	local mode=$1 round=$2 prefix reload_ms end_ms left deleted=0 window=0 swept
	prefix=$WORK/r$round-$mode
	build_events
	start_proxy
	pgbench_run "$prefix" -R "$RATE" >"$prefix.out" &
	local bench_pid=$!
	sleep "$WARMUP"
	if [ "$mode" = sweeper ]; then
		cp "$WORK/sweeper.yaml" "$WORK/run.yaml"
	fi
	read -r wal0 fpi0 full0 backend0 < <(server_counters)
	reload_ms=$(now_ms)
	kill -HUP "$PROXY_PID"
	wait "$bench_pid" || die "pgbench failed: $(cat "$prefix.out")"
	end_ms=$(now_ms)
	read -r wal1 fpi1 full1 backend1 < <(server_counters)
	log "round $round, $mode: after the reload: WAL $(((${wal1%.*} - ${wal0%.*}) / 1048576)) MB," \
		"$((fpi1 - fpi0)) full-page images, wal_buffers full $((full1 - full0)) times," \
		"$((backend1 - backend0)) buffers written by backends"
	stop_proxy
	cp "$WORK/proxy.log" "$prefix.log"
	if [ "$mode" = sweeper ]; then
		left=$(psql_q -d bench -At -c "SELECT count(*) FROM events WHERE expires_at < now()")
		deleted=$((BACKLOG - left))
		# The sweep of events ended at its "swept table" line.
		swept=$(awk '/msg="swept table"/ && /table=public.events/ {
			match($0, /time=[^ ]+/); print substr($0, RSTART + 5, RLENGTH - 5); exit }' "$WORK/proxy.log")
		if [ -n "$swept" ]; then
			window=$(($(date -d "$swept" +%s%3N) - reload_ms))
		else
			window=$((end_ms - reload_ms))
		fi
	fi
	tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$prefix.out" | tail -1)
	printf '%s %s %s %s %s %s %s\n' "$round" "$mode" "$tps" "$deleted" "$reload_ms" "$window" "$prefix"
}

# Both runs of a round are measured over the sweeper's window, each from its
# own reload.
RESULTS=()
for round in $(seq "$ROUNDS"); do
	if [ $((round % 2)) = 1 ]; then
		log "round $round: with the sweeper, then without"
		on=$(one_run sweeper "$round")
		off=$(one_run none "$round")
	else
		log "round $round: without the sweeper, then with"
		off=$(one_run none "$round")
		on=$(one_run sweeper "$round")
	fi
	window=$(awk '{ print $6 }' <<<"$on")
	for r in "$on" "$off"; do
		read -r _ mode tps deleted reload_ms _ prefix <<<"$r"
		read -r count p50 p99 < <(latencies "$prefix" "$reload_ms" $((reload_ms + window)))
		RESULTS+=("$round $mode $tps $count $p50 $p99 $deleted $window")
		log "round $round, $mode: tps $tps, $count transactions in the window, p50 $p50 ms, p99 $p99 ms"
	done
done

printf '\n| round | sweeper | tps | transactions in window | p50 ms | p99 ms | expired rows deleted | window ms |\n'
printf '|---|---|---|---|---|---|---|---|\n'
for r in "${RESULTS[@]}"; do
	read -r round mode tps count p50 p99 deleted window <<<"$r"
	[ "$mode" = sweeper ] || deleted="–"
	printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$round" "$mode" "$tps" "$count" "$p50" "$p99" "$deleted" "$window"
done
p99_on=() p99_off=() p50_on=() p50_off=()
for r in "${RESULTS[@]}"; do
	read -r _ mode _ _ p50 p99 _ _ <<<"$r"
	if [ "$mode" = sweeper ]; then p99_on+=("$p99"); p50_on+=("$p50"); else p99_off+=("$p99"); p50_off+=("$p50"); fi
done
m_on=$(median "${p99_on[@]}")
m_off=$(median "${p99_off[@]}")
printf '\np99 median: %s ms with the sweeper, %s ms without: %s (spread with: %s–%s ms, without: %s–%s ms)\n' \
	"$m_on" "$m_off" "$(awk -v a="$m_on" -v b="$m_off" 'BEGIN { printf "%+.1f%%", (a / b - 1) * 100 }')" \
	"$(printf '%s\n' "${p99_on[@]}" | sort -g | head -1)" "$(printf '%s\n' "${p99_on[@]}" | sort -g | tail -1)" \
	"$(printf '%s\n' "${p99_off[@]}" | sort -g | head -1)" "$(printf '%s\n' "${p99_off[@]}" | sort -g | tail -1)"
printf 'p50 median: %s ms with the sweeper, %s ms without\n' "$(median "${p50_on[@]}")" "$(median "${p50_off[@]}")"
printf 'pgbench -R %s (-c %s -j %s, %s, -M simple, scale %s) through ttlproxy; backlog %s expired rows; PostgreSQL %s, %s cores\n' \
	"$RATE" "$CLIENTS" "$JOBS" "$SCRIPT" "$SCALE" "$BACKLOG" "$(psql_q -d bench -At -c 'SHOW server_version')" "$(nproc)"
