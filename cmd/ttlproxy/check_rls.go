package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/proxy"
	"github.com/ttlproxy/ttlproxy/rewrite"
	"github.com/ttlproxy/ttlproxy/ttl"
)

// rowSecurityQuery reads the row-level security of a table and of its
// inheritance children and partitions at any depth, as the proxy's catalog
// does: relrowsecurity, relforcerowsecurity and the comment of the live
// policy as ttlproxy install --row-security creates it (NULL: none).
const rowSecurityQuery = `
WITH RECURSIVE tree AS (
  SELECT $1::pg_catalog.regclass::pg_catalog.oid AS oid
  UNION
  SELECT i.inhrelid FROM pg_catalog.pg_inherits i JOIN tree ON i.inhparent = tree.oid
)
SELECT n.nspname::pg_catalog.text || '.' || c.relname::pg_catalog.text, c.relrowsecurity, c.relforcerowsecurity,
       ` + proxy.LivePolicyComment + `
  FROM tree
  JOIN pg_catalog.pg_class c ON c.oid = tree.oid
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 ORDER BY tree.oid = $1::pg_catalog.regclass::pg_catalog.oid DESC, 1`

// checkRowSecurity reports whether the table of r and its children carry
// the live policy of ttlproxy install --row-security. At row_security
// required a table without it is refused by the proxy (fail); at off the
// policies are the optional second layer, reported as found (ok).
func checkRowSecurity(ctx context.Context, conn *pgx.Conn, r *ttl.Rule, required bool, add func(check, status, detail string)) error {
	const check = "row security"
	level := "row_security off"
	if required {
		level = "row_security required"
	}
	if !r.HasRowRule() {
		add(check, checkOK, level+": no row rule, no policy (column TTL has no server-side counterpart)")
		return nil
	}
	rows, err := conn.Query(ctx, rowSecurityQuery, r.QuotedName())
	if err != nil {
		return fmt.Errorf("table %s: reading row security: %w", r.QualifiedName(), err)
	}
	var missing []string
	n := 0
	for rows.Next() {
		var name string
		var comment *string
		var rs rewrite.RowSecurity
		if err := rows.Scan(&name, &rs.Enabled, &rs.Forced, &comment); err != nil {
			return err
		}
		if comment != nil {
			rs.Policy, rs.Condition = true, ttl.PolicyCondition(*comment)
		}
		n++
		if why := rs.Protects(r); why != "" {
			missing = append(missing, name+": "+why)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("table %s: reading row security: %w", r.QualifiedName(), err)
	}
	switch {
	case len(missing) == 0:
		add(check, checkOK, fmt.Sprintf("%s: the live policy protects the table and its %d children", level, n-1))
	case required:
		add(check, checkFail, level+": the proxy refuses statements on "+strings.Join(missing, "; ")+" (ttlproxy install --row-security)")
	default:
		add(check, checkOK, level+": the second layer is not installed ("+strings.Join(missing, "; ")+"); hostile SQL is stopped by the rewrite alone (docs/contract.md)")
	}
	return nil
}
