#!/usr/bin/env bash
# pgx v5's own test suite (the version in go.mod, from the Go module cache)
# run directly against a throw-away cluster, through ttlproxy in
# pool_mode: transaction and through PgBouncer in transaction mode, then
# pgx's PgBouncer tests with PGX_TEST_PGBOUNCER_CONN_STRING pointed at
# ttlproxy (issue 16). Prints a Markdown table of tests passed, failed and
# skipped per target, and the tests that pass directly but fail (or give no
# result) through each target.
#
#   bench/pgx-suite.sh                         # the whole suite, four runs: 12-20 minutes
#   RUN='^TestConnect' PKGS=./pgconn bench/pgx-suite.sh   # a subset while debugging
#   TARGETS="direct ttlproxy" bench/pgx-suite.sh           # some targets only
#   SMOKE=1 bench/pgx-suite.sh                 # a few packages' subset: does the machinery work?
#
# Setup, as pgx's CI (ci/setup_test.bash, testsetup/): database pgx_test
# with hstore, ltree and the domain uint64 (testsetup/postgresql_setup.sql,
# run as it is: roles pgx_md5, pgx_pw, pgx_scram, ... all superusers with
# password "secret"), pg_hba as testsetup/pg_hba.conf over TCP: pgx_md5
# md5, pgx_scram scram-sha-256, pgx_pw password. The database is dropped
# and made again before each run, so that no run sees another's leftovers,
# and each pooler is started just before its run and stopped after it.
#
# Every run sets the same variables, each pointed at the run's target:
#   PGX_TEST_DATABASE                    user pgx_md5 (as pgx's CI)
#   PGX_TEST_TCP_CONN_STRING             user pgx_md5
#   PGX_TEST_MD5_PASSWORD_CONN_STRING    user pgx_md5
#   PGX_TEST_PLAIN_PASSWORD_CONN_STRING  user pgx_pw
#   PGX_TEST_SCRAM_PASSWORD_CONN_STRING  user pgx_scram
# and none of the others (unix socket, TLS, SCRAM-PLUS, OAuth, CrateDB,
# CockroachDB, libpq regress), whose tests skip the same way in every run.
# Both poolers: auth_type md5, the same auth_file ("secret" in clear for
# pgx_md5 and pgx_pw, pgx_scram's SCRAM verifier from pg_authid, which
# both answer with SCRAM), default_pool_size POOL, a pool per database and
# user; PgBouncer routes every database name to the cluster.
#
# Runs (go test -p 1 -json -count=1 in a writable copy of the module):
#   direct      PGX_TEST_* -> PostgreSQL
#   ttlproxy    PGX_TEST_* -> ttlproxy, pool_mode transaction
#   pgbouncer   PGX_TEST_* -> PgBouncer, pool_mode transaction
#   pgbouncer-tests  PGX_TEST_DATABASE -> PostgreSQL and
#               PGX_TEST_PGBOUNCER_CONN_STRING -> ttlproxy; only the tests
#               that read it (TestPgbouncer*, and the pgbouncer subtest of
#               pgconn's TestConnContextCanceledCancelsRunningQueryOnServer)
# Test counts include subtests (a subtest's result and its parent's each
# count once). pgx documents its PgBouncer tests for 1.21+ with
# max_prepared_statements; the PgBouncer here may be older: its run of the
# whole suite is for comparison only.
#
# Environment:
#   TARGETS   runs to make (default: direct ttlproxy pgbouncer pgbouncer-tests)
#   PKGS      packages (default ./...)
#   RUN       go test -run pattern for the first three runs (default: all)
#   POOL      default_pool_size of both poolers (default 20)
#   TIMEOUT   go test -timeout per package (default 5m: a test that hangs
#             ends its package, whose remaining tests then have no result)
#   PGX_DIR   a pgx source tree to use instead of the module cache's
#   SMOKE=1   RUN=^TestConnect|^TestExec, PKGS=./pgconn .: minutes
#   PROXY_LOG_LEVEL  ttlproxy's --log-level (default warn)
#   PG_BINDIR, KEEP  see lib.sh (KEEP=1 keeps the go test output and logs)
# Needs the server binaries (with contrib: hstore, ltree), psql, Go, jq and
# pgbouncer (installed with apt-get when missing and running as root).
# Exit status 1: a test that passes directly fails or gives no result
# through ttlproxy (but the known exceptions, KNOWN below), or a test of
# pgbouncer-tests fails. PgBouncer's results never fail the script.
set -euo pipefail

