package proxy

// Pinning in transaction mode (docs/design/pooling.md §2, "Pins"): a client
// whose statements may leave state on its server that the proxy cannot
// carry to another server or take back keeps that server for the rest of
// its session. Until the state is read back and replayed, that is any
// session-level setting too; so a cheap text check that errs toward yes
// decides, before the statement is forwarded.

// The reasons a client is pinned.
const (
	pinSet           = "set"           // SET, RESET, DISCARD, set_config
	pinTemp          = "temp"          // temporary tables, pg_temp
	pinAdvisoryLock  = "advisory_lock" // pg_advisory_lock and friends
	pinListen        = "listen"        // LISTEN
	pinHoldCursor    = "hold_cursor"   // DECLARE … WITH HOLD
	pinSQLPrepare    = "sql_prepare"   // PREPARE
	pinLoad          = "load"          // LOAD
	pinPrepared      = "prepared"      // a named protocol-level statement
	pinFunctionCall  = "function_call" // FunctionCall: may be set_config
	pinExtensionConn = "dblink"        // dblink's named connections
)

// pin keeps the client on its server for the rest of its session.
func (s *clientConn) pin(reason string) {
	pl := s.link.pooled
	if pl == nil || pl.pinned.Load() {
		return
	}
	pl.pinned.Store(true)
	s.log.Debug("client pinned to its server connection", "reason", reason)
}

// pinFor pins the client when sql may leave state that pins (pinReason).
func (s *clientConn) pinFor(sql string) {
	if s.link.pooled.pinned.Load() {
		return
	}
	if reason := pinReason(sql); reason != "" {
		s.pin(reason)
	}
}

// pinReason returns why sql pins its client, "" when it does not. It scans
// words (letters, digits, _ and $), case-insensitively, skipping comments
// and quoted text's quotes but not its words, so that it errs toward a pin:
// a statement led by SET (but SET LOCAL, SET TRANSACTION and SET
// CONSTRAINTS, which end with the transaction), RESET, DISCARD, LISTEN,
// PREPARE (but PREPARE TRANSACTION) or LOAD; and anywhere the words TEMP,
// TEMPORARY or HOLD, or text containing set_config, advisory, pg_temp or
// dblink. No allocation.
func pinReason(sql string) string {
	lead := true   // the next word leads a statement
	afterSet := "" // the leading word whose next word decides
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
		case c == ';':
			if afterSet != "" {
				return pinSet // SET; alone is not valid, err toward a pin
			}
			lead = true
			i++
			continue
		case !isWordByte(c):
			i++
			continue
		}
		start := i
		for i < len(sql) && isWordByte(sql[i]) {
			i++
		}
		w := sql[start:i]
		if afterSet != "" {
			switch {
			case afterSet == "set" && (equalFoldASCII(w, "local") || equalFoldASCII(w, "transaction") || equalFoldASCII(w, "constraints")):
			case afterSet == "prepare" && equalFoldASCII(w, "transaction"):
			case afterSet == "set":
				return pinSet
			default:
				return pinSQLPrepare
			}
			afterSet = ""
		}
		if lead {
			lead = false
			switch {
			case equalFoldASCII(w, "set"):
				afterSet = "set"
			case equalFoldASCII(w, "prepare"):
				afterSet = "prepare"
			case equalFoldASCII(w, "reset"), equalFoldASCII(w, "discard"):
				return pinSet
			case equalFoldASCII(w, "listen"):
				return pinListen
			case equalFoldASCII(w, "load"):
				return pinLoad
			}
		}
		switch {
		case equalFoldASCII(w, "temp"), equalFoldASCII(w, "temporary"):
			return pinTemp
		case equalFoldASCII(w, "hold"):
			return pinHoldCursor
		case containsFold(w, "set_config"):
			return pinSet
		case containsFold(w, "advisory"):
			return pinAdvisoryLock
		case containsFold(w, "pg_temp"):
			return pinTemp
		case containsFold(w, "dblink"):
			return pinExtensionConn
		}
	}
	switch afterSet {
	case "set":
		return pinSet
	case "prepare":
		return pinSQLPrepare
	}
	return ""
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
