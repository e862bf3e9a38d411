package sweeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ttlproxy/ttlproxy/internal/sqlstate"
	"github.com/ttlproxy/ttlproxy/ttl"
)

// Expired partitions. With Config.DropExpiredPartitions, a column rule's
// table that is range-partitioned on its expiry column alone loses, at the
// start of each run, every direct partition whose upper bound is itself
// expired at the cutoff: each row of it is below that bound, so each is
// expired too (NULL expiries, never expired, can only be in the default
// partition, which has no bound). Such a partition is detached and dropped
// instead of deleted row by row; the other partitions are swept as usual.
//
// DETACH PARTITION … CONCURRENTLY (PostgreSQL 14+) takes only a SHARE UPDATE
// EXCLUSIVE lock on the parent, so reads and writes go on; it cannot be used
// while the table has a default partition, and then a plain DETACH, which
// needs an ACCESS EXCLUSIVE lock on the parent, is tried with a lock_timeout
// of one target batch duration, so that foreground statements queue behind
// it for no longer than behind a batch; when the lock is not granted in
// time the partition is left to the next run. A concurrent detach
// interrupted half way (its partition "detach pending") is finished with
// DETACH … FINALIZE. One instance at a time drops a table's partitions (a
// session advisory lock keyed by the table and slice -1, on the connection
// that drops them).

// upperBound extracts the upper bound literal of a single-column range
// partition bound as pg_get_expr prints it: FOR VALUES FROM (x) TO (y).
var upperBound = regexp.MustCompile(`^FOR VALUES FROM \(.*\) TO \((.+)\)$`)

// boundLiteral matches the literals pg_get_expr prints for a bound that
// may be pasted into a statement: a quoted string or a number.
var boundLiteral = regexp.MustCompile(`^(?:'(?:[^']|'')*'|-?[0-9]+(?:\.[0-9]+)?)$`)

// partitionLockSlice is the advisory lock slice index of a table's
// partition drops (slices are numbered from 0).
const partitionLockSlice = -1

// partition is a direct partition of a TTL table.
type partition struct {
	name    string // regclass text, quoted as needed
	bound   string // pg_get_expr of relpartbound
	pending bool   // an interrupted DETACH CONCURRENTLY
}

// dropExpiredPartitions detaches and drops r's expired partitions and
// returns how many it dropped. A partition that cannot be detached in time
// is logged and left to the next run; other failures are returned.
func (s *Sweeper) dropExpiredPartitions(ctx context.Context, log *slog.Logger, r *ttl.Rule, cutoff time.Time) (int, error) {
	doomed, concurrently, err := s.expiredPartitions(ctx, r, cutoff)
	if err != nil || len(doomed) == 0 {
		return 0, err
	}
	return s.dropPartitions(ctx, log, r, doomed, concurrently)
}

