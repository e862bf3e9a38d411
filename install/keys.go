package install

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// Skipped is a unique index the collision trigger does not cover, or covers
// only in part: a write that collides with an expired row on what is not
// covered still fails with 23505, as it does without the trigger.
type Skipped struct {
	// Table is "schema.table".
	Table string
	// Index is the index name.
	Index string
	// Reason says why, e.g. "partial index".
	Reason string
}

func (s Skipped) String() string {
	return fmt.Sprintf("table %s: unique index %s: %s; a collision with an expired row there still raises 23505",
		s.Table, s.Index, s.Reason)
}

// querier is what reading the catalog needs; *pgx.Conn and pgx.Tx have it.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// UniqueKeys reads the unique keys of the rules' tables from the catalog:
// "schema.table" (Rule.QualifiedName) to the key column sets of the primary
// key and of every unique index or constraint, in index name order after the
// primary key. Every rule's table has an entry, empty when it has no usable
// key. Indexes it leaves out, and why (see Skipped):
//   - partial indexes (WHERE …): their predicate is not carried into the
//     trigger, and without it the probe could not use the index;
//   - expression indexes (lower(email)): the trigger compares columns;
//   - indexes whose equality operator is not in pg_catalog (citext and other
//     extension types): the trigger function runs with search_path
//     pg_catalog, pg_temp, where such an operator would not resolve.
//
// A NULLS NOT DISTINCT index (PostgreSQL 15) is kept: its non-NULL
// collisions are handled; a NULL key colliding with an expired row's NULL
// still raises 23505. A table that does not exist is an error naming it.
func UniqueKeys(ctx context.Context, conn *pgx.Conn, rules []ttl.Rule) (map[string][][]string, error) {
	keys, _, err := readKeys(ctx, conn, rules)
	return keys, err
}

// UniqueKeysSkipped is UniqueKeys that also returns the unique indexes it
// left out.
func UniqueKeysSkipped(ctx context.Context, conn *pgx.Conn, rules []ttl.Rule) (map[string][][]string, []Skipped, error) {
	return readKeys(ctx, conn, rules)
}

const tableQuery = `SELECT c.oid, c.relkind::text
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2`

// indexQuery lists a table's unique indexes that are maintained (indisready:
// a unique index being built concurrently already rejects duplicates). The
// key columns are the first indnkeyatts (INCLUDE columns are not part of the
// key); foreign_ops names the key types whose btree equality operator is not
// in pg_catalog. indnullsnotdistinct is read through to_jsonb so the query
// also runs on servers before 15, where the column does not exist.
const indexQuery = `SELECT ic.relname::text,
  i.indpred IS NOT NULL,
  i.indexprs IS NOT NULL OR 0 = ANY (i.indkey::pg_catalog.int2[]),
  coalesce((pg_catalog.to_jsonb(i) ->> 'indnullsnotdistinct')::boolean, false),
  ARRAY(SELECT a.attname::text
        FROM pg_catalog.unnest(i.indkey::pg_catalog.int2[]) WITH ORDINALITY AS k(attnum, ord)
        JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
        WHERE k.ord <= i.indnkeyatts
        ORDER BY k.ord),
  ARRAY(SELECT pg_catalog.format_type(oc.opcintype, NULL) || ' (' ||
               coalesce(pg_catalog.quote_ident(opn.nspname) || '.' || o.oprname, 'no equality operator') || ')'
        FROM pg_catalog.unnest(i.indclass::pg_catalog.oid[]) WITH ORDINALITY AS k(opc, ord)
        JOIN pg_catalog.pg_opclass oc ON oc.oid = k.opc
        LEFT JOIN pg_catalog.pg_amop ao ON ao.amopfamily = oc.opcfamily AND ao.amopmethod = oc.opcmethod
             AND ao.amoplefttype = oc.opcintype AND ao.amoprighttype = oc.opcintype AND ao.amopstrategy = 3
        LEFT JOIN pg_catalog.pg_operator o ON o.oid = ao.amopopr
        LEFT JOIN pg_catalog.pg_namespace opn ON opn.oid = o.oprnamespace
        WHERE k.ord <= i.indnkeyatts AND (opn.nspname IS DISTINCT FROM 'pg_catalog')
        ORDER BY k.ord)
FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid
WHERE i.indrelid = $1 AND i.indisunique AND i.indislive AND i.indisready
ORDER BY i.indisprimary DESC, ic.relname`

func readKeys(ctx context.Context, q querier, rules []ttl.Rule) (map[string][][]string, []Skipped, error) {
	keys := make(map[string][][]string, len(rules))
	var skipped []Skipped
	for i := range rules {
		r := &rules[i]
		name := r.QualifiedName()
		var oid uint32
		var kind string
		err := q.QueryRow(ctx, tableQuery, r.SchemaName(), r.Table).Scan(&oid, &kind)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, nil, fmt.Errorf("table %s: does not exist", name)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("table %s: reading the catalog: %w", name, err)
		}
		if kind != "r" && kind != "p" {
			return nil, nil, fmt.Errorf("table %s: not a table (relkind %q)", name, kind)
		}
		rows, err := q.Query(ctx, indexQuery, oid)
		if err != nil {
			return nil, nil, fmt.Errorf("table %s: reading unique indexes: %w", name, err)
		}
		tkeys := [][]string{}
		for rows.Next() {
			var index string
			var partial, expr, nullsNotDistinct bool
			var cols, foreign []string
			if err := rows.Scan(&index, &partial, &expr, &nullsNotDistinct, &cols, &foreign); err != nil {
				rows.Close()
				return nil, nil, fmt.Errorf("table %s: reading unique indexes: %w", name, err)
			}
			switch {
			case partial:
				skipped = append(skipped, Skipped{Table: name, Index: index, Reason: "partial index, not covered"})
			case expr:
				skipped = append(skipped, Skipped{Table: name, Index: index, Reason: "expression index, not covered"})
			case len(foreign) > 0:
				skipped = append(skipped, Skipped{Table: name, Index: index,
					Reason: "not covered, equality operator outside pg_catalog for " + strings.Join(foreign, ", ")})
			default:
				if nullsNotDistinct {
					skipped = append(skipped, Skipped{Table: name, Index: index,
						Reason: "NULLS NOT DISTINCT, covered for non-NULL key values only"})
				}
				tkeys = append(tkeys, cols)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, nil, fmt.Errorf("table %s: reading unique indexes: %w", name, err)
		}
		keys[name] = tkeys
	}
	return keys, skipped, nil
}
