package proxy

import "strings"

// Pinning and settings in transaction mode (docs/design/pooling.md §2): a
// client whose statements may leave state on its server that the proxy
// cannot carry to another server keeps that server for the rest of its
// session (it is pinned). Settings are carried: a statement that may change
// them makes the server pump read them back when the transaction ends
// (settings.go), and they are applied on the client's next server. A cheap
// text check that errs toward yes decides, before the statement is
// forwarded.

// The reasons a client is pinned.
const (
	pinTemp          = "temp"                  // temporary tables, pg_temp
	pinAdvisoryLock  = "advisory_lock"         // pg_advisory_lock and friends
	pinListen        = "listen"                // LISTEN
	pinHoldCursor    = "hold_cursor"           // DECLARE … WITH HOLD
	pinSQLPrepare    = "sql_prepare"           // PREPARE
	pinLoad          = "load"                  // LOAD
	pinPrepared      = "prepared"              // a named protocol-level statement
	pinFunctionCall  = "function_call"         // FunctionCall: may be set_config
	pinExtensionConn = "dblink"                // dblink's named connections
	pinSessionAuth   = "session_authorization" // SET SESSION AUTHORIZATION
	pinSettings      = "settings"              // a setting whose name the text does not show
)

// pin keeps the client on its server for the rest of its session.
func (s *clientConn) pin(reason string) {
	pl := s.link.pooled.Load()
	if pl == nil || pl.pinned.Load() {
		return
	}
	pl.pinned.Store(true)
	s.srv.metrics.poolPins.WithLabelValues(reason).Inc()
	s.log.Debug("client pinned to its server connection", "reason", reason)
}

// noteStatement looks at a Query or Parse text about to be forwarded in
// transaction mode: it pins the client, or marks its settings to be read
// back when the transaction ends, by what the text may do.
func (s *clientConn) noteStatement(sql string) {
	pl := s.link.pooled.Load()
	if pl.pinned.Load() {
		return
	}
	sc := scanStatement(sql)
	switch {
	case sc.pin != "":
		s.pin(sc.pin)
	case sc.settings:
		pl.noteSettings(sc.custom)
	}
}

// statementScan is what scanStatement found in a text.
type statementScan struct {
	// pin is why the text pins its client, "" when it does not.
	pin string
	// settings: the text may change session-level settings, which are
	// read back; custom lists the names with a dot among them
	// (placeholders, which pg_settings does not show).
	settings bool
	custom   []string
}

