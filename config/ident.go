package config

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// maxIdentLen is PostgreSQL's NAMEDATALEN-1: longer names are truncated by
// the server, so a longer name in the file could never match.
const maxIdentLen = 63

// parseIdent parses one SQL identifier the way PostgreSQL's scanner reads it:
// "quoted" keeps its case ("" is a literal quote); unquoted is folded to lower
// case (ASCII only, as the server does for multi-byte encodings).
func parseIdent(s string) (string, error) {
	name, rest, err := scanIdent(s)
	if err != nil {
		return "", err
	}
	if rest != "" {
		return "", fmt.Errorf("unexpected %q after identifier", rest)
	}
	return name, nil
}

// parseQualified parses "schema.table" or "table"; an unqualified name gets
// defaultSchema.
func parseQualified(s, defaultSchema string) (schema, name string, err error) {
	first, rest, err := scanIdent(s)
	if err != nil {
		return "", "", err
	}
	if rest == "" {
		return defaultSchema, first, nil
	}
	if rest[0] != '.' {
		return "", "", fmt.Errorf("unexpected %q after identifier", rest)
	}
	second, rest, err := scanIdent(rest[1:])
	if err != nil {
		return "", "", err
	}
	if rest != "" {
		if rest[0] == '.' {
			return "", "", errors.New("too many dotted parts: want schema.table")
		}
		return "", "", fmt.Errorf("unexpected %q after identifier", rest)
	}
	return first, second, nil
}

// scanIdent reads one identifier from the start of s and returns it with the
// unread remainder.
func scanIdent(s string) (name, rest string, err error) {
	if s == "" {
		return "", "", errors.New("empty name")
	}
	if s[0] == '"' {
		var b strings.Builder
		for i := 1; i < len(s); i++ {
			if s[i] != '"' {
				b.WriteByte(s[i])
				continue
			}
			if i+1 < len(s) && s[i+1] == '"' {
				b.WriteByte('"')
				i++
				continue
			}
			if b.Len() == 0 {
				return "", "", errors.New("empty quoted name")
			}
			if err := checkLen(b.String()); err != nil {
				return "", "", err
			}
			return b.String(), s[i+1:], nil
		}
		return "", "", errors.New("unterminated quoted name")
	}
	i := 0
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if !identRune(r, i == 0) {
			break
		}
		i += size
	}
	if i == 0 {
		return "", "", fmt.Errorf("invalid character %q in name", firstRune(s))
	}
	name = ttl.FoldIdent(s[:i])
	if err := checkLen(name); err != nil {
		return "", "", err
	}
	return name, s[i:], nil
}

// identRune reports whether r may appear in an unquoted identifier: letters,
// underscore and any non-ASCII character, then also digits and '$'.
func identRune(r rune, first bool) bool {
	switch {
	case r == utf8.RuneError:
		return false
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r == '_', r >= 0x80:
		return true
	case r >= '0' && r <= '9', r == '$':
		return !first
	}
	return false
}

func firstRune(s string) rune {
	r, _ := utf8.DecodeRuneInString(s)
	return r
}

func checkLen(name string) error {
	if len(name) > maxIdentLen {
		return fmt.Errorf("name longer than %d bytes", maxIdentLen)
	}
	return nil
}
