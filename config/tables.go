package config

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// Keys of a tables[] entry, and which rule kinds each belongs to (nil: all).
var tableKeys = []struct {
	key   string
	kinds []ttl.Kind
}{
	{"table", nil},
	{"rule", nil},
	{"default_ttl", rowKinds},
	{"refresh_on_update", rowKinds},
	{"create_index", []ttl.Kind{ttl.KindColumn, ttl.KindDerived, ttl.KindNone}},
	{"column", []ttl.Kind{ttl.KindColumn}},
	{"column_type", []ttl.Kind{ttl.KindColumn}},
	{"base_column", []ttl.Kind{ttl.KindDerived}},
	{"expire_after", []ttl.Kind{ttl.KindDerived}},
	{"interval_column", []ttl.Kind{ttl.KindDerived}},
	{"interval_unit", []ttl.Kind{ttl.KindDerived}},
	{"sidecar_table", []ttl.Kind{ttl.KindSidecar}},
	{"key_columns", []ttl.Kind{ttl.KindSidecar}},
	{"columns", nil},
}

// rowKinds are the rule kinds with a row rule: every kind but none.
var rowKinds = []ttl.Kind{ttl.KindColumn, ttl.KindDerived, ttl.KindSidecar}

var columnTypes = []ttl.ColumnType{
	ttl.TypeTimestamptz, ttl.TypeTimestamp, ttl.TypeDate,
	ttl.TypeUnixSeconds, ttl.TypeUnixMilliseconds,
	ttl.TypeUnixMicroseconds, ttl.TypeUnixNanoseconds,
}

func parseTables(v field) ([]ttl.Rule, error) {
	if isNull(v.val) {
		return nil, nil
	}
	items, err := v.list()
	if err != nil {
		return nil, err
	}
	rules := make([]ttl.Rule, 0, len(items))
	seen := map[string]int{}
	for i, item := range items {
		r, err := parseTable(item)
		if err != nil {
			return nil, err
		}
		name := r.QualifiedName()
		if j, dup := seen[name]; dup {
			return nil, fmt.Errorf("%s.table: %s is already configured in %s[%d]", item.path, name, v.path, j)
		}
		seen[name] = i
		rules = append(rules, r)
	}
	for i := range rules {
		r := &rules[i]
		if r.RuleKind() != ttl.KindSidecar {
			continue
		}
		side := r.SidecarSchema + "." + r.SidecarTable
		if j, ok := seen[side]; ok {
			return nil, fmt.Errorf("%s[%d].sidecar_table: %s is itself a TTL table (%s[%d])", v.path, i, side, v.path, j)
		}
	}
	return rules, nil
}

func parseTable(item field) (ttl.Rule, error) {
	var r ttl.Rule
	known := make([]string, len(tableKeys))
	for i, k := range tableKeys {
		known[i] = k.key
	}
	f, err := mapping(item.val, item.path, known...)
	if err != nil {
		return r, err
	}

	if !f.has("table") {
		return r, fmt.Errorf("%s.table: required", item.path)
	}
	if r.Schema, r.Table, err = qualified(f["table"], "public"); err != nil {
		return r, err
	}

	r.Kind = ttl.KindColumn
	if x, ok := f["rule"]; ok {
		s, err := x.str()
		if err != nil {
			return r, err
		}
		switch k := ttl.Kind(s); k {
		case ttl.KindColumn, ttl.KindDerived, ttl.KindSidecar, ttl.KindNone:
			r.Kind = k
		default:
			return r, fmt.Errorf("%s: unknown rule %q (want column, derived, sidecar or none)", x.path, s)
		}
	}
	for _, k := range tableKeys {
		x, ok := f[k.key]
		if !ok || k.kinds == nil || slices.Contains(k.kinds, r.Kind) {
			continue
		}
		if r.Kind == ttl.KindNone {
			return r, fmt.Errorf("%s: not allowed with rule none (a table with no row rule has no row expiry)", x.path)
		}
		return r, fmt.Errorf("%s: not allowed with rule %s (it belongs to rule %s)", x.path, r.Kind, k.kinds[0])
	}
	if x, ok := f["columns"]; r.Kind == ttl.KindNone && (!ok || isNull(x.val)) {
		return r, fmt.Errorf("%s.columns: required with rule none (the table's expiring columns)", item.path)
	}

	if x, ok := f["default_ttl"]; ok {
		if r.DefaultTTL, err = x.positiveDuration(); err != nil {
			return r, err
		}
	}
	if x, ok := f["refresh_on_update"]; ok {
		if r.RefreshOnUpdate, err = x.boolean(); err != nil {
			return r, err
		}
		if r.RefreshOnUpdate && r.DefaultTTL == 0 {
			return r, fmt.Errorf("%s: needs default_ttl (the new expiry is now() + default_ttl)", x.path)
		}
	}

	if x, ok := f["create_index"]; ok {
		if r.CreateIndex, err = x.boolean(); err != nil {
			return r, err
		}
	}

	switch r.Kind {
	case ttl.KindColumn:
		err = parseColumnRule(item, f, &r)
	case ttl.KindDerived:
		err = parseDerivedRule(item, f, &r)
	case ttl.KindSidecar:
		err = parseSidecarRule(item, f, &r)
	}
	if err != nil {
		return r, err
	}
	if x, ok := f["columns"]; ok {
		if err := parseColumns(x, &r); err != nil {
			return r, err
		}
	}
	if err := r.Validate(); err != nil {
		return r, fmt.Errorf("%s: %w", item.path, err)
	}
	return r, nil
}

