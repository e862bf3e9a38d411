package proxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"io"
	"math/big"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/ttlproxy/ttlproxy/internal/pgtest"
	"github.com/ttlproxy/ttlproxy/internal/wire"
)

func TestAuthenticationMethods(t *testing.T) {
	sessionModeOnly(t, "the server's authentication methods, relayed end to end; in transaction mode the proxy authenticates (clientauth_test.go)")
	p := startProxy(t, Config{})
	ensureRole(t,
		roleSQL("ttl_trust", "unused"),
		roleSQL("ttl_password", "cleartext-secret"),
		"SET password_encryption = 'md5'; "+roleSQL("ttl_md5", "md5-secret"),
		"SET password_encryption = 'scram-sha-256'; "+roleSQL("ttl_scram", "scram-secret"),
	)
	for _, c := range []struct {
		name, user, password string
	}{
		{"trust", "ttl_trust", ""},
		{"cleartext", "ttl_password", "cleartext-secret"},
		{"md5", "ttl_md5", "md5-secret"},
		{"scram", "ttl_scram", "scram-secret"},
	} {
		t.Run(c.name, func(t *testing.T) {
			u, _ := url.Parse(p.connString(t, "postgres"))
			u.User = url.UserPassword(c.user, c.password)
			conn, err := pgx.Connect(testContext(t), u.String())
			if err != nil {
				t.Fatalf("login through proxy: %v", err)
			}
			defer conn.Close(testContext(t))
			if got := queryString(t, conn, "SELECT current_user::text"); got != c.user {
				t.Fatalf("current_user = %q", got)
			}
			if c.password == "" {
				return
			}
			u.User = url.UserPassword(c.user, "wrong")
			_, err = pgx.Connect(testContext(t), u.String())
			requireCode(t, err, "28P01")
		})
	}
}

func TestCancelRequest(t *testing.T) {
	p := startProxy(t, Config{})
	conn := p.connect(t, "postgres", pgx.QueryExecModeCacheStatement)
	ctx := testContext(t)
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := conn.Exec(ctx, "SELECT pg_sleep(10)")
		done <- err
	}()
	// Cancel once the server runs the statement: a cancel that arrives
	// before it is lost, as with the server alone.
	waitActive(t, 1)
	if err := conn.PgConn().CancelRequest(ctx); err != nil {
		t.Fatalf("CancelRequest: %v", err)
	}
	err := <-done
	requireCode(t, err, "57014")
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("cancel took %v", d)
	}
	mustExec(t, conn, "SELECT 1")
	if got := counterValue(t, p.reg, "ttlproxy_proxy_cancel_requests_total"); got != 1 {
		t.Fatalf("cancel_requests_total = %v", got)
	}
}

func TestUpstreamUnreachable(t *testing.T) {
	sessionModeOnly(t, "counts a dial per client and wants 08001 at once; a pool keeps its clients waiting while it retries a refused login (TestPoolLoginTransient)")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close()
	p := startProxy(t, Config{Upstream: dead, DialTimeout: time.Second})
	for range 2 {
		_, err := pgx.Connect(testContext(t), p.connString(t, "postgres"))
		pe := requireCode(t, err, codeUnableToConnect)
		if pe.Severity != "FATAL" {
			t.Fatalf("severity %s", pe.Severity)
		}
	}
	if err := p.srv.CheckUpstream(testContext(t)); err == nil {
		t.Fatal("CheckUpstream succeeded on a dead upstream")
	}
	if got := counterValue(t, p.reg, "ttlproxy_proxy_upstream_errors_total"); got < 2 {
		t.Fatalf("upstream_errors_total = %v", got)
	}
}

func TestUpstreamLostMidSession(t *testing.T) {
	sessionModeOnly(t, "the server is lost between statements; in transaction mode the client holds none then, and the next statement runs on another (TestPooledServerLost)")
	fwd := startForwarder(t, pgtest.Server(t).Addr())
	p := startProxy(t, Config{Upstream: fwd.addr})
	if err := p.srv.CheckUpstream(testContext(t)); err != nil {
		t.Fatal(err)
	}
	conn := p.connect(t, "postgres", pgx.QueryExecModeCacheStatement)
	mustExec(t, conn, "SELECT 1")
	fwd.cutAll()
	_, err := conn.Exec(testContext(t), "SELECT 2")
	pe := requireCode(t, err, codeConnectionFailure)
	if pe.Severity != "FATAL" {
		t.Fatalf("severity %s", pe.Severity)
	}
	// The proxy serves new clients.
	fresh := p.connect(t, "postgres", pgx.QueryExecModeCacheStatement)
	mustExec(t, fresh, "SELECT 3")
}

