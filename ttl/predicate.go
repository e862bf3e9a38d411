package ttl

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// The one definition of "expired" shared by the read filter and the sweeper:
// a row is live when LiveCondition is true and expired when it is false.
// LiveCondition is never NULL (every NULL case is spelled out), so
// ExpiredCondition, its negation, is its exact complement. PostgreSQL pushes
// the NOT through the OR (negate_clause), so both stay index-friendly.

// Now is the instant "now" as the proxy writes it: schema-qualified, as every
// name it writes into SQL, so that a function now() of the client's own in a
// schema put before pg_catalog in search_path is not called (pg_dump writes
// names so; CREATE FUNCTION, "Writing SECURITY DEFINER Functions Safely").
const Now = "pg_catalog.now()"

// Operators the proxy writes, qualified for the same reason: a bare `>=`
// is looked up along search_path like a function. OPERATOR(…) binds as
// any other operator (tighter than comparison, looser than + and *), so
// every operand the proxy writes around one is parenthesized or atomic.
const (
	opEq    = " OPERATOR(pg_catalog.=) "
	opGE    = " OPERATOR(pg_catalog.>=) "
	opLT    = " OPERATOR(pg_catalog.<) "
	opPlus  = " OPERATOR(pg_catalog.+) "
	opMinus = " OPERATOR(pg_catalog.-) "
	opMul   = " OPERATOR(pg_catalog.*) "
	opDiv   = " OPERATOR(pg_catalog./) "
)

// LiveCondition returns a boolean SQL expression that is true when the row of
// the rule's table, visible under qualifier (already quoted SQL such as `"s"`
// or `public.sessions`), is live at the instant at (a timestamptz SQL
// expression such as Now or `$1::pg_catalog.timestamptz`). Expiry NULL never expires.
func (r *Rule) LiveCondition(qualifier, at string) string {
	return r.LiveConditionRenamed(qualifier, at, nil)
}

// LiveConditionRenamed is LiveCondition for a reference whose column alias
// list renames the table's columns (rename maps a column to its alias; nil
// keeps the names). Only the table's columns are renamed, not the registry's.
func (r *Rule) LiveConditionRenamed(qualifier, at string, rename map[string]string) string {
	q := func(col string) string {
		if alias, ok := rename[col]; ok {
			col = alias
		}
		return qualifier + "." + QuoteIdent(col)
	}
	at = parenthesize(at)
	switch r.RuleKind() {
	case KindDerived:
		base := q(r.BaseColumn)
		if r.IntervalColumn != "" {
			ivl := q(r.IntervalColumn)
			if r.IntervalSeconds {
				ivl = "(" + ivl + opMul + "interval '1 second')"
			}
			// Added in UTC: timestamptz + interval with day or month parts
			// depends on the session's TimeZone across a DST change, and the
			// proxy's clients and the sweeper must agree.
			return fmt.Sprintf("(%s IS NULL OR %s IS NULL OR ((%s AT TIME ZONE 'UTC')"+opPlus+"%s)"+opGE+"(%s AT TIME ZONE 'UTC'))",
				base, q(r.IntervalColumn), base, ivl, at)
		}
		return fmt.Sprintf("(%s IS NULL OR %s"+opGE+"(%s"+opMinus+"%s))", base, base, at, IntervalLiteral(r.ExpireAfter))
	case KindSidecar:
		var b strings.Builder
		fmt.Fprintf(&b, "(NOT EXISTS (SELECT 1 FROM %s AS _ttl_reg WHERE ", r.SidecarName())
		for i, k := range r.KeyColumns {
			if i > 0 {
				b.WriteString(" AND ")
			}
			fmt.Fprintf(&b, "_ttl_reg.%s"+opEq+"%s", QuoteIdent(k), q(k))
		}
		fmt.Fprintf(&b, " AND _ttl_reg.expires_at"+opLT+"%s))", at)
		return b.String()
	case KindNone:
		// No row rule: every row is live. Callers skip the condition
		// (HasRowRule); this keeps a missed one correct.
		return "true"
	}
	col := q(r.ExpiryColumn())
	return fmt.Sprintf("(%s IS NULL OR %s"+opGE+"%s)", col, col, r.columnThreshold(at))
}

// parenthesize wraps an instant expression in parentheses unless it is a
// plain Now or parameter, so operators around it bind as intended.
func parenthesize(at string) string {
	if at == Now || simpleParam.MatchString(at) {
		return at
	}
	return "(" + at + ")"
}

var simpleParam = regexp.MustCompile(`^\$[0-9]+(::pg_catalog\.timestamptz)?$`)

// ExpiredCondition is NOT LiveCondition: true when the row is expired at at.
func (r *Rule) ExpiredCondition(qualifier, at string) string {
	return "(NOT " + r.LiveCondition(qualifier, at) + ")"
}

