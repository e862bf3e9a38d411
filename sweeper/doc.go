// Package sweeper physically deletes expired rows of TTL tables in the
// background (ARCHITECTURE.md, "The sweeper"): the hard half of ttlproxy's soft TTL.
//
// A run fixes a cutoff once (the database's now()) and, table by table,
// deletes the rows that ttl.Rule.ExpiredCondition reports expired at that
// cutoff: the read filter's LiveCondition negated, so the sweeper deletes
// exactly the rows the proxy already hides. It works in batches, each its
// own short transaction that re-checks the rule on the row it deletes, so a
// row refreshed while the run goes on survives, and that skips rows a
// foreground transaction holds (FOR UPDATE SKIP LOCKED; they are left for
// the next run). A sidecar rule's base rows are deleted with their registry
// rows locked, then the registry entries left without a base row are
// deleted once expired.
// After a table's rows, the expired values of each of its expiring columns
// (ttl.Rule.Columns) are set to NULL in the rows the row rule keeps, by the
// same batches with UPDATE in place of DELETE (columns.go).
//
// Batch sizes adapt to a target transaction time (Config.TargetBatchDuration,
// 50 ms) and the sweeper backs off only when the database is busy (pace.go:
// AIMD's multiplicative steps for the size, CoDel's standing-delay test for
// the waits, and the latency of the statements the proxy relays against
// its baseline for the sweeper's share of time).
//
// Each table is split into slices (slicer.go), the unit that instances
// coordinate on (coordinate.go: a session advisory lock per table and
// slice) and that Config.Workers sweep in parallel. On PostgreSQL a table
// whose doomed rows the planner finds through an index is one slice that
// the batches walk; a table it would read sequentially is cut into ranges
// of 1024 heap blocks swept by TID range scans (PostgreSQL 14+), so a run
// reads the table once: each batch DELETEs the doomed rows of the next few
// blocks in one pass, as a bulk DELETE does, under a short lock_timeout,
// and a range that meets a row lock is swept again by picks that skip the
// locked rows (sweeper.go, rangeBatches). On
// YugabyteDB (version() contains "-YB-") the slices are 16 yb_hash_code
// ranges over the primary key's hash columns and rows are addressed by
// ybctid, as in the YugabyteDB row-TTL recipe.
//
// One table's failure (missing table, permission denied, repeated timeouts)
// is logged, counted in ttlproxy_sweeper_errors_total and reported in
// RunResult.Errors; the other tables are swept. The sweeper's sessions use
// TimeZone UTC and READ COMMITTED whatever the login's defaults, and a
// server-side statement_timeout of BatchTimeout.
//
// Usage:
//
//	s, err := sweeper.New(sweeper.Config{
//		DSN:        "postgres://ttl_sweeper@127.0.0.1:5432/app",
//		Rules:      rules,
//		Logger:     logger,
//		Registerer: registry,
//	})
//	if err != nil {
//		return err
//	}
//	if err := s.Start(ctx); err != nil {
//		return err
//	}
//	defer s.Stop()
//
// The login needs SELECT, UPDATE (for the row locks, and to set expired
// values to NULL) and DELETE on every TTL table, and on a sidecar registry.
package sweeper
