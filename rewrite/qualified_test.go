package rewrite

import (
	"strings"
	"testing"
	"time"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// TestPredicatesQualified: every function, operator and type the live and
// expired conditions, the stamped expiries and the column values name is
// pg_catalog's, so that a schema the client puts before pg_catalog in
// search_path cannot replace one (now(), >=, +, a type).
func TestPredicatesQualified(t *testing.T) {
	var rules []ttl.Rule
	for _, typ := range []ttl.ColumnType{ttl.TypeTimestamptz, ttl.TypeTimestamp, ttl.TypeDate,
		ttl.TypeUnixSeconds, ttl.TypeUnixMilliseconds, ttl.TypeUnixMicroseconds, ttl.TypeUnixNanoseconds} {
		rules = append(rules, ttl.Rule{Table: "t", ColumnType: typ})
	}
	rules = append(rules,
		ttl.Rule{Table: "t", Kind: ttl.KindDerived, BaseColumn: "b", ExpireAfter: time.Hour},
		ttl.Rule{Table: "t", Kind: ttl.KindDerived, BaseColumn: "b", IntervalColumn: "i"},
		ttl.Rule{Table: "t", Kind: ttl.KindDerived, BaseColumn: "b", IntervalColumn: "i", IntervalSeconds: true},
		ttl.Rule{Table: "t", Kind: ttl.KindSidecar, SidecarTable: "r", KeyColumns: []string{"a", "b"}},
	)
	for _, r := range rules {
		for _, at := range []string{ttl.Now, "$1::pg_catalog.timestamptz"} {
			for _, e := range []string{r.LiveCondition(`"t"`, at), r.ExpiredCondition(`"t"`, at),
				r.ExpiryValue(time.Hour), r.StampValue(90 * time.Second), r.RefreshValue(`"t"`, time.Hour)} {
				checkQualified(t, e)
			}
		}
		c := ttl.ColumnRule{Column: "c", ExpiresAtColumn: "e", ColumnType: r.ColumnType}
		if r.RuleKind() == ttl.KindDerived {
			c = ttl.ColumnRule{Column: "c", BaseColumn: "b", ExpireAfter: time.Hour}
		}
		checkQualified(t, c.ValueExpr(&r, `"t"`, "integer"))
	}
}

// checkQualified fails unless every name expr calls or casts to is
// qualified with pg_catalog.
func checkQualified(t *testing.T, expr string) {
	t.Helper()
	tree, err := pg.Parse("SELECT " + expr)
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	var walk func(m protoreflect.Message)
	walk = func(m protoreflect.Message) {
		var names []*pg.Node
		switch x := m.Interface().(type) {
		case *pg.FuncCall:
			names = x.Funcname
		case *pg.A_Expr:
			names = x.Name
		case *pg.TypeName:
			names = x.Names
		}
		if len(names) > 0 && (len(names) < 2 || names[0].GetString_().GetSval() != "pg_catalog") {
			var parts []string
			for _, n := range names {
				parts = append(parts, n.GetString_().GetSval())
			}
			t.Errorf("%s: names %s unqualified", expr, strings.Join(parts, "."))
		}
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			switch {
			case fd.Message() == nil || fd.IsMap():
			case fd.IsList():
				for i := 0; i < v.List().Len(); i++ {
					walk(v.List().Get(i).Message())
				}
			default:
				walk(v.Message())
			}
			return true
		})
	}
	walk(tree.ProtoReflect())
}
