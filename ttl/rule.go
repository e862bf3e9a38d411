package ttl

import (
	"fmt"
	"time"
)

// Kind names an expiry rule (docs/contract.md, "Rule kinds").
type Kind string

const (
	// KindColumn: expiry is the value of one column.
	KindColumn Kind = "column"
	// KindDerived: expiry is a base timestamp column plus a fixed interval
	// (ExpireAfter) or a per-row interval column (IntervalColumn).
	KindDerived Kind = "derived"
	// KindSidecar: expiry lives in a registry table keyed by the base table's
	// primary key.
	KindSidecar Kind = "sidecar"
	// KindNone: the table has no row rule, only expiring columns (Columns);
	// every row is live and no row expires.
	KindNone Kind = "none"
)

// ColumnType is the SQL type of an expiry column (KindColumn) as the rule
// interprets it.
type ColumnType string

const (
	TypeTimestamptz ColumnType = "timestamptz"
	// TypeTimestamp is a timestamp without time zone, read as UTC so that the
	// proxy and the sweeper agree whatever their sessions' TimeZone.
	TypeTimestamp ColumnType = "timestamp"
	// TypeDate expires at the start (00:00 UTC) of the given day.
	TypeDate ColumnType = "date"
	// Integer Unix time in seconds, milliseconds, microseconds, nanoseconds.
	TypeUnixSeconds      ColumnType = "unix_s"
	TypeUnixMilliseconds ColumnType = "unix_ms"
	TypeUnixMicroseconds ColumnType = "unix_us"
	TypeUnixNanoseconds  ColumnType = "unix_ns"
)

// Rule is one TTL table and its expiry rule. Names are stored as PostgreSQL
// stores them (case-sensitive, already folded): the config layer folds
// unquoted names to lower case.
type Rule struct {
	// Schema of the table; "" means "public".
	Schema string
	// Table name.
	Table string
	// Kind of expiry rule; "" means KindColumn.
	Kind Kind

	// Column is the expiry column for KindColumn; "" means "expires_at".
	Column string
	// ColumnType of Column; "" means TypeTimestamptz.
	ColumnType ColumnType

	// BaseColumn (KindDerived) is a timestamptz column, e.g. created_at.
	BaseColumn string
	// ExpireAfter (KindDerived) is the fixed lifetime added to BaseColumn.
	ExpireAfter time.Duration
	// IntervalColumn (KindDerived) is a per-row lifetime column used instead of
	// ExpireAfter: an interval, or an integer number of seconds when
	// IntervalSeconds is set.
	IntervalColumn  string
	IntervalSeconds bool

	// SidecarSchema/SidecarTable (KindSidecar) name the registry table; it
	// holds KeyColumns (the base table's primary key, same names) and an
	// expires_at timestamptz column. With a lifetime (DefaultTTL or the
	// session's), INSERT registers each inserted row's expiry there with
	// INSERT … ON CONFLICT (KeyColumns), so the registry needs a unique key
	// (primary key or unique index) on exactly KeyColumns; without one the
	// server rejects the INSERT (42P10).
	SidecarSchema string
	SidecarTable  string
	KeyColumns    []string

	// DefaultTTL is stamped on INSERT when the statement gives no expiry
	// (registered in the registry for KindSidecar); 0 means no stamping.
	DefaultTTL time.Duration
	// RefreshOnUpdate: an UPDATE of a live row sets expiry to now()+DefaultTTL
	// unless it sets the expiry itself.
	RefreshOnUpdate bool
	// CreateIndex asks the sweeper to create the index on the expiry column
	// (the base column of a derived rule) when the table has none.
	CreateIndex bool

	// Columns are the table's expiring columns: each value reads as NULL
	// from its own expiry on while the row stays (docs/design/column-ttl.md).
	// Until the rewriter reads them, it refuses every statement that names
	// one (SQLSTATE 0A000).
	Columns []ColumnRule
}

