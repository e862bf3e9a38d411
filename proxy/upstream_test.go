package proxy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/internal/pgcluster"
)

// testCA is a throw-away certificate authority.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue returns PEM certificate and key for a server known by ips only.
func (ca *testCA) issue(t *testing.T, ips ...net.IP) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "ttlproxy test server"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// startTLSCluster starts a cluster of its own with ssl = on, its
// certificate issued by ca for 127.0.0.1 only.
func startTLSCluster(t *testing.T, ca *testCA) *pgcluster.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx, pgcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	certPEM, keyPEM := ca.issue(t, net.ParseIP("127.0.0.1"))
	fi, err := os.Stat(c.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	for name, data := range map[string][]byte{"server.crt": certPEM, "server.key": keyPEM} {
		p := filepath.Join(c.DataDir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		// The server reads the key as its own user, and refuses one others
		// can read.
		if err := os.Chown(p, int(st.Uid), int(st.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := pgx.Connect(ctx, c.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "ALTER SYSTEM SET ssl = on"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		var on string
		if err := conn.QueryRow(ctx, "SHOW ssl").Scan(&on); err == nil && on == "on" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("ssl did not turn on")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return c
}

// TestUpstreamTLS connects through the proxy to a server with ssl = on in
// every sslmode and checks what each verifies.
func TestUpstreamTLS(t *testing.T) {
	sessionModeOnly(t, "its upstream is a cluster of its own, whose verifiers the auth_file of the shared one does not hold")
	ca, other := newTestCA(t, "ttlproxy test CA"), newTestCA(t, "another CA")
	c := startTLSCluster(t, ca)
	_, port, _ := net.SplitHostPort(c.Addr())
	byName := net.JoinHostPort("localhost", port) // the certificate names 127.0.0.1 only

	through := func(t *testing.T, upstream string, u *UpstreamTLS) (p *testProxy, ssl string, err error) {
		t.Helper()
		p = startProxy(t, Config{Upstream: upstream, UpstreamTLS: u})
		cfg, err := pgx.ParseConfig(c.ConnString("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Host, cfg.Port = "127.0.0.1", mustPort(t, p.addr)
		cfg.TLSConfig = nil
		conn, err := pgx.ConnectConfig(testContext(t), cfg)
		if err != nil {
			return p, "", err
		}
		defer conn.Close(testContext(t))
		err = conn.QueryRow(testContext(t), "SELECT ssl::text FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl)
		return p, ssl, err
	}
	for _, c := range []struct {
		name     string
		upstream string
		u        *UpstreamTLS
		ssl      string // "" when the connection must fail
		errPart  string
	}{
		{"disable", c.Addr(), &UpstreamTLS{SSLMode: SSLDisable}, "false", ""},
		{"default is prefer", c.Addr(), nil, "true", ""},
		{"require", c.Addr(), &UpstreamTLS{SSLMode: SSLRequire}, "true", ""},
		{"verify-ca", byName, &UpstreamTLS{SSLMode: SSLVerifyCA, Config: &tls.Config{RootCAs: ca.pool}}, "true", ""},
		{"verify-ca, other CA", c.Addr(), &UpstreamTLS{SSLMode: SSLVerifyCA, Config: &tls.Config{RootCAs: other.pool}}, "", "unknown authority"},
		{"verify-full", c.Addr(), &UpstreamTLS{SSLMode: SSLVerifyFull, Config: &tls.Config{RootCAs: ca.pool}}, "true", ""},
		{"verify-full, wrong name", byName, &UpstreamTLS{SSLMode: SSLVerifyFull, Config: &tls.Config{RootCAs: ca.pool}}, "", "localhost"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, ssl, err := through(t, c.upstream, c.u)
			if c.ssl == "" {
				// The client is told the proxy could not connect; the
				// reason is the proxy's (logged, and CheckUpstream's).
				if pgCode(err) != codeUnableToConnect {
					t.Fatalf("connected (ssl %s, %v), want SQLSTATE %s", ssl, err, codeUnableToConnect)
				}
				if err := p.srv.CheckUpstream(testContext(t)); err == nil || !strings.Contains(err.Error(), c.errPart) {
					t.Fatalf("CheckUpstream: %v, want an error about %q", err, c.errPart)
				}
				return
			}
			if err != nil || ssl != c.ssl {
				t.Fatalf("ssl %q, %v; want %s", ssl, err, c.ssl)
			}
		})
	}
	// Without TLS on the server: require fails, prefer falls back.
	t.Run("require without server TLS", func(t *testing.T) {
		p := startProxy(t, Config{UpstreamTLS: &UpstreamTLS{SSLMode: SSLRequire}})
		if err := p.srv.CheckUpstream(testContext(t)); err == nil || !strings.Contains(err.Error(), "does not support TLS") {
			t.Fatalf("CheckUpstream: %v", err)
		}
	})
	if _, _, err := upstreamTLS(&UpstreamTLS{SSLMode: "allow"}, "h:1"); err == nil {
		t.Error("sslmode allow accepted")
	}
}

func mustPort(t *testing.T, addr string) uint16 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	var n uint16
	for _, c := range p {
		n = n*10 + uint16(c-'0')
	}
	return n
}
