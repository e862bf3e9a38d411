package sweeper

// How one batch runs: the statement for the table's kind and slice
// (target.go builds them), its transaction, its lock and statement
// timeouts, and the cursor a block slice keeps between batches.

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/ttlproxy/ttlproxy/internal/sqlstate"
)

// batchFunc runs one batch of size rows at most and returns the rows
// deleted, the work it did in rows (the rows picked, or those a range of
// blocks holds: what the pacer measures its time against) and whether the
// batch was full (more doomed rows may remain).
type batchFunc func(ctx context.Context, cutoff time.Time, size int) (deleted, work int64, full bool, err error)

// batchFunc returns how to run t's batches in slice sl. A block slice's
// function keeps the slice's cursor: each batch starts past the rows or
// blocks the previous one covered.
func (s *Sweeper) batchFunc(d dialect, t target, sl slice) batchFunc {
	var from, to *pgtype.TID
	if sl.blocks {
		from = &pgtype.TID{BlockNumber: sl.firstBlock, Valid: true}
		to = &pgtype.TID{BlockNumber: sl.endBlock, Valid: true}
	}
	if t.registry != nil && d == dialectYugabyte {
		lock, del := lockedBatchSQL(d, t, sl, s.lockRows)
		return func(ctx context.Context, cutoff time.Time, size int) (int64, int64, bool, error) {
			n, picked, err := execLockedBatch[[]byte](ctx, s, lock, del, cutoff, []any{cutoff, int64(size)})
			return n, int64(len(picked)), len(picked) >= size, err
		}
	}
	if t.registry != nil {
		lock, del := lockedBatchSQL(d, t, sl, s.lockRows)
		return func(ctx context.Context, cutoff time.Time, size int) (int64, int64, bool, error) {
			args := []any{cutoff, int64(size)}
			if from != nil {
				args = append(args, *from, *to)
			}
			n, picked, err := execLockedBatch[pgtype.TID](ctx, s, lock, del, cutoff, args)
			if from != nil && len(picked) > 0 {
				*from = after(slices.MaxFunc(picked, compareTID))
			}
			return n, int64(len(picked)), len(picked) >= size, err
		}
	}
	if sl.blocks && !s.pickBlocks {
		return s.rangeBatches(t, sl, *from)
	}
	if sl.blocks {
		sql := blockBatchSQL(t, sl, s.lockRows)
		return func(ctx context.Context, cutoff time.Time, size int) (int64, int64, bool, error) {
			n, picked, last, err := s.execBlockBatch(ctx, sql, cutoff, size, *from, *to)
			if last.Valid {
				*from = after(last)
			}
			return n, picked, picked >= int64(size), err
		}
	}
	sql := deleteBatchSQL(d, t, sl, s.lockRows)
	return func(ctx context.Context, cutoff time.Time, size int) (int64, int64, bool, error) {
		n, err := s.execBatch(ctx, sql, cutoff, size)
		return n, n, n >= int64(size), err
	}
}

// rangeBatches sweeps a block slice from from: each batch deletes the doomed
// rows of the next range of blocks that holds about size rows by the
// table's density (rangeBatchSQL, bulk DELETE speed), so it deletes at most
// about size rows. When a range meets a row a
// foreground transaction holds (lock_timeout), that range is swept again by
// picks that skip locked rows (blockBatchSQL), size rows at a time, and the
// next range starts after it.
func (s *Sweeper) rangeBatches(t target, sl slice, from pgtype.TID) batchFunc {
	del := rangeBatchSQL(t)
	pick := blockBatchSQL(t, sl, s.lockRows)
	var picking bool        // the range to rangeEnd falls back to picks
	var rangeEnd pgtype.TID // the end of the range being picked
	// Blocks past the table's end when it was sliced are left for the
	// next run.
	stop := min(sl.endBlock, sl.tableBlocks)
	return func(ctx context.Context, cutoff time.Time, size int) (int64, int64, bool, error) {
		if from.BlockNumber >= stop {
			return 0, 0, false, nil
		}
		if !picking {
			blocks := uint32(max(1, min(float64(size)/sl.rowsPerBlock, float64(stop-from.BlockNumber))))
			end := pgtype.TID{BlockNumber: min(from.BlockNumber+blocks, stop), Valid: true}
			work := int64(float64(end.BlockNumber-from.BlockNumber) * sl.rowsPerBlock)
			n, err := s.execRangeBatch(ctx, del, cutoff, from, end)
			if err == nil {
				from = end
				return n, work, end.BlockNumber < stop, nil
			}
			if !isLockTimeout(err) {
				return 0, 0, false, err
			}
			s.log.Debug("a range of blocks holds a locked row: picking around it",
				slog.String("table", t.name), slog.Any("from", from), slog.Any("to", end))
			picking, rangeEnd = true, end
		}
		n, picked, last, err := s.execBlockBatch(ctx, pick, cutoff, size, from, rangeEnd)
		if err != nil {
			return 0, 0, false, err
		}
		if last.Valid {
			from = after(last)
		}
		if picked < int64(size) {
			picking, from = false, rangeEnd
			return n, picked, rangeEnd.BlockNumber < stop, nil
		}
		return n, picked, true, nil
	}
}