// ColumnRule is one expiring column of a TTL table. Names are stored as
// Rule's, already folded. Its kind follows from its fields: an expiry
// column of its own (ExpiresAtColumn, KindColumn) or a base column plus a
// fixed lifetime (BaseColumn and ExpireAfter, KindDerived). Expiry NULL
// never expires, as for rows.
type ColumnRule struct {
	// Column is the column whose value expires.
	Column string
	// ExpiresAtColumn is the value's expiry column, read as ColumnType (""
	// means TypeTimestamptz).
	ExpiresAtColumn string
	ColumnType      ColumnType
	// BaseColumn is a timestamptz column the value's lifetime ExpireAfter
	// counts from, e.g. created_at.
	BaseColumn  string
	ExpireAfter time.Duration
	// DefaultTTL is stamped into ExpiresAtColumn when a statement writes a
	// value to Column and gives no expiry; 0 means no stamping.
	DefaultTTL time.Duration
	// RefreshOnUpdate: an UPDATE of the row moves a live value's expiry to
	// now()+DefaultTTL unless it sets the expiry itself.
	RefreshOnUpdate bool
}

// Kind returns KindDerived for a rule with a BaseColumn, else KindColumn.
func (c *ColumnRule) Kind() Kind {
	if c.BaseColumn != "" {
		return KindDerived
	}
	return KindColumn
}

// Expiry returns the value's expiry as a row rule on table's table, whose
// LiveCondition and ExpiredCondition are the value's: the same predicate
// code serves rows and values.
func (c *ColumnRule) Expiry(table *Rule) Rule {
	r := Rule{Schema: table.Schema, Table: table.Table, Kind: c.Kind()}
	if r.Kind == KindDerived {
		r.BaseColumn, r.ExpireAfter = c.BaseColumn, c.ExpireAfter
	} else {
		r.Column, r.ColumnType = c.ExpiresAtColumn, c.ColumnType
	}
	return r
}

// Clock returns the column whose value decides the value's expiry: its
// expiry column, or a derived value's base column.
func (c *ColumnRule) Clock() string {
	if c.BaseColumn != "" {
		return c.BaseColumn
	}
	return c.ExpiresAtColumn
}

// ValueExpr returns the SQL expression that reads the column's value, of
// SQL type typ (format_type's text, e.g. "character varying(20)"), in
// table's row visible under qualifier (already quoted): the value while it
// is live, NULL of the same type once expired. The ELSE keeps the type's
// modifier: a CASE without one reports the type without it (varchar(20)
// as varchar) in the RowDescription.
func (c *ColumnRule) ValueExpr(table *Rule, qualifier, typ string) string {
	e := c.Expiry(table)
	return "CASE WHEN " + e.LiveCondition(qualifier, Now) + " THEN " + qualifier + "." + QuoteIdent(c.Column) +
		" ELSE NULL::" + typ + " END"
}

// ExpiringColumn returns the column rule for column, or nil.
func (r *Rule) ExpiringColumn(column string) *ColumnRule {
	for i := range r.Columns {
		if r.Columns[i].Column == column {
			return &r.Columns[i]
		}
	}
	return nil
}

// RowColumns returns the columns the row rule reads: its expiry, base,
// interval or key columns.
func (r *Rule) RowColumns() []string {
	switch r.RuleKind() {
	case KindDerived:
		if r.IntervalColumn != "" {
			return []string{r.BaseColumn, r.IntervalColumn}
		}
		return []string{r.BaseColumn}
	case KindSidecar:
		return r.KeyColumns
	case KindNone:
		return nil
	}
	return []string{r.ExpiryColumn()}
}

// validateColumns reports a column rule that cannot be used: a column
// listed twice, an expiring column the row rule or another column rule
// reads (its expiry would be undefined), an expiry that is the column
// itself, and the checks a row rule of the same kind gets.
func (r *Rule) validateColumns() error {
	seen := map[string]bool{}
	for i := range r.Columns {
		c := &r.Columns[i]
		name := r.QualifiedName() + "." + c.Column
		if c.Column == "" {
			return fmt.Errorf("%s: expiring column %d has no name", r.QualifiedName(), i)
		}
		if seen[c.Column] {
			return fmt.Errorf("%s: listed twice", name)
		}
		seen[c.Column] = true
		if (c.ExpiresAtColumn == "") == (c.BaseColumn == "") {
			return fmt.Errorf("%s: needs exactly one of an expiry column and a base column", name)
		}
		if c.ExpiresAtColumn == c.Column || c.BaseColumn == c.Column {
			return fmt.Errorf("%s: its expiry must be another column", name)
		}
		if c.Kind() == KindDerived && c.ExpireAfter <= 0 {
			return fmt.Errorf("%s: a base column needs a positive expire_after", name)
		}
		if c.Kind() == KindDerived && (c.DefaultTTL != 0 || c.ColumnType != "") {
			return fmt.Errorf("%s: default_ttl and column_type need an expiry column", name)
		}
		if c.DefaultTTL < 0 {
			return fmt.Errorf("%s: default_ttl must not be negative", name)
		}
		if c.RefreshOnUpdate && c.DefaultTTL == 0 {
			return fmt.Errorf("%s: refresh_on_update needs default_ttl", name)
		}
		if !validColumnType(c.ColumnType) {
			return fmt.Errorf("%s: unknown column type %q", name, c.ColumnType)
		}
		for _, rc := range r.RowColumns() {
			if rc == c.Column {
				return fmt.Errorf("%s: the row rule reads this column", name)
			}
		}
	}
	for i := range r.Columns {
		e := r.Columns[i].Expiry(r)
		for _, rc := range e.RowColumns() {
			if seen[rc] {
				return fmt.Errorf("%s.%s: an expiring column cannot be the expiry of expiring column %s", r.QualifiedName(), rc, r.Columns[i].Column)
			}
		}
	}
	return nil
}

