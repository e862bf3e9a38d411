#!/usr/bin/env bash
# The sweeper against one bulk DELETE of the same expired rows, with and
# without an index on the expiry column, in one run against one throw-away
# cluster (issue 8's goal 1: at least 0.7x the bulk DELETE's rows per second
# with the index, 0.5x without, every sweeper transaction within 100 ms).
#
#   bench/sweep.sh                   # 1,000,000 rows, half of them expired, 3 rounds
#   ROWS=100000 ROUNDS=1 bench/sweep.sh   # a quick check
#   COLUMN=1 bench/sweep.sh          # an expiring column: its values set to NULL
#
# For each case two identical tables are built (ROWS rows, every second one
# expired an hour ago, the others live for an hour, VACUUM ANALYZE); one is
# emptied of its expired rows by `DELETE FROM bulk WHERE expires_at < now()`,
# the other by `ttlproxy sweep --once` with the default sweeper settings
# (plus SWEEPER_YAML). The ratio is the bulk DELETE's time over the
# sweeper's (the same rows, so rows per second: 1 is as fast as bulk). Both
# are wall-clock times of a command (psql -c, ttlproxy sweep --once), start
# and connection included; the sweeper's longest batch is its longest
# transaction. In each of ROUNDS rounds both cases run, bulk then sweeper;
# the table shows each run, then the medians, and the ratio of the medians.
# "to last row" is the time from the sweeper's start to its log line of the
# table swept (the last expired row gone), without what the command does
# after it (the oldest expired row's age, an index walk over the rows just
# deleted, and the exit); the ratio is taken on it. "paced waits" is the
# time the pacing slept between batches because they ran slower than the
# run's best (CoDel: the server busy with other work, which a bulk DELETE
# never yields to).
#
# With BEFORE=path/to/an/older/ttlproxy each round also sweeps a third
# identical table with that binary, in alternating order with this
# checkout's, so that before and after share the machine's state.
#
# With COLUMN=1 the rows stay and a value expires instead (column-level
# TTL): every row is live (expires_at in an hour, indexed, so that the
# row deletes before the column find nothing at once), and every second
# row's value c expired an hour ago (c_exp); the index of the indexed case
# is on c_exp. One table is nulled by `UPDATE bulk SET c = NULL, c_exp =
# NULL WHERE c_exp < now() AND c IS NOT NULL`, the other by `ttlproxy sweep
# --once` with c as an expiring column (columns: [{column: c,
# expires_at_column: c_exp}]).
#
# Environment:
#   ROWS          rows per table (default 1000000)
#   ROUNDS        interleaved rounds (default 3)
#   COLUMN        1: set an expiring column's expired values to NULL instead
#                 of deleting expired rows
#   CASES         which cases run: "1 0" (default), 1 (with the index) or 0
#   BEFORE        an older ttlproxy binary to compare with (see above)
#   SWEEPER_YAML  extra sweeper keys, YAML flow style without braces,
#                 e.g. "workers: 2, target_batch_duration: 20ms"
#   PG_BINDIR, KEEP  see lib.sh
set -euo pipefail

ROWS=${ROWS:-1000000}
ROUNDS=${ROUNDS:-3}
SWEEPER_YAML=${SWEEPER_YAML:-}
COLUMN=${COLUMN:-0}
CASES=${CASES:-1 0}
BEFORE=${BEFORE:-}

PROG=sweep.sh
# shellcheck source=bench/lib.sh
. "$(dirname "$0")/lib.sh"

# autovacuum off: a vacuum starting between the two deletes would favour one.
start_cluster fsync=off synchronous_commit=off autovacuum=off shared_buffers=256MB

for t in swept swept_b; do
	cat >"$WORK/$t.yaml" <<EOF
upstream: 127.0.0.1:$PGPORT
sweeper: {dsn: '$DSN'${SWEEPER_YAML:+, $SWEEPER_YAML}}
tables:
  - table: $t
EOF
	if [ "$COLUMN" = 1 ]; then
		echo "    columns: [{column: c, expires_at_column: c_exp}]" >>"$WORK/$t.yaml"
	fi
