package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/ttlproxy/ttlproxy/internal/wire"
)

// The link to the upstream server: TCP, and TLS with libpq's meaning of
// sslmode (PostgreSQL documentation, "SSL Support", table "SSL Mode
// Descriptions"): the proxy asks with an SSLRequest and, on 'S', runs the
// TLS handshake before the StartupMessage or CancelRequest it relays.

// SSL modes, as libpq names them.
const (
	// SSLDisable: plain TCP.
	SSLDisable = "disable"
	// SSLPrefer: TLS when the server offers it, without checking its
	// certificate; plain TCP when it does not (libpq's default).
	SSLPrefer = "prefer"
	// SSLRequire: TLS, without checking the server's certificate.
	SSLRequire = "require"
	// SSLVerifyCA: TLS, the certificate chain checked against the root
	// certificates; any host name.
	SSLVerifyCA = "verify-ca"
	// SSLVerifyFull: TLS, the chain checked and the certificate's names
	// matched against the upstream host (the recommended mode).
	SSLVerifyFull = "verify-full"
)

// UpstreamTLS configures TLS to the upstream server.
type UpstreamTLS struct {
	// SSLMode is one of the SSL* modes; "" means SSLPrefer.
	SSLMode string
	// Config holds the root certificates (RootCAs; nil: the system's) for
	// verify-ca and verify-full, and an optional client certificate. Its
	// ServerName, when empty, is the host of Config.Upstream.
	Config *tls.Config
}

// upstreamTLS returns the mode and the tls.Config to dial upstream with
// (nil for SSLDisable), or an error for an unknown mode.
func upstreamTLS(u *UpstreamTLS, upstream string) (string, *tls.Config, error) {
	mode := SSLPrefer
	var base *tls.Config
	if u != nil {
		if u.SSLMode != "" {
			mode = u.SSLMode
		}
		base = u.Config
	}
	if base == nil {
		base = &tls.Config{}
	}
	c := base.Clone()
	if c.MinVersion == 0 {
		c.MinVersion = tls.VersionTLS12
	}
	if c.ServerName == "" {
		host, _, err := net.SplitHostPort(upstream)
		if err != nil {
			return "", nil, fmt.Errorf("proxy: upstream %q: %w", upstream, err)
		}
		c.ServerName = host
	}
	switch mode {
	case SSLDisable:
		return mode, nil, nil
	case SSLPrefer, SSLRequire:
		c.InsecureSkipVerify = true
	case SSLVerifyCA:
		// Chain only: crypto/tls checks the host name too unless told
		// not to, so the chain is verified here instead.
		c.InsecureSkipVerify = true
		roots := c.RootCAs
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("server sent no certificate")
			}
			inter := x509.NewCertPool()
			for _, cert := range cs.PeerCertificates[1:] {
				inter.AddCert(cert)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
			return err
		}
	case SSLVerifyFull:
	default:
		return "", nil, fmt.Errorf("proxy: unknown sslmode %q (want disable, prefer, require, verify-ca or verify-full)", mode)
	}
	return mode, c, nil
}

// dialUpstream connects to the upstream server and, unless the mode is
// disable, negotiates TLS: the returned connection is ready for a
// StartupMessage or CancelRequest.
func (s *Server) dialUpstream(ctx context.Context) (net.Conn, error) {
	conn, err := s.dialTCP(ctx)
	if err != nil {
		return nil, fmt.Errorf("proxy: connecting to upstream %s: %w", s.cfg.Upstream, err)
	}
	conn = wire.NewConn(conn)
	if s.upstreamTLS == nil {
		return conn, nil
	}
	tc, err := s.negotiateTLS(ctx, conn)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("proxy: upstream %s: %w", s.cfg.Upstream, err)
	}
	return tc, nil
}

// negotiateTLS sends an SSLRequest on conn and runs the handshake when the
// server accepts; with SSLPrefer a refusal leaves conn plain.
func (s *Server) negotiateTLS(ctx context.Context, conn net.Conn) (net.Conn, error) {
	deadline := time.Now().Add(s.cfg.DialTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
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
		tc := tls.Client(conn, s.upstreamTLS)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, fmt.Errorf("TLS handshake (sslmode %s): %w", s.sslMode, err)
		}
		_ = tc.SetDeadline(time.Time{})
		return tc, nil
	case 'N':
		if s.sslMode == SSLPrefer {
			return conn, nil
		}
		return nil, fmt.Errorf("the server does not support TLS (sslmode %s)", s.sslMode)
	}
	return nil, fmt.Errorf("unexpected answer %q to SSLRequest", answer[0])
}
