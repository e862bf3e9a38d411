package proxy

import (
	"reflect"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/ttlproxy/ttlproxy/internal/wire"
	"github.com/ttlproxy/ttlproxy/rewrite"
)

// TestRedactConstraintDetail: a class 23 ErrorResponse on a TTL table or a
// child loses its DETAIL and keeps every other field; any other error, one
// on another table and one for a bypass session pass unchanged.
func TestRedactConstraintDetail(t *testing.T) {
	rw, err := rewrite.New(testRules, rewrite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cat := rewrite.NewCatalog(rewrite.CatalogData{Children: map[string]string{"public.items_2024": "public.items"}})
	g := &detailGuard{rw: rw, cat: cat}
	msg := func(code, schema, table string) []byte {
		b, err := (&pgproto3.ErrorResponse{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: code,
			Message: "conflicting key value violates exclusion constraint", Detail: "Key (id)=(2) conflicts with existing key (id)=(2).",
			SchemaName: schema, TableName: table, ConstraintName: "c", File: "execIndexing.c", Line: 1, Routine: "r"}).Encode(nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	decode := func(b []byte) *pgproto3.ErrorResponse {
		var e pgproto3.ErrorResponse
		if err := e.Decode(b[wire.HeaderLen:]); err != nil {
			t.Fatalf("decoding %q: %v", b, err)
		}
		return &e
	}
	for _, c := range []struct {
		name, code, schema, table string
		guard                     *detailGuard
		stripped                  bool
	}{
		{"exclusion on a TTL table", "23P01", "public", "items", g, true},
		{"unique on a child", "23505", "public", "items_2024", g, true},
		{"not null", "23502", "public", "items", g, true},
		{"another table", "23505", "public", "other", g, false},
		{"same name, other schema", "23505", "other", "items", g, false},
		{"not class 23", "22P02", "public", "items", g, false},
		{"bypass", "23505", "public", "items", &detailGuard{rw: rw, cat: cat, bypass: true}, false},
		{"no guard", "23505", "public", "items", nil, false},
	} {
		in := msg(c.code, c.schema, c.table)
		got := decode(redactConstraintDetail(c.guard, in, nil))
		want := decode(in)
		if c.stripped {
			want.Detail = ""
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %+v, want %+v", c.name, got, want)
		}
	}
}
