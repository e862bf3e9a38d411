package rewrite

import (
	"fmt"
	"strconv"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// ttlproxy.ttl is a custom setting: the server accepts any text for it, and
// the proxy reads it back (ttl.ParseTTLSetting) only to find it unusable, after
// which stamping falls back to each rule's default_ttl without the client
// knowing. So a literal value is checked here, where the client still gets
// the error: SET [SESSION|LOCAL] ttlproxy.ttl {TO|=} value (also in ALTER
// ROLE/DATABASE/SYSTEM … SET and a function's SET clause) and
// set_config('ttlproxy.ttl', 'value', …).

// ttlSettingWord is the cheap check for statements that may set
// ttlproxy.ttl: the word is present whether the name is written
// ttlproxy.ttl, "ttlproxy"."ttl" or ttlproxy . ttl.
const ttlSettingWord = "ttlproxy"

// ttlSettingName is the setting's name; setting names are case-insensitive.
const ttlSettingName = "ttlproxy.ttl"

// mentionsTTLSetting reports whether sql may name the ttlproxy.ttl setting.
// It does not allocate.
func mentionsTTLSetting(sql string) bool {
	return indexFold(sql, ttlSettingWord) >= 0
}

// checkSettings rejects a statement that sets ttlproxy.ttl to a literal value
// ttl.ParseTTLSetting does not accept. read reports that it found a SET or a
// call that may be set_config, whose literal arguments decide the outcome.
func checkSettings(n *pg.Node) (err *Error, read bool) {
	if n == nil || n.Node == nil {
		return nil, false
	}
	walkMessages(n.ProtoReflect(), func(m protoreflect.Message) bool {
		if err != nil || isLeaf(m) {
			return false
		}
		switch v := m.Interface().(type) {
		case *pg.VariableSetStmt:
			read = true
			err = checkVariableSet(v)
		case *pg.FuncCall:
			if isSetConfigName(v) {
				read = true
			}
			err = checkSetConfig(v)
		}
		return err == nil
	})
	return err, read
}

// isSetConfigName reports a call of set_config or pg_catalog.set_config.
func isSetConfigName(f *pg.FuncCall) bool {
	switch len(f.Funcname) {
	case 1:
	case 2:
		if f.Funcname[0].GetString_().GetSval() != "pg_catalog" {
			return false
		}
	default:
		return false
	}
	return f.Funcname[len(f.Funcname)-1].GetString_().GetSval() == "set_config"
}

// checkVariableSet checks SET ttlproxy.ttl = value. SET … TO DEFAULT, FROM
// CURRENT and RESET pass: they restore a value that was checked, or none.
func checkVariableSet(v *pg.VariableSetStmt) *Error {
	if v.Kind != pg.VariableSetKind_VAR_SET_VALUE || !strings.EqualFold(v.Name, ttlSettingName) {
		return nil
	}
	if len(v.Args) != 1 {
		return errTTLSetting("SET ttlproxy.ttl takes only one value")
	}
	value, ok := constText(v.Args[0])
	if !ok {
		return errTTLSetting("invalid value for ttlproxy.ttl: the proxy accepts only a literal value")
	}
	return checkTTLValue(value)
}

// checkSetConfig checks set_config('ttlproxy.ttl', 'value', is_local) with
// literal arguments, positional or named. A value given by a parameter or an
// expression cannot be checked here and passes.
func checkSetConfig(f *pg.FuncCall) *Error {
	if !isSetConfigName(f) || len(f.Args) < 2 {
		return nil
	}
	var name, value *pg.Node
	for i, a := range f.Args {
		if na := a.GetNamedArgExpr(); na != nil {
			switch na.Name {
			case "setting_name":
				name = na.Arg
			case "new_value":
				value = na.Arg
			}
			continue
		}
		switch i {
		case 0:
			name = a
		case 1:
			value = a
		}
	}
	if n, ok := stringConst(name); !ok || !strings.EqualFold(n, ttlSettingName) {
		return nil
	}
	v, ok := stringConst(value)
	if !ok {
		return nil
	}
	return checkTTLValue(v)
}

// checkTTLValue rejects a value ttl.ParseTTLSetting does not accept.
func checkTTLValue(value string) *Error {
	if _, err := ttl.ParseTTLValue(value); err != nil {
		return errTTLSetting(fmt.Sprintf("invalid value for ttlproxy.ttl: %q: %v", value, err))
	}
	return nil
}

// constText returns the text the server stores for a SET argument.
func constText(n *pg.Node) (string, bool) {
	c := n.GetAConst()
	if c == nil || c.Isnull {
		return "", false
	}
	switch v := c.Val.(type) {
	case *pg.A_Const_Sval:
		return v.Sval.GetSval(), true
	case *pg.A_Const_Ival:
		return strconv.FormatInt(int64(v.Ival.GetIval()), 10), true
	case *pg.A_Const_Fval:
		return v.Fval.GetFval(), true
	case *pg.A_Const_Boolval:
		if v.Boolval.GetBoolval() {
			return "on", true
		}
		return "off", true
	}
	return "", false
}

// stringConst returns the value of a string literal, possibly cast
// ('…'::text); ok is false for anything else, NULL included.
func stringConst(n *pg.Node) (string, bool) {
	if tc := n.GetTypeCast(); tc != nil {
		n = tc.Arg
	}
	c := n.GetAConst()
	if c == nil || c.Isnull {
		return "", false
	}
	if s, ok := c.Val.(*pg.A_Const_Sval); ok {
		return s.Sval.GetSval(), true
	}
	return "", false
}

// showTTLQuery answers SHOW ttlproxy.ttl. The server knows a custom setting
// only once something has set it, so a plain SHOW would fail with 42704 in a
// session that never did; this reads it the same way and shows "" (each
// table's default_ttl) when unset. The result column is named like SHOW's;
// the command tag is SELECT 1 instead of SHOW.
const showTTLQuery = `SELECT COALESCE(pg_catalog.current_setting('ttlproxy.ttl', true), '') AS "ttlproxy.ttl"`

// showTTLEdit returns the edit that replaces a SHOW ttlproxy.ttl statement
// (its whole span after leading white space; leading comments go) with showTTLQuery.
func showTTLEdit(sql string, raw *pg.RawStmt) (edit, bool) {
	v, ok := raw.GetStmt().GetNode().(*pg.Node_VariableShowStmt)
	if !ok || !strings.EqualFold(v.VariableShowStmt.GetName(), ttlSettingName) {
		return edit{}, false
	}
	start, end := int(raw.StmtLocation), len(sql)
	if raw.StmtLen > 0 {
		end = start + int(raw.StmtLen)
	}
	for start < end && strings.IndexByte(" \t\r\n\f", sql[start]) >= 0 {
		start++
	}
	return edit{start: start, end: end, text: showTTLQuery}, true
}
