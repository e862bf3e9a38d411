package proxy

import (
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/ttlproxy/ttlproxy/internal/wire"
)

// A pooled client's named prepared statements (docs/design/pooling.md §3,
// simplified): they live on the server the client holds; when the client
// moves to a server that does not hold the set it has now, the server's
// statements are deallocated (another client's, or an older set of this
// client's) and the client's are parsed again there, rewritten for its
// current state, ahead of its first message, their answers dropped by the
// server pump. So statement names never meet another client's, and a
// client that stays on its server (the pool's affinity) pays nothing.
// PgBouncer instead shares statements between clients in an LRU per server
// under names of its own; this keeps the client's names and costs a
// re-parse per switch.

// namedStatementChanged records that the client's set of named statements
// changed on the server it holds (a named Parse or Close forwarded):
// the server stays in step when it was, so that a client that keeps its
// server never re-parses. Client pump only.
func (pl *pooledLink) namedStatementChanged(client uint64) {
	inStep := pl.cur != nil && pl.cur.prepOwner == client && pl.cur.prepGen == pl.prepGen
	pl.prepGen++
	if inStep || pl.cur != nil && pl.cur.prepOwner == 0 {
		pl.cur.prepOwner, pl.cur.prepGen = client, pl.prepGen
	}
}

// restoreStatements makes server ps hold exactly the client's named
// statements, when it does not already: DEALLOCATE ALL and a Parse and a
// Sync per statement, written ahead of the client's first message; the
// server pump drops the answers. A statement that no longer parses is
// missing there, and its Bind fails as the server fails it (26000).
func (s *clientConn) restoreStatements(ps *pooledServer) error {
	l, pl := s.link, s.link.pooled.Load()
	if ps.prepOwner == 0 && !s.hasNamedStatements() || ps.prepOwner == s.id && ps.prepGen == pl.prepGen {
		return nil
	}
	var msgs []byte
	n := 0
	if ps.prepOwner != 0 {
		msgs = appendQuery(msgs, "DEALLOCATE ALL")
		n++
		pl.unnamedOK = false // a Query drops it
	}
	parses, k, err := s.parseAgainMessages()
	if err != nil {
		return err
	}
	msgs = append(msgs, parses...)
	n += k
	if n > 0 {
		l.answers.swallow.Add(int32(n))
		l.answers.lenient.Add(int32(k)) // after swallow: see swallowAnswer
		if _, err := l.sw.Write(msgs); err != nil {
			return &wire.WriteError{Err: err}
		}
	}
	ps.prepOwner, ps.prepGen = s.id, pl.prepGen
	if k == 0 {
		ps.prepOwner = 0
	}
	return nil
}

// hasNamedStatements reports a named statement the client has prepared.
func (s *clientConn) hasNamedStatements() bool {
	for name, p := range s.st.prepared {
		if name != "" && !p.doubtful {
			return true
		}
	}
	return false
}

// parseAgainMessages encodes a Parse and a Sync for each of the client's
// named statements, rewritten for the current state (k of them); one the
// rewriter now rejects is left out and rejected when bound.
func (s *clientConn) parseAgainMessages() (msgs []byte, k int, err error) {
	rw := s.rs.Load().rewriter
	for name, p := range s.st.prepared {
		if name == "" || p.doubtful {
			continue
		}
		res, rerr := rw.Rewrite(p.sql, s.st.cur)
		p.gen = s.st.gen
		if rerr != nil {
			p.rejected = rerr
			continue
		}
		p.rejected, p.plain = nil, !s.st.sensitive(res)
		q := &pgproto3.Parse{Name: name, Query: p.sql, ParameterOIDs: p.oids}
		if res.Rewritten {
			q.Query = res.SQL
		}
		if msgs, err = q.Encode(msgs); err != nil {
			return nil, 0, &wire.ProtocolError{Code: codeProgramLimit, Msg: "rewritten Parse message too large"}
		}
		msgs = append(msgs, 'S', 0, 0, 0, 4)
		k++
	}
	return msgs, k, nil
}

// noteClose looks at a Close about to be forwarded (total bytes, unread in
// r): closing a named statement changes the client's set.
func (s *clientConn) noteClose(r *wire.Reader, total int) {
	b, err := r.Peek(min(total, r.Size()))
	if err != nil && len(b) < total {
		return // the relay reports the short read
	}
	body := b[wire.HeaderLen:]
	if len(body) >= 2 && body[0] == 'S' && body[1] != 0 {
		s.link.pooled.Load().namedStatementChanged(s.id)
	}
}
