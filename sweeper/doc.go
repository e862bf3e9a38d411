// Package sweeper physically deletes expired rows of TTL tables in the
// background (DESIGN.md §2): the hard half of ttlproxy's soft TTL.
//
// A run fixes a cutoff once (the database's now()) and, table by table,
// deletes rows that rewrite.Rule.ExpiredCondition reports expired at that
// cutoff, in small batches, each its own autocommit DELETE that re-checks the
// rule, so a row refreshed while the run goes on survives. One table's
// failure never stops the others.
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
package sweeper
