package proxy

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/ttlproxy/ttlproxy/internal/wire"
	"github.com/ttlproxy/ttlproxy/rewrite"
)

// Prepared statements and session state.
//
// A Parse is rewritten for the session state of its time, but PostgreSQL
// re-analyses a prepared statement when search_path has changed since, a
// statement prepared for a bypass role carries no filter at all, and one
// the rewriter passed through may name a view or function made directly
// that the session's catalog did not know of yet. So the proxy keeps, for
// every prepared statement, its text and the state generation it was
// rewritten for, and whether the rewriter passed it through (plain). When
// the state changes outside a transaction block, the statements whose
// rewrite depends on it are prepared again for the new state at once (Close
// and Parse under the same name, answered to the proxy alone), so a
// client's statement cache keeps working; a plain one is rewritten again
// (most take the rewriter's cheap check) and prepared again only when it is
// no longer plain. A stale statement that could not be prepared again
// (inside a transaction block, where a failure would abort the client's
// transaction, or after a DEALLOCATE the proxy cannot follow) is rejected
// when bound: never run for a state it was not rewritten for.

// preparedStmt is one prepared statement.
type preparedStmt struct {
	sql  string
	oids []uint32
	gen  uint64
	// plain: the rewriter passed it through unchanged for the state of gen
	// (it could not name a TTL table or a path to one then).
	plain bool
	// doubtful: the client may have deallocated it with SQL (DEALLOCATE,
	// DISCARD ALL), so it must not be re-created.
	doubtful bool
	// rejected: preparing it again for the current state was rejected; the
	// statement no longer exists on the server.
	rejected error
}

// errStalePipeline rejects a statement that follows, in the same pipeline,
// one that may have changed the session state.
var errStalePipeline = &rewrite.Error{
	Code: codeFeatureNotSupported,
	Message: "ttlproxy: cannot rewrite a statement that follows a change of search_path, role, " +
		"ttlproxy.ttl or temporary tables in the same pipeline",
	Hint: "End the pipeline (Sync) after the statement that changes the setting.",
}

func staleStatementError(name string) *rewrite.Error {
	return &rewrite.Error{
		Code: codeFeatureNotSupported,
		Message: fmt.Sprintf("ttlproxy: prepared statement %q was prepared before a change of search_path, "+
			"role, ttlproxy.ttl or temporary tables", name),
		Hint: "Prepare the statement again.",
	}
}

// notePrepared records the outcome of a Parse: name now holds sql
// (parameter types oids, raw big-endian) rewritten for the current state,
// passed through when plain; or nothing, when ok is false (the Parse was
// rejected: the server fails the placeholder sent in its place).
func (st *sessionState) notePrepared(name []byte, sql string, oids []byte, ok, plain bool) {
	if !ok {
		if len(st.prepared) > 0 {
			delete(st.prepared, string(name))
		}
		return
	}
	if st.prepared == nil {
		st.prepared = make(map[string]*preparedStmt)
	}
	p := &preparedStmt{sql: sql, gen: st.gen, plain: plain}
	for ; len(oids) >= 4; oids = oids[4:] {
		p.oids = append(p.oids, uint32(oids[0])<<24|uint32(oids[1])<<16|uint32(oids[2])<<8|uint32(oids[3]))
	}
	st.prepared[string(name)] = p
}

// onClose is the hook for a Close message (body possibly truncated): it
// forgets a closed statement.
func (st *sessionState) onClose(body []byte) {
	if len(st.prepared) == 0 || len(body) < 1 || body[0] != 'S' {
		return
	}
	if name, _, ok := wire.CString(body[1:]); ok {
		delete(st.prepared, string(name))
	}
}

// staleBind returns the rejection for a Bind (body possibly truncated) of a
// statement that must not run in the current state, or nil.
func (st *sessionState) staleBind(body []byte) error {
	name, ok := bindStatement(body)
	if !ok {
		return nil
	}
	p := st.prepared[string(name)]
	if p == nil {
		return nil
	}
	switch {
	case p.rejected != nil:
		// Preparing it again for the current state was rejected: the
		// statement no longer exists on the server.
		return p.rejected
	case p.plain && (p.gen != st.gen || st.unseen) && st.stillPlain(p):
		// Passed through for this state too (as a Parse of it would be
		// in a pipeline not yet read back).
		if !st.unseen {
			p.gen = st.gen
		}
	case p.gen != st.gen || st.unseen:
		return staleStatementError(string(name))
	}
	return nil
}

