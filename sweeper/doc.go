// Package sweeper physically deletes expired rows of TTL tables in the
// background (ARCHITECTURE.md, "The sweeper"): the hard half of ttlproxy's soft TTL.
//
// A run fixes a cutoff once (the database's now()) and, table by table,
// deletes the rows that ttl.Rule.ExpiredCondition reports expired at that
// cutoff: the read filter's LiveCondition negated, so the sweeper deletes
// exactly the rows the proxy already hides. It works in batches of BatchSize
// rows, each its own short transaction that re-checks the rule on the row it
// deletes, so a row refreshed while the run goes on survives, and that skips
// rows a foreground transaction holds (FOR UPDATE SKIP LOCKED; they are left
// for the next run). A sidecar rule's base rows are deleted with their
// registry rows locked, then the registry entries left without a base row
// are deleted once expired.
//
// Each table is split into slices swept one after another: on PostgreSQL the
// whole table is one slice; on YugabyteDB (version() contains "-YB-") the
// slices are 16 yb_hash_code ranges over the primary key's hash columns and
// rows are addressed by ybctid, as in the YugabyteDB row-TTL recipe. Slices
// are where coordination between several proxy instances will hook in.
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
// The login needs SELECT, UPDATE (for the row locks) and DELETE on every
// TTL table, and on a sidecar registry.
package sweeper
