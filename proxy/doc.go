// Package proxy is the PostgreSQL wire-protocol front end of ttlproxy: it
// accepts client connections, relays startup, TLS and authentication to the
// upstream server, and passes every Query and Parse text through package
// rewrite. Everything else is relayed byte for byte.
//
// One upstream connection serves one client connection for its whole life
// (session mode). A rejected statement is replaced by one that makes the
// server itself fail at parse time, so that the server's protocol and
// transaction state stay exactly what they would be had the server rejected
// the original; the server's error is then swapped for the rejection.
//
// proxy is the top layer (ARCHITECTURE.md): it assembles the byte engine
// (internal/wire), client authentication (proxy/internal/auth), the
// upstream dial and login (proxy/internal/upstream) and the metrics
// (proxy/internal/metrics), and holds the sessions, the pools and the
// catalog. Nothing below it may import it; what it hands down are values
// and callbacks.
//
// Usage:
//
//	rw, _ := rewrite.New(rules, rewrite.Options{})
//	srv, err := proxy.New(proxy.Config{Upstream: "127.0.0.1:5432", Rewriter: rw})
//	if err != nil {
//		return err
//	}
//	ln, err := net.Listen("tcp", "127.0.0.1:6432")
//	if err != nil {
//		return err
//	}
//	return srv.Serve(ctx, ln) // returns once ctx is cancelled and sessions drained
package proxy
