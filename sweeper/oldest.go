package sweeper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// observeOldest sets the oldest_expired_age_seconds gauge of r's table: the
// age at the cutoff of the oldest row still present that is expired at the
// cutoff (skipped as locked, or left by a failed sweep), 0 when none.
//
// It is measured only where it is cheap: a column rule, or a derived rule with
// a fixed lifetime, on PostgreSQL, with a plain btree index led by the
// column, where ORDER BY column LIMIT 1 over the expired predicate reads one
// index entry. Other rules have no index that orders rows by expiry (a
// per-row lifetime needs an expression index; a sidecar's order lives in
// another table), so the gauge would cost a scan per run; for them, and for
// a table without such an index, the series is removed instead.
func (s *Sweeper) observeOldest(ctx context.Context, log *slog.Logger, r *ttl.Rule, cutoff time.Time, d dialect) error {
	name := r.QualifiedName()
	sql, ok, err := s.oldestQuery(ctx, r, d)
	if err != nil {
		return err
	}
	if !ok {
		log.Debug("oldest expired age not measured (no btree index on the expiry column, or a rule without one)",
			slog.String("table", name))
		s.m.oldestExpired.DeleteLabelValues(name)
		return nil
	}
	expiry, err := s.oldestExpiry(ctx, r, sql, cutoff)
	if errors.Is(err, pgx.ErrNoRows) {
		s.m.oldestExpired.WithLabelValues(name).Set(0)
		return nil
	}
	if err != nil {
		return fmt.Errorf("finding the oldest expired row of %s: %w", name, err)
	}
	age := math.Inf(1) // -infinity
	if !expiry.IsZero() {
		age = max(cutoff.Sub(expiry).Seconds(), 0)
	}
	s.m.oldestExpired.WithLabelValues(name).Set(age)
	return nil
}

// oldestQuery returns the statement that reads the expiry-ordering value of
// r's oldest expired row ($1 the cutoff), or ok false where that is not
// cheap (see observeOldest).
func (s *Sweeper) oldestQuery(ctx context.Context, r *ttl.Rule, d dialect) (sql string, ok bool, err error) {
	col, ok := orderColumn(r)
	if !ok || d != dialectPostgres {
		return "", false, nil
	}
	indexed, err := s.btreeIndexed(ctx, r, col)
	if err != nil {
		return "", false, err
	}
	if !indexed {
		return "", false, nil
	}
	qcol := "s." + ttl.QuoteIdent(col)
	return fmt.Sprintf("SELECT %s FROM %s AS s WHERE %s ORDER BY %s LIMIT 1",
		qcol, r.QuotedName(), r.ExpiredCondition("s", cutoffParam), qcol), true, nil
}

// oldestAge returns the age at cutoff of r's oldest expired row (0 when
// none), where cheap to know; ok false otherwise.
func (s *Sweeper) oldestAge(ctx context.Context, r *ttl.Rule, cutoff time.Time, d dialect) (time.Duration, bool) {
	sql, ok, err := s.oldestQuery(ctx, r, d)
	if err != nil || !ok {
		return 0, false
	}
	expiry, err := s.oldestExpiry(ctx, r, sql, cutoff)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, true
	case err != nil:
		return 0, false
	case expiry.IsZero():
		return time.Duration(math.MaxInt64), true
	}
	return max(cutoff.Sub(expiry), 0), true
}

// btreeIndexed reports whether r's table has a valid plain btree index led
// by column col.
func (s *Sweeper) btreeIndexed(ctx context.Context, r *ttl.Rule, col string) (bool, error) {
	var indexed bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (
		SELECT 1 FROM pg_catalog.pg_index i
		JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid
		JOIN pg_catalog.pg_am am ON am.oid = ic.relam
		JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
		WHERE i.indrelid = pg_catalog.to_regclass($1) AND a.attname = $2
		  AND am.amname = 'btree' AND i.indisvalid AND i.indpred IS NULL)`,
		r.QuotedName(), col).Scan(&indexed)
	if err != nil {
		return false, fmt.Errorf("looking for an index on %s.%s: %w", r.QualifiedName(), col, err)
	}
	return indexed, nil
}

// orderColumn returns the column whose order is the expiry order of r's rows.
func orderColumn(r *ttl.Rule) (string, bool) {
	switch r.RuleKind() {
	case ttl.KindColumn:
		return r.ExpiryColumn(), true
	case ttl.KindDerived:
		if r.IntervalColumn == "" {
			return r.BaseColumn, true
		}
	}
	return "", false
}

// oldestExpiry runs sql (which selects one expiry-ordering value) and
// converts the value to the instant the row expired, as package rewrite
// reads each column type. The zero time stands for -infinity.
func (s *Sweeper) oldestExpiry(ctx context.Context, r *ttl.Rule, sql string, cutoff time.Time) (time.Time, error) {
	row := s.pool.QueryRow(ctx, sql, cutoff)
	if r.RuleKind() == ttl.KindDerived {
		var v pgtype.Timestamptz
		if err := row.Scan(&v); err != nil {
			return time.Time{}, err
		}
		if v.InfinityModifier != pgtype.Finite {
			return time.Time{}, nil
		}
		return v.Time.Add(r.ExpireAfter), nil
	}
	switch r.ColumnType {
	case ttl.TypeTimestamp:
		// Read as UTC, as rewrite does; pgx returns the wall time in UTC.
		var v pgtype.Timestamp
		if err := row.Scan(&v); err != nil {
			return time.Time{}, err
		}
		if v.InfinityModifier != pgtype.Finite {
			return time.Time{}, nil
		}
		return v.Time, nil
	case ttl.TypeDate:
		// Expires at 00:00 UTC of the day.
		var v pgtype.Date
		if err := row.Scan(&v); err != nil {
			return time.Time{}, err
		}
		if v.InfinityModifier != pgtype.Finite {
			return time.Time{}, nil
		}
		return v.Time, nil
	case ttl.TypeUnixSeconds, ttl.TypeUnixMilliseconds, ttl.TypeUnixMicroseconds, ttl.TypeUnixNanoseconds:
		var v int64
		if err := row.Scan(&v); err != nil {
			return time.Time{}, err
		}
		switch r.ColumnType {
		case ttl.TypeUnixMilliseconds:
			return time.UnixMilli(v), nil
		case ttl.TypeUnixMicroseconds:
			return time.UnixMicro(v), nil
		case ttl.TypeUnixNanoseconds:
			return time.Unix(0, v), nil
		}
		return time.Unix(v, 0), nil
	}
	var v pgtype.Timestamptz
	if err := row.Scan(&v); err != nil {
		return time.Time{}, err
	}
	if v.InfinityModifier != pgtype.Finite {
		return time.Time{}, nil
	}
	return v.Time, nil
}
