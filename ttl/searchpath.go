package ttl

import (
	"slices"
	"strings"
)

// ParseSearchPath resolves a search_path setting into schema names as
// PostgreSQL does (SplitIdentifierString, then "$user"): the names of
// SplitIdentifiers, "$user" replaced by currentUser, duplicates and empty
// names dropped. Schemas that do not exist are kept: the catalog says where
// TTL tables live.
func ParseSearchPath(setting, currentUser string) []string {
	var out []string
	for _, name := range SplitIdentifiers(setting) {
		if name == "$user" {
			name = currentUser
		}
		if name != "" && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// SplitIdentifiers splits a comma-separated list of identifiers as
// PostgreSQL's SplitIdentifierString does: entries split on commas outside
// double quotes, unquoted ones trimmed and folded to lower case (FoldIdent),
// quoted ones unquoted ("" is a quote). It reads quote_ident's output back.
func SplitIdentifiers(list string) []string {
	var out []string
	s := list
	for {
		s = strings.TrimLeft(s, " \t\n\r\f\v")
		if s == "" {
			break
		}
		var name strings.Builder
		if s[0] == '"' {
			i := 1
			for i < len(s) {
				if s[i] == '"' {
					if i+1 < len(s) && s[i+1] == '"' {
						name.WriteByte('"')
						i += 2
						continue
					}
					break
				}
				name.WriteByte(s[i])
				i++
			}
			s = s[min(i+1, len(s)):]
			out = append(out, name.String())
		} else {
			end := strings.IndexByte(s, ',')
			if end < 0 {
				end = len(s)
			}
			out = append(out, FoldIdent(strings.TrimRight(s[:end], " \t\n\r\f\v")))
			s = s[end:]
		}
		s = strings.TrimLeft(s, " \t\n\r\f\v")
		if s == "" || s[0] != ',' {
			break
		}
		s = s[1:]
	}
	return out
}
