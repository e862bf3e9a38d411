package sweeper

import (
	"context"
	"log/slog"
)

// Coordination between instances. Several ttlproxy processes in front of
// one database run a sweeper each; they coordinate through the database
// only, with a session advisory lock per table and slice
// (pg_try_advisory_lock(hashtext('ttlproxy.sweeper:' || table), slice);
// an expiring column's nulling has locks of its own, keyed by
// 'schema.table.column': instances share out its slices the same way),
// taken on a connection of its own for as long as the slice is swept. An
// instance skips a slice another holds, so no slice is swept twice at once,
// and every instance tries every slice every run, so together they cover
// all of them each interval. The lock belongs to the session: when a
// process dies, even by SIGKILL, the server ends its session and releases
// the lock, and the next run of any other instance takes the slice over.
//
// Advisory locks rather than a lease table: they need no table, no clock
// and no expiry to tune, and a dead holder's locks vanish with its
// connection. YugabyteDB has them from 2.25.1 and 2025.1 (YugabyteDB issue
// #3642; sources in yugabyte.go). On an older release, or one whose
// advisory locks may be taken on one node only, the run sweeps without
// coordination (Sweeper.uncoordinated, logged once), which stays correct
// (each batch re-checks the rule, and the YugabyteDB batch deletes by
// ybctid) but repeats work; so does a run where pg_try_advisory_lock fails
// on YugabyteDB anyway (0A000 "advisory locks are not yet implemented"
// when the server's ysql_yb_enable_advisory_locks flag is off).

// lockNamespace prefixes the advisory lock key of a table.
const lockNamespace = "ttlproxy.sweeper:"

// holdSlice takes the advisory lock of slice i of t. held is false when
// another instance holds it; release unlocks and returns the connection.
func (s *Sweeper) holdSlice(ctx context.Context, d dialect, t target, i int) (release func(), held bool, err error) {
	if s.uncoordinated != "" {
		return func() {}, true, nil
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, false, err
	}
	var ok bool
	err = conn.QueryRow(ctx, "SELECT pg_catalog.pg_try_advisory_lock(pg_catalog.hashtext($1), $2)",
		lockNamespace+t.name, int32(i)).Scan(&ok)
	if err != nil {
		conn.Release()
		if d == dialectYugabyte && ctx.Err() == nil {
			s.log.Warn("advisory locks unavailable: sweeping without coordination between instances",
				slog.String("table", t.name), slog.Any("error", err))
			return func() {}, true, nil
		}
		return nil, false, err
	}
	if !ok {
		conn.Release()
		return nil, false, nil
	}
	s.m.slicesHeld.WithLabelValues(t.table()).Inc()
	s.tables.update(t.table(), func(st *TableStatus) { st.SlicesHeld++ })
	return func() {
		s.m.slicesHeld.WithLabelValues(t.table()).Dec()
		s.tables.update(t.table(), func(st *TableStatus) { st.SlicesHeld-- })
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.BatchTimeout)
		defer cancel()
		if _, err := conn.Exec(uctx, "SELECT pg_catalog.pg_advisory_unlock(pg_catalog.hashtext($1), $2)", lockNamespace+t.name, int32(i)); err != nil {
			// The lock goes with the session: close it instead of
			// returning it to the pool still locked.
			_ = conn.Conn().Close(uctx)
		}
		conn.Release()
	}, true, nil
}