if [ "${SMOKE:-}" = 1 ]; then
	RUN=${RUN:-'^TestConnect$|^TestExec$|^TestConnQueryScan$|^TestTxCommit'}
	PKGS=${PKGS:-'./pgconn .'}
fi
TARGETS=${TARGETS:-direct ttlproxy pgbouncer pgbouncer-tests}
PKGS=${PKGS:-./...}
RUN=${RUN:-}
POOL=${POOL:-20}
TIMEOUT=${TIMEOUT:-5m}
case $POOL in '' | *[!0-9]* | 0*) echo "pgx-suite.sh: POOL must be a positive integer, got '$POOL'" >&2; exit 2 ;; esac

unset PGSERVICE PGSERVICEFILE PGOPTIONS PGPASSFILE PGHOST PGHOSTADDR PGPORT PGUSER PGDATABASE PGAPPNAME PGPASSWORD
export PGSSLMODE=disable PGCONNECT_TIMEOUT=30
# Only what this script sets reaches pgx's tests.
for v in $(compgen -e); do
	case $v in PGX_*) unset "$v" ;; esac
done

PROG=pgx-suite.sh
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

command -v jq >/dev/null || die "jq not found (apt-get install jq)"
PGBOUNCER=$(command -v pgbouncer 2>/dev/null || echo /usr/sbin/pgbouncer)
if [ ! -x "$PGBOUNCER" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
	log "installing pgbouncer"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q pgbouncer >"$WORK/apt.log" 2>&1 ||
		{ apt-get update -q >>"$WORK/apt.log" 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q pgbouncer >>"$WORK/apt.log" 2>&1; } ||
		die "apt-get install pgbouncer failed: $(tail -n 5 "$WORK/apt.log")"
	PGBOUNCER=$(command -v pgbouncer 2>/dev/null || echo /usr/sbin/pgbouncer)
fi
[ -x "$PGBOUNCER" ] || die "pgbouncer not found (apt-get install pgbouncer)"
BOUNCER_VERSION=$("$PGBOUNCER" --version | awk 'NR == 1 { print $NF }')

PGX_VERSION=$(cd "$ROOT" && go list -m -f '{{.Version}}' github.com/jackc/pgx/v5)
if [ -z "${PGX_DIR:-}" ]; then
	PGX_DIR=$(cd "$ROOT" && go list -m -f '{{.Dir}}' github.com/jackc/pgx/v5)
	if [ -z "$PGX_DIR" ] || [ ! -d "$PGX_DIR" ]; then
		(cd "$ROOT" && go mod download github.com/jackc/pgx/v5)
		PGX_DIR=$(cd "$ROOT" && go list -m -f '{{.Dir}}' github.com/jackc/pgx/v5)
	fi
fi
[ -f "$PGX_DIR/testsetup/postgresql_setup.sql" ] || die "no pgx source tree at '$PGX_DIR'"
log "copying pgx $PGX_VERSION from $PGX_DIR"
cp -r "$PGX_DIR" "$WORK/pgx"
chmod -R u+w "$WORK/pgx"
# The test binaries are built once, before any server starts.
# shellcheck disable=SC2086 # PKGS is a list
(cd "$WORK/pgx" && go test -p 1 -count=1 -run '^$' $PKGS >"$WORK/build.log" 2>&1) ||
	die "pgx's tests do not build: $(tail -n 20 "$WORK/build.log")"

start_cluster fsync=off synchronous_commit=off full_page_writes=off max_connections=200
cat >"$DATA/pg_hba.conf" <<'HBA'
host all postgres  127.0.0.1/32 trust
host all pgx_md5   127.0.0.1/32 md5
host all pgx_scram 127.0.0.1/32 scram-sha-256
host all pgx_pw    127.0.0.1/32 password
HBA
as_pg "$BIN/pg_ctl" -D "$DATA" reload >/dev/null

# make_db drops pgx_test and makes it again as pgx's CI does; the first
# time also its roles.
ROLES_MADE=
make_db() {
	psql_q -d postgres -c 'DROP DATABASE IF EXISTS pgx_test WITH (FORCE)' -c 'CREATE DATABASE pgx_test' >/dev/null
	if [ -z "$ROLES_MADE" ]; then
		psql_q -d pgx_test -f "$WORK/pgx/testsetup/postgresql_setup.sql" >"$WORK/setup.log" 2>&1 ||
			die "testsetup/postgresql_setup.sql failed: $(cat "$WORK/setup.log")"
		ROLES_MADE=1
	else
		psql_q -d pgx_test -c 'create extension hstore' -c 'create extension ltree' \
			-c 'create domain uint64 as numeric(20,0)' >/dev/null
	fi
}
make_db
sleep 0.3
PGPASSWORD=wrong psql -X -q -h 127.0.0.1 -p "$PGPORT" -U pgx_md5 -d pgx_test -c 'SELECT 1' >/dev/null 2>&1 &&
	die "pg_hba.conf not in effect: pgx_md5 logged in with a wrong password"

VERIFIER=$(psql_q -d postgres -A -t -c "SELECT rolpassword FROM pg_authid WHERE rolname = 'pgx_scram'")
case $VERIFIER in SCRAM-SHA-256\$*) ;; *) die "pgx_scram has no SCRAM verifier: $VERIFIER" ;; esac
printf '"pgx_md5" "secret"\n"pgx_pw" "secret"\n"pgx_scram" "%s"\n' "$VERIFIER" >"$WORK/userlist.txt"

