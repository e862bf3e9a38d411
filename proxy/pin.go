package proxy

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ttlproxy/ttlproxy/internal/wire"
	"github.com/ttlproxy/ttlproxy/rewrite"
)

// Pinning and settings in transaction mode (docs/design/pooling.md §2): a
// client whose statements may leave state on its server that the proxy
// cannot carry to another server keeps that server (it is pinned) until
// the server says the state is gone. Settings are carried: a statement
// that may change them makes the server pump read them back when the
// transaction ends (settings.go), and they are applied on the client's
// next server. A cheap text check that errs toward yes decides, before the
// statement is forwarded, what the end of the transaction checks: whether
// the client is still pinned (pinCheckQuery) and its settings.

// The reasons a client is pinned.
const (
	pinTemp          = "temp"                  // temporary tables, pg_temp
	pinAdvisoryLock  = "advisory_lock"         // pg_advisory_lock and friends
	pinListen        = "listen"                // LISTEN
	pinHoldCursor    = "hold_cursor"           // DECLARE … WITH HOLD
	pinSQLPrepare    = "sql_prepare"           // PREPARE
	pinSessionAuth   = "session_authorization" // SET SESSION AUTHORIZATION
	pinLoad          = "load"                  // LOAD
	pinPrepared      = "prepared"              // a named protocol-level statement
	pinFunctionCall  = "function_call"         // FunctionCall: may be set_config
	pinExtensionConn = "dblink"                // dblink's named connections
	pinSettings      = "settings"              // a setting whose name the text does not show
)

// pinReasons lists every reason, for the metrics' labels.
var pinReasons = []string{pinTemp, pinAdvisoryLock, pinListen, pinHoldCursor, pinSQLPrepare, pinSessionAuth,
	pinLoad, pinPrepared, pinFunctionCall, pinExtensionConn, pinSettings}

// pinsForLife reports a reason no query can see the end of: a loaded
// library, dblink's connections, a setting of unknown name, a named
// statement not tracked, a FunctionCall. The client keeps its server until
// it leaves.
func pinsForLife(reason string) bool {
	switch reason {
	case pinLoad, pinExtensionConn, pinSettings, pinPrepared, pinFunctionCall:
		return true
	}
	return false
}

// pinCheckQuery asks a server, at the end of a pinned client's transaction
// in which a statement may have changed what pins it, whether any such
// state is left: one boolean per reason, in pinChecked's order. $1 is the
// login user (SET SESSION AUTHORIZATION changes session_user).
const pinCheckQuery = `SELECT
 EXISTS (SELECT FROM pg_catalog.pg_class WHERE relnamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema())
  OR EXISTS (SELECT FROM pg_catalog.pg_proc WHERE pronamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema())
  OR EXISTS (SELECT FROM pg_catalog.pg_type WHERE typnamespace OPERATOR(pg_catalog.=) pg_catalog.pg_my_temp_schema()),
 EXISTS (SELECT FROM pg_catalog.pg_locks WHERE locktype OPERATOR(pg_catalog.=) 'advisory' AND pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid()),
 EXISTS (SELECT FROM pg_catalog.pg_listening_channels()),
 EXISTS (SELECT FROM pg_catalog.pg_cursors WHERE is_holdable),
 EXISTS (SELECT FROM pg_catalog.pg_prepared_statements WHERE from_sql),
 session_user::pg_catalog.text OPERATOR(pg_catalog.<>) $1`

// pinChecked are the reasons pinCheckQuery's columns answer, in order.
var pinChecked = []string{pinTemp, pinAdvisoryLock, pinListen, pinHoldCursor, pinSQLPrepare, pinSessionAuth}

// pinCheckMessages is the check-in's question for a pinned client: the pin
// check, then the settings' read-back (readbackQuery) for the placeholders
// custom, one ReadyForQuery.
func pinCheckMessages(user string, custom []string) []byte {
	names, _ := json.Marshal(custom)
	if custom == nil {
		names = []byte("[]")
	}
	b := appendStatement(nil, pinCheckQuery, user)
	return endStatements(appendStatement(b, readbackQuery, string(names)))
}

