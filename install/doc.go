// Package install adds, on request, a helper trigger to each TTL table so
// that a write whose unique key collides with an expired, not yet swept row
// behaves as if that row were absent, also for COPY FROM and for writes that
// do not go through the proxy.
//
// # Why a trigger
//
// The proxy hides expired rows from reads, but the unique index does not:
// without help, inserting a key an expired row still holds fails with 23505,
// ON CONFLICT DO NOTHING skips the row, and ON CONFLICT DO UPDATE updates the
// dead row. The trigger is a BEFORE INSERT row trigger (and a BEFORE UPDATE OF
// the key columns row trigger that fires only when a key value changes)
// whose function deletes, for every unique key of the table, the rows that
// hold NEW's value and are expired at now() by the rule's own definition
// (ttl.Rule.ExpiredCondition). PostgreSQL checks uniqueness
// (_bt_check_unique) and the ON CONFLICT arbiter indexes
// (check_exclusion_or_unique_constraint) with a dirty snapshot
// (SnapshotDirty), which does not see a tuple deleted by the current
// transaction; the BEFORE ROW trigger runs before both, so the write goes on
// as if the expired row had been swept already. A live row is never deleted,
// so its collision still raises 23505, and ON CONFLICT still acts on it.
//
// Verified on PostgreSQL 15 (install_test.go), for column rules
// (timestamptz and Unix seconds), derived and sidecar rules: plain and
// multi-row INSERT, INSERT … SELECT, ON CONFLICT DO NOTHING with and
// without a conflict target, ON CONFLICT DO UPDATE by column list and by
// constraint name, UPDATE setting a key to an expired row's value, the
// DO UPDATE half of an upsert changing a second key, MERGE, COPY FROM (text
// and binary), and a partitioned table; live collisions unchanged in each
// case.
//
// # Cost
//
// One plpgsql call and one index probe per unique key per inserted row, and
// per updated row whose key changes (the trigger's WHEN clause keeps it off
// other updates); a delete when a probe finds an expired row. PostgreSQL
// stops batching COPY FROM into multi-row inserts on a table with a BEFORE
// INSERT row trigger, so bulk loads get slower. Measured on a loaded 2-core
// machine, table with two unique keys, 100,000 rows: INSERT … SELECT 0.6–1.4 s
// without the trigger, 2.9–3.8 s with it (some 20–30 µs a row); updates that
// change no key column are not affected.
//
// # Security
//
// The functions live in schema ttlproxy, are SECURITY DEFINER (a role that
// may INSERT but not DELETE can still take the key of an expired row), pin
// search_path to pg_catalog, pg_temp and name every table fully. EXECUTE is
// revoked from PUBLIC: firing a trigger does not check it.
//
// # Install, reinstall, uninstall
//
// Apply is idempotent (CREATE OR REPLACE FUNCTION; DROP TRIGGER IF EXISTS
// and CREATE TRIGGER) and runs in one transaction, with lock_timeout set so
// that waiting for a busy table does not block its writers. Run it again
// after adding or dropping a unique key. It drops the triggers of tables no
// longer configured (their rows are ordinary data now, whatever their expiry
// column says), so a database holds one configuration's triggers. Uninstall
// removes every ttlproxy collision trigger and function, and the ttlproxy
// schema when nothing else lives in it.
//
// # Limits
//
//   - Verified on PostgreSQL only. YugabyteDB checks uniqueness in DocDB,
//     not with SnapshotDirty; test there before relying on it.
//   - Expiry is judged at now(), the transaction's start, as the proxy does:
//     a row that expires while a long transaction runs still collides in it.
//   - Partial and expression unique indexes, and those of types whose
//     equality operator is outside pg_catalog, are not covered (UniqueKeys,
//     Skipped): collisions with expired rows on them still raise 23505.
//   - Deleting the expired row runs its ON DELETE actions: foreign keys that
//     reference it cascade, or make the write fail with 23503, exactly as the
//     sweeper's delete would.
//   - Sidecar tables: the expired registry rows of a deleted base row are
//     deleted with it, in the same statement; left behind, they would mark a
//     new row with the same primary key as expired at once.
//   - The update trigger is column-specific (BEFORE UPDATE OF the key
//     columns): a key changed only by another BEFORE UPDATE trigger, not by
//     the statement's SET list, does not fire it.
//   - The function deletes as its owner, the role that ran the install:
//     under FORCE ROW LEVEL SECURITY a policy hiding the expired row from
//     that role leaves it in place, and the write fails with 23505.
//   - In REPEATABLE READ and SERIALIZABLE, two transactions racing for the
//     key of the same expired row can fail with 40001, as for any concurrent
//     delete; retry.
//   - A statement that bypasses the proxy and updates expired rows themselves
//     along with changing keys (UPDATE t SET id = id + 1) can fail with
//     27000 when the trigger has deleted a row the statement reaches later.
//     Through the proxy expired rows are never the target of an UPDATE.
//
// # Other objects
//
// ApplyRowSecurity adds row-level security policies (rowsecurity.go),
// ApplyDDLEvents the DDL event triggers (ddlevents.go), and ApplyAuthQuery
// ttlproxy.user_lookup, the function the proxy's auth_query reads password
// verifiers through for transaction pooling (proxy/internal/auth/query.go).
//
// # Usage
//
//	conn, _ := pgx.Connect(ctx, dsn)
//	done, err := install.Apply(ctx, conn, cfg.Tables, false)
//	for _, s := range done {
//		fmt.Println(s + ";")
//	}
package install
