#!/usr/bin/env bash
# Throughput of pgbench through ttlproxy, compared with a direct connection
# and with PgBouncer in session mode (when pgbouncer is installed), in one run
# against one throw-away cluster.
#
#   bench/pgbench.sh                      # pgbench -S -c 8 -j 2 -T 10, scale 1
#   SCALE=10 DURATION=30 bench/pgbench.sh
#   PGBENCH_ARGS="-S -M extended" bench/pgbench.sh
#
# Environment:
#   SCALE         pgbench scale factor (default 1)
#   CLIENTS       pgbench -c (default 8)
#   JOBS          pgbench -j (default 2)
#   DURATION      pgbench -T in seconds (default 10)
#   PGBENCH_ARGS  workload flags (default -S: the built-in select-only script)
#   PG_BINDIR, KEEP  see lib.sh
#
# Targets:
#   direct                 pgbench -> PostgreSQL
#   ttlproxy passthrough   TTL table configured that the workload never touches:
#                          every statement takes the cheap identifier check
#   ttlproxy filtered      pgbench_accounts is also a TTL table (an expires_at
#                          column, all NULL): every -S statement is rewritten
#   pgbouncer session      PgBouncer, pool_mode = session
set -euo pipefail

SCALE=${SCALE:-1}
CLIENTS=${CLIENTS:-8}
JOBS=${JOBS:-2}
DURATION=${DURATION:-10}
PGBENCH_ARGS=${PGBENCH_ARGS:--S}

PROG=pgbench.sh
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

# run_pgbench PORT LABEL prints the tps of one pgbench run.
run_pgbench() {
	local port=$1 label=$2 out
	log "pgbench $PGBENCH_ARGS -c $CLIENTS -j $JOBS -T $DURATION: $label"
	# shellcheck disable=SC2086 # PGBENCH_ARGS is a list of flags
	out=$(pgbench -h 127.0.0.1 -p "$port" -U postgres -n $PGBENCH_ARGS \
		-c "$CLIENTS" -j "$JOBS" -T "$DURATION" bench 2>&1) || {
		printf '%s\n' "$out" >&2
		die "pgbench failed for $label"
	}
	printf '%s\n' "$out" | sed -n 's/^tps = \([0-9.]*\).*/\1/p' | tail -1
}

command -v pgbench >/dev/null || die "pgbench not found (install postgresql-client or postgresql-contrib)"
PIDFILES+=("$WORK/pgbouncer.pid")
start_cluster fsync=off synchronous_commit=off max_connections=100
log "pgbench -i -s $SCALE"
pgbench -i -q -s "$SCALE" -h 127.0.0.1 -p "$PGPORT" -U postgres bench >"$WORK/pgbench-init.log" 2>&1 ||
	die "pgbench -i failed: $(cat "$WORK/pgbench-init.log")"
psql_q -d bench <<'SQL'
-- A TTL table the workload never touches.
CREATE TABLE bench_sessions (id int PRIMARY KEY, expires_at timestamptz);
-- Lets pgbench_accounts be a TTL table too (NULL: no row ever expires, so
-- every target reads the same rows).
ALTER TABLE pgbench_accounts ADD COLUMN expires_at timestamptz;
VACUUM ANALYZE;
SQL

# start_proxy NAME TABLES_YAML starts ttlproxy and sets PROXY_PORT.
start_proxy() {
	local name=$1 tables=$2 port admin
	port=$(free_port)
	admin=$(free_port)
	cat >"$WORK/$name.yaml" <<EOF
listen: 127.0.0.1:$port
upstream: 127.0.0.1:$PGPORT
admin_listen: 127.0.0.1:$admin
tables:
$tables
EOF
	"$WORK/ttlproxy" serve --config "$WORK/$name.yaml" --log-level warn >"$WORK/$name.log" 2>&1 &
	PIDS+=($!)
	wait_port "$port" "ttlproxy ($name)"
	PROXY_PORT=$port
}

start_proxy passthrough "  - table: public.bench_sessions
    default_ttl: 1h"
PASS_PORT=$PROXY_PORT
start_proxy filtered "  - table: public.bench_sessions
    default_ttl: 1h
  - table: public.pgbench_accounts"
FILTER_PORT=$PROXY_PORT

BOUNCER_PORT=
if command -v pgbouncer >/dev/null 2>&1; then
	BOUNCER_PORT=$(free_port)
	echo '"postgres" ""' >"$WORK/userlist.txt"
	cat >"$WORK/pgbouncer.ini" <<EOF
[databases]
bench = host=127.0.0.1 port=$PGPORT dbname=bench

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $BOUNCER_PORT
unix_socket_dir =
auth_type = trust
auth_file = $WORK/userlist.txt
pool_mode = session
max_client_conn = 200
default_pool_size = $((CLIENTS + 2))
logfile = $WORK/pgbouncer.log
pidfile = $WORK/pgbouncer.pid
EOF
	if [ "$(id -u)" = 0 ]; then
		chown postgres "$WORK/userlist.txt" "$WORK/pgbouncer.ini"
	fi
	as_pg pgbouncer -d "$WORK/pgbouncer.ini" || die "pgbouncer did not start: $(cat "$WORK/pgbouncer.log" 2>/dev/null)"
	wait_port "$BOUNCER_PORT" pgbouncer
else
	log "pgbouncer not installed: skipping it (apt-get install pgbouncer)"
fi

# A short warm-up so that the first target does not pay for cold caches.
DURATION=2 run_pgbench "$PGPORT" "warm-up" >/dev/null

TPS_DIRECT=$(run_pgbench "$PGPORT" "direct")
TPS_PASS=$(run_pgbench "$PASS_PORT" "ttlproxy passthrough")
TPS_FILTER=$(run_pgbench "$FILTER_PORT" "ttlproxy filtered")
TPS_BOUNCER=
if [ -n "$BOUNCER_PORT" ]; then
	TPS_BOUNCER=$(run_pgbench "$BOUNCER_PORT" "pgbouncer session")
fi

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0 && a != "") printf "%.2f", a / b; else printf "-" }'; }

echo
echo "pgbench $PGBENCH_ARGS -c $CLIENTS -j $JOBS -T $DURATION, scale $SCALE, $(nproc) CPUs, $("$BIN/postgres" --version)"
printf '%-22s %12s %10s %13s\n' target tps /direct /pgbouncer
printf '%-22s %12.1f %10s %13s\n' direct "$TPS_DIRECT" 1.00 "$(ratio "$TPS_DIRECT" "$TPS_BOUNCER")"
printf '%-22s %12.1f %10s %13s\n' "ttlproxy passthrough" "$TPS_PASS" "$(ratio "$TPS_PASS" "$TPS_DIRECT")" "$(ratio "$TPS_PASS" "$TPS_BOUNCER")"
printf '%-22s %12.1f %10s %13s\n' "ttlproxy filtered" "$TPS_FILTER" "$(ratio "$TPS_FILTER" "$TPS_DIRECT")" "$(ratio "$TPS_FILTER" "$TPS_BOUNCER")"
if [ -n "$TPS_BOUNCER" ]; then
	printf '%-22s %12.1f %10s %13s\n' "pgbouncer session" "$TPS_BOUNCER" "$(ratio "$TPS_BOUNCER" "$TPS_DIRECT")" 1.00
fi
