package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
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