// stillPlain reports whether the rewriter passes p's text through under the
// current state too.
func (st *sessionState) stillPlain(p *preparedStmt) bool {
	res, err := st.rw.Rewrite(p.sql, st.cur)
	return err == nil && !st.sensitive(res)
}

// reprepare prepares every stale statement again for the current state.
// Called between statements outside a transaction block, with nothing
// outstanding.
func (s *clientConn) reprepare() error {
	return s.reprepareOnly(nil)
}

// reprepareOnly is reprepare for the statements only names, or all when
// only is nil.
func (s *clientConn) reprepareOnly(only []byte) error {
	var msgs []byte
	n := 0
	for name, p := range s.st.prepared {
		if p.gen == s.st.gen || p.doubtful || only != nil && name != string(only) {
			continue
		}
		p.gen = s.st.gen
		res, err := s.rs.Load().rewriter.Rewrite(p.sql, s.st.cur)
		if p.plain {
			if err == nil && !s.st.sensitive(res) {
				continue
			}
			p.plain = false
		}
		msgs, _ = (&pgproto3.Close{ObjectType: 'S', Name: name}).Encode(msgs)
		if err == nil {
			q := &pgproto3.Parse{Name: name, Query: res.SQL, ParameterOIDs: p.oids}
			if !res.Rewritten {
				q.Query = p.sql
			}
			msgs, err = q.Encode(msgs)
			if err != nil {
				return &wire.ProtocolError{Code: codeProgramLimit, Msg: "rewritten Parse message too large"}
			}
			p.rejected = nil
		} else {
			p.rejected = err
		}
		msgs = append(msgs, 'S', 0, 0, 0, 4)
		n++
	}
	if n == 0 {
		return nil
	}
	_, err := s.link.ask(msgs, n, s.quit)
	return err
}

// mayDeallocate reports whether sql may deallocate prepared statements
// (DEALLOCATE, DISCARD ALL).
func mayDeallocate(sql string) bool {
	return containsFold(sql, "deallocate") || containsFold(sql, "discard") && containsFold(sql, "all")
}

// containsFold is an ASCII case-insensitive strings.Contains for a
// lower-case needle.
func containsFold(s, needle string) bool {
	for i := 0; i+len(needle) <= len(s); i++ {
		if s[i]|0x20 == needle[0] && strings.EqualFold(s[i:i+len(needle)], needle) {
			return true
		}
	}
	return false
}

// inspect looks at a Bind or Close about to be relayed (total bytes, still
// unread in r): it returns the rejection for a Bind that must not run, and
// notes what the message changes.
func (s *clientConn) inspect(typ byte, r *wire.Reader, total int) (stale, err error) {
	b, err := r.Peek(min(total, r.Size()))
	if err != nil && len(b) < total {
		return nil, err
	}
	body := b[wire.HeaderLen:]
	if typ == 'C' {
		s.st.onClose(body)
		return nil, nil
	}
	return s.st.onBind(body), nil
}

// reprepareBound prepares again, inside a transaction block, the stale
// statement that the Bind starting a batch (total bytes, unread in r) is
// about to run: a failure is the failure running it would have. Nothing
// but this batch may be outstanding.
func (s *clientConn) reprepareBound(r *wire.Reader, total int) error {
	if s.st.unseen || s.link.pending.Load() != 1 || byte(s.link.txStatus.Load()) != 'T' {
		return nil
	}
	b, err := r.Peek(min(total, r.Size()))
	if err != nil && len(b) < total {
		return nil
	}
	name, ok := bindStatement(b[wire.HeaderLen:])
	if !ok {
		return nil
	}
	if p := s.st.prepared[string(name)]; p == nil || p.gen == s.st.gen || p.doubtful || p.plain && s.st.stillPlain(p) {
		return nil
	}
	return s.reprepareOnly(name)
}