// stillPinned reads the pin check's row: the first reason whose state is
// left, "" when none is; ok is false for a row of another shape.
func stillPinned(row []string) (reason string, ok bool) {
	if len(row) != len(pinChecked) {
		return "", false
	}
	for i, v := range row {
		switch v {
		case "t":
			return pinChecked[i], true
		case "f":
		default:
			return "", false
		}
	}
	return "", true
}

// errPinLimit is the answer to a statement that would pin its client when
// max_pinned_connections clients of its pool are pinned already: the
// statement does not run.
func errPinLimit(limit int) *rewrite.Error {
	return &rewrite.Error{Code: codeInsufficientResources,
		Message: fmt.Sprintf("ttlproxy: %d clients of this pool already keep their server connections (max_pinned_connections)", limit),
		Detail:  "The statement would keep this client's server connection (temporary objects, advisory locks, LISTEN, WITH HOLD cursors, PREPARE, SET SESSION AUTHORIZATION) and was not run.",
		Hint:    "Retry when another client has released its state, or raise max_pinned_connections."}
}

// pin keeps the client on its server until the reason's state is gone (or
// for the client's life). A reason the check-in can see the end of is
// tentative until the end of the transaction shows its state left
// (confirmPin); only confirmed pins count toward max_pinned_connections,
// so a transaction that creates and drops its own state (ON COMMIT DROP)
// costs no slot. A client not pinned yet whose pool has
// max_pinned_connections confirmed pins is refused (errPinLimit), unless
// force: a pin the client has to have whatever the count (a FunctionCall
// already relayed). The bound is soft: clients pinning at once may each
// pass it before the first is confirmed.
func (s *clientConn) pin(reason string, force bool) error {
	pl := s.link.pooled.Load()
	forLife := pinsForLife(reason)
	if !pl.pinned.Load() {
		if ok, limit := pl.pool.pinRoom(force); !ok {
			s.srv.metrics.PoolPinRefusals.Inc()
			s.log.Info("statement refused: max_pinned_connections reached", "reason", reason, "max_pinned_connections", limit)
			return errPinLimit(limit)
		}
		pl.pinReason = reason
		pl.pinned.Store(true)
		s.log.Debug("client pinned to its server connection", "reason", reason)
	}
	if forLife {
		pl.forLife.Store(true)
		pl.confirmPin()
	} else {
		pl.pinCheck.Store(true)
	}
	return nil
}

// confirmPin counts the client's pin toward its pool's bound and in the
// metrics, once: the pin outlasts a transaction (the check-in found its
// state left), or it is for life.
func (pl *pooledLink) confirmPin() {
	if !pl.confirmed.CompareAndSwap(false, true) {
		return
	}
	pl.pool.addPin(1)
	pl.metrics.PoolPins.WithLabelValues(pl.pinReason).Inc()
	pl.metrics.PoolPinned.WithLabelValues(pl.pinReason).Inc()
}

// unpin ends the client's pin, once: called by the server pump when the
// check finds nothing left, and when the client leaves.
func (pl *pooledLink) unpin() {
	if !pl.pinned.CompareAndSwap(true, false) {
		return
	}
	if pl.confirmed.CompareAndSwap(true, false) {
		pl.pool.addPin(-1)
		pl.metrics.PoolPinned.WithLabelValues(pl.pinReason).Dec()
	}
}

// noteStatement looks at a Query or Parse text about to be forwarded in
// transaction mode: it pins the client, asks for its pin to be checked,
// or marks its settings to be read back when the transaction ends, by what
// the text may do. The error is errPinLimit: the statement must not run.
func (s *clientConn) noteStatement(sql string) error {
	pl := s.link.pooled.Load()
	if pl.forLife.Load() {
		return nil
	}
	return s.noteScan(pl, s.scanStatement(pl, sql))
}

