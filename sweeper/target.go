package sweeper

import (
	"fmt"
	"strings"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// Parameters of every sweeper statement: the run's cutoff and the batch size.
const (
	cutoffParam = "$1::pg_catalog.timestamptz"
	limitParam  = "$2"
)

// target is one table the sweeper deletes from: a rule's table, or a sidecar
// rule's registry.
type target struct {
	// name is "schema.table": the metric label and the RunResult key.
	name string
	// quoted is the quoted qualified table name.
	quoted string
	// regclass is the name to_regclass accepts (the quoted name).
	regclass string
	// doomed returns the SQL condition, over the row visible as qualifier,
	// that selects the rows to delete at the cutoff cutoffParam.
	doomed func(qualifier string) string
	// registry is set for a sidecar rule's base table: its expiry lives in
	// another table's rows, which a batch must lock too (lockedBatchSQL).
	registry *registryRef
	// rule is the rule of a table's own rows (nil for a sidecar registry
	// and an expiring column): what the inflow is counted by (inflow.go).
	rule *ttl.Rule
	// column is set for an expiring column of the table: its batches set
	// the column (and its expiry column) to NULL in the rows doomed selects
	// instead of deleting them (columns.go).
	column *columnRef
}

// table returns the qualified name of the table the target sweeps: the
// label of the metrics a table's row deletes and column nulling share.
func (t target) table() string {
	if t.column != nil {
		return t.column.table
	}
	return t.name
}

// verb names what sweeping t does, for errors: "deleting from
// schema.table" or "nulling schema.table.column".
func (t target) verb() string {
	if t.column != nil {
		return "nulling " + t.name
	}
	return "deleting from " + t.name
}

// done is the log key of the rows a sweep of t changed: "deleted", or
// "nulled" for an expiring column.
func (t target) done() string {
	if t.column != nil {
		return "nulled"
	}
	return "deleted"
}

// write returns the head of the statement that sweeps the rows of t's
// table visible as t and selected by the WHERE clause that follows it:
// "DELETE FROM tbl AS t", or for an expiring column "UPDATE tbl AS t SET
// c = NULL[, c_exp = NULL]". join is the keyword that adds a FROM item to
// it: USING for DELETE, FROM for UPDATE.
func (t target) write() (head, join string) {
	if t.column != nil {
		return "UPDATE " + t.quoted + " AS t SET " + t.column.set, "FROM"
	}
	return "DELETE FROM " + t.quoted + " AS t", "USING"
}

// registryRef names a sidecar registry and the key it shares with its base
// table.
type registryRef struct {
	quoted string
	keys   []string
}

// targets returns what sweeping r deletes from, in order: the table itself
// and, for a sidecar rule, then the registry rows it leaves behind; none
// for a table with no row rule (its rows never expire).
func targets(r *ttl.Rule) []target {
	if !r.HasRowRule() {
		return nil
	}
	base := target{
		name:     r.QualifiedName(),
		quoted:   r.QuotedName(),
		regclass: r.QuotedName(),
		rule:     r,
		// The one definition of expired, shared with the read filter.
		doomed: func(q string) string { return r.ExpiredCondition(q, cutoffParam) },
	}
	if r.RuleKind() != ttl.KindSidecar {
		return []target{base}
	}
	base.registry = &registryRef{quoted: r.SidecarName(), keys: r.KeyColumns}
	regSchema := r.SidecarSchema
	if regSchema == "" {
		regSchema = r.SchemaName()
	}
	reg := target{
		name:     regSchema + "." + r.SidecarTable,
		quoted:   r.SidecarName(),
		regclass: r.SidecarName(),
		doomed:   func(q string) string { return orphanCondition(r, q) },
	}
	return []target{base, reg}
}

// orphanCondition selects registry rows, visible as qualifier, whose expiry
// has passed at the cutoff and whose base row no longer exists: the base row
// was swept (or deleted by the application) and its registry entry is all
// that is left. An entry whose base row still exists is kept even when
// expired, since it is what hides that row.
func orphanCondition(r *ttl.Rule, q string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "(%s.expires_at < %s AND NOT EXISTS (SELECT 1 FROM %s AS _ttl_base WHERE ",
		q, cutoffParam, r.QuotedName())
	for i, k := range r.KeyColumns {
		if i > 0 {
			b.WriteString(" AND ")
		}
		k = ttl.QuoteIdent(k)
		fmt.Fprintf(&b, "_ttl_base.%s = %s.%s", k, q, k)
	}
	b.WriteString("))")
	return b.String()
}

