# Shared by the sweeper benchmarks (sweep.sh, sweep-load.sh) and pooling.sh: a throw-away
# PostgreSQL cluster and ttlproxy built from this checkout in a work
# directory that is removed at exit. Source it after setting PROG; it sets
# ROOT, WORK, BIN (the server's bin directory), PIDS (processes stopped at
# exit) and PIDFILES (pid files of daemons stopped at exit), and defines the
# functions below.
#
# Environment:
#   PG_BINDIR  directory of initdb/pg_ctl (default: PATH, then the newest
#              /usr/lib/postgresql/*/bin)
#   TTLPROXY   a ttlproxy binary to run instead of building this checkout
#              (e.g. an older build, for a before/after run)
#   KEEP=1     keep the work directory (logs) after the run

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ttlproxy-$PROG.XXXXXX")
DATA=$WORK/data
PG_STARTED=
PIDS=()
PIDFILES=()

log() { printf '== %s\n' "$*" >&2; }
die() { printf '%s: %s\n' "$PROG" "$*" >&2; exit 1; }
now_ms() { date +%s%3N; }

# as_pg runs a command as the postgres OS user when we are root: the server
# refuses to run as root.
as_pg() {
	if [ "$(id -u)" = 0 ]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

# stop_pid PID stops a process started by the script: TERM, then KILL.
stop_pid() {
	local pid=$1
	kill "$pid" 2>/dev/null || return 0
	for _ in $(seq 50); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	kill -9 "$pid" 2>/dev/null || true
}

cleanup() {
	local pid
	for pid in "${PIDS[@]}"; do
		stop_pid "$pid"
	done
	local f
	for f in "${PIDFILES[@]}"; do
		if [ -f "$f" ]; then
			stop_pid "$(cat "$f")"
		fi
	done
	if [ -n "$PG_STARTED" ]; then
		as_pg "$BIN/pg_ctl" -D "$DATA" -m immediate -w stop >/dev/null 2>&1 || true
	fi
	if [ "${KEEP:-}" = 1 ]; then
		log "kept $WORK"
	else
		rm -rf "$WORK"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

find_bindir() {
	if [ -n "${PG_BINDIR:-}" ]; then
		echo "$PG_BINDIR"
		return
	fi
	if command -v initdb >/dev/null 2>&1; then
		dirname "$(readlink -f "$(command -v initdb)")"
		return
	fi
	local d
	d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k4 -n | tail -1)
	[ -n "$d" ] || die "PostgreSQL server binaries not found (install postgresql or set PG_BINDIR)"
	echo "$d"
}

# free_port prints a TCP port on 127.0.0.1 that nothing listens on, below
# the kernel's ephemeral range: a port inside it can be taken by an outgoing
# connection (this script's or a neighbour's) before the server binds it.
free_port() {
	local p lo=32768 base=20000 span=40000
	if [ -r /proc/sys/net/ipv4/ip_local_port_range ]; then
		read -r lo _ </proc/sys/net/ipv4/ip_local_port_range || lo=32768
	fi
	if [ "$lo" -gt 12000 ]; then
		base=10000 span=$((lo - 10000))
	fi
	for _ in $(seq 200); do
		p=$((base + (RANDOM * 32768 + RANDOM) % span))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	die "no free port found"
}

# wait_port PORT WHAT waits up to 10 s for a listener on 127.0.0.1:PORT.
wait_port() {
	local port=$1 what=$2
	for _ in $(seq 100); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			return
		fi
		sleep 0.1
	done
	die "$what did not start listening on port $port"
}

# start_cluster SETTINGS... builds ttlproxy into $WORK/ttlproxy, starts a
# cluster on a free port (PGPORT) with the given -c settings, creates the
# database bench and sets DSN to it.
start_cluster() {
	command -v psql >/dev/null || die "psql not found (install postgresql-client)"
	command -v go >/dev/null || die "go not found: needed to build ttlproxy"
	BIN=$(find_bindir)
	[ -x "$BIN/initdb" ] || die "$BIN/initdb not found"
	if [ "$(id -u)" = 0 ]; then
		id postgres >/dev/null 2>&1 || die "running as root needs a postgres OS user"
		chmod 755 "$WORK"
		chown postgres "$WORK"
	fi
	if [ -n "${TTLPROXY:-}" ]; then
		log "ttlproxy: $TTLPROXY"
		cp "$TTLPROXY" "$WORK/ttlproxy"
	else
		log "building ttlproxy"
		(cd "$ROOT" && go build -o "$WORK/ttlproxy" ./cmd/ttlproxy)
	fi

	PGPORT=$(free_port)
	log "starting PostgreSQL ($BIN) on port $PGPORT"
	as_pg "$BIN/initdb" -D "$DATA" -U postgres -A trust -E UTF8 --locale C --no-sync >"$WORK/initdb.log" 2>&1 ||
		die "initdb failed: $(cat "$WORK/initdb.log")"
	local opts="-p $PGPORT -c listen_addresses=127.0.0.1 -c unix_socket_directories=''" s
	for s in "$@"; do
		opts+=" -c $s"
	done
	as_pg "$BIN/pg_ctl" -D "$DATA" -l "$WORK/postgres.log" -w -t 60 start -o "$opts" >/dev/null ||
		die "PostgreSQL did not start: $(cat "$WORK/postgres.log")"
	PG_STARTED=1
	psql_q -d postgres -c "CREATE DATABASE bench"
	DSN="postgres://postgres@127.0.0.1:$PGPORT/bench?sslmode=disable"
}

psql_q() { psql -X -q -h 127.0.0.1 -p "$PGPORT" -U postgres -v ON_ERROR_STOP=1 "$@"; }

# median prints the median of its numeric arguments.
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

# http_req PORT METHOD PATH prints the response (status line, headers,
# body) of an HTTP/1.0 request to 127.0.0.1:PORT.
http_req() {
	(
		exec 3<>"/dev/tcp/127.0.0.1/$1" &&
			printf '%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n' "$2" "$3" >&3 &&
			cat <&3
	)
}
