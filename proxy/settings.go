package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
)

// A client's session-level settings in transaction mode
// (docs/design/pooling.md §2): read back from its server at the end of a
// transaction in which a statement may have changed them (the server
// pump's check-in, pooledLink.checkIn), and applied on a server whose own
// settings differ before the client's next transaction runs there
// (clientConn.relink). Built-in settings come from pg_settings (source
// session), the role from current_setting('role'), placeholders (a dot in
// the name, which pg_settings does not show) by the names the client's
// statements named. Values travel as JSON parameters, never as literals.

// sessionSettings is one client's settings over the pool's baseline.
type sessionSettings struct {
	// values is a JSON object of name → value, keys sorted.
	values string
	// role is current_setting('role'): "none" when no SET ROLE is in force.
	role string
	// fp is a hash of values and role; 0 for the baseline (no setting, no
	// role).
	fp uint64
}

// readbackQuery reads a server's session-level settings: the built-in ones,
// the role, and the placeholders named in $1 (a JSON array) that are
// defined.
const readbackQuery = `SELECT
 (SELECT coalesce(pg_catalog.json_object_agg(name, setting), '{}') FROM pg_catalog.pg_settings WHERE source OPERATOR(pg_catalog.=) 'session')::pg_catalog.text,
 pg_catalog.current_setting('role'),
 (SELECT coalesce(pg_catalog.json_object_agg(n, v), '{}')
  FROM (SELECT n, pg_catalog.current_setting(n, true) AS v FROM pg_catalog.json_array_elements_text($1::pg_catalog.json) AS t(n)) s
  WHERE v IS NOT NULL)::pg_catalog.text`

// applyQuery and applyRoleQuery set a client's settings on a server that
// has just been reset; the role last.
const (
	applyQuery     = `SELECT pg_catalog.count(pg_catalog.set_config(key, value, false)) FROM pg_catalog.json_each_text($1::pg_catalog.json)`
	applyRoleQuery = `SELECT pg_catalog.set_config('role', $1, false)`
)

// readbackMessages is the check-in's question for a client that named the
// placeholders custom: one ReadyForQuery.
func readbackMessages(custom []string) []byte {
	names, _ := json.Marshal(custom)
	if custom == nil {
		names = []byte("[]")
	}
	return endStatements(appendStatement(nil, readbackQuery, string(names)))
}

// resetQuery returns a server to its login's settings: RESET ALL leaves the
// role alone, hence RESET ROLE first.
var resetQuery = appendQuery(nil, "RESET ROLE; RESET ALL")

// completeResetQuery returns a server that may hold another client's
// session state to its login's: DISCARD ALL's parts (PostgreSQL's
// discard.c) but DISCARD PLANS, which only costs plans, and with RESET
// ROLE, which RESET ALL leaves alone. DISCARD ALL itself may not run in the
// implicit transaction of a Query of several statements; its parts may, so
// it stays one Query sent ahead of the client's first message. It ends the
// state a function can leave where the proxy cannot see it (hostile.md):
// cursors WITH HOLD, a session authorization and role, settings
// (set_config(…, false)), prepared statements (PREPARE run by EXECUTE; the
// proxy's own are prepared again: pooledServer.prepOwner), LISTEN, session
// advisory locks, temporary tables, views and sequences, and the sequences'
// currval. Loaded libraries (LOAD) stay, as with DISCARD ALL: LOAD pins its
// client for life and its server is closed.
var completeResetQuery = appendQuery(nil, "CLOSE ALL; RESET SESSION AUTHORIZATION; RESET ROLE; RESET ALL; "+
	"DEALLOCATE ALL; UNLISTEN *; SELECT pg_catalog.pg_advisory_unlock_all(); DISCARD TEMP; DISCARD SEQUENCES")

// applyMessages returns a server to its baseline (RESET ROLE; RESET ALL, or
// completeResetQuery when complete) and, for settings other than the
// baseline, applies them; n is the number of ReadyForQuery messages the
// server answers with.
func applyMessages(st *sessionSettings, complete bool) (msgs []byte, n int) {
	reset := resetQuery
	if complete {
		reset = completeResetQuery
	}
	msgs = append([]byte(nil), reset...)
	if st == nil || st.fp == 0 {
		return msgs, 1
	}
	msgs = appendStatement(msgs, applyQuery, st.values)
	if st.role != "none" && st.role != "" {
		msgs = appendStatement(msgs, applyRoleQuery, st.role)
	}
	return endStatements(msgs), 2
}

// errReadback: the answer to the check-in's question was not one row of
// three text columns.
var errReadback = errors.New("unexpected answer to the settings query")

// parseReadback makes the settings of the check-in's answer (results as
// readResults returns them).
func parseReadback(results [][][]string) (*sessionSettings, error) {
	if len(results) != 1 || len(results[0]) != 1 || len(results[0][0]) != 3 {
		return nil, errReadback
	}
	row := results[0][0]
	values := map[string]string{}
	for _, col := range []string{row[0], row[2]} {
		var m map[string]string
		if err := json.Unmarshal([]byte(col), &m); err != nil {
			return nil, fmt.Errorf("%w: %w", errReadback, err)
		}
		for k, v := range m {
			values[k] = v
		}
	}
	return newSessionSettings(values, row[1]), nil
}

// newSessionSettings canonicalises values and role and hashes them.
func newSessionSettings(values map[string]string, role string) *sessionSettings {
	text, _ := json.Marshal(values) // keys sorted
	st := &sessionSettings{values: string(text), role: role}
	if len(values) > 0 || role != "none" {
		h := fnv.New64a()
		_, _ = h.Write(text)
		_, _ = h.Write([]byte{0})
		_, _ = h.Write([]byte(role))
		st.fp = h.Sum64() | 1
	}
	return st
}

// noteSettings records that the client's transaction may change its
// settings, naming the placeholders custom: the server pump reads them
// back when the transaction ends. Called by the client pump.
func (pl *pooledLink) noteSettings(custom []string) {
	added := false
	for _, n := range custom {
		if !slices.Contains(pl.custom, n) {
			pl.custom = append(pl.custom, n)
			added = true
		}
	}
	if added {
		names := slices.Clone(pl.custom)
		pl.customNames.Store(&names)
	}
	pl.dirty.Store(true)
}