func TestServerTerminatesBackend(t *testing.T) {
	sessionModeOnly(t, "the backend is terminated between statements; in transaction mode the client holds no server then (TestPooledServerLost)")
	p := startProxy(t, Config{})
	conn := p.connect(t, "postgres", pgx.QueryExecModeCacheStatement)
	var pid int
	if err := conn.QueryRow(testContext(t), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	execDirect(t, "postgres", "SELECT pg_terminate_backend("+itoa(pid)+")")
	// The server's own FATAL reaches the client, not one of the proxy's.
	_, err := conn.Exec(testContext(t), "SELECT 1")
	requireCode(t, err, "57P01")
}

func TestGarbageClosesOnlyThatClient(t *testing.T) {
	p := startProxy(t, Config{MaxMessageBytes: 1 << 20})
	bystander := p.connect(t, "postgres", pgx.QueryExecModeCacheStatement)
	for _, c := range []struct {
		name string
		data []byte
		code string
	}{
		{"length_3", []byte{'Q', 0, 0, 0, 3}, codeProtocolViolation},
		{"negative_length", []byte{'Q', 0x80, 0, 0, 0}, codeProtocolViolation},
		{"length_2GB", []byte{'Q', 0x7f, 0xff, 0xff, 0xff}, codeProgramLimit},
		{"over_limit", []byte{'d', 0, 0x10, 0, 1}, codeProgramLimit},
		{"query_without_nul", []byte{'Q', 0, 0, 0, 5, 'x'}, codeProtocolViolation},
		{"unknown_type", []byte{'!', 0, 0, 0, 4}, codeProtocolViolation}, // the server's answer
	} {
		t.Run(c.name, func(t *testing.T) {
			pc, err := pgconn.Connect(testContext(t), p.connString(t, "postgres"))
			if err != nil {
				t.Fatal(err)
			}
			hc, err := pc.Hijack()
			if err != nil {
				t.Fatal(err)
			}
			raw := &rawClient{hc.Conn}
			defer raw.Close()
			_ = raw.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := raw.Write(c.data); err != nil {
				t.Fatal(err)
			}
			b, err := raw.readAll()
			if err != nil {
				t.Fatalf("reading until close: %v", err)
			}
			if codes := errorCodes(b); !slices.Equal(codes, []string{c.code}) {
				t.Fatalf("got errors %v, want [%s]", codes, c.code)
			}
		})
	}
	for _, c := range []struct {
		name string
		data []byte
	}{
		{"http_request", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")},
		{"startup_length_3", []byte{0, 0, 0, 3}},
	} {
		t.Run(c.name, func(t *testing.T) {
			raw := dialRaw(t, p.addr)
			_, _ = raw.Write(c.data)
			b, _ := raw.readAll()
			if codes := errorCodes(b); !slices.Equal(codes, []string{codeProtocolViolation}) {
				t.Fatalf("got errors %v (%q)", codes, b)
			}
		})
	}
	mustExec(t, bystander, "SELECT 1")
}

// startupRaw sends a StartupMessage for ttl_trust and reads to the first
// ReadyForQuery.
func startupRaw(t *testing.T, c net.Conn) {
	t.Helper()
	fe := pgproto3.NewFrontend(c, c)
	fe.Send(&pgproto3.StartupMessage{
		ProtocolVersion: pgproto3.ProtocolVersionNumber,
		Parameters:      map[string]string{"user": "ttl_trust", "database": "postgres"},
	})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	for {
		msg, err := fe.Receive()
		if err != nil {
			t.Fatal(err)
		}
		switch m := msg.(type) {
		case *pgproto3.ErrorResponse:
			t.Fatalf("startup: %s %s", m.Code, m.Message)
		case *pgproto3.ReadyForQuery:
			return
		}
	}
}

func negotiationRequest(code uint32) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint32(b, 8)
	binary.BigEndian.PutUint32(b[4:], code)
	return b
}

func TestSSLAndGSSRequestsDeclined(t *testing.T) {
	sessionModeOnly(t, "logs in as a role the server trusts, without the password the proxy's own authentication asks for")
	p := startProxy(t, Config{})
	ensureRole(t, roleSQL("ttl_trust", "unused"))
	raw := dialRaw(t, p.addr)
	for _, code := range []uint32{wire.GSSEncRequestCode, wire.SSLRequestCode} {
		if _, err := raw.Write(negotiationRequest(code)); err != nil {
			t.Fatal(err)
		}
		var b [1]byte
		if _, err := io.ReadFull(raw, b[:]); err != nil || b[0] != 'N' {
			t.Fatalf("request %d answered %q, %v", code, b[0], err)
		}
	}
	startupRaw(t, raw)

	// pgx's default sslmode=prefer falls back to plain.
	u, _ := url.Parse(p.connString(t, "postgres"))
	q := u.Query()
	q.Set("sslmode", "prefer")
	u.RawQuery = q.Encode()
	conn, err := pgx.Connect(testContext(t), u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(testContext(t))
	if _, ok := conn.PgConn().Conn().(*tls.Conn); ok {
		t.Fatal("TLS without a TLSConfig")
	}
}

func TestTLS(t *testing.T) {
	ensureRole(t, "SET password_encryption = 'scram-sha-256'; "+roleSQL("ttl_scram", "scram-secret"))
	p := startProxy(t, Config{TLSConfig: &tls.Config{Certificates: []tls.Certificate{selfSigned(t)}}})
	for _, c := range []struct {
		user        *url.Userinfo
		negotiation string
	}{
		{nil, "postgres"},
		{url.UserPassword("ttl_scram", "scram-secret"), "postgres"},
		{nil, "direct"},
	} {
		u, _ := url.Parse(p.connString(t, "postgres"))
		if c.user != nil {
			u.User = c.user
		}
		q := u.Query()
		q.Set("sslmode", "require")
		q.Set("sslnegotiation", c.negotiation)
		u.RawQuery = q.Encode()
		conn, err := pgx.Connect(testContext(t), u.String())
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := conn.PgConn().Conn().(*tls.Conn); !ok {
			t.Fatal("not a TLS connection")
		}
		if got := queryString(t, conn, "SELECT 'over tls'::text"); got != "over tls" {
			t.Fatalf("got %q", got)
		}
		// Messages and results many TLS records and socket reads long.
		var n int
		if err := conn.QueryRow(testContext(t), "SELECT length($1::text)", strings.Repeat("y", 300_000)).Scan(&n); err != nil || n != 300_000 {
			t.Fatalf("a 300 kB parameter over TLS: length %d, %v", n, err)
		}
		rows, err := conn.Query(testContext(t), "SELECT g, repeat('z', 100) FROM generate_series(1, 20000) g")
		if err != nil {
			t.Fatal(err)
		}
		n = 0
		for rows.Next() {
			n++
		}
		if err := rows.Err(); err != nil || n != 20000 {
			t.Fatalf("a 2 MB result over TLS: %d rows, %v", n, err)
		}
		_ = conn.Close(testContext(t))
	}
}

func TestFilterSASL(t *testing.T) {
	in, _ := (&pgproto3.AuthenticationSASL{AuthMechanisms: []string{"SCRAM-SHA-256-PLUS", "SCRAM-SHA-256"}}).Encode(nil)
	var got pgproto3.AuthenticationSASL
	if err := got.Decode(filterSASL(in)[wire.HeaderLen:]); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.AuthMechanisms, []string{"SCRAM-SHA-256"}) {
		t.Fatalf("mechanisms %v", got.AuthMechanisms)
	}
	plain, _ := (&pgproto3.AuthenticationSASL{AuthMechanisms: []string{"SCRAM-SHA-256"}}).Encode(nil)
	if out := filterSASL(plain); &out[0] != &plain[0] {
		t.Fatal("unchanged message was copied")
	}
}

func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "ttlproxy test"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// forwarder is a plain TCP relay between the proxy and the server whose
// connections the test can cut, to lose the upstream mid-session.
type forwarder struct {
	addr  string
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func startForwarder(t *testing.T, target string) *forwarder {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &forwarder{addr: ln.Addr().String(), ln: ln}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			f.mu.Lock()
			f.conns = append(f.conns, c, up)
			f.mu.Unlock()
			f.wg.Add(2)
			go func() { defer f.wg.Done(); _, _ = io.Copy(up, c); _ = up.Close() }()
			go func() { defer f.wg.Done(); _, _ = io.Copy(c, up); _ = c.Close() }()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		f.cutAll()
		f.wg.Wait()
	})
	return f
}

func (f *forwarder) cutAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		_ = c.Close()
	}
	f.conns = nil
}