done
if [ -n "$BEFORE" ]; then
	cp "$BEFORE" "$WORK/ttlproxy-before"
fi
if [ "$COLUMN" = 1 ]; then
	WHAT="UPDATE" DONE="nulled" KEY="public.swept.c" NOTE=", COLUMN=1 (an expiring column nulled)"
	BULK_SQL="UPDATE bulk SET c = NULL, c_exp = NULL WHERE c_exp < now() AND c IS NOT NULL"
	LEFT_SQL="SELECT count(*) FROM swept WHERE c_exp < now() OR c IS NULL AND c_exp IS NOT NULL"
else
	WHAT="DELETE" DONE="expired" KEY="public.swept" NOTE=""
	BULK_SQL="DELETE FROM bulk WHERE expires_at < now()"
	LEFT_SQL="SELECT count(*) FROM swept WHERE expires_at < now()"
fi

# build TABLE INDEXED creates TABLE with ROWS rows, half of them expired
# (with COLUMN=1, half of their values).
build() {
	local t=$1 indexed=$2
	if [ "$COLUMN" = 1 ]; then
		psql_q -d bench <<SQL
DROP TABLE IF EXISTS $t;
CREATE TABLE $t (id bigint PRIMARY KEY, expires_at timestamptz, c text, c_exp timestamptz, note text);
INSERT INTO $t SELECT g, now() + interval '1 hour', '10.0.' || (g % 256) || '.' || (g / 256 % 256),
	CASE WHEN g % 2 = 0 THEN now() - interval '1 hour' ELSE now() + interval '1 hour' END, 'n'
	FROM generate_series(1, $ROWS) AS g;
CREATE INDEX ON $t (expires_at);
SQL
		if [ "$indexed" = 1 ]; then
			psql_q -d bench -c "CREATE INDEX ON $t (c_exp)"
		fi
		psql_q -d bench -c "VACUUM ANALYZE $t"
		return
	fi
	psql_q -d bench <<SQL
DROP TABLE IF EXISTS $t;
CREATE TABLE $t (id bigint PRIMARY KEY, expires_at timestamptz, note text);
INSERT INTO $t SELECT g, CASE WHEN g % 2 = 0 THEN now() - interval '1 hour' ELSE now() + interval '1 hour' END, 'n'
	FROM generate_series(1, $ROWS) AS g;
SQL
	if [ "$indexed" = 1 ]; then
		psql_q -d bench -c "CREATE INDEX ON $t (expires_at)"
	fi
	psql_q -d bench -c "VACUUM ANALYZE $t"
}

