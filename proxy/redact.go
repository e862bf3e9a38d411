package proxy

import (
	"bytes"
	"encoding/binary"

	"github.com/ttlproxy/ttlproxy/internal/wire"
	"github.com/ttlproxy/ttlproxy/rewrite"
)

// Constraint messages: a unique or exclusion violation's DETAIL prints the
// key of the existing row ("Key (id)=(2) conflicts with existing key
// (id)=(2)."), a not-null or check violation's the whole new row ("Failing
// row contains (…)"), which carries the stored values of columns the
// statement did not set. On a TTL table that row may be expired, or its
// value. PostgreSQL itself omits these DETAILs on a table under row
// security (ExecBuildSlotValueDescription and BuildIndexValueDescription
// return nothing when check_enable_rls is RLS_ENABLED); the proxy does the
// same for every class 23 error whose table (fields 's' and 't') is a TTL
// table or one of its children, at either contract level. The code, the
// message and the constraint's name stay: that a key exists is what the
// server tells under row security too.

// detailGuard is what the server pump reads to decide: the session's
// rewriter and catalog, and whether it bypasses the filter (a role in
// bypass_roles sees expired rows anyway, and keeps its DETAILs), published
// by the client pump (sessionState.apply).
type detailGuard struct {
	rw     *rewrite.Rewriter
	cat    *rewrite.Catalog
	bypass bool
}

// redactConstraintDetail returns msg (a whole ErrorResponse, header
// included) without its DETAIL when it is a class 23 error on a table g
// covers, appended to out; otherwise msg itself.
func redactConstraintDetail(g *detailGuard, msg, out []byte) []byte {
	if g == nil || g.bypass || len(msg) < wire.HeaderLen {
		return msg
	}
	var code, schema, table []byte
	detail := -1
	body := msg[wire.HeaderLen:]
	for i := 0; i < len(body) && body[i] != 0; {
		end := bytes.IndexByte(body[i+1:], 0)
		if end < 0 {
			return msg
		}
		v := body[i+1 : i+1+end]
		switch body[i] {
		case 'C':
			code = v
		case 's':
			schema = v
		case 't':
			table = v
		case 'D':
			detail = i
		}
		i += end + 2
	}
	if detail < 0 || len(code) != 5 || code[0] != '2' || code[1] != '3' || table == nil ||
		!g.rw.Covers(g.cat, string(schema), string(table)) {
		return msg
	}
	end := detail + 1 + bytes.IndexByte(body[detail+1:], 0) + 1
	out = append(out, msg[0], 0, 0, 0, 0)
	out = append(out, body[:detail]...)
	out = append(out, body[end:]...)
	binary.BigEndian.PutUint32(out[1:wire.HeaderLen], uint32(len(out)-1))
	return out
}