// scanStatement is scanStatement for the client's text, under the
// standard_conforming_strings its server last reported.
func (s *clientConn) scanStatement(pl *pooledLink, sql string) statementScan {
	var sc statementScan
	sc, pl.spans = scanStatement(sql, s.link.lex.bits.Load()&lexBackslash != 0, pl.spans)
	return sc
}

// noteScan pins the client, asks for its pin to be checked, or marks its
// settings to be read back, by what scanStatement found.
func (s *clientConn) noteScan(pl *pooledLink, sc statementScan) error {
	if sc.pin != "" {
		if err := s.pin(sc.pin, false); err != nil {
			return err
		}
	} else if sc.unpin && pl.pinned.Load() {
		pl.pinCheck.Store(true)
	}
	if sc.settings {
		pl.noteSettings(sc.custom)
	}
	return nil
}

// noteParse is noteStatement for the Parse of statement name (empty: the
// unnamed one). A statement whose text changes settings is remembered by
// name: it changes them each time it runs, and a driver prepares it in one
// transaction and binds it in later ones (pgx's statement cache, its
// QueryExecModeDescribeExec), which noteBind then marks for the read-back.
func (s *clientConn) noteParse(name []byte, sql string) error {
	pl := s.link.pooled.Load()
	if pl.forLife.Load() {
		return nil
	}
	sc := s.scanStatement(pl, sql)
	switch {
	case sc.settings:
		if pl.settingsStmts == nil {
			pl.settingsStmts = make(map[string]bool)
		}
		pl.settingsStmts[string(name)] = true
	case len(pl.settingsStmts) > 0:
		delete(pl.settingsStmts, string(name))
	}
	return s.noteScan(pl, sc)
}

// noteBind, for a Bind (total bytes, unread in r) in transaction mode,
// marks the client's settings to be read back when the statement it binds
// is one noteParse remembered. The placeholders it names were added to
// the read-back's names at its Parse.
func (s *clientConn) noteBind(r *wire.Reader, total int) {
	pl := s.link.pooled.Load()
	if len(pl.settingsStmts) == 0 || pl.forLife.Load() {
		return
	}
	b, err := r.Peek(min(total, r.Size()))
	if err != nil && len(b) < total {
		return // the relay reports the short read
	}
	if name, ok := bindStatement(b[wire.HeaderLen:]); !ok || pl.settingsStmts[string(name)] {
		// A name longer than the buffer: assume the worst.
		pl.noteSettings(nil)
	}
}

// statementScan is what scanStatement found in a text.
type statementScan struct {
	// pin is why the text pins its client, "" when it does not: the first
	// reason found, or the one reason that pins for life (pinsForLife).
	pin string
	// unpin: the text may end a pin (DISCARD, UNLISTEN, CLOSE, DEALLOCATE,
	// DROP); a pinned client's server is checked when its transaction
	// ends.
	unpin bool
	// settings: the text may change session-level settings, which are
	// read back; custom lists the names with a dot among them
	// (placeholders, which pg_settings does not show).
	settings bool
	custom   []string
}

// scanStatement finds what sql may do to its session (statementScan).
// It reads tokens as PostgreSQL's scanner does (rewrite.LiteralSpans):
// words and quoted identifiers count, the contents of literals and
// comments do not, so `WHERE v = 'on hold'` pins nothing. The exception is
// the body of a DO block, code the server runs, whose words all count
// (scanWords). A text the token reader cannot read exactly, or one whose
// reading depends on standard_conforming_strings while the server reports
// it off (backslash), is scanned by words alone, literals and all, which
// errs toward a pin. spans is a buffer for the literals' offsets, returned
// for reuse.
func scanStatement(sql string, backslash bool, spans []int) (statementScan, []int) {
	if backslash && backslashOutsideEscapes(sql) {
		return scanWords(sql), spans
	}
	if !mayHoldString(sql) {
		return scanText(sql, nil, true), spans
	}
	spans, ok := rewrite.LiteralSpans(spans[:0], sql)
	if !ok {
		return scanWords(sql), spans
	}
	return scanText(sql, spans, true), spans
}

