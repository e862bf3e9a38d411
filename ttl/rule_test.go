package ttl

import (
	"testing"
	"time"
)

// TestValidateColumns: Validate refuses column rules built in code that the
// configuration would refuse, and accepts both kinds.
func TestValidateColumns(t *testing.T) {
	ip := ColumnRule{Column: "ip", ExpiresAtColumn: "ip_exp"}
	note := ColumnRule{Column: "note", BaseColumn: "created_at", ExpireAfter: time.Hour}
	tests := []struct {
		name string
		cols []ColumnRule
		want string
	}{
		{"both kinds", []ColumnRule{ip, note}, ""},
		{"unnamed", []ColumnRule{{ExpiresAtColumn: "e"}}, "public.t: expiring column 0 has no name"},
		{"twice", []ColumnRule{ip, ip}, "public.t.ip: listed twice"},
		{"no expiry", []ColumnRule{{Column: "c"}}, "public.t.c: needs exactly one of an expiry column and a base column"},
		{"two expiries", []ColumnRule{{Column: "c", ExpiresAtColumn: "e", BaseColumn: "b", ExpireAfter: time.Hour}}, "public.t.c: needs exactly one of an expiry column and a base column"},
		{"itself", []ColumnRule{{Column: "c", ExpiresAtColumn: "c"}}, "public.t.c: its expiry must be another column"},
		{"no lifetime", []ColumnRule{{Column: "c", BaseColumn: "b"}}, "public.t.c: a base column needs a positive expire_after"},
		{"stamp of derived", []ColumnRule{{Column: "c", BaseColumn: "b", ExpireAfter: time.Hour, DefaultTTL: time.Hour}}, "public.t.c: default_ttl and column_type need an expiry column"},
		{"refresh without ttl", []ColumnRule{{Column: "c", ExpiresAtColumn: "e", RefreshOnUpdate: true}}, "public.t.c: refresh_on_update needs default_ttl"},
		{"bad type", []ColumnRule{{Column: "c", ExpiresAtColumn: "e", ColumnType: "bigint"}}, `public.t.c: unknown column type "bigint"`},
		{"row expiry", []ColumnRule{{Column: "expires_at", ExpiresAtColumn: "e"}}, "public.t.expires_at: the row rule reads this column"},
		{"expiry expires", []ColumnRule{ip, {Column: "ip_exp", ExpiresAtColumn: "x"}}, "public.t.ip_exp: an expiring column cannot be the expiry of expiring column ip"},
	}
	for _, tt := range tests {
		r := Rule{Table: "t", Columns: tt.cols}
		got := ""
		if err := r.Validate(); err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("%s: Validate() = %q, want %q", tt.name, got, tt.want)
		}
	}
	r := Rule{Table: "t", Columns: []ColumnRule{ip, note}}
	if c := r.ExpiringColumn("note"); c == nil || c.Kind() != KindDerived {
		t.Errorf("ExpiringColumn(note) = %+v", c)
	}
	if r.ExpiringColumn("id") != nil {
		t.Error("ExpiringColumn(id) found a rule")
	}
	e := ip.Expiry(&r)
	if got, want := e.LiveCondition(`"t"`, Now), `("t"."ip_exp" IS NULL OR "t"."ip_exp" OPERATOR(pg_catalog.>=) pg_catalog.now())`; got != want {
		t.Errorf("the value's live condition = %s, want %s", got, want)
	}
}

// TestValidateNone: a table with no row rule needs expiring columns and
// takes no row expiry settings; every row is live.
func TestValidateNone(t *testing.T) {
	ip := ColumnRule{Column: "expires_at", ExpiresAtColumn: "ip_exp"}
	tests := []struct {
		name string
		r    Rule
		want string
	}{
		{"columns", Rule{Table: "t", Kind: KindNone, Columns: []ColumnRule{ip}}, ""},
		{"no columns", Rule{Table: "t", Kind: KindNone}, "public.t: a table with no row rule needs expiring columns"},
		{"expiry column", Rule{Table: "t", Kind: KindNone, Column: "e", Columns: []ColumnRule{ip}}, "public.t: a table with no row rule takes no row expiry settings"},
		{"default ttl", Rule{Table: "t", Kind: KindNone, DefaultTTL: time.Hour, Columns: []ColumnRule{ip}}, "public.t: a table with no row rule takes no row expiry settings"},
		{"base column", Rule{Table: "t", Kind: KindNone, BaseColumn: "b", Columns: []ColumnRule{ip}}, "public.t: a table with no row rule takes no row expiry settings"},
		{"registry", Rule{Table: "t", Kind: KindNone, SidecarTable: "r", Columns: []ColumnRule{ip}}, "public.t: a table with no row rule takes no row expiry settings"},
	}
	for _, tt := range tests {
		got := ""
		if err := tt.r.Validate(); err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("%s: Validate() = %q, want %q", tt.name, got, tt.want)
		}
	}
	r := tests[0].r
	if r.HasRowRule() || r.RowColumns() != nil || r.StampColumn() != "" || r.LiveCondition(`"t"`, Now) != "true" {
		t.Errorf("rule none: HasRowRule %v, RowColumns %v, StampColumn %q, LiveCondition %q",
			r.HasRowRule(), r.RowColumns(), r.StampColumn(), r.LiveCondition(`"t"`, Now))
	}
	if !(&Rule{Table: "t"}).HasRowRule() {
		t.Error("HasRowRule = false for the default kind")
	}
}