// deleteBatchSQL returns the statement that deletes one batch of t's doomed
// rows in slice sl; $1 is the cutoff, $2 the batch size.
//
// On PostgreSQL the inner SELECT picks up to $2 row addresses (ctid) and
// locks them with FOR UPDATE SKIP LOCKED, so a row a foreground transaction
// holds is left for the next run instead of blocking either side; the
// DELETE then fetches them by TID scan. On YugabyteDB it follows the seed
// recipe: the row key ybctid of up to $2 doomed rows of one yb_hash_code
// slice, deleted through a join.
//
// Either way the DELETE evaluates doomed again on the row it deletes: under
// READ COMMITTED that is the newest version, so a row refreshed after the
// inner SELECT (expiry pushed into the future) is not deleted. On a
// partitioned PostgreSQL table ctids repeat across partitions, so a batch
// may also delete other rows that happen to share a ctid; the re-check
// limits those to rows that are doomed anyway.
//
// On YugabyteDB, ybctid is a bytea system column that YugabyteDB's own
// regression test yb.orig.ctid selects, orders by ("select ybctid, k, v
// from ybctid_test_hash order by ybctid"), compares ("where ybctid =
// '\x47121048800000012121'"), deletes by and joins on; no YugabyteDB test
// runs this exact WITH … DELETE … USING shape (docs/yugabytedb.md). The
// batch relies on statement_timeout, not lock_timeout, which YugabyteDB
// does not honour on row locks (YugabyteDB issue #29549).
//
// lockRows false leaves out FOR UPDATE SKIP LOCKED (tests use it to make the
// DELETE wait for a concurrent writer and exercise the re-check).
func deleteBatchSQL(d dialect, t target, sl slice, lockRows bool) string {
	inner := t.doomed("s")
	if c := sl.cond("s"); c != "" {
		inner += " AND " + c
	}
	head, join := t.write()
	if d == dialectYugabyte {
		return fmt.Sprintf("WITH doomed AS (SELECT s.ybctid AS id FROM %s AS s WHERE %s ORDER BY s.ybctid LIMIT %s) "+
			"%s %s doomed AS d WHERE t.ybctid OPERATOR(pg_catalog.=) d.id AND %s",
			t.quoted, inner, limitParam, head, join, t.doomed("t"))
	}
	lock := ""
	if lockRows {
		lock = " FOR UPDATE OF s SKIP LOCKED"
	}
	return fmt.Sprintf("%s WHERE t.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT s.ctid FROM %s AS s WHERE %s LIMIT %s%s)) AND %s",
		head, t.quoted, inner, limitParam, lock, t.doomed("t"))
}

// blockBatchSQL returns the statement that deletes one batch of t's doomed
// rows in block slice sl on PostgreSQL: deleteBatchSQL's pick and DELETE
// with sl's bounds ($3 the lowest row address, $4 the first excluded) on
// the pick, which a TID range scan reads in address order. It returns one
// row: the rows deleted, the rows picked (the batch is full when they are
// $2) and the highest address picked (NULL when none), past which the
// next batch starts.
func blockBatchSQL(t target, sl slice, lockRows bool) string {
	lock := ""
	if lockRows {
		lock = " FOR UPDATE OF s SKIP LOCKED"
	}
	head, _ := t.write()
	return fmt.Sprintf("WITH picked AS (SELECT s.ctid FROM %s AS s WHERE %s AND %s LIMIT %s%s), "+
		"gone AS (%s WHERE t.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT ctid FROM picked)) AND %s RETURNING 1) "+
		"SELECT (SELECT pg_catalog.count(*) FROM gone), (SELECT pg_catalog.count(*) FROM picked), (SELECT pg_catalog.max(ctid) FROM picked)",
		t.quoted, sl.cond("s"), t.doomed("s"), limitParam, lock, head, t.doomed("t"))
}

