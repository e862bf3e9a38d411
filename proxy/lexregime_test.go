package proxy

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/ttlproxy/ttlproxy/internal/wire"
)

func TestLexRegime(t *testing.T) {
	var x lexRegime
	report := func(name, value string) {
		b, _ := (&pgproto3.ParameterStatus{Name: name, Value: value}).Encode(nil)
		x.note(b[wire.HeaderLen:])
	}
	for _, c := range []struct {
		name, value string
		want        uint32
	}{
		{"standard_conforming_strings", "off", lexBackslash},
		{"client_encoding", "SJIS", lexBackslash | lexHighBytes},
		{"TimeZone", "UTC", lexBackslash | lexHighBytes},
		{"standard_conforming_strings", "on", lexHighBytes},
		{"client_encoding", "LATIN1", lexConverted},
		{"client_encoding", "GB18030", lexHighBytes},
		{"client_encoding", "UTF8", 0},
	} {
		report(c.name, c.value)
		if got := x.bits.Load(); got != c.want {
			t.Errorf("after %s=%s: bits %b, want %b", c.name, c.value, got, c.want)
		}
	}
	for _, c := range []struct {
		sql  string
		risk uint32
	}{
		{"SELECT 1", 0},
		{`SELECT '\'`, lexBackslash},
		{"SELECT 'café'", lexHighBytes},
		{"SELECT E'\x95\\'", lexBackslash | lexHighBytes},
	} {
		if got := textRisk(c.sql); got != c.risk {
			t.Errorf("textRisk(%q) = %b, want %b", c.sql, got, c.risk)
		}
	}
	for _, c := range []struct {
		risk, bits uint32
		nonASCII   bool
		want       error
	}{
		{lexBackslash, lexHighBytes, false, nil},
		{lexHighBytes, lexHighBytes, false, errLexEncoding},
		{lexBackslash | lexHighBytes, lexBackslash, false, errLexBackslash},
		{lexHighBytes, lexConverted, false, nil},
		{lexHighBytes, lexConverted, true, errLexConverted},
	} {
		if got := lexRefusal(c.risk, c.bits, c.nonASCII); !errors.Is(got, c.want) || (got == nil) != (c.want == nil) {
			t.Errorf("lexRefusal(%b, %b, %v) = %v, want %v", c.risk, c.bits, c.nonASCII, got, c.want)
		}
	}
}

func TestBackslashOutsideEscapes(t *testing.T) {
	for _, c := range []struct {
		sql  string
		want bool
	}{
		{`SELECT '\', ', note FROM sessions --'`, true},
		{`SELECT N'\'`, true},
		{`SELECT date'\'`, true},
		{`SELECT 'a' '\'`, true},
		{`SELECT E'\'', note FROM sessions`, false},
		{`SELECT e'\\'`, false},
		{`SELECT U&'d\0061t\+000061' AS U&"d\0061t\+000061"`, false},
		{`SELECT $$\$$, $a$ ' \ $a$`, false},
		{`SELECT 1 -- \`, false},
		{`SELECT /* /* \ */ ' */ 1`, false},
		{`SELECT /* /* \ */ 1`, true},
		{`SELECT "a\b"`, false},
		{`SELECT B'\', X'\'`, false},
		{`SELECT a$b, $1 \`, true},
		{`SELECT E'\`, true},
		{`SELECT 'abc`, true},
		{`SELECT ee'\'`, true},
	} {
		if got := backslashOutsideEscapes(c.sql); got != c.want {
			t.Errorf("backslashOutsideEscapes(%q) = %v, want %v", c.sql, got, c.want)
		}
	}
}