// after returns the first row address after tid.
func after(tid pgtype.TID) pgtype.TID {
	if tid.OffsetNumber == math.MaxUint16 {
		return pgtype.TID{BlockNumber: tid.BlockNumber + 1, Valid: true}
	}
	return pgtype.TID{BlockNumber: tid.BlockNumber, OffsetNumber: tid.OffsetNumber + 1, Valid: true}
}

// compareTID orders row addresses as PostgreSQL's tid does.
func compareTID(a, b pgtype.TID) int {
	if c := cmp.Compare(a.BlockNumber, b.BlockNumber); c != 0 {
		return c
	}
	return cmp.Compare(a.OffsetNumber, b.OffsetNumber)
}

// execBlockBatch runs blockBatchSQL's statement as its own autocommit
// statement and returns the rows deleted and picked and the highest
// address picked (not Valid when none).
func (s *Sweeper) execBlockBatch(ctx context.Context, sql string, cutoff time.Time, size int, from, to pgtype.TID) (deleted, picked int64, last pgtype.TID, err error) {
	bctx, cancel := context.WithTimeout(ctx, s.cfg.BatchTimeout+clientTimeoutSlack)
	defer cancel()
	err = s.withOrigin(bctx, func(db execer) error {
		return db.QueryRow(bctx, sql, cutoff, int64(size), from, to).Scan(&deleted, &picked, &last)
	})
	return deleted, picked, last, err
}

// execRangeBatch runs rangeBatchSQL's statement on the blocks from up to
// to in a transaction of its own whose lock_timeout is the target batch
// time, and returns the rows deleted. A row a foreground transaction holds
// makes it fail with SQLSTATE 55P03 (isLockTimeout) after that time.
//
// The lock_timeout and the DELETE go in one pipeline (pgx.Batch: one Sync,
// so one implicit transaction, in which set_config's local setting holds
// until the DELETE commits): one round trip per batch where BEGIN,
// set_config, DELETE and COMMIT took four.
func (s *Sweeper) execRangeBatch(ctx context.Context, sql string, cutoff time.Time, from, to pgtype.TID) (int64, error) {
	bctx, cancel := context.WithTimeout(ctx, s.cfg.BatchTimeout+clientTimeoutSlack)
	defer cancel()
	lockTimeout := s.cfg.TargetBatchDuration
	if lockTimeout <= 0 {
		lockTimeout = rangeLockTimeout
	}
	var n int64
	err := s.withOrigin(bctx, func(db execer) error {
		b := &pgx.Batch{}
		b.Queue("SELECT pg_catalog.set_config('lock_timeout', $1, true)",
			strconv.FormatInt(max(lockTimeout.Milliseconds(), 1), 10))
		b.Queue(sql, cutoff, from, to)
		br := db.SendBatch(bctx, b)
		_, err := br.Exec()
		if err == nil {
			var tag pgconn.CommandTag
			tag, err = br.Exec()
			n = tag.RowsAffected()
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		return err
	})
	return n, err
}

// rangeLockTimeout is how long a range batch waits for a row lock when no
// target batch time is set.
const rangeLockTimeout = 100 * time.Millisecond

// isLockTimeout reports lock_timeout's error, SQLSTATE 55P03
// (lock_not_available).
func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == sqlstate.LockNotAvailable
}

// execBatch runs one batch DELETE as its own autocommit statement.
func (s *Sweeper) execBatch(ctx context.Context, sql string, cutoff time.Time, size int) (int64, error) {
	bctx, cancel := context.WithTimeout(ctx, s.cfg.BatchTimeout+clientTimeoutSlack)
	defer cancel()
	var n int64
	err := s.withOrigin(bctx, func(db execer) error {
		tag, err := db.Exec(bctx, sql, cutoff, int64(size))
		n = tag.RowsAffected()
		return err
	})
	return n, err
}

// execLockedBatch runs lockedBatchSQL's statements in one short
// transaction with args ($1 the cutoff, $2 the batch size, then the slice's
// bounds) and returns the rows deleted and the ids of the rows picked: ID
// is pgtype.TID (ctid) on PostgreSQL, []byte (ybctid) on YugabyteDB.
func execLockedBatch[ID any](ctx context.Context, s *Sweeper, lock, del string, cutoff time.Time, args []any) (int64, []ID, error) {
	bctx, cancel := context.WithTimeout(ctx, s.cfg.BatchTimeout+clientTimeoutSlack)
	defer cancel()
	var deleted int64
	var ids []ID
	err := s.withOrigin(bctx, func(db execer) error {
		return pgx.BeginTxFunc(bctx, db, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
			rows, err := tx.Query(bctx, lock, args...)
			if err != nil {
				return err
			}
			if ids, err = pgx.CollectRows(rows, pgx.RowTo[ID]); err != nil || len(ids) == 0 {
				return err
			}
			tag, err := tx.Exec(bctx, del, cutoff, ids)
			deleted = tag.RowsAffected()
			return err
		})
	})
	return deleted, ids, err
}

// isTimeout reports a batch that ran out of time: the server's
// statement_timeout (SQLSTATE 57014, query_canceled) or the client-side
// deadline.
func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == sqlstate.QueryCanceled
}
