package proxy

import (
	"context"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/internal/pgtest"
)

// TestClientVanishesMidTransaction: a client holding a row lock in an open
// transaction disappears; the proxy must end its server session at once, so
// that the server rolls the transaction back and another client takes the
// lock within 1 s. The client goes with a close (FIN), a reset (RST), or a
// close right after the first bytes of a message or a Parse without Sync:
// then its last bytes and its FIN arrive together, and the proxy must
// still see the end of the stream after reading them.
func TestClientVanishesMidTransaction(t *testing.T) {
	p := startProxy(t, Config{})
	db := pgtest.NewDatabase(t)
	execDirect(t, db, "CREATE TABLE locked (id int PRIMARY KEY)", "INSERT INTO locked VALUES (1)")
	for _, tc := range []struct {
		name  string
		last  []byte
		reset bool
	}{
		{name: "close"},
		{name: "reset", reset: true},
		{name: "close after a partial message", last: []byte{'Q', 0, 0}},
		{name: "close after a Parse without Sync", last: msg('P', "\x00SELECT 1\x00\x00\x00")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := p.connect(t, db, pgx.QueryExecModeSimpleProtocol)
			mustExec(t, a, "BEGIN")
			mustExec(t, a, "SELECT * FROM locked WHERE id = 1 FOR UPDATE")
			raw := a.PgConn().Conn()
			if tc.reset {
				if err := raw.(*net.TCPConn).SetLinger(0); err != nil {
					t.Fatal(err)
				}
			}
			if len(tc.last) > 0 {
				if _, err := raw.Write(tc.last); err != nil {
					t.Fatal(err)
				}
			}
			_ = raw.Close()

			b := p.connect(t, db, pgx.QueryExecModeSimpleProtocol)
			mustExec(t, b, "SET lock_timeout = '1s'")
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := b.Exec(ctx, "SELECT * FROM locked WHERE id = 1 FOR UPDATE"); err != nil {
				t.Fatalf("the second client could not take the lock: %v", err)
			}
			t.Logf("lock taken after %v", time.Since(start).Round(time.Millisecond))
			_ = b.Close(ctx)
		})
	}
}

// msg builds one frontend message: type byte, length, body.
func msg(typ byte, body string) []byte {
	b := []byte{typ, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(4+len(body)))
	return append(b, body...)
}