// QualifiedName returns schema.table with defaults applied (unquoted).
func (r *Rule) QualifiedName() string {
	return r.SchemaName() + "." + r.Table
}

// SchemaName returns Schema or "public".
func (r *Rule) SchemaName() string {
	if r.Schema == "" {
		return "public"
	}
	return r.Schema
}

// ExpiryColumn returns Column or "expires_at".
func (r *Rule) ExpiryColumn() string {
	if r.Column == "" {
		return "expires_at"
	}
	return r.Column
}

// HasRowRule reports whether rows of the table expire: false for KindNone,
// a table with expiring columns only. Every use of the row rule (the read
// filter, the row stamp, the sweeper's deletes, install's policies and
// triggers) is skipped for a table without one.
func (r *Rule) HasRowRule() bool {
	return r.RuleKind() != KindNone
}

// RuleKind returns Kind or KindColumn.
func (r *Rule) RuleKind() Kind {
	if r.Kind == "" {
		return KindColumn
	}
	return r.Kind
}

// validColumnType reports a ColumnType the predicates know ("" is
// TypeTimestamptz).
func validColumnType(t ColumnType) bool {
	switch t {
	case "", TypeTimestamptz, TypeTimestamp, TypeDate,
		TypeUnixSeconds, TypeUnixMilliseconds, TypeUnixMicroseconds, TypeUnixNanoseconds:
		return true
	}
	return false
}

// Validate reports a rule that cannot be used.
func (r *Rule) Validate() error {
	if r.Table == "" {
		return fmt.Errorf("table name is empty")
	}
	switch r.RuleKind() {
	case KindColumn:
		if !validColumnType(r.ColumnType) {
			return fmt.Errorf("%s: unknown column type %q", r.QualifiedName(), r.ColumnType)
		}
	case KindDerived:
		if r.BaseColumn == "" {
			return fmt.Errorf("%s: derived rule needs a base column", r.QualifiedName())
		}
		if (r.IntervalColumn == "") == (r.ExpireAfter == 0) {
			return fmt.Errorf("%s: derived rule needs exactly one of expire_after and interval_column", r.QualifiedName())
		}
		if r.ExpireAfter < 0 {
			return fmt.Errorf("%s: expire_after must be positive", r.QualifiedName())
		}
	case KindSidecar:
		if r.SidecarTable == "" || len(r.KeyColumns) == 0 {
			return fmt.Errorf("%s: sidecar rule needs a registry table and key columns", r.QualifiedName())
		}
	case KindNone:
		if len(r.Columns) == 0 {
			return fmt.Errorf("%s: a table with no row rule needs expiring columns", r.QualifiedName())
		}
		if r.Column != "" || r.ColumnType != "" || r.BaseColumn != "" || r.ExpireAfter != 0 || r.IntervalColumn != "" ||
			r.IntervalSeconds || r.SidecarSchema != "" || r.SidecarTable != "" || len(r.KeyColumns) > 0 ||
			r.DefaultTTL != 0 || r.RefreshOnUpdate {
			return fmt.Errorf("%s: a table with no row rule takes no row expiry settings", r.QualifiedName())
		}
	default:
		return fmt.Errorf("%s: unknown rule kind %q", r.QualifiedName(), r.Kind)
	}
	if r.DefaultTTL < 0 {
		return fmt.Errorf("%s: default_ttl must not be negative", r.QualifiedName())
	}
	return r.validateColumns()
}
