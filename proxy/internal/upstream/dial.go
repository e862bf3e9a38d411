package upstream

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/ttlproxy/ttlproxy/internal/wire"
)

// Dialer connects to the upstream server: TCP, and TLS with libpq's meaning
// of sslmode (PostgreSQL documentation, "SSL Support", table "SSL Mode
// Descriptions"): it asks with an SSLRequest and, on 'S', runs the TLS
// handshake before the StartupMessage or CancelRequest the caller sends.
// Safe for concurrent use; not to be changed once in use.
type Dialer struct {
	// Addr is the server's host:port.
	Addr string
	// Timeout bounds the TCP connect and the TLS negotiation.
	Timeout time.Duration
	// Net makes the TCP connection (keepalives, TCP_USER_TIMEOUT); nil is a
	// plain net.Dialer. Its Timeout is Timeout.
	Net *net.Dialer
	// DialTCP, when set, replaces Net.DialContext(ctx, "tcp", addr) (tests).
	DialTCP func(ctx context.Context, d *net.Dialer, addr string) (net.Conn, error)
	// TLS is the handshake's configuration; nil for sslmode disable.
	TLS *tls.Config
	// SSLMode names the mode in errors; "prefer" goes on in clear text
	// when the server declines TLS.
	SSLMode string
}

// Dial connects to the server and, unless TLS is nil, negotiates TLS: the
// returned connection (a *wire.Conn, or TLS over one) is ready for a
// StartupMessage or CancelRequest. Errors name the server.
func (d *Dialer) Dial(ctx context.Context) (net.Conn, error) {
	conn, err := d.dialTCP(ctx)
	if err != nil {
		return nil, fmt.Errorf("proxy: connecting to upstream %s: %w", d.Addr, err)
	}
	conn = wire.NewConn(conn)
	if d.TLS == nil {
		return conn, nil
	}
	tc, err := d.negotiateTLS(ctx, conn)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("proxy: upstream %s: %w", d.Addr, err)
	}
	return tc, nil
}

func (d *Dialer) dialTCP(ctx context.Context) (net.Conn, error) {
	nd := &net.Dialer{}
	if d.Net != nil {
		c := *d.Net
		nd = &c
	}
	nd.Timeout = d.Timeout
	if d.DialTCP != nil {
		return d.DialTCP(ctx, nd, d.Addr)
	}
	return nd.DialContext(ctx, "tcp", d.Addr)
}

// negotiateTLS sends an SSLRequest on conn and runs the handshake when the
// server accepts; with sslmode prefer a refusal leaves conn plain.
func (d *Dialer) negotiateTLS(ctx context.Context, conn net.Conn) (net.Conn, error) {
	deadline := time.Now().Add(d.Timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = conn.SetDeadline(deadline)
	defer func() { _ = conn.SetDeadline(time.Time{}) }()
	var req [8]byte
	binary.BigEndian.PutUint32(req[:4], 8)
	binary.BigEndian.PutUint32(req[4:], wire.SSLRequestCode)
	if _, err := conn.Write(req[:]); err != nil {
		return nil, fmt.Errorf("sending SSLRequest: %w", err)
	}
	var answer [1]byte
	if _, err := io.ReadFull(conn, answer[:]); err != nil {
		return nil, fmt.Errorf("reading the answer to SSLRequest: %w", err)
	}
	switch answer[0] {
	case 'S':
		tc := tls.Client(conn, d.TLS)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, fmt.Errorf("TLS handshake (sslmode %s): %w", d.SSLMode, err)
		}
		_ = tc.SetDeadline(time.Time{})
		return tc, nil
	case 'N':
		if d.SSLMode == "prefer" {
			return conn, nil
		}
		return nil, fmt.Errorf("the server does not support TLS (sslmode %s)", d.SSLMode)
	}
	return nil, fmt.Errorf("unexpected answer %q to SSLRequest", answer[0])
}
