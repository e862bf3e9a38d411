// Package wire is ttlproxy's byte engine: sockets whose reads and writes
// are raw system calls (Conn, and Drive, which runs a pump as a coroutine
// of one long read), the pumps' buffers (Reader, Writer: small while a
// session waits, a pooled BufSize one while data flows), and the framing of
// PostgreSQL's wire protocol after startup (PeekHeader, RelayRaw,
// ReadMessage, ErrorResponse). It decodes nothing it does not need to find
// a message's end.
//
// It owns no session, server or pool: it must not import any package of
// the module but internal/ ones below it (today none), so that the proxy's
// layers and the benchmark floors (bench/relayfloor) both stand on it.
//
// Usage, a pump that relays every message of src to dst:
//
//	c := wire.NewConn(src) // a *wire.Conn for a non-blocking socket, else src
//	r, w := wire.NewReader(c, wire.ClientBufSize, nil), wire.NewWriter(dst)
//	pump := func() error {
//		for {
//			_, n, err := wire.PeekHeader(r)
//			if err != nil {
//				return err
//			}
//			if _, err := wire.RelayRaw(r, w, int(n)+1); err != nil {
//				return err
//			}
//			if !wire.NextBuffered(r) {
//				if err := w.Flush(); err != nil {
//					return err
//				}
//			}
//		}
//	}
//	if rc, ok := c.(*wire.Conn); ok {
//		return rc.Drive(pump)
//	}
//	return pump()
package wire
