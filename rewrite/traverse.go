package rewrite

import (
	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Generic traversal: the reflective walk that finds every subquery and
// table reference in the parts of a statement the structural walk does not
// model.

func (w *walker) genericList(ns []*pg.Node, sc *scope) {
	for _, n := range ns {
		w.generic(n, sc)
	}
}

// generic walks an expression (or any subtree) and treats each query found
// in it as a read. A table reference met outside a query is in a position
// the walker does not understand.
func (w *walker) generic(n *pg.Node, sc *scope) {
	if n == nil || n.Node == nil || w.err != nil {
		return
	}
	w.genericMsg(n.ProtoReflect(), sc, false)
}

// genericMsg walks m; with names set, table references outside queries are
// DDL names (allowed) instead of unknown positions.
func (w *walker) genericMsg(m protoreflect.Message, sc *scope, names bool) {
	walkMessages(m, func(m protoreflect.Message) bool {
		if len(w.unqualified) > 0 {
			if n, ok := m.Interface().(*pg.Node); ok {
				if cr := n.GetColumnRef(); cr != nil {
					w.unqualify(cr)
				}
			}
		}
		if w.err != nil || isLeaf(m) {
			return false
		}
		switch v := m.Interface().(type) {
		case *pg.SelectStmt:
			w.selectStmt(v, sc)
			return false
		case *pg.MultiAssignRef:
			if isRepeatedSource(v) {
				return false
			}
		case *pg.RangeVar:
			w.mark(v)
			if names {
				return false
			}
			if r := w.ruleFor(v, sc); r != nil {
				w.fail(errUnhandledPosition(r, w.construct))
			}
			return false
		}
		return true
	})
}

// walkMessages calls visit on m and then, depth first in Range order, on the
// messages below it, map fields aside. Where visit returns false, the
// messages below that one are skipped.
func walkMessages(m protoreflect.Message, visit func(protoreflect.Message) bool) {
	// One Range callback serves the whole walk rather than a new closure
	// per message: every parsed statement is walked this way.
	var walk func(protoreflect.Message)
	field := func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Message() == nil || fd.IsMap() {
			return true
		}
		if fd.IsList() {
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				walk(l.Get(i).Message())
			}
			return true
		}
		walk(v.Message())
		return true
	}
	walk = func(m protoreflect.Message) {
		if visit(m) {
			m.Range(field)
		}
	}
	walk(m)
}

// isLeaf reports nodes that by their schema hold no table reference and no
// query, so walks skip them without reflection.
func isLeaf(m protoreflect.Message) bool {
	switch v := m.Interface().(type) {
	case *pg.Node:
		switch v.Node.(type) {
		case *pg.Node_ColumnRef, *pg.Node_AConst, *pg.Node_ParamRef, *pg.Node_String_, *pg.Node_Integer,
			*pg.Node_Float, *pg.Node_Boolean, *pg.Node_AStar, *pg.Node_BitString, nil:
			return true
		}
	case *pg.ColumnRef, *pg.A_Const, *pg.ParamRef, *pg.String, *pg.Integer, *pg.Float, *pg.Boolean, *pg.A_Star, *pg.BitString:
		return true
	}
	return false
}

// isRepeatedSource reports the second and later columns of a multi-column
// assignment, SET (a, b) = (SELECT …): the parse tree repeats the source
// under each column, and only the first copy has the text's locations to
// itself.
func isRepeatedSource(m *pg.MultiAssignRef) bool {
	return m.Colno > 1
}

// forEachRangeVar calls fn for every table reference under n.
func forEachRangeVar(n *pg.Node, fn func(*pg.RangeVar)) {
	if n == nil || n.Node == nil {
		return
	}
	walkMessages(n.ProtoReflect(), func(m protoreflect.Message) bool {
		if isLeaf(m) {
			return false
		}
		switch v := m.Interface().(type) {
		case *pg.RangeVar:
			fn(v)
			return false
		case *pg.MultiAssignRef:
			if isRepeatedSource(v) {
				return false
			}
		}
		return true
	})
}
