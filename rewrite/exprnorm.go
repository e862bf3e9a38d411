package rewrite

import (
	"strconv"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Expressions compared as pg_get_viewdef prints them: the proxy's own
// expressions, parsed from the text it writes, against a view definition's,
// parsed from the server's deparse of the stored tree (colviews.go).

// normalise returns a copy of n without what pg_get_viewdef's printing
// changes and the expression's meaning does not: locations, the
// pg_catalog qualification of functions, operators and types, the syntax a function
// was called with, casts of constants (`'UTC'::text`, `(1000000)::numeric`)
// and other casts to numeric, and the spelling of an interval constant (`'720:00:00'` for `'2592000
// seconds'`, compared as months, days and microseconds).
func normalise(n *pg.Node) *pg.Node {
	if n == nil {
		return nil
	}
	out := proto.Clone(n).(*pg.Node)
	normaliseMessage(out.ProtoReflect())
	return out
}

func normaliseMessage(m protoreflect.Message) {
	switch x := m.Interface().(type) {
	case *pg.Node:
		if tc := x.GetTypeCast(); tc != nil {
			// The implicit cast of an integer to numeric (an expiry column
			// of type numeric compared with the proxy's bigint threshold)
			// is printed; it changes no comparison.
			for typeName(tc.TypeName) == "numeric" && len(tc.TypeName.Typmods) == 0 && tc.Arg.GetAConst() == nil {
				x.Node = tc.Arg.Node
				if tc = x.GetTypeCast(); tc == nil {
					break
				}
			}
		}
		if tc := x.GetTypeCast(); tc != nil {
			if k := tc.Arg.GetAConst(); k != nil {
				if typeName(tc.TypeName) == "interval" && k.GetSval() != nil {
					if canon, ok := intervalCanon(k.GetSval().Sval); ok {
						k.Val = &pg.A_Const_Sval{Sval: &pg.String{Sval: canon}}
					}
				} else {
					x.Node = &pg.Node_AConst{AConst: k}
				}
			}
		}
	case *pg.FuncCall:
		x.Funcname = stripCatalog(x.Funcname)
		x.Funcformat = 0
	case *pg.TypeName:
		x.Names = stripCatalog(x.Names)
	case *pg.A_Expr:
		// OPERATOR(pg_catalog.>=) as the proxy writes it, >= as
		// pg_get_viewdef prints it under search_path pg_catalog.
		x.Name = stripCatalog(x.Name)
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Name() == "location" && fd.Kind() == protoreflect.Int32Kind:
			m.Clear(fd)
		case fd.Message() == nil || fd.IsMap():
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				normaliseMessage(l.Get(i).Message())
			}
		default:
			normaliseMessage(v.Message())
		}
		return true
	})
}

// typeName returns a type's last name.
func typeName(t *pg.TypeName) string {
	if t == nil || len(t.Names) == 0 {
		return ""
	}
	return t.Names[len(t.Names)-1].GetString_().GetSval()
}

// stripCatalog drops a leading pg_catalog from names.
func stripCatalog(names []*pg.Node) []*pg.Node {
	if len(names) > 1 && names[0].GetString_().GetSval() == "pg_catalog" {
		return names[1:]
	}
	return names
}

// intervalCanon spells the interval constant s (PostgreSQL's input of
// numbers with units, as ttl.IntervalLiteral writes, or the postgres
// IntervalStyle's output, `1 year 2 mons 3 days 04:05:06.5`) as its
// months, days and microseconds; ok is false for anything else.
func intervalCanon(s string) (string, bool) {
	var months, days, micros int64
	fields := strings.Fields(strings.ToLower(s))
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		if strings.Contains(f, ":") {
			us, ok := clockMicros(f)
			if !ok {
				return "", false
			}
			micros += us
			continue
		}
		if i+1 >= len(fields) {
			return "", false
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return "", false
		}
		i++
		switch strings.TrimSuffix(fields[i], "s") {
		case "year":
			months += 12 * n
		case "mon", "month":
			months += n
		case "day":
			days += n
		case "hour":
			micros += n * 3600e6
		case "minute", "min":
			micros += n * 60e6
		case "second", "sec":
			micros += n * 1e6
		case "millisecond":
			micros += n * 1e3
		case "microsecond":
			micros += n
		default:
			return "", false
		}
	}
	return strconv.FormatInt(months, 10) + "m" + strconv.FormatInt(days, 10) + "d" + strconv.FormatInt(micros, 10) + "us", true
}

// clockMicros reads [-]H:MM:SS[.ffffff] as microseconds.
func clockMicros(s string) (int64, bool) {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimLeft(s, "+-")
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return 0, false
	}
	h, err1 := strconv.ParseInt(parts[0], 10, 64)
	m, err2 := strconv.ParseInt(parts[1], 10, 64)
	secs, frac, _ := strings.Cut(parts[2], ".")
	sec, err3 := strconv.ParseInt(secs, 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || len(frac) > 6 {
		return 0, false
	}
	us := int64(0)
	if frac != "" {
		f, err := strconv.ParseInt(frac+strings.Repeat("0", 6-len(frac)), 10, 64)
		if err != nil {
			return 0, false
		}
		us = f
	}
	total := ((h*60+m)*60+sec)*1e6 + us
	if neg {
		total = -total
	}
	return total, true
}