# start_ttlproxy and start_pgbouncer start a pooler on T_PORT, a free port
# when T_PORT is empty (a restart keeps the port); stop_target stops it.
T_PID=
T_PIDFILE=
T_PORT=
start_ttlproxy() {
	local admin
	[ -n "$T_PORT" ] || T_PORT=$(free_port)
	admin=$(free_port)
	[ "$admin" != "$T_PORT" ] || admin=$(free_port)
	cat >"$WORK/ttlproxy.yaml" <<YAML
listen: 127.0.0.1:$T_PORT
upstream: 127.0.0.1:$PGPORT
admin_listen: 127.0.0.1:$admin
shutdown_timeout: 1s
upstream_tls: {sslmode: disable}
pool_mode: transaction
auth_type: md5
auth_file: $WORK/userlist.txt
default_pool_size: $POOL
YAML
	log "starting ttlproxy (transaction, md5) on port $T_PORT"
	"$WORK/ttlproxy" serve --config "$WORK/ttlproxy.yaml" --log-level "${PROXY_LOG_LEVEL:-warn}" >>"$WORK/ttlproxy.log" 2>&1 &
	T_PID=$!
	PIDS+=("$T_PID")
	wait_port "$T_PORT" ttlproxy
}

start_pgbouncer() {
	[ -n "$T_PORT" ] || T_PORT=$(free_port)
	cat >"$WORK/pgbouncer.ini" <<INI
[databases]
* = host=127.0.0.1 port=$PGPORT

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $T_PORT
unix_socket_dir =
auth_type = md5
auth_file = $WORK/userlist.txt
pool_mode = transaction
default_pool_size = $POOL
max_client_conn = 1000
server_tls_sslmode = disable
client_tls_sslmode = disable
log_connections = 0
log_disconnections = 0
logfile = $WORK/pgbouncer.log
pidfile = $WORK/pgbouncer.pid
INI
	log "starting PgBouncer $BOUNCER_VERSION (transaction, md5) on port $T_PORT"
	as_pg "$PGBOUNCER" -d "$WORK/pgbouncer.ini" >"$WORK/pgbouncer.out" 2>&1 ||
		die "PgBouncer did not start: $(cat "$WORK/pgbouncer.out" "$WORK/pgbouncer.log" 2>/dev/null)"
	T_PIDFILE=$WORK/pgbouncer.pid
	PIDFILES+=("$T_PIDFILE")
	wait_port "$T_PORT" pgbouncer
}

stop_target() {
	if [ -n "$T_PID" ]; then
		kill -0 "$T_PID" 2>/dev/null || log "ttlproxy exited during the run: $(tail -n 20 "$WORK/ttlproxy.log")"
		stop_pid "$T_PID"
	fi
	if [ -n "$T_PIDFILE" ] && [ -f "$T_PIDFILE" ]; then
		stop_pid "$(cat "$T_PIDFILE")"
	fi
	T_PID='' T_PIDFILE='' T_PORT=''
}

# target_alive: the pooler started last still runs.
target_alive() {
	if [ -n "$T_PID" ]; then
		kill -0 "$T_PID" 2>/dev/null
	elif [ -n "$T_PIDFILE" ]; then
		[ -f "$T_PIDFILE" ] && kill -0 "$(cat "$T_PIDFILE")" 2>/dev/null
	fi
}