# sweep BINARY TABLE WHO: `BINARY sweep --once` of TABLE, checked; adds a
# line to RESULTS and sets sweep_ms and last_ms.
sweep() {
	local bin=$1 t=$2 who=$3 key out start ts row deleted batches longest left ratio waited
	key=${KEY/swept/$t}
	log "$label: $who: ttlproxy sweep --once"
	start=$(now_ms)
	out=$("$bin" sweep --config "$WORK/$t.yaml" --once --log-level debug 2>"$WORK/sweep-$t.log") || {
		printf '%s\n' "$out" >&2
		die "ttlproxy sweep failed: $(cat "$WORK/sweep-$t.log")"
	}
	sweep_ms=$(($(now_ms) - start))
	ts=$(sed -n 's/^time=\([^ ]*\) .*msg="swept \(table\|column\)".*/\1/p' "$WORK/sweep-$t.log" | tail -1)
	last_ms=$sweep_ms
	if [ -n "$ts" ]; then
		last_ms=$(($(date -d "$ts" +%s%3N) - start))
	fi
	# The pacing's waits (CoDel: the server busy with other work), from
	# the log line of each batch.
	waited=$(sed -n 's/.*msg=batch .* wait=\([^ ]*\).*/\1/p' "$WORK/sweep-$t.log" | awk '
		/ms$/ { s += $0 + 0; next } /µs$/ { s += ($0 + 0) / 1000; next } /[0-9]s$/ { s += ($0 + 0) * 1000 }
		END { printf "%d", s }')
	# TABLE DELETED (COLUMN NULLED) BATCHES LONGEST-BATCH [ERROR]
	row=$(printf '%s\n' "$out" | awk -v k="$key" '$1 == k {print $2, $3, $4}')
	read -r deleted batches longest <<<"$row"
	[ "$deleted" = $((ROWS / 2)) ] || die "the sweeper's $key: $deleted, want $((ROWS / 2)): $out"
	left=$(psql_q -d bench -At -c "${LEFT_SQL/swept/$t}")
	[ "$left" = 0 ] || die "$left expired rows (values) left after the sweep of $t"
	ratio=$(awk -v b="$bulk_ms" -v s="$last_ms" 'BEGIN { printf "%.2f", (s > 0 ? b / s : 0) }')
	RESULTS+=("| $round | $label | $who | $ROWS | $((ROWS / 2)) | $bulk_ms ms | $sweep_ms ms | $last_ms ms | $batches | $longest | $waited ms | ${ratio}x |")
}

RESULTS=()
BULK_1=() SWEEP_1=() LAST_1=() BULK_0=() SWEEP_0=() LAST_0=()
BSWEEP_1=() BLAST_1=() BSWEEP_0=() BLAST_0=()
for round in $(seq "$ROUNDS"); do
for indexed in $CASES; do
	label="index"
	[ "$indexed" = 1 ] || label="no index"
	log "round $round, $label: building the tables of $ROWS rows"
	build bulk "$indexed"
	build swept "$indexed"
	if [ -n "$BEFORE" ]; then
		build swept_b "$indexed"
	fi
	psql_q -d bench -c CHECKPOINT

	log "$label: bulk $WHAT"
	start=$(now_ms)
	psql_q -d bench -c "$BULK_SQL"
	bulk_ms=$(($(now_ms) - start))
	eval "BULK_$indexed+=($bulk_ms)"

	order="after"
	if [ -n "$BEFORE" ]; then
		order="after before"
		[ $((round % 2)) = 1 ] || order="before after"
	fi
	for who in $order; do
		if [ "$who" = after ]; then
			sweep "$WORK/ttlproxy" swept "$who"
			eval "SWEEP_$indexed+=($sweep_ms) LAST_$indexed+=($last_ms)"
		else
			sweep "$WORK/ttlproxy-before" swept_b "$who"
			eval "BSWEEP_$indexed+=($sweep_ms) BLAST_$indexed+=($last_ms)"
		fi
	done
done
done
for indexed in $CASES; do
	label="index"
	[ "$indexed" = 1 ] || label="no index"
	for who in after before; do
		pre=""
		[ "$who" = after ] || pre=B
		[ "$who" = after ] || [ -n "$BEFORE" ] || continue
		eval 'b=$(median "${BULK_'$indexed'[@]}") s=$(median "${'$pre'SWEEP_'$indexed'[@]}") l=$(median "${'$pre'LAST_'$indexed'[@]}")'
		ratio=$(awk -v b="$b" -v s="$l" 'BEGIN { printf "%.2f", (s > 0 ? b / s : 0) }')
		RESULTS+=("| median | $label | $who | $ROWS | $((ROWS / 2)) | $b ms | $s ms | $l ms | | | | **${ratio}x** |")
	done
done

printf '\n| round | case | sweeper | rows | %s | bulk %s | sweeper | to last row | batches | longest batch | paced waits | sweeper/bulk (rows/s, to last row) |\n' "$DONE" "$WHAT"
printf '|---|---|---|---|---|---|---|---|---|---|---|---|\n'
printf '%s\n' "${RESULTS[@]}"
printf '\nPostgreSQL %s, %s cores, load %s, sweeper settings: defaults%s%s%s\n' \
	"$(psql_q -d bench -At -c 'SHOW server_version')" "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)" \
	"${SWEEPER_YAML:+ + $SWEEPER_YAML}" "$NOTE" "${BEFORE:+; before: $BEFORE}"
