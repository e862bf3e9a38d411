// Package corpus reads the SQL corpus the tests use: PostgreSQL's regression
// scripts (shared/corpus/pg-regress-15, CONTRIBUTING.md "The SQL corpus").
package corpus

import (
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// Statements returns the statements of a psql script: meta-command lines
// (`\set`, `\gset`, …) and the data of COPY … FROM stdin are dropped, the
// rest is split by PostgreSQL's scanner; a script the scanner cannot split
// (the scripts that test lexer errors) is split at lines ending in `;`.
func Statements(text string) []string {
	var b strings.Builder
	inData := false
	for _, line := range strings.SplitAfter(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if inData {
			if trimmed == `\.` {
				inData = false
			}
			continue
		}
		if strings.HasPrefix(trimmed, `\`) {
			continue
		}
		b.WriteString(line)
		low := strings.ToLower(trimmed)
		if strings.HasPrefix(low, "copy ") && strings.Contains(low, "from stdin") && strings.HasSuffix(low, ";") {
			inData = true
		}
	}
	stmts, err := pg.SplitWithScanner(b.String(), true)
	if err == nil {
		return stmts
	}
	stmts = nil
	for _, s := range strings.SplitAfter(b.String(), ";\n") {
		if s = strings.TrimSpace(s); s != "" {
			stmts = append(stmts, s)
		}
	}
	return stmts
}
