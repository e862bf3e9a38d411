package config

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// Keys of a tables[].columns[] entry: an expiring column and its expiry
// (docs/design/column-ttl.md).
var columnKeys = []struct{ key string }{
	{"column"},
	{"expires_at_column"},
	{"column_type"},
	{"base_column"},
	{"expire_after"},
	{"default_ttl"},
	{"refresh_on_update"},
}

// parseColumns reads tables[].columns into r.Columns, after the row rule
// (whose columns an expiring column may not be).
func parseColumns(v field, r *ttl.Rule) error {
	if isNull(v.val) {
		return nil
	}
	items, err := v.list()
	if err != nil {
		return err
	}
	if len(items) == 0 {
		return fmt.Errorf("%s: must name at least one column (or leave the key out)", v.path)
	}
	at := map[string]string{} // expiring column → its entry's path
	for _, item := range items {
		c, err := parseTableColumn(item, r)
		if err != nil {
			return err
		}
		if prev, dup := at[c.Column]; dup {
			return fmt.Errorf("%s.column: %s is already listed in %s", item.path, c.Column, prev)
		}
		at[c.Column] = item.path
		r.Columns = append(r.Columns, c)
	}
	for i := range r.Columns {
		e := r.Columns[i].Expiry(r)
		for _, rc := range e.RowColumns() {
			if p, ok := at[rc]; ok {
				return fmt.Errorf("%s.column: %s is the expiry of %s, which cannot itself expire", p, rc, items[i].path)
			}
		}
	}
	return nil
}

// parseTableColumn reads one tables[].columns[] entry of the table r.
func parseTableColumn(item field, r *ttl.Rule) (ttl.ColumnRule, error) {
	var c ttl.ColumnRule
	known := make([]string, len(columnKeys))
	for i, k := range columnKeys {
		known[i] = k.key
	}
	f, err := mapping(item.val, item.path, known...)
	if err != nil {
		return c, err
	}
	if !f.has("column") {
		return c, fmt.Errorf("%s.column: required", item.path)
	}
	if c.Column, err = ident(f["column"]); err != nil {
		return c, err
	}
	if slices.Contains(r.RowColumns(), c.Column) {
		return c, fmt.Errorf("%s: %s is a column the table's %s rule reads", f["column"].path, c.Column, r.RuleKind())
	}

	exp, hasExp := f["expires_at_column"]
	base, hasBase := f["base_column"]
	switch {
	case hasExp && hasBase:
		return c, fmt.Errorf("%s: not allowed together with expires_at_column (give one of them)", base.path)
	case !hasExp && !hasBase:
		return c, fmt.Errorf("%s.expires_at_column: required (or base_column with expire_after)", item.path)
	case hasExp:
		if c.ExpiresAtColumn, err = ident(exp); err != nil {
			return c, err
		}
		if c.ExpiresAtColumn == c.Column {
			return c, fmt.Errorf("%s: must differ from column", exp.path)
		}
		c.ColumnType = ttl.TypeTimestamptz
		if x, ok := f["column_type"]; ok {
			s, err := x.str()
			if err != nil {
				return c, err
			}
			c.ColumnType = ttl.ColumnType(s)
			if !slices.Contains(columnTypes, c.ColumnType) {
				names := make([]string, len(columnTypes))
				for i, t := range columnTypes {
					names[i] = string(t)
				}
				return c, fmt.Errorf("%s: unknown column type %q (want one of %s)", x.path, s, strings.Join(names, ", "))
			}
		}
		if x, ok := f["expire_after"]; ok {
			return c, fmt.Errorf("%s: only allowed with base_column", x.path)
		}
	default:
		if c.BaseColumn, err = ident(base); err != nil {
			return c, err
		}
		if c.BaseColumn == c.Column {
			return c, fmt.Errorf("%s: must differ from column", base.path)
		}
		x, ok := f["expire_after"]
		if !ok {
			return c, fmt.Errorf("%s.expire_after: required with base_column", item.path)
		}
		if c.ExpireAfter, err = x.positiveDuration(); err != nil {
			return c, err
		}
		for _, k := range []string{"column_type", "default_ttl", "refresh_on_update"} {
			if x, ok := f[k]; ok {
				return c, fmt.Errorf("%s: only allowed with expires_at_column (a base column's value lives exactly expire_after)", x.path)
			}
		}
	}

	if x, ok := f["default_ttl"]; ok {
		if c.DefaultTTL, err = x.positiveDuration(); err != nil {
			return c, err
		}
	}
	if x, ok := f["refresh_on_update"]; ok {
		if c.RefreshOnUpdate, err = x.boolean(); err != nil {
			return c, err
		}
		if c.RefreshOnUpdate && c.DefaultTTL == 0 {
			return c, fmt.Errorf("%s: needs default_ttl (the new expiry is now() + default_ttl)", x.path)
		}
	}
	return c, nil
}
