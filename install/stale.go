package install

import (
	"context"
	"fmt"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// staleQuery lists the purge functions in schema ttlproxy and the triggers
// that call them, one row per trigger (trigger columns NULL for a function
// no trigger calls).
const staleQuery = `SELECT p.proname::text, tn.nspname::text, tc.relname::text, tg.tgname::text
FROM pg_catalog.pg_proc p
JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
LEFT JOIN pg_catalog.pg_trigger tg ON tg.tgfoid = p.oid
LEFT JOIN pg_catalog.pg_class tc ON tc.oid = tg.tgrelid
LEFT JOIN pg_catalog.pg_namespace tn ON tn.oid = tc.relnamespace
WHERE n.nspname = $1 AND p.proname LIKE $2 AND p.pronargs = 0
ORDER BY 1, 2, 3, 4`

// readStale returns the statements that drop the purge functions of tables
// not among rules, and their triggers: left from an earlier install for a
// table since removed from the configuration, such a trigger would go on
// deleting rows by a rule that no longer applies to the table, and those rows
// are ordinary data now. The tables among rules are Plan's business.
func readStale(ctx context.Context, q querier, rules []ttl.Rule) ([]step, error) {
	mine := make(map[string]bool, len(rules))
	for i := range rules {
		mine[FunctionName(rules[i].SchemaName(), rules[i].Table)] = true
	}
	rows, err := q.Query(ctx, staleQuery, Schema, `purge\_expired\_\_%`)
	if err != nil {
		return nil, fmt.Errorf("reading installed functions: %w", err)
	}
	defer rows.Close()
	var steps, drops []step
	seen := map[string]bool{}
	for rows.Next() {
		var fn string
		var schema, table, trigger *string
		if err := rows.Scan(&fn, &schema, &table, &trigger); err != nil {
			return nil, fmt.Errorf("reading installed functions: %w", err)
		}
		if mine[fn] {
			continue
		}
		if trigger != nil {
			name := *schema + "." + *table
			steps = append(steps, step{table: name, sql: fmt.Sprintf("DROP TRIGGER IF EXISTS %s ON %s",
				ttl.QuoteIdent(*trigger), ttl.QuoteIdent(*schema)+"."+ttl.QuoteIdent(*table))})
		}
		if !seen[fn] {
			seen[fn] = true
			drops = append(drops, step{sql: "DROP FUNCTION IF EXISTS " + ttl.QuoteIdent(Schema) + "." + ttl.QuoteIdent(fn) + "()"})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading installed functions: %w", err)
	}
	return append(steps, drops...), nil
}
