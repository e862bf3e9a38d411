package proxy

import (
	"context"
	"fmt"
	"time"

	"github.com/ttlproxy/ttlproxy/proxy/internal/auth"
	"github.com/ttlproxy/ttlproxy/proxy/internal/upstream"
)

// Server login without a client, for transaction pooling: the exchange is
// upstream.Login's; here the pools get a serverConn of it.

// serverLogin is what one server connection logs in with.
type serverLogin struct {
	// params are the StartupMessage's parameters: user and database, and
	// the client's other startup parameters of the pool key.
	params map[string]string
	// secret answers the server's authentication request; nil logs in only
	// where the server asks for nothing (trust).
	secret *auth.Login
}

// loginServer dials the upstream server (TCP and TLS as upstream.Dialer) and
// logs in with lg, until the server's first ReadyForQuery; ctx bounds it
// all (server_connect_timeout). It returns the connection with its relay
// buffers set up and BackendKeyData kept, and what the server sent. Errors:
// *upstream.ServerError for an ErrorResponse from the server or an authentication
// request the proxy cannot answer with lg.secret; upstream.ErrLogin wrapping a
// failed dial, read or write. On error the socket is closed.
func (srv *Server) loginServer(ctx context.Context, lg serverLogin) (*serverConn, *upstream.Welcome, error) {
	nc, err := srv.dialer.Dial(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", upstream.ErrLogin, err)
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(srv.cfg.DialTimeout)
	}
	_ = nc.SetDeadline(deadline)
	welcome, err := upstream.Login(nc, lg.params, lg.secret)
	if err != nil {
		_ = nc.Close()
		return nil, nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	sc := &serverConn{nc: nc}
	sc.setBackendKey(welcome.Key)
	return sc, welcome, nil
}
