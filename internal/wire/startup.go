package wire

import (
	"encoding/binary"
	"io"
	"net"

	"github.com/ttlproxy/ttlproxy/internal/sqlstate"
)

// ReadStartupPacket reads one length-prefixed startup-phase packet straight
// from conn: no buffering, so that nothing sent in plaintext before a TLS
// handshake can be mistaken for data after it. first holds the packet's
// first bytes already read (at most 8, the shortest packet's length).
func ReadStartupPacket(conn net.Conn, first []byte) ([]byte, error) {
	var head [8]byte
	n := copy(head[:], first)
	if n < 4 {
		m, err := io.ReadFull(conn, head[n:4])
		if err != nil {
			return nil, err
		}
		n += m
	}
	l := int(int32(binary.BigEndian.Uint32(head[:4])))
	if l < 8 || l > MaxStartupPacket {
		return nil, &ProtocolError{Code: sqlstate.ProtocolViolation, Msg: "invalid length of startup packet"}
	}
	pkt := make([]byte, l)
	copy(pkt, head[:n])
	if _, err := io.ReadFull(conn, pkt[n:]); err != nil {
		return nil, err
	}
	return pkt, nil
}