// columnThreshold converts the timestamptz instant at into the expiry
// column's own type, so that the column is compared without a cast and its
// index stays usable.
func (r *Rule) columnThreshold(at string) string {
	switch r.ColumnType {
	case TypeTimestamp, TypeDate:
		return fmt.Sprintf("(%s AT TIME ZONE 'UTC')", at)
	case TypeUnixSeconds, TypeUnixMilliseconds, TypeUnixMicroseconds, TypeUnixNanoseconds:
		// col >= x  <=>  col >= ceil(x) for integer col.
		return unixCeil(at, r.ColumnType)
	}
	return at
}

// unixCeil renders the instant at (a parenthesized timestamptz expression) as
// integer Unix time in the unit of t, rounded up. It works in exact integer
// microseconds: extract(epoch) is double precision before PostgreSQL 14, too
// coarse for nanoseconds. It assumes instants after 1970 (positive epochs).
func unixCeil(at string, t ColumnType) string {
	us := fmt.Sprintf("((extract(epoch from pg_catalog.date_trunc('second', %[1]s))::bigint"+opMul+"1000000)"+
		opPlus+"(pg_catalog.round((extract(epoch from (%[1]s"+opMinus+"pg_catalog.date_trunc('second', %[1]s)))"+opMul+"1000000))::bigint))", at)
	switch t {
	case TypeUnixSeconds:
		return "((" + us + opPlus + "999999)" + opDiv + "1000000)"
	case TypeUnixMilliseconds:
		return "((" + us + opPlus + "999)" + opDiv + "1000)"
	case TypeUnixNanoseconds:
		return "(" + us + opMul + "1000)"
	}
	return us
}

// StampColumn returns the column that INSERT stamping and UPDATE refresh set,
// or "" when the rule has none (derived with a fixed lifetime, sidecar).
func (r *Rule) StampColumn() string {
	switch r.RuleKind() {
	case KindColumn:
		return r.ExpiryColumn()
	case KindDerived:
		return r.IntervalColumn
	}
	return ""
}

// StampValue returns the SQL expression stamped into StampColumn for a
// lifetime ttl starting at now(): the expiry in the column's own type, or, for
// a derived rule, the per-row lifetime.
func (r *Rule) StampValue(ttl time.Duration) string {
	if r.RuleKind() == KindDerived {
		if r.IntervalSeconds {
			return fmt.Sprintf("%d", int64(ttl/time.Second))
		}
		return IntervalLiteral(ttl)
	}
	return r.ExpiryValue(ttl)
}

// RefreshValue returns the SQL expression an UPDATE of the row, visible
// under qualifier, sets StampColumn to so that the row expires ttl after
// now(): StampValue, but for a derived rule's per-row lifetime, which counts
// from the base column: the row's age (in UTC, as LiveCondition adds it)
// plus ttl, whole seconds rounded up. A row without a base stays without
// a lifetime (it never expires either way).
func (r *Rule) RefreshValue(qualifier string, ttl time.Duration) string {
	if r.RuleKind() != KindDerived {
		return r.StampValue(ttl)
	}
	age := fmt.Sprintf("((%s AT TIME ZONE 'UTC')"+opMinus+"(%s.%s AT TIME ZONE 'UTC'))", Now, qualifier, QuoteIdent(r.BaseColumn))
	if r.IntervalSeconds {
		return fmt.Sprintf("(pg_catalog.ceil(extract(epoch from %s))::bigint"+opPlus+"%d)", age, int64(ttl/time.Second))
	}
	return "(" + age + opPlus + IntervalLiteral(ttl) + ")"
}

// ExpiryValue returns the SQL expression for the instant now()+ttl in the
// expiry column's type (also the sidecar registry's timestamptz).
func (r *Rule) ExpiryValue(ttl time.Duration) string {
	at := Now + opPlus + IntervalLiteral(ttl)
	switch r.ColumnType {
	case TypeTimestamp:
		return fmt.Sprintf("((%s) AT TIME ZONE 'UTC')", at)
	case TypeDate:
		return fmt.Sprintf("((%s) AT TIME ZONE 'UTC')::pg_catalog.date", at)
	case TypeUnixSeconds, TypeUnixMilliseconds, TypeUnixMicroseconds, TypeUnixNanoseconds:
		return unixCeil(parenthesize(at), r.ColumnType)
	}
	return "(" + at + ")"
}

// SidecarName returns the quoted qualified registry table name.
func (r *Rule) SidecarName() string {
	return QuoteIdent(r.SidecarSchemaName()) + "." + QuoteIdent(r.SidecarTable)
}

// SidecarSchemaName returns SidecarSchema or the table's schema.
func (r *Rule) SidecarSchemaName() string {
	if r.SidecarSchema == "" {
		return r.SchemaName()
	}
	return r.SidecarSchema
}

// QuotedName returns the quoted qualified table name, e.g. "public"."sessions".
func (r *Rule) QuotedName() string {
	return QuoteIdent(r.SchemaName()) + "." + QuoteIdent(r.Table)
}

// IntervalLiteral renders d as an interval literal, e.g. interval '90 seconds'
// for whole seconds, in microseconds otherwise.
func IntervalLiteral(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("interval '%d seconds'", int64(d/time.Second))
	}
	return fmt.Sprintf("interval '%d microseconds'", int64(d/time.Microsecond))
}
