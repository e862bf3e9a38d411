package install

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// Row-level security: the database itself hides expired rows.
//
// The proxy filters the statements it sees. Views and functions owned by
// ordinary roles, and connections that do not go through the proxy, read
// the tables inside the server; with row security installed they see the
// live rows only, by the same definition (ttl.Rule.LiveCondition).
//
// Each TTL table, and each of its inheritance children and partitions
// (a query on a child does not apply the parent's policies), gets:
//
//   - a RESTRICTIVE policy ttlproxy_live FOR ALL TO PUBLIC, USING the live
//     condition at now() or current_user among the exempt roles, WITH CHECK
//     (true): rows with any expiry may still be written, and restrictive
//     policies cannot widen what the table's own policies allow;
//   - when the table had row security disabled, ENABLE ROW LEVEL SECURITY
//     and a PERMISSIVE policy ttlproxy_all USING (true) WITH CHECK (true),
//     so that roles keep the access their privileges gave them;
//   - FORCE ROW LEVEL SECURITY, so that the table's owner, and views and
//     SECURITY DEFINER functions owned by it, are filtered too.
//
// The exempt roles see every row: the sweeper's login (it deletes expired
// rows), the installing login (the collision triggers' SECURITY DEFINER
// functions delete expired rows as that role) and bypass_roles. Not covered,
// by PostgreSQL's design: superusers and roles with BYPASSRLS (they bypass
// every policy), TRUNCATE, and a session with row_security = off, which gets
// an error instead of filtered rows. A policy for a sidecar rule reads the
// registry with the querying role's privileges, so readers need SELECT on
// it.
//
// Uninstall drops both policies and, read from the policy's comment, undoes
// what the install changed: FORCE, and row security itself when the install
// enabled it and no other policy is left.

// Policy names.
const (
	livePolicy = "ttlproxy_live"
	allPolicy  = "ttlproxy_all"
)

// policyComment marks the live policy; the suffixes record what the install
// changed ("enabled" row security, "forced" it), for uninstall, and the
// condition it holds ("condition" and ttl.Rule.PolicyFingerprint), which the
// proxy checks at row_security required.
const policyComment = "ttlproxy: created by ttlproxy install --row-security"

// policyConditionTag precedes the fingerprint in the policy's comment
// (ttl.PolicyCondition reads it).
const policyConditionTag = ttl.PolicyConditionTag

// withCondition returns comment recording fp instead of any fingerprint it
// held.
func withCondition(comment, fp string) string {
	if i := strings.Index(comment, policyConditionTag); i >= 0 {
		rest := comment[i+len(policyConditionTag):]
		if j := strings.Index(rest, ";"); j >= 0 {
			comment = comment[:i] + rest[j:]
		} else {
			comment = comment[:i]
		}
	}
	return comment + policyConditionTag + fp
}

// ApplyRowSecurity installs (or, with uninstall, removes) the row-level
// security policies on the tables of rules and their children, in one
// transaction, and returns the statements run. exempt are the roles that see
// every row besides the installing login (current_user on conn). A table
// with no row rule (rule none) gets no policy, and loses those an earlier
// install gave it. The login must own the tables. Errors name the table.
func ApplyRowSecurity(ctx context.Context, conn *pgx.Conn, rules []ttl.Rule, exempt []string, uninstall bool) ([]string, error) {
	return runRowSecurity(ctx, conn, rules, exempt, uninstall, true)
}

// PreviewRowSecurity is ApplyRowSecurity without changing anything.
func PreviewRowSecurity(ctx context.Context, conn *pgx.Conn, rules []ttl.Rule, exempt []string, uninstall bool) ([]string, error) {
	return runRowSecurity(ctx, conn, rules, exempt, uninstall, false)
}

// rlsTable is what the catalog says about one table.
type rlsTable struct {
	rule              *ttl.Rule
	name              string // quoted schema.table
	enabled, forced   bool
	live, all, others bool   // policies present
	comment           string // of the live policy
}

func runRowSecurity(ctx context.Context, conn *pgx.Conn, rules []ttl.Rule, exempt []string, uninstall, execute bool) (out []string, err error) {
	opts := pgx.TxOptions{}
	if !execute {
		opts.AccessMode = pgx.ReadOnly
	}
	tx, err := conn.BeginTx(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("beginning a transaction: %w", err)
	}
	defer func() {
		if err != nil {
			// The error that made us roll back is the one to report; a
			// failed rollback ends the connection's transaction anyway.
			_ = tx.Rollback(ctx)
		}
	}()
	if execute {
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+LockTimeout+"'"); err != nil {
			return nil, fmt.Errorf("setting lock_timeout: %w", err)
		}
	}
	var me string
	if err := tx.QueryRow(ctx, "SELECT current_user::text").Scan(&me); err != nil {
		return nil, fmt.Errorf("reading current_user: %w", err)
	}
	roles := append([]string{me}, exempt...)
	slices.Sort(roles)
	roles = slices.Compact(roles)

	var tables []rlsTable
	for i := range rules {
		ts, err := readRowSecurity(ctx, tx, &rules[i])
		if err != nil {
			return nil, fmt.Errorf("table %s: %w", rules[i].QualifiedName(), err)
		}
		tables = append(tables, ts...)
	}
	for _, t := range tables {
		var steps []string
		// A table with no row rule (rule none) hides no row: the policies
		// an earlier install gave it go, as on uninstall.
		if uninstall || !t.rule.HasRowRule() {
			steps = planRowSecurityRemoval(t)
		} else {
			steps = planRowSecurity(t, roles)
		}
		for _, s := range steps {
			if execute {
				if _, err := tx.Exec(ctx, s); err != nil {
					return nil, fmt.Errorf("table %s: %w", t.name, err)
				}
			}
			out = append(out, s)
		}
	}
	if !execute {
		return out, tx.Rollback(ctx)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("committing: %w", err)
	}
	return out, nil
}

