package ttl

import "strings"

// Identifier and literal quoting and case folding, as PostgreSQL's
// quote_ident, quote_literal and downcase_identifier (scansup.c) do them.

// QuoteIdent quotes an identifier the way PostgreSQL's quote_ident does when
// quoting is needed: always quoting is also valid, and simpler to get right.
func QuoteIdent(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// QuoteLiteral quotes s as an escape string constant (E'…'), which reads the
// same whatever the server's standard_conforming_strings says.
func QuoteLiteral(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	s = strings.ReplaceAll(s, `'`, `''`)
	return "E'" + s + "'"
}

// FoldIdent folds ASCII letters to lower case and leaves every other byte as
// it is, as PostgreSQL's downcase_identifier does for an unquoted identifier
// in a multibyte encoding. It allocates only when s has an upper-case letter.
func FoldIdent(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if 'A' <= b[j] && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}
