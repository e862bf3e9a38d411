package proxy

import (
	"encoding/binary"
	"fmt"

	"github.com/ttlproxy/ttlproxy/internal/wire"
	"github.com/ttlproxy/ttlproxy/rewrite"
)

// FunctionCall, the protocol's function call sub-protocol, runs a function
// named by OID inside the server with no SQL text the rewriter could
// check: query_to_xml('SELECT * FROM t', …) or any function that reads a
// TTL table would return expired rows. With TTL rules, a session that is
// not bypassed may call this way only the large-object functions libpq's
// lo_* calls use (the sub-protocol's remaining use, "Function Call" in the
// manual's protocol chapter); any other FunctionCall is refused with 0A000
// before it reaches the server.

// largeObjectFunctions are the OIDs of pg_catalog's large-object functions
// (pg_proc.dat; the same in every release since they were added): lo_create,
// lo_open, lo_close, loread, lowrite, lo_lseek, lo_creat, lo_tell,
// lo_unlink, lo_truncate, lo_lseek64, lo_tell64, lo_truncate64.
var largeObjectFunctions = map[uint32]bool{
	715: true, 952: true, 953: true, 954: true, 955: true, 956: true, 957: true, 958: true,
	964: true, 1004: true, 3170: true, 3171: true, 3172: true,
}

// functionCallRefusal returns the rejection of the FunctionCall message of
// total bytes at the head of r, or nil to forward it. It reads the
// function's OID without consuming the message.
func (s *clientConn) functionCallRefusal(r *wire.Reader, total int) (*rewrite.Error, error) {
	if s.replication || len(s.rs.Load().rules) == 0 || s.st.bypassing || total < wire.HeaderLen+4 {
		return nil, nil
	}
	b, err := r.Peek(wire.HeaderLen + 4)
	if err != nil {
		return nil, err
	}
	oid := binary.BigEndian.Uint32(b[wire.HeaderLen:])
	if largeObjectFunctions[oid] {
		return nil, nil
	}
	return &rewrite.Error{
		Code:    codeFeatureNotSupported,
		Message: fmt.Sprintf("ttlproxy: cannot run function %d by FunctionCall: the proxy cannot see what it reads, and TTL rules are configured", oid),
		Hint:    "Call the function in a SQL statement instead.",
	}, nil
}