// readRowSecurity reads the row security state of the rule's table and of
// its inheritance children and partitions at any depth. A missing table is
// an error.
func readRowSecurity(ctx context.Context, tx pgx.Tx, r *ttl.Rule) ([]rlsTable, error) {
	rows, err := tx.Query(ctx, `
WITH RECURSIVE tree AS (
  SELECT $1::pg_catalog.regclass::pg_catalog.oid AS oid
  UNION
  SELECT i.inhrelid FROM pg_catalog.pg_inherits i JOIN tree ON i.inhparent = tree.oid
)
SELECT pg_catalog.quote_ident(n.nspname) || '.' || pg_catalog.quote_ident(c.relname),
       c.relrowsecurity, c.relforcerowsecurity,
       EXISTS (SELECT FROM pg_catalog.pg_policy p WHERE p.polrelid = c.oid AND p.polname = $2),
       EXISTS (SELECT FROM pg_catalog.pg_policy p WHERE p.polrelid = c.oid AND p.polname = $3),
       EXISTS (SELECT FROM pg_catalog.pg_policy p WHERE p.polrelid = c.oid AND p.polname NOT IN ($2, $3)),
       COALESCE((SELECT pg_catalog.obj_description(p.oid, 'pg_policy') FROM pg_catalog.pg_policy p
                  WHERE p.polrelid = c.oid AND p.polname = $2), '')
  FROM tree
  JOIN pg_catalog.pg_class c ON c.oid = tree.oid
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 ORDER BY tree.oid = $1::pg_catalog.regclass::pg_catalog.oid DESC, 1`,
		r.QuotedName(), livePolicy, allPolicy)
	if err != nil {
		return nil, err
	}
	var out []rlsTable
	for rows.Next() {
		t := rlsTable{rule: r}
		if err := rows.Scan(&t.name, &t.enabled, &t.forced, &t.live, &t.all, &t.others, &t.comment); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// planRowSecurity returns the statements that install the policies on t.
// Installing again replaces the live policy (new exempt roles, a changed
// rule) and keeps what the first install recorded.
func planRowSecurity(t rlsTable, exempt []string) []string {
	var steps []string
	comment := t.comment
	if !t.live {
		comment = policyComment
		if !t.enabled {
			comment += "; enabled"
		}
		if !t.forced {
			comment += "; forced"
		}
	}
	if !t.enabled {
		steps = append(steps, "ALTER TABLE "+t.name+" ENABLE ROW LEVEL SECURITY")
	}
	if !t.enabled && !t.all {
		steps = append(steps, "CREATE POLICY "+allPolicy+" ON "+t.name+" AS PERMISSIVE FOR ALL TO PUBLIC USING (true) WITH CHECK (true)")
	}
	lits := make([]string, len(exempt))
	for i, r := range exempt {
		lits[i] = ttl.QuoteLiteral(r)
	}
	using := t.rule.LiveCondition(t.name, ttl.Now)
	if len(lits) > 0 {
		using += " OR current_user = ANY (ARRAY[" + strings.Join(lits, ", ") + "]::pg_catalog.name[])"
	}
	if t.live {
		steps = append(steps, "DROP POLICY "+livePolicy+" ON "+t.name)
	}
	comment = withCondition(comment, t.rule.PolicyFingerprint())
	steps = append(steps,
		"CREATE POLICY "+livePolicy+" ON "+t.name+" AS RESTRICTIVE FOR ALL TO PUBLIC USING ("+using+") WITH CHECK (true)",
		"COMMENT ON POLICY "+livePolicy+" ON "+t.name+" IS "+ttl.QuoteLiteral(comment))
	if !t.forced {
		steps = append(steps, "ALTER TABLE "+t.name+" FORCE ROW LEVEL SECURITY")
	}
	return steps
}

// planRowSecurityRemoval returns the statements that remove the policies
// from t and undo what their install recorded.
func planRowSecurityRemoval(t rlsTable) []string {
	if !t.live && !t.all {
		return nil
	}
	var steps []string
	if t.live {
		steps = append(steps, "DROP POLICY "+livePolicy+" ON "+t.name)
	}
	if t.all {
		steps = append(steps, "DROP POLICY "+allPolicy+" ON "+t.name)
	}
	if strings.Contains(t.comment, "; forced") && t.forced {
		steps = append(steps, "ALTER TABLE "+t.name+" NO FORCE ROW LEVEL SECURITY")
	}
	if strings.Contains(t.comment, "; enabled") && t.enabled && !t.others {
		steps = append(steps, "ALTER TABLE "+t.name+" DISABLE ROW LEVEL SECURITY")
	}
	return steps
}