// scanStatement scans words (letters, digits, _ and $), case-insensitively,
// skipping comments, and quoted text's quotes but not its words, so that it
// errs toward a pin. Settings: a statement led by SET (but SET LOCAL, SET
// TRANSACTION and SET CONSTRAINTS, which end with the transaction), RESET or
// DISCARD, or set_config anywhere; the setting's name must be plain words
// (a quoted name, or set_config's first argument not a literal, pins).
// Pins: SET/RESET SESSION AUTHORIZATION, statements led by LISTEN, PREPARE
// (but PREPARE TRANSACTION) or LOAD; anywhere the words TEMP, TEMPORARY or
// HOLD, or text containing advisory, pg_temp or dblink.
func scanStatement(sql string) (sc statementScan) {
	lead := true    // the next word leads a statement
	after := ""     // the leading word(s) whose next word decides
	expectName := 0 // 1: the next word is a setting's name; 2: after its dot
	name := ""
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-':
			for i < len(sql) && sql[i] != '\n' {
				i++
			}
			continue
		case c == '/' && i+1 < len(sql) && sql[i+1] == '*':
			i += 2
			for i+1 < len(sql) && (sql[i] != '*' || sql[i+1] != '/') {
				i++
			}
			i += 2
			continue
		case c == '.' && expectName == 2:
			name += "."
			expectName = 3
			i++
			continue
		case c == '"' && (after != "" || expectName != 0):
			// A quoted name: not followed.
			return statementScan{pin: pinSettings}
		case c == ';':
			if after == "set" || after == "prepare" || after == "set session" {
				return statementScan{pin: pinSettings} // an incomplete statement
			}
			if expectName != 0 {
				sc.noteName(name)
				expectName, name = 0, ""
			}
			lead, after = true, ""
			i++
			continue
		case !isWordByte(c):
			if expectName == 2 {
				sc.noteName(name)
				expectName, name = 0, ""
			}
			i++
			continue
		}
		start := i
		for i < len(sql) && isWordByte(sql[i]) {
			i++
		}
		w := sql[start:i]
		switch expectName {
		case 1, 3:
			name += strings.ToLower(w)
			expectName = 2
			continue
		case 2:
			sc.noteName(name)
			expectName, name = 0, ""
		}
		if after != "" {
			switch {
			case after == "set" && (equalFoldASCII(w, "local") || equalFoldASCII(w, "transaction") || equalFoldASCII(w, "constraints")):
				// Ends with the transaction: nothing to read back.
			case after == "prepare" && equalFoldASCII(w, "transaction"):
			case after == "prepare":
				return statementScan{pin: pinSQLPrepare}
			case (after == "set" || after == "reset") && equalFoldASCII(w, "session"):
				after = "set session"
				continue
			case after == "set session" && equalFoldASCII(w, "authorization"):
				return statementScan{pin: pinSessionAuth}
			case after == "set session" && equalFoldASCII(w, "characteristics"):
				sc.settings = true
			case equalFoldASCII(w, "role"), equalFoldASCII(w, "all"), equalFoldASCII(w, "time"), equalFoldASCII(w, "names"), equalFoldASCII(w, "schema"):
				// SET ROLE, RESET ALL, SET TIME ZONE, SET NAMES, SET SCHEMA:
				// built-in settings (or role), read back.
				sc.settings = true
			default:
				// SET [SESSION] name, RESET name.
				sc.settings = true
				name = strings.ToLower(w)
				expectName = 2
			}
			after = ""
			continue
		}
		if lead {
			lead = false
			switch {
			case equalFoldASCII(w, "set"):
				after = "set"
				continue
			case equalFoldASCII(w, "reset"):
				after = "reset"
				continue
			case equalFoldASCII(w, "prepare"):
				after = "prepare"
				continue
			case equalFoldASCII(w, "discard"):
				sc.settings = true
			case equalFoldASCII(w, "listen"):
				return statementScan{pin: pinListen}
			case equalFoldASCII(w, "load"):
				return statementScan{pin: pinLoad}
			}
		}
		switch {
		case equalFoldASCII(w, "temp"), equalFoldASCII(w, "temporary"):
			return statementScan{pin: pinTemp}
		case equalFoldASCII(w, "hold"):
			return statementScan{pin: pinHoldCursor}
		case containsFold(w, "advisory"):
			return statementScan{pin: pinAdvisoryLock}
		case containsFold(w, "pg_temp"):
			return statementScan{pin: pinTemp}
		case containsFold(w, "dblink"):
			return statementScan{pin: pinExtensionConn}
		case containsFold(w, "set_config"):
			n, ok := setConfigName(sql[i:])
			if !ok {
				return statementScan{pin: pinSettings}
			}
			if n == "session_authorization" {
				return statementScan{pin: pinSessionAuth}
			}
			sc.settings = true
			sc.noteName(n)
		}
	}
	switch after {
	case "set", "prepare", "set session", "reset":
		return statementScan{pin: pinSettings}
	}
	if expectName == 2 {
		sc.noteName(name)
	} else if expectName != 0 {
		return statementScan{pin: pinSettings}
	}
	return sc
}

// noteName records a setting's name when it is a placeholder's (a dot in
// it).
func (sc *statementScan) noteName(name string) {
	if strings.Contains(name, ".") {
		sc.custom = append(sc.custom, name)
	}
}

// setConfigName returns the first argument of the set_config call at the
// start of rest when it is a plain string literal: `('name'`.
func setConfigName(rest string) (string, bool) {
	i := 0
	for i < len(rest) && (rest[i] == ' ' || rest[i] == '\t' || rest[i] == '\n' || rest[i] == '\r') {
		i++
	}
	if i >= len(rest) || rest[i] != '(' {
		return "", false
	}
	i++
	for i < len(rest) && (rest[i] == ' ' || rest[i] == '\t' || rest[i] == '\n' || rest[i] == '\r') {
		i++
	}
	if i >= len(rest) || rest[i] != '\'' {
		return "", false
	}
	end := strings.IndexByte(rest[i+1:], '\'')
	if end < 0 {
		return "", false
	}
	name := rest[i+1 : i+1+end]
	if strings.ContainsAny(name, `\"`) || i+1+end+1 < len(rest) && rest[i+1+end+1] == '\'' {
		return "", false // an escaped quote: not followed
	}
	return strings.ToLower(name), true
}

func isWordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '$' || c >= 0x80
}

// equalFoldASCII compares a word with a lower-case ASCII keyword.
func equalFoldASCII(w, keyword string) bool {
	if len(w) != len(keyword) {
		return false
	}
	for i := 0; i < len(w); i++ {
		if w[i]|0x20 != keyword[i] {
			return false
		}
	}
	return true
}