conn() { # conn PORT USER
	printf 'host=127.0.0.1 port=%s user=%s password=secret dbname=pgx_test sslmode=disable' "$1" "$2"
}

# run_suite NAME PORT [START]: go test with every PGX_TEST_* variable
# pointed at PORT, one package at a time; the -json streams go to
# $WORK/NAME.json. With START (the pooler's start function), a pooler that
# died during a package is started again, on the same port, before the
# next one, and counted in RESTARTS.
run_suite() {
	local name=$1 port=$2 start=${3:-} rc t0 pkg
	t0=$(date +%s)
	RESTARTS[$name]=0
	: >"$WORK/$name.json"
	log "run $name: go test -p 1 -json ${RUN:+-run \"$RUN\" }, $(wc -w <<<"$TEST_PKGS") packages"
	for pkg in $TEST_PKGS; do
		if [ -n "$start" ] && ! target_alive; then
			log "run $name: the pooler died (see its log): started again for $pkg"
			RESTARTS[$name]=$((RESTARTS[$name] + 1))
			local p=$T_PORT
			stop_target
			T_PORT=$p
			$start
		fi
		rc=0
		(cd "$WORK/pgx" && env \
			PGX_TEST_DATABASE="$(conn "$port" pgx_md5)" \
			PGX_TEST_TCP_CONN_STRING="$(conn "$port" pgx_md5)" \
			PGX_TEST_MD5_PASSWORD_CONN_STRING="$(conn "$port" pgx_md5)" \
			PGX_TEST_PLAIN_PASSWORD_CONN_STRING="$(conn "$port" pgx_pw)" \
			PGX_TEST_SCRAM_PASSWORD_CONN_STRING="$(conn "$port" pgx_scram)" \
			go test -count=1 -json -timeout "$TIMEOUT" ${RUN:+-run "$RUN"} "$pkg") >>"$WORK/$name.json" 2>>"$WORK/$name.stderr" || rc=$?
		[ "$rc" = 0 ] || log "run $name: $pkg: go test exit status $rc"
	done
	if [ -n "$start" ] && ! target_alive; then
		log "run $name: the pooler died during the last package"
		RESTARTS[$name]=$((RESTARTS[$name] + 1))
	fi
	log "run $name: $(($(date +%s) - t0)) s"
	ELAPSED[$name]=$(($(date +%s) - t0))
}

# results NAME: "package test action" per test (subtests included), the
# last pass/fail/skip of each. A t.TempDir() in a subtest's name (pgconn's
# TestParseConfigSSLCertMode) is made the same in every run.
results() {
	jq -r 'select(.Test != null and (.Action == "pass" or .Action == "fail" or .Action == "skip"))
		| "\(.Package) \(.Test) \(.Action)"' "$WORK/$1.json" | sed -E 's|/tmp/[A-Za-z0-9_]+/[0-9]+/|TMP/|g' |
		awk '{ r[$1 " " $2] = $3 } END { for (k in r) print k, r[k] }' | sort
}

# The packages with tests, each run on its own.
# shellcheck disable=SC2086 # PKGS is a list
TEST_PKGS=$(cd "$WORK/pgx" && go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' $PKGS)
[ -n "$TEST_PKGS" ] || die "no packages with tests in '$PKGS'"

declare -A ELAPSED RESTARTS
RAN=()
for target in $TARGETS; do
	case $target in
	direct)
		make_db
		run_suite direct "$PGPORT"
		;;
	ttlproxy)
		make_db
		start_ttlproxy
		run_suite ttlproxy "$T_PORT" start_ttlproxy
		stop_target
		;;
	pgbouncer)
		make_db
		start_pgbouncer
		run_suite pgbouncer "$T_PORT" start_pgbouncer
		stop_target
		;;
	pgbouncer-tests)
		make_db
		start_ttlproxy
		log "run pgbouncer-tests: PGX_TEST_PGBOUNCER_CONN_STRING -> ttlproxy"
		t0=$(date +%s) rc=0
		(cd "$WORK/pgx" && env PGX_TEST_DATABASE="$(conn "$PGPORT" pgx_md5)" \
			PGX_TEST_PGBOUNCER_CONN_STRING="$(conn "$T_PORT" pgx_md5)" \
			go test -p 1 -count=1 -json -timeout "$TIMEOUT" \
			-run '^TestPgbouncer|^TestConnContextCanceledCancelsRunningQueryOnServer$' . ./pgconn) \
			>"$WORK/pgbouncer-tests.json" 2>"$WORK/pgbouncer-tests.stderr" || rc=$?
		log "run pgbouncer-tests: go test exit status $rc, $(($(date +%s) - t0)) s"
		ELAPSED[pgbouncer-tests]=$(($(date +%s) - t0))
		RESTARTS[pgbouncer-tests]=0
		target_alive || RESTARTS[pgbouncer-tests]=1
		stop_target
		;;
	*) die "unknown target '$target' (direct ttlproxy pgbouncer pgbouncer-tests)" ;;
	esac
	results "$target" >"$WORK/$target.results"
	RAN+=("$target")
