package proxy

import (
	"errors"
	"sync/atomic"

	"github.com/ttlproxy/ttlproxy/rewrite"
	"github.com/ttlproxy/ttlproxy/ttl"
)

// The settings under which the server reads a statement's text, and the
// texts the proxy may not read as the server does under them.
//
// The proxy's lexers (the cheap check, the shape lexer, the parse limits)
// and pg_query read text as PostgreSQL does with standard_conforming_strings
// on and an ASCII-safe client encoding. Two settings make the server read
// the same bytes otherwise:
//
//   - standard_conforming_strings off: a backslash escapes the quote that
//     follows it inside an ordinary '…' literal, so `SELECT '\', ', secret
//     FROM sessions --'` reads a table the proxy sees inside a literal.
//     Text without a backslash byte reads the same either way
//     (escape_string_warning only warns; backslash_quote only decides
//     whether the server accepts \' where a backslash escapes).
//   - a client encoding whose characters may end in an ASCII byte:
//     PostgreSQL's client-only encodings SJIS, BIG5, GBK, UHC, GB18030 and
//     JOHAB (docs, "Character Set Support"), where a second byte may be 0x5C
//     (a backslash to the proxy) or a letter, a digit or `;`. The server
//     converts the text before it reads it. Text of ASCII bytes alone reads
//     the same in every encoding PostgreSQL supports for clients.
//   - any other client encoding but UTF8 and SQL_ASCII (LATIN1, WIN1252,
//     …): the server converts the text to UTF-8, so a name the rules spell
//     with a non-ASCII character reads `caf\xe9` as café while the proxy
//     compares bytes. Only with such a name does a non-ASCII byte need
//     refusing (lexConverted).
//
// Both settings are GUC_REPORT: the server reports every change in a
// ParameterStatus, whatever made it (startup packet, options, ALTER ROLE
// or DATABASE … SET, SET, set_config, a function's SET clause), before the
// ReadyForQuery of the exchange that made it. The proxy keys on those
// reports (lexRegime) and refuses the texts it cannot read as the server
// will; a session whose server reports such an encoding at startup is
// refused outright (startupLexRefusal), since its application's text is
// rarely ASCII alone. The server reads each Query's and Parse's text as a
// whole when it arrives, so a change made by one statement of a Query
// applies from the next message on, never inside the same text.
//
// A change reported late is the gap: a statement forwarded while an earlier
// one, whose report has not come yet, may have changed a setting. Such a
// text, when it holds a byte the change would matter for, waits for the
// answers the client is owed (Query, the Parse that starts a batch) or is
// refused (inside a batch after an Execute, whose report only comes with
// the batch's ReadyForQuery).

const (
	// lexBackslash: standard_conforming_strings is off.
	lexBackslash uint32 = 1 << iota
	// lexHighBytes: client_encoding is not ASCII-safe.
	lexHighBytes
	// lexConverted: client_encoding is ASCII-safe but not UTF8 or
	// SQL_ASCII: non-ASCII text is converted before the server reads it.
	lexConverted
)

// lexRegime holds the lex* bits of the settings the server last reported
// for the link's session. Written by the pump relaying the server's
// messages, read by the client pump.
type lexRegime struct{ bits atomic.Uint32 }

// note records the ParameterStatus of body when it reports one of the
// settings.
func (x *lexRegime) note(body []byte) {
	if x == nil {
		return
	}
	if name, value, ok := parseParamStatus(body); ok {
		x.set(string(name), string(value))
	}
}

// set records the reported value of setting name.
func (x *lexRegime) set(name, value string) {
	var mask, bits uint32
	switch name {
	case "standard_conforming_strings":
		mask = lexBackslash
		if value != "on" {
			bits = lexBackslash
		}
	case "client_encoding":
		mask = lexHighBytes | lexConverted
		switch {
		case unsafeClientEncoding(value):
			bits = lexHighBytes
		case value != "UTF8" && value != "SQL_ASCII":
			bits = lexConverted
		}
	default:
		return
	}
	for {
		old := x.bits.Load()
		if x.bits.CompareAndSwap(old, old&^mask|bits) {
			return
		}
	}
}

