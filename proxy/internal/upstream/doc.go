// Package upstream owns the proxy's side of a connection to the upstream
// server up to its first ReadyForQuery: the TCP connect, TLS with libpq's
// meaning of sslmode (Dialer), and the login without a client that
// transaction pooling makes in a client's name (Login: SCRAM pass-through,
// md5, a clear-text password), with what the server tells at login
// (Welcome) and how it refuses (ServerError, ErrLogin).
//
// It stands on internal/wire and proxy/internal/auth; it knows nothing of
// the sessions, links or pools that use its connections and must not
// import them (nor proxy).
//
// Usage:
//
//	d := &upstream.Dialer{Addr: "127.0.0.1:5432", Timeout: 5 * time.Second}
//	nc, err := d.Dial(ctx)
//	if err != nil {
//		return err
//	}
//	w, err := upstream.Login(nc, map[string]string{"user": "app", "database": "app"}, login)
package upstream
