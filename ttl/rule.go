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

// RuleKind returns Kind or KindColumn.
func (r *Rule) RuleKind() Kind {
	if r.Kind == "" {
		return KindColumn
	}
	return r.Kind
}

// Validate reports a rule that cannot be used.
func (r *Rule) Validate() error {
	if r.Table == "" {
		return fmt.Errorf("table name is empty")
	}
	switch r.RuleKind() {
	case KindColumn:
		switch r.ColumnType {
		case "", TypeTimestamptz, TypeTimestamp, TypeDate,
			TypeUnixSeconds, TypeUnixMilliseconds, TypeUnixMicroseconds, TypeUnixNanoseconds:
		default:
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
	default:
		return fmt.Errorf("%s: unknown rule kind %q", r.QualifiedName(), r.Kind)
	}
	if r.DefaultTTL < 0 {
		return fmt.Errorf("%s: default_ttl must not be negative", r.QualifiedName())
	}
	return nil
}