// rangeBatchSQL returns the statement that deletes every doomed row of t
// stored in the heap blocks from $2 up to $3 (exclusive): a TID range scan
// (PostgreSQL 14+) of those blocks, one pass as a bulk DELETE makes, with
// no row picked or locked first. It waits for a row a foreground
// transaction holds, so it runs under a short lock_timeout
// (execRangeBatch), and the range falls back to blockBatchSQL's picks,
// which skip such rows, when that runs out. The DELETE evaluates doomed on
// the newest version of each row it deletes (READ COMMITTED), so a row
// refreshed meanwhile is kept.
func rangeBatchSQL(t target) string {
	head, _ := t.write()
	return fmt.Sprintf("%s WHERE t.ctid OPERATOR(pg_catalog.>=) $2::pg_catalog.tid AND t.ctid OPERATOR(pg_catalog.<) $3::pg_catalog.tid AND %s", head, t.doomed("t"))
}

// lockedBatchSQL returns the two statements of a batch on a sidecar rule's
// base table, run in one transaction:
//
//	lock: up to $2 doomed base rows, locked together with their registry
//	      rows (FOR UPDATE SKIP LOCKED when lockRows); returns their row
//	      ids (ctid on PostgreSQL, ybctid on YugabyteDB).
//	del:  DELETE of those rows ($2, an array of ids) that are still doomed
//	      at $1.
//
// A refresh of a sidecar row updates the registry row only, so locking the
// base row (as deleteBatchSQL does) does not order the DELETE after it, and
// the DELETE's re-check reads the registry in the statement's snapshot: a
// refresh in flight would be lost. Here the registry rows are locked first.
// Under READ COMMITTED (PostgreSQL) del starts with a new snapshot: a
// refresh either committed before it (and is seen) or waits for the batch
// to commit. Under snapshot isolation (YugabyteDB's REPEATABLE READ, to
// which it maps READ COMMITTED unless yb_enable_read_committed_isolation is
// on; YugabyteDB issue #12004) the lock is expected to fail with 40001
// when a registry row changed after the transaction's snapshot, as
// PostgreSQL's REPEATABLE READ does (not verified on YugabyteDB), and the
// batch is retried at the next run; a later refresh waits for the batch or
// is aborted, per YugabyteDB's concurrency control.
func lockedBatchSQL(d dialect, t target, sl slice, lockRows bool) (lock, del string) {
	inner := t.doomed("s")
	if c := sl.cond("s"); c != "" {
		inner += " AND " + c
	}
	var join strings.Builder
	for i, k := range t.registry.keys {
		if i > 0 {
			join.WriteString(" AND ")
		}
		k = ttl.QuoteIdent(k)
		fmt.Fprintf(&join, "_ttl_lock.%s OPERATOR(pg_catalog.=) s.%s", k, k)
	}
	skip := ""
	if lockRows {
		skip = " SKIP LOCKED"
	}
	id, ids := "ctid", "pg_catalog.tid[]"
	if d == dialectYugabyte {
		id, ids = "ybctid", "pg_catalog.bytea[]"
	}
	lock = fmt.Sprintf("SELECT s.%s FROM %s AS s JOIN %s AS _ttl_lock ON %s WHERE %s LIMIT %s FOR UPDATE OF s, _ttl_lock%s",
		id, t.quoted, t.registry.quoted, join.String(), inner, limitParam, skip)
	del = fmt.Sprintf("DELETE FROM %s AS t WHERE t.%s OPERATOR(pg_catalog.=) ANY ($2::%s) AND %s", t.quoted, id, ids, t.doomed("t"))
	return lock, del
}