// expiredPartitions returns r's direct partitions whose upper bound is
// expired at cutoff (and those an interrupted concurrent detach left
// pending), and whether they can be detached CONCURRENTLY; none when r's
// table is not range-partitioned on its expiry column alone.
func (s *Sweeper) expiredPartitions(ctx context.Context, r *ttl.Rule, cutoff time.Time) ([]partition, bool, error) {
	if r.RuleKind() != ttl.KindColumn {
		return nil, false, nil
	}
	var (
		keyed   bool
		version int
		colType string
		hasDef  bool
	)
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_catalog.pg_partitioned_table p
			JOIN pg_catalog.pg_attribute a ON a.attrelid = p.partrelid AND a.attnum = p.partattrs[0]
			WHERE p.partrelid = pg_catalog.to_regclass($1) AND p.partstrat = 'r' AND p.partnatts = 1 AND a.attname = $2),
		current_setting('server_version_num')::int,
		coalesce((SELECT pg_catalog.format_type(a.atttypid, a.atttypmod) FROM pg_catalog.pg_attribute a
			WHERE a.attrelid = pg_catalog.to_regclass($1) AND a.attname = $2), ''),
		EXISTS (SELECT FROM pg_catalog.pg_partitioned_table p
			WHERE p.partrelid = pg_catalog.to_regclass($1) AND p.partdefid <> 0)`,
		r.QuotedName(), r.ExpiryColumn()).Scan(&keyed, &version, &colType, &hasDef)
	if err != nil {
		return nil, false, fmt.Errorf("reading the partitioning of %s: %w", r.QualifiedName(), err)
	}
	if !keyed {
		return nil, false, nil
	}
	pendingCol := "false"
	if version >= 140000 {
		pendingCol = "i.inhdetachpending"
	}
	rows, err := s.pool.Query(ctx, `SELECT c.oid::regclass::text, pg_catalog.pg_get_expr(c.relpartbound, c.oid), `+pendingCol+`
		FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = pg_catalog.to_regclass($1) ORDER BY 1`, r.QuotedName())
	if err != nil {
		return nil, false, fmt.Errorf("listing the partitions of %s: %w", r.QualifiedName(), err)
	}
	parts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (partition, error) {
		var p partition
		err := row.Scan(&p.name, &p.bound, &p.pending)
		return p, err
	})
	if err != nil {
		return nil, false, fmt.Errorf("listing the partitions of %s: %w", r.QualifiedName(), err)
	}
	var doomed []partition
	for _, p := range parts {
		if p.pending {
			doomed = append(doomed, p)
			continue
		}
		m := upperBound.FindStringSubmatch(p.bound)
		if m == nil || !boundLiteral.MatchString(m[1]) {
			continue // DEFAULT, MAXVALUE, or a bound we do not read
		}
		var expired bool
		sql := fmt.Sprintf("SELECT %s FROM (SELECT CAST(%s AS %s) AS %s) AS b",
			r.ExpiredCondition("b", cutoffParam), m[1], colType, ttl.QuoteIdent(r.ExpiryColumn()))
		if err := s.pool.QueryRow(ctx, sql, cutoff).Scan(&expired); err != nil {
			return nil, false, fmt.Errorf("comparing the bound of partition %s with the cutoff: %w", p.name, err)
		}
		if expired {
			doomed = append(doomed, p)
		}
	}
	return doomed, version >= 140000 && !hasDef, nil
}

// dropPartitions detaches and drops parts of r on a connection of its own
// that holds r's partition lock.
func (s *Sweeper) dropPartitions(ctx context.Context, log *slog.Logger, r *ttl.Rule, parts []partition, concurrently bool) (int, error) {
	conn, err := s.connect(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var held bool
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.pg_try_advisory_lock(pg_catalog.hashtext($1), $2)",
		lockNamespace+r.QualifiedName(), int32(partitionLockSlice)).Scan(&held); err != nil {
		return 0, err
	}
	if !held {
		log.Debug("another instance drops the expired partitions", slog.String("table", r.QualifiedName()))
		return 0, nil
	}
	lockTimeout := s.cfg.TargetBatchDuration
	if lockTimeout <= 0 {
		lockTimeout = DefaultTargetBatchDuration
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf("SET statement_timeout = %d; SET lock_timeout = %d",
		s.cfg.BatchTimeout.Milliseconds(), lockTimeout.Milliseconds())); err != nil {
		return 0, err
	}
	dropped := 0
	for _, p := range parts {
		var detach string
		switch {
		case p.pending:
			detach = fmt.Sprintf("ALTER TABLE %s DETACH PARTITION %s FINALIZE", r.QuotedName(), p.name)
		case concurrently:
			detach = fmt.Sprintf("ALTER TABLE %s DETACH PARTITION %s CONCURRENTLY", r.QuotedName(), p.name)
		default:
			detach = fmt.Sprintf("ALTER TABLE %s DETACH PARTITION %s", r.QuotedName(), p.name)
		}
		if _, err := conn.Exec(ctx, detach); err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == sqlstate.LockNotAvailable {
				log.Warn("expired partition not detached: its table is busy; next run tries again",
					slog.String("table", r.QualifiedName()), slog.String("partition", p.name))
				continue
			}
			return dropped, fmt.Errorf("detaching partition %s: %w", p.name, err)
		}
		// Detached, the table is the sweeper's alone: wait for its lock as
		// long as a statement may.
		if _, err := conn.Exec(ctx, "SET lock_timeout = 0"); err != nil {
			return dropped, err
		}
		if _, err := conn.Exec(ctx, "DROP TABLE "+p.name); err != nil {
			return dropped, fmt.Errorf("dropping detached partition %s: %w", p.name, err)
		}
		if _, err := conn.Exec(ctx, fmt.Sprintf("SET lock_timeout = %d", lockTimeout.Milliseconds())); err != nil {
			return dropped, err
		}
		dropped++
		s.m.partitionsDropped.WithLabelValues(r.QualifiedName()).Inc()
		log.Info("dropped expired partition", slog.String("table", r.QualifiedName()),
			slog.String("partition", p.name), slog.String("bound", p.bound))
	}
	return dropped, nil
}