func parseColumnRule(item field, f fields, r *ttl.Rule) error {
	r.Column = "expires_at"
	r.ColumnType = ttl.TypeTimestamptz
	var err error
	if x, ok := f["column"]; ok {
		if r.Column, err = ident(x); err != nil {
			return err
		}
	}
	if x, ok := f["column_type"]; ok {
		s, err := x.str()
		if err != nil {
			return err
		}
		r.ColumnType = ttl.ColumnType(s)
		if !slices.Contains(columnTypes, r.ColumnType) {
			names := make([]string, len(columnTypes))
			for i, t := range columnTypes {
				names[i] = string(t)
			}
			return fmt.Errorf("%s: unknown column type %q (want one of %s)", x.path, s, strings.Join(names, ", "))
		}
	}
	return nil
}

func parseDerivedRule(item field, f fields, r *ttl.Rule) error {
	var err error
	if !f.has("base_column") {
		return fmt.Errorf("%s.base_column: required with rule derived", item.path)
	}
	if r.BaseColumn, err = ident(f["base_column"]); err != nil {
		return err
	}
	after, hasAfter := f["expire_after"]
	ivl, hasIvl := f["interval_column"]
	switch {
	case hasAfter && hasIvl:
		return fmt.Errorf("%s: not allowed together with expire_after (give one of them)", ivl.path)
	case !hasAfter && !hasIvl:
		return fmt.Errorf("%s.expire_after: required with rule derived (or interval_column)", item.path)
	case hasAfter:
		if r.ExpireAfter, err = after.positiveDuration(); err != nil {
			return err
		}
		if x, ok := f["interval_unit"]; ok {
			return fmt.Errorf("%s: only allowed with interval_column", x.path)
		}
		if x, ok := f["default_ttl"]; ok {
			return fmt.Errorf("%s: not allowed with expire_after (every row lives exactly expire_after)", x.path)
		}
	default:
		if r.IntervalColumn, err = ident(ivl); err != nil {
			return err
		}
		if r.IntervalColumn == r.BaseColumn {
			return fmt.Errorf("%s: must differ from base_column", ivl.path)
		}
		if x, ok := f["interval_unit"]; ok {
			s, err := x.str()
			if err != nil {
				return err
			}
			switch s {
			case "interval":
			case "seconds":
				r.IntervalSeconds = true
			default:
				return fmt.Errorf("%s: unknown unit %q (want interval or seconds)", x.path, s)
			}
		}
	}
	return nil
}

func parseSidecarRule(item field, f fields, r *ttl.Rule) error {
	var err error
	if !f.has("sidecar_table") {
		return fmt.Errorf("%s.sidecar_table: required with rule sidecar", item.path)
	}
	// An unqualified registry table lives in the base table's schema.
	if r.SidecarSchema, r.SidecarTable, err = qualified(f["sidecar_table"], r.Schema); err != nil {
		return err
	}
	if r.SidecarSchema == r.Schema && r.SidecarTable == r.Table {
		return fmt.Errorf("%s: must differ from table", f["sidecar_table"].path)
	}
	x, ok := f["key_columns"]
	if !ok {
		return fmt.Errorf("%s.key_columns: required with rule sidecar", item.path)
	}
	names, err := x.strings()
	if err != nil {
		return err
	}
	if len(names) == 0 {
		return fmt.Errorf("%s: must name at least one column", x.path)
	}
	for i, s := range names {
		p := fmt.Sprintf("%s[%d]", x.path, i)
		name, err := parseIdent(s)
		if err != nil {
			return fmt.Errorf("%s: invalid column name %q: %w", p, s, err)
		}
		for _, prev := range r.KeyColumns {
			if prev == name {
				return fmt.Errorf("%s: column %s is listed twice", p, name)
			}
		}
		r.KeyColumns = append(r.KeyColumns, name)
	}
	return nil
}

// ident reads a column name.
func ident(f field) (string, error) {
	s, err := f.str()
	if err != nil {
		return "", err
	}
	name, err := parseIdent(s)
	if err != nil {
		return "", fmt.Errorf("%s: invalid column name %q: %w", f.path, s, err)
	}
	return name, nil
}

// qualified reads a schema.table name.
func qualified(f field, defaultSchema string) (schema, table string, err error) {
	s, err := f.str()
	if err != nil {
		return "", "", err
	}
	schema, table, err = parseQualified(s, defaultSchema)
	if err != nil {
		return "", "", fmt.Errorf("%s: invalid table name %q: %w", f.path, s, err)
	}
	return schema, table, nil
}