// scanWords scans every word of sql, inside literals too (scanText).
func scanWords(sql string) statementScan { return scanText(sql, nil, false) }

// scanText scans words (letters, digits, _ and $), case-insensitively,
// skipping comments. Settings: a statement led by SET (but SET LOCAL, SET
// TRANSACTION and SET CONSTRAINTS, which end with the transaction), RESET or
// DISCARD, or set_config anywhere; the setting's name must be plain words
// (a quoted name, or set_config's first argument not a literal, pins for
// life). Pins: SET/RESET SESSION AUTHORIZATION, statements led by LISTEN,
// PREPARE (but PREPARE TRANSACTION) or LOAD; the words TEMP or TEMPORARY,
// HOLD, a word containing advisory (but xact, a lock the transaction's end
// releases, or unlock, which may end a pin), pg_temp or dblink. A pin for
// life ends the scan; other pins do not, so that the settings of the same
// text are seen. Unpin: statements led by DISCARD, UNLISTEN, CLOSE,
// DEALLOCATE or DROP, and the advisory unlock functions.
//
// With tokens (spans, the offsets of sql's literals, start then end), a
// literal is skipped but in a DO statement (scanWords of its body); a
// quoted identifier is a name, never a keyword, read for the functions it
// may call; TEMP and TEMPORARY count only where the grammar takes them
// (after CREATE, OR REPLACE, LOCAL, GLOBAL or INTO), HOLD only after WITH,
// an advisory word only when a call's parenthesis may follow. Without
// tokens, quotes delimit nothing and every such word counts.
func scanText(sql string, spans []int, tokens bool) (sc statementScan) {
	lead := true     // the next word leads a statement
	doBlock := false // the statement is a DO block
	prev := ""       // the word just before, "" after any other token
	after := ""      // the leading word(s) whose next word decides
	expectName := 0  // 1: the next word is a setting's name; 2: after its dot
	name := ""
	k := 0 // spans[k] is the next literal's start
	for i := 0; i < len(sql); {
		if k < len(spans) && i >= spans[k] {
			start, end := spans[k], spans[k+1]
			k += 2
			if doBlock && sc.merge(scanWords(sql[start:end])) {
				return sc
			}
			if expectName == 2 {
				sc.noteName(name)
				expectName, name = 0, ""
			}
			lead, prev, i = false, "", end
			continue
		}
		c := sql[i]
		switch {
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-':
			for i < len(sql) && sql[i] != '\n' && (!tokens || sql[i] != '\r') {
				i++
			}
			continue
		case c == '/' && i+1 < len(sql) && sql[i+1] == '*':
			i = skipBlockComment(sql, i+2, tokens)
			continue
		case c == '.' && expectName == 2:
			name += "."
			expectName = 3
			i++
			continue
		case c == '"' && (after != "" || expectName != 0):
			// A quoted name: not followed.
			return statementScan{pin: pinSettings}
		case c == '"' && tokens:
			end := quotedIdentEnd(sql, i+1)
			if sc.noteCall(callWords(sql[i+1:end-1]), sql, end, spans, true) {
				return sc
			}
			lead, prev, i = false, "", end
			continue
		case c == ';':
			if after == "set" || after == "prepare" || after == "set session" {
				return statementScan{pin: pinSettings} // an incomplete statement
			}
			if expectName != 0 {
				sc.noteName(name)
				expectName, name = 0, ""
			}
			lead, after, doBlock, prev = true, "", false, ""
			i++
			continue
		case !isWordByte(c):
			if expectName == 2 {
				sc.noteName(name)
				expectName, name = 0, ""
			}
			if c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '\f' && c != '\v' {
				prev = ""
			}
			i++
			continue
		}
		start := i
		for i < len(sql) && isWordByte(sql[i]) {
			i++
		}
		w := sql[start:i]
		before := prev
		prev = w
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
			case after == "discard":
				// DISCARD ALL, PLANS, SEQUENCES, TEMP or TEMPORARY: the
				// word names what goes, never a pin.
			case after == "set" && (equalFoldASCII(w, "local") || equalFoldASCII(w, "transaction") || equalFoldASCII(w, "constraints")):
				// Ends with the transaction: nothing to read back.
			case after == "prepare" && equalFoldASCII(w, "transaction"):
			case after == "prepare":
				sc.notePin(pinSQLPrepare)
			case (after == "set" || after == "reset") && equalFoldASCII(w, "session"):
				after = "set session"
				continue
			case after == "set session" && equalFoldASCII(w, "authorization"):
				sc.notePin(pinSessionAuth)
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
				sc.settings, sc.unpin = true, true
				after = "discard"
				continue
			case equalFoldASCII(w, "unlisten"), equalFoldASCII(w, "close"), equalFoldASCII(w, "deallocate"), equalFoldASCII(w, "drop"):
				sc.unpin = true
			case equalFoldASCII(w, "listen"):
				sc.notePin(pinListen)
				continue
			case equalFoldASCII(w, "load"):
				return statementScan{pin: pinLoad}
			case equalFoldASCII(w, "do"):
				doBlock = true
				continue
			}
		}
		switch {
		case equalFoldASCII(w, "temp"), equalFoldASCII(w, "temporary"):
			if !tokens || takesTemp(before) {
				sc.notePin(pinTemp)
			}
		case equalFoldASCII(w, "hold"):
			if !tokens || equalFoldASCII(before, "with") {
				sc.notePin(pinHoldCursor)
			}
		default:
			if sc.noteCall(callWords(w), sql, i, spans, !tokens) {
				return sc
			}
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

// noteCall notes what a word or quoted name may call, k being its parts
// (callWords) and sql[end:] the text after it: the advisory lock functions
// (a call only when a parenthesis may follow, unless anyCall), pg_temp,
// dblink, set_config, and the built-ins that run a query given as text
// (query_to_xml and its kin, ts_stat), whose literals are code: with
// tokens (spans), sql is then scanned again by words. It reports a pin for
// life, which ends the scan (sc is then that pin alone).
func (sc *statementScan) noteCall(k uint8, sql string, end int, spans []int, anyCall bool) (forLife bool) {
	rest := sql[end:]
	if k&callQueryText != 0 && spans != nil && sc.merge(scanWords(sql)) {
		return true
	}
	switch {
	case k&callAdvisory != 0 && k&callXact != 0:
		// pg_advisory_xact_lock and friends: released at the end of
		// the transaction, which the client holds its server for.
	case k&callAdvisory != 0 && k&callUnlock != 0:
		sc.unpin = true
	case k&callAdvisory != 0:
		if anyCall || mayCall(rest) {
			sc.notePin(pinAdvisoryLock)
		}
	case k&callPgTemp != 0:
		sc.notePin(pinTemp)
	case k&callDblink != 0:
		*sc = statementScan{pin: pinExtensionConn}
		return true
	case k&callSetConfig != 0:
		n, ok := setConfigName(rest)
		if !ok {
			*sc = statementScan{pin: pinSettings}
			return true
		}
		if n == "session_authorization" {
			sc.notePin(pinSessionAuth)
			return false
		}
		sc.settings = true
		sc.noteName(n)
	}
	return false
}

// The parts of a name noteCall looks for (callWords).
const (
	callAdvisory  = 1 << iota // advisory
	callXact                  // xact
	callUnlock                // unlock
	callPgTemp                // pg_temp
	callDblink                // dblink
	callSetConfig             // set_config
	callQueryText             // query_to_xml…, ts_stat
)

// callWords returns the call* bits of the parts w holds, in any case: one
// pass over w.
func callWords(w string) (k uint8) {
	if len(w) < len("xact") {
		return 0
	}
	for i := 0; i < len(w); i++ {
		var part string
		var bit uint8
		switch w[i] | 0x20 {
		case 'a':
			part, bit = "advisory", callAdvisory
		case 'x':
			part, bit = "xact", callXact
		case 'u':
			part, bit = "unlock", callUnlock
		case 'p':
			part, bit = "pg_temp", callPgTemp
		case 'd':
			part, bit = "dblink", callDblink
		case 's':
			part, bit = "set_config", callSetConfig
		case 'q':
			part, bit = "query_to_xml", callQueryText
		case 't':
			part, bit = "ts_stat", callQueryText
		default:
			continue
		}
		if len(w)-i >= len(part) && strings.EqualFold(w[i:i+len(part)], part) {
			k |= bit
		}
	}
	return k
}

// mayHoldString reports whether sql may hold a string literal: a quote, or
// a $ that may open a dollar quote (not a $n parameter).
func mayHoldString(sql string) bool {
	if strings.IndexByte(sql, '\'') >= 0 {
		return true
	}
	for i := strings.IndexByte(sql, '$'); i >= 0; {
		if i+1 >= len(sql) || sql[i+1] < '0' || sql[i+1] > '9' {
			return true
		}
		j := strings.IndexByte(sql[i+1:], '$')
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return false
}

// merge adds what another scan of the same statement found (a DO block's
// body); forLife: it found a pin for life, and sc is now that pin alone.
func (sc *statementScan) merge(o statementScan) (forLife bool) {
	if pinsForLife(o.pin) {
		*sc = statementScan{pin: o.pin}
		return true
	}
	if o.pin != "" {
		sc.notePin(o.pin)
	}
	sc.unpin = sc.unpin || o.unpin
	sc.settings = sc.settings || o.settings
	sc.custom = append(sc.custom, o.custom...)
	return false
}

// takesTemp reports the words after which PostgreSQL's grammar takes TEMP
// or TEMPORARY (OptTemp, OptTempTableName): CREATE, CREATE OR REPLACE,
// LOCAL, GLOBAL, SELECT … INTO.
func takesTemp(before string) bool {
	return equalFoldASCII(before, "create") || equalFoldASCII(before, "replace") || equalFoldASCII(before, "local") ||
		equalFoldASCII(before, "global") || equalFoldASCII(before, "into")
}

// mayCall reports whether rest, the text after a name, may open the
// name's argument list: its first byte past white space is a parenthesis
// or starts a comment (which may hide one).
func mayCall(rest string) bool {
	for i := 0; i < len(rest); i++ {
		switch rest[i] {
		case ' ', '\t', '\n', '\r', '\f', '\v':
		case '(', '/', '-':
			return true
		default:
			return false
		}
	}
	return false
}

// quotedIdentEnd returns the offset after the quoted identifier whose body
// starts at i ("" stands for a quote), or len(sql) when it is unterminated.
func quotedIdentEnd(sql string, i int) int {
	for ; i < len(sql); i++ {
		if sql[i] == '"' {
			if i+1 < len(sql) && sql[i+1] == '"' {
				i++
				continue
			}
			return i + 1
		}
	}
	return len(sql)
}

// skipBlockComment returns the offset after the /* comment */ whose body
// starts at i; nested: each /* opens a level (PostgreSQL's scanner), else
// the first */ ends it.
func skipBlockComment(sql string, i int, nested bool) int {
	depth := 1
	for i+1 < len(sql) {
		switch {
		case nested && sql[i] == '/' && sql[i+1] == '*':
			depth++
			i += 2
		case sql[i] == '*' && sql[i+1] == '/':
			if depth--; depth == 0 {
				return i + 2
			}
			i += 2
		default:
			i++
		}
	}
	return len(sql)
}

// notePin records a reason the text pins its client, keeping the first.
func (sc *statementScan) notePin(reason string) {
	if sc.pin == "" {
		sc.pin = reason
	}
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
