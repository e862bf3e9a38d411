package proxy

import (
	"errors"
	"strings"
	"sync/atomic"

	"github.com/ttlproxy/ttlproxy/internal/wire"
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
//     Text without a backslash in an ordinary '…' string reads the same
//     either way (backslashOutsideEscapes), and text whose bytes name no
//     TTL table reads none however the server reads it
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

// statementRisk is textRisk with a backslash counted only where its
// reading depends on standard_conforming_strings (backslashOutsideEscapes).
func statementRisk(sql string) uint32 {
	risk := textRisk(sql)
	if risk&lexBackslash != 0 && !backslashOutsideEscapes(sql) {
		risk &^= lexBackslash
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
	b := wire.ErrorResponse(nil, "FATAL", codeFeatureNotSupported,
		"ttlproxy: client encodings SJIS, BIG5, GBK, UHC, GB18030 and JOHAB are not supported",
		"", "Connect with an ASCII-safe client encoding such as UTF8: in SJIS, BIG5, GBK, UHC, GB18030 and JOHAB "+
			"a character's second byte may read as an ASCII one, and ttlproxy reads statements as the server would.")
	return b
}

// backslashOutsideEscapes reports whether sql, read as the server reads it
// with standard_conforming_strings on, holds a backslash anywhere but in
// the places whose reading does not depend on the setting: E'…' strings,
// dollar quotes, comments, quoted identifiers (U&"…" too), B'…' and X'…'
// strings, and U&'…' strings, which the server refuses outright while the
// setting is off. The two readings agree up to the first ordinary '…'
// (or N'…') string holding a backslash, so a text without one reads the
// same either way. It errs toward true: an unterminated token, or a
// backslash outside any token, counts.
func backslashOutsideEscapes(sql string) bool {
	identByte := func(c byte) bool {
		return c == '_' || c == '$' || c >= 0x80 || 'a' <= c|0x20 && c|0x20 <= 'z' || '0' <= c && c <= '9'
	}
	n := len(sql)
	for i := 0; i < n; {
		c := sql[i]
		prevIdent := i > 0 && identByte(sql[i-1])
		switch {
		case c == '\\':
			return true
		case c == '-' && i+1 < n && sql[i+1] == '-':
			for i < n && sql[i] != '\n' && sql[i] != '\r' {
				i++
			}
		case c == '/' && i+1 < n && sql[i+1] == '*':
			depth := 0
			for i < n {
				switch {
				case i+1 < n && sql[i] == '/' && sql[i+1] == '*':
					depth++
					i += 2
				case i+1 < n && sql[i] == '*' && sql[i+1] == '/':
					depth--
					i += 2
				default:
					i++
				}
				if depth == 0 {
					break
				}
			}
			if depth > 0 {
				return true
			}
		case c == '"':
			j := strings.IndexByte(sql[i+1:], '"')
			if j < 0 {
				return true
			}
			i += j + 2 // "" continues the identifier as a new one: same bytes
		case c == '\'':
			// An ordinary string (standard_conforming_strings on: '' is a
			// quote, a backslash an ordinary byte).
			j := i + 1
			for j < n && sql[j] != '\'' {
				if sql[j] == '\\' {
					return true
				}
				j++
			}
			if j >= n {
				return true
			}
			i = j + 1
		case !prevIdent && (c|0x20 == 'e' || c|0x20 == 'b' || c|0x20 == 'x') && i+1 < n && sql[i+1] == '\'':
			j, esc := i+2, c|0x20 == 'e'
			for j < n && sql[j] != '\'' {
				if esc && sql[j] == '\\' {
					j++
				}
				j++
			}
			if j >= n {
				return true
			}
			i = j + 1
		case !prevIdent && c|0x20 == 'u' && i+2 < n && sql[i+1] == '&' && sql[i+2] == '\'':
			j := strings.IndexByte(sql[i+3:], '\'')
			if j < 0 {
				return true
			}
			i += j + 4
		case !prevIdent && c == '$' && i+1 < n && (sql[i+1] == '$' || sql[i+1] < '0' || sql[i+1] > '9'):
			k := i + 1
			for k < n && sql[k] != '$' && identByte(sql[k]) {
				k++
			}
			if k >= n || sql[k] != '$' {
				i++
				continue
			}
			delim := sql[i : k+1]
			end := strings.Index(sql[k+1:], delim)
			if end < 0 {
				return true
			}
			i = k + 1 + end + len(delim)
		case identByte(c):
			for i < n && identByte(sql[i]) {
				i++
			}
		default:
			i++
		}
	}
	return false
}
