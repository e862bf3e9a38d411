package sweeper

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ttlproxy/ttlproxy/internal/sqlstate"
)

// Change data capture. With Config.CDCOrigin the sweeper's deletes carry a
// replication origin, so that a logical-decoding consumer (a logical
// replication subscription with origin = none, Debezium, test_decoding's
// only-local option) can tell them from an application's deletes and skip
// them, as CockroachDB's ttl_disable_changefeed_replication allows. The
// origin is created when missing (pg_replication_origin_create) at the start
// of a run, and set up on the batch's connection for the length of each
// batch (pg_replication_origin_session_setup, then _reset), so that its
// commit record carries the origin.
//
// Up to PostgreSQL 18 one origin is active in one session at a time (the
// pid argument that lets sessions share it comes with PostgreSQL 19): the
// workers of one instance take turns (originMu), and a batch that finds the
// origin active in another instance's session (SQLSTATE 55006,
// object_in_use) waits originRetry and tries again, for at most
// BatchTimeout. The login needs EXECUTE on those functions (superusers have
// it; grant it to another role).

// originRetry is the wait before setting up an origin that another
// session has active again: about a tenth of a batch at the default target.
const originRetry = 5 * time.Millisecond

// execer runs statements: a pooled connection or the pool itself.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// withOrigin runs f on the pool, or with CDCOrigin on a connection that
// carries the origin while f runs.
func (s *Sweeper) withOrigin(ctx context.Context, f func(db execer) error) error {
	if s.cfg.CDCOrigin == "" {
		return f(s.pool)
	}
	s.originMu.Lock()
	defer s.originMu.Unlock()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	deadline := time.Now().Add(s.cfg.BatchTimeout)
	for {
		_, err = conn.Exec(ctx, "SELECT pg_catalog.pg_replication_origin_session_setup($1)", s.cfg.CDCOrigin)
		// ObjectInUse: the origin is active in another session.
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != sqlstate.ObjectInUse || time.Now().After(deadline) {
			break
		}
		if err := s.wait(ctx, originRetry); err != nil {
			return err
		}
	}
	if err != nil {
		return fmt.Errorf("setting up replication origin %q: %w", s.cfg.CDCOrigin, err)
	}
	ferr := f(conn)
	if _, err := conn.Exec(context.WithoutCancel(ctx), "SELECT pg_catalog.pg_replication_origin_session_reset()"); err != nil {
		// The origin goes with the session: close it rather than pool it
		// with the origin still active.
		_ = conn.Conn().Close(context.WithoutCancel(ctx))
	}
	return ferr
}

// createOrigin creates CDCOrigin when it does not exist yet. Two instances
// creating it at once may collide on its unique name (SQLSTATE 23505): the
// origin then exists, which is all that is needed.
func (s *Sweeper) createOrigin(ctx context.Context) error {
	if s.cfg.CDCOrigin == "" {
		return nil
	}
	_, err := s.pool.Exec(ctx, `SELECT pg_catalog.pg_replication_origin_create($1)
		WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_replication_origin WHERE roname = $1)`, s.cfg.CDCOrigin)
	var pgErr *pgconn.PgError
	// A unique violation: pg_replication_origin_create raced another instance.
	if err != nil && (!errors.As(err, &pgErr) || pgErr.Code != sqlstate.UniqueViolation) {
		return fmt.Errorf("creating replication origin %q: %w", s.cfg.CDCOrigin, err)
	}
	return nil
}
