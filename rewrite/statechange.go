package rewrite

// stateNeedles are the lower-case words whose presence means a statement may
// change search_path or ttlproxy.ttl: SET/SET LOCAL/RESET of either, RESET
// ALL, RESET ROLE, DISCARD ALL, set_config(), ROLLBACK [TO SAVEPOINT] undoing
// a SET, and U&" spelling a name in escapes.
var stateNeedles = [...]string{"search_path", "ttlproxy", "reset", "discard", "set_config", "rollback", `u&"`, "session_authorization"}

// SessionStateMayChange reports whether sql may change the session's
// search_path, ttlproxy.ttl, current role or temporary relations, so that
// the proxy should read them back (current_setting) before it rewrites the
// next statement. Besides the stateNeedles substrings it reports SET
// [SESSION|LOCAL] ROLE, SET SESSION AUTHORIZATION, SET SCHEMA (search_path
// by another name), CREATE [GLOBAL|LOCAL] TEMP[ORARY], CREATE OR REPLACE
// TEMP, INTO TEMP, and any name starting with pg_temp. It is a
// case-insensitive text check: no parse, no allocation; words in comments
// are skipped between the keywords of a phrase, words in literals count, so
// it errs toward true. A transaction's end also undoes SET LOCAL and a
// rolled-back SET: the proxy should read them back when a transaction in
// which this reported true ends (ReadyForQuery returning to idle). A
// function that changes a setting inside the server is not seen.
func SessionStateMayChange(sql string) bool {
	return hasStateNeedle(sql) || roleOrTempPhrase(sql)
}

// hasStateNeedle reports whether sql holds one of stateNeedles.
func hasStateNeedle(sql string) bool {
	for i := 0; i < len(sql); i++ {
		c := lowerTable[sql[i]]
		if !stateNeedleFirst[c] {
			continue
		}
		for _, n := range stateNeedles {
			if n[0] == c && hasPrefixFold(sql[i:], n) {
				return true
			}
		}
	}
	return false
}

// stateNeedleFirst marks the first bytes of stateNeedles.
var stateNeedleFirst = func() (first [256]bool) {
	for _, n := range stateNeedles {
		first[n[0]] = true
	}
	return first
}()

// roleOrTempPhrase reports the phrases of SessionStateMayChange that are
// keyword sequences: each word is compared with the one before it, comments
// between them skipped.
func roleOrTempPhrase(sql string) bool {
	prev := ""
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-':
			for i < len(sql) && sql[i] != '\n' {
				i++
			}
			continue
		case c == '/' && i+1 < len(sql) && sql[i+1] == '*':
			i = skipBlockComment(sql, i)
			continue
		case !isIdentByte(c):
			i++
			continue
		}
		j := i + 1
		for j < len(sql) && isIdentByte(sql[j]) {
			j++
		}
		w := sql[i:j]
		i = j
		switch {
		case hasPrefixFold(w, "pg_temp"):
			return true
		case equalFold(w, "role"), equalFold(w, "schema"):
			if equalFold(prev, "set") || equalFold(prev, "session") || equalFold(prev, "local") {
				return true
			}
		case equalFold(w, "temp"), equalFold(w, "temporary"):
			if equalFold(prev, "create") || equalFold(prev, "into") || equalFold(prev, "global") ||
				equalFold(prev, "local") || equalFold(prev, "replace") {
				return true
			}
		case equalFold(w, "authorization"):
			if equalFold(prev, "session") {
				return true
			}
		}
		prev = w
	}
	return false
}

// equalFold reports whether s equals the lower-case word n under ASCII case
// folding.
func equalFold(s, n string) bool {
	return len(s) == len(n) && hasPrefixFold(s, n)
}