// unsafeClientEncoding reports PostgreSQL's client-only encodings, named as
// the server reports client_encoding (pg_encoding_to_char).
func unsafeClientEncoding(name string) bool {
	switch name {
	case "SJIS", "BIG5", "GBK", "UHC", "GB18030", "JOHAB":
		return true
	}
	return false
}

// textRisk returns the lex* bits of the settings under which sql could read
// differently to the server: lexBackslash for a backslash byte,
// lexHighBytes for a byte of 0x80 or more.
func textRisk(sql string) uint32 {
	var risk uint32
	for i := 0; i < len(sql); i++ {
		switch c := sql[i]; {
		case c == '\\':
			risk |= lexBackslash
		case c >= 0x80:
			risk |= lexHighBytes
		default:
			continue
		}
		if risk == lexBackslash|lexHighBytes {
			break
		}
	}
	return risk
}

// lexRefusal returns the refusal of a text with risk (textRisk) under the
// reported settings bits, or nil; nonASCII: a rule spells a name with a
// non-ASCII character.
func lexRefusal(risk, bits uint32, nonASCII bool) error {
	switch {
	case risk&bits&lexBackslash != 0:
		return errLexBackslash
	case risk&bits&lexHighBytes != 0:
		return errLexEncoding
	case nonASCII && risk&lexHighBytes != 0 && bits&lexConverted != 0:
		return errLexConverted
	}
	return nil
}

// rulesNameNonASCII reports whether a rule spells a table, schema or
// column name with a non-ASCII character.
func rulesNameNonASCII(rules []ttl.Rule) bool {
	for i := range rules {
		r := &rules[i]
		names := []string{r.Schema, r.Table, r.Column, r.BaseColumn, r.IntervalColumn, r.SidecarSchema, r.SidecarTable}
		names = append(names, r.KeyColumns...)
		for _, c := range r.Columns {
			names = append(names, c.Column, c.ExpiresAtColumn, c.BaseColumn)
		}
		for _, n := range names {
			if textRisk(n)&lexHighBytes != 0 {
				return true
			}
		}
	}
	return false
}

// errUnsafeEncoding ends a session refused at startup (startupLexRefusal).
var errUnsafeEncoding = errors.New("client encoding not supported")

var (
	errLexBackslash = &rewrite.Error{
		Code:    codeFeatureNotSupported,
		Message: "ttlproxy: cannot read a statement containing a backslash while standard_conforming_strings is off",
		Hint:    "SET standard_conforming_strings = on; ttlproxy reads statements as the server does with it on.",
	}
	errLexEncoding = &rewrite.Error{
		Code:    codeFeatureNotSupported,
		Message: "ttlproxy: cannot read a statement containing non-ASCII bytes in this client_encoding",
		Hint: "SET client_encoding = 'UTF8' (or another ASCII-safe encoding): in SJIS, BIG5, GBK, UHC, GB18030 " +
			"and JOHAB a character's second byte may read as an ASCII one.",
	}
	errLexConverted = &rewrite.Error{
		Code: codeFeatureNotSupported,
		Message: "ttlproxy: cannot read a statement containing non-ASCII bytes in a client_encoding other than UTF8 " +
			"while a TTL rule names a table, schema or column with a non-ASCII character",
		Hint: "SET client_encoding = 'UTF8'.",
	}
	errLexPipeline = &rewrite.Error{
		Code: codeFeatureNotSupported,
		Message: "ttlproxy: cannot read a statement containing a backslash or non-ASCII bytes that follows an " +
			"Execute in the same pipeline: it may have changed standard_conforming_strings or client_encoding",
		Hint: "End the pipeline (Sync) before the statement.",
	}
)

// startupLexRefusal is the FATAL ErrorResponse for a session whose server
// reported, at its startup, a client encoding the proxy cannot read
// statements in.
func startupLexRefusal() []byte {
	b := errorResponse(nil, "FATAL", codeFeatureNotSupported,
		"ttlproxy: client encodings SJIS, BIG5, GBK, UHC, GB18030 and JOHAB are not supported",
		"", "Connect with an ASCII-safe client encoding such as UTF8: in SJIS, BIG5, GBK, UHC, GB18030 and JOHAB "+
			"a character's second byte may read as an ASCII one, and ttlproxy reads statements as the server would.")
	return b
}