done

if grep -q 'panic' "$WORK/ttlproxy.log" 2>/dev/null; then
	log "ttlproxy logged a panic: see $WORK/ttlproxy.log (KEEP=1)"
fi

row() { printf '|'; printf ' %s |' "$@"; printf '\n'; }
count() { awk -v a="$2" '$3 == a' "$WORK/$1.results" | wc -l; }
top() { awk -v a="$2" '$3 == a && $2 !~ /\//' "$WORK/$1.results" | wc -l; }

PG_VERSION=$("$BIN/postgres" --version | awk '{ print $3 }')
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -z "$(git -C "$ROOT" status --porcelain 2>/dev/null)" ] || COMMIT="$COMMIT+dirty"
echo
printf 'pgx %s, go test -p 1 %s%s, PostgreSQL %s, ttlproxy %s, PgBouncer %s, default_pool_size %s, %s CPUs\n' \
	"$PGX_VERSION" "$PKGS" "${RUN:+ -run \"$RUN\"}" "$PG_VERSION" "$COMMIT" "$BOUNCER_VERSION" "$POOL" "$(nproc)"
echo
row run passed failed skipped 'no result (passed directly)' 'top-level passed / failed / skipped' 'packages failed' 'pooler restarts' seconds
echo '|---|--:|--:|--:|--:|--:|--:|--:|--:|'
for t in "${RAN[@]}"; do
	pf=$(jq -r 'select(.Test == null and .Action == "fail") | .Package' "$WORK/$t.json" | sort -u | wc -l)
	nr=–
	if [ "$t" != direct ] && [ "$t" != pgbouncer-tests ] && [ -f "$WORK/direct.results" ]; then
		nr=$(awk 'NR == FNR { if ($3 == "pass") p[$1 " " $2] = 1; next } { r[$1 " " $2] = 1 }
			END { n = 0; for (k in p) if (!(k in r)) n++; print n }' "$WORK/direct.results" "$WORK/$t.results")
	fi
	row "$t" "$(count "$t" pass)" "$(count "$t" fail)" "$(count "$t" skip)" "$nr" \
		"$(top "$t" pass) / $(top "$t" fail) / $(top "$t" skip)" "$pf" "${RESTARTS[$t]:-0}" "${ELAPSED[$t]}"
done
if [ -f "$WORK/direct.results" ]; then
	for t in ttlproxy pgbouncer; do
		[ -f "$WORK/$t.results" ] || continue
		echo
		echo "Pass directly, fail or no result through $t:"
		echo
		awk 'NR == FNR { if ($3 == "pass") p[$1 " " $2] = 1; next } { r[$1 " " $2] = $3 }
			END { for (k in p) if (!(k in r)) print "- " k " (no result)"; else if (r[k] != "pass" && r[k] != "skip") print "- " k " (" r[k] ")" }' \
			"$WORK/direct.results" "$WORK/$t.results" | sed 's|github.com/jackc/pgx/v5/||; s|github.com/jackc/pgx/v5 |pgx |' | sort
		echo
		echo "Skipped through $t, not directly:"
		echo
		awk 'NR == FNR { d[$1 " " $2] = $3; next } $3 == "skip" && d[$1 " " $2] != "skip" { print "- " $1 " " $2 }' \
			"$WORK/direct.results" "$WORK/$t.results" | sed 's|github.com/jackc/pgx/v5/||; s|github.com/jackc/pgx/v5 |pgx |' | sort
	done
fi
# causes NAME: the tests that pass directly and fail through NAME, by the
# first of these their output shows (a test's own output, not its
# subtests'): a cause per test, counted.
causes() {
	jq -r 'select(.Test != null and .Action == "output" and (.Output | test("^(=== |--- |\\s*$)") | not))
		| [.Package, .Test, .Output] | @tsv' "$WORK/$1.json" |
		awk -F'\t' 'FNR == 1 { fi++ }
			fi == 1 { if ($3 == "pass") p[$1 "\t" $2] = 1; next }
			fi == 2 { if ($3 == "fail") f[$1 "\t" $2] = 1; next }
			{ k = $1 "\t" $2; if ((k in p) && (k in f)) out[k] = out[k] " " $3 }
			END {
				for (k in f) {
					if (!(k in p)) continue
					o = out[k]
					if (o ~ /prepared statement .* (already exists|does not exist)/) c = "named prepared statement missing or already there on the server (42P05, 26000)"
					else if (o ~ /relation .* (already exists|does not exist)/) c = "temporary table of another transaction, or still there from another client (42P07, 42P01)"
					else if (o ~ /unsupported startup parameter/) c = "startup parameter refused"
					else if (o ~ /connection refused|server conn crashed|unexpected EOF|conn closed/) c = "connection refused or lost (the pooler died or closed it)"
					else if (o ~ /cursor .* does not exist/) c = "cursor of another transaction (34000)"
					else if (o ~ /test timed out|deadline exceeded|timeout/) c = "timeout"
					else if (o == "") c = "no message of its own (a subtest failed)"
					else c = "other"
					n[c]++
				}
				for (c in n) printf "| %s | %d |\n", c, n[c]
			}' <(sed 's/ /\t/; s/ /\t/' "$WORK/direct.results") <(sed 's/ /\t/; s/ /\t/' "$WORK/$1.results") - | sort -t'|' -k3 -rn
}
if [ -f "$WORK/direct.results" ]; then
	for t in ttlproxy pgbouncer; do
		[ -f "$WORK/$t.results" ] || continue
		echo
		echo "Through $t, tests that pass directly and fail, by cause (first match in the test's own output):"
		echo
		row cause tests
		echo '|---|--:|'
		causes "$t"
	done
fi
if [ -f "$WORK/pgbouncer-tests.results" ]; then
	echo
	echo "PGX_TEST_PGBOUNCER_CONN_STRING -> ttlproxy:"
	echo
	sed 's|github.com/jackc/pgx/v5/||; s|github.com/jackc/pgx/v5 |pgx |; s/^/- /' "$WORK/pgbouncer-tests.results"
fi
if [ -n "${KEEP:-}" ]; then
	log "go test output: $WORK/*.json (KEEP=1)"
fi

# The exit status: 1 when a test that passes directly fails or gives no
# result through ttlproxy, other than those below, or a test of the
# pgbouncer-tests run fails. The known exceptions pass the process ID of
# their BackendKeyData to pg_terminate_backend and expect their own session
# to end: in transaction mode it is the proxy's key and names no backend
# (bench/results/2026-11-25-pgx-suite.md).
KNOWN='github.com/jackc/pgx/v5 TestFatalTxError
github.com/jackc/pgx/v5 TestFatalRxError
github.com/jackc/pgx/v5/pgconn TestConnCheckConn
github.com/jackc/pgx/v5/pgconn TestConnPing
github.com/jackc/pgx/v5/pgxpool TestPoolAcquireChecksIdleConns
github.com/jackc/pgx/v5/stdlib TestCheckIdleConn'
UNEXPECTED=
if [ -f "$WORK/direct.results" ] && [ -f "$WORK/ttlproxy.results" ]; then
	UNEXPECTED=$(awk 'FNR == 1 { fi++ }
		fi == 1 { known[$1 " " $2] = 1; next }
		fi == 2 { if ($3 == "pass") p[$1 " " $2] = 1; next }
		{ r[$1 " " $2] = $3 }
		END { for (k in p) if (!(k in known) && (!(k in r) || r[k] == "fail")) print k }' \
		<(printf '%s\n' "$KNOWN") "$WORK/direct.results" "$WORK/ttlproxy.results")
fi
if [ -f "$WORK/pgbouncer-tests.results" ]; then
	UNEXPECTED+=$(awk '$3 == "fail" { print "\n" $1 " " $2 " (pgbouncer-tests)" }' "$WORK/pgbouncer-tests.results")
fi
if [ -n "$UNEXPECTED" ]; then
	log "FAILED through ttlproxy, beyond the known exceptions: $(printf '%s\n' "$UNEXPECTED" | sed '/^$/d' | sort | tr '\n' ' ')"
	exit 1
fi
