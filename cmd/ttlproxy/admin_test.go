package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// startServe runs `ttlproxy serve` on the configuration file p with the
// admin server on a free address, and returns the admin base URL and the
// log. It stops when the test ends.
func startServe(t *testing.T, p string) (string, *lockedBuffer) {
	t.Helper()
	adminAddr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var errOut lockedBuffer
	go func() {
		done <- run(ctx, []string{"serve", "--config", p, "--admin-listen", adminAddr}, io.Discard, &errOut)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("serve exited %d:\n%s", code, errOut.String())
			}
		case <-time.After(15 * time.Second):
			t.Error("serve did not stop")
		}
	})
	waitHTTP(t, "http://"+adminAddr+"/healthz")
	return "http://" + adminAddr, &errOut
}

// do sends a request with an optional Authorization header.
func do(t *testing.T, client *http.Client, method, url, auth string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// deadUpstream is an address nothing listens on: the admin tests need no
// database.
func deadUpstream(t *testing.T) string { return freeAddr(t) }

// TestAdminLockedByDefault: /metrics, /healthz and /readyz answer anyone;
// /status and POST /-/reload answer 403 until enabled, or 401 without the
// bearer token when one is configured; a reload applies a new admin
// section.
func TestAdminLockedByDefault(t *testing.T) {
	p := writeFile(t, "ttlproxy.yaml", "upstream: "+deadUpstream(t)+"\nlisten: 127.0.0.1:0\n")
	base, _ := startServe(t, p)
	c := http.DefaultClient
	for _, path := range []string{"/metrics", "/healthz"} {
		if code, body := do(t, c, "GET", base+path, ""); code != 200 {
			t.Errorf("%s = %d %s", path, code, body)
		}
	}
	if code, _ := do(t, c, "GET", base+"/readyz", ""); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz with a dead upstream = %d, want 503", code)
	}
	if code, body := do(t, c, "GET", base+"/status", ""); code != 403 || !strings.Contains(body, "admin.enable_status") {
		t.Errorf("/status = %d %q, want 403 naming admin.enable_status", code, body)
	}
	if code, body := do(t, c, "POST", base+"/-/reload", ""); code != 403 || !strings.Contains(body, "admin.enable_lifecycle") {
		t.Errorf("POST /-/reload = %d %q, want 403 naming admin.enable_lifecycle", code, body)
	}
	var stOut, stErr bytes.Buffer
	if code := run(context.Background(), []string{"status", "--admin", base}, &stOut, &stErr); code == 0 ||
		!strings.Contains(stErr.String(), "403") {
		t.Errorf("ttlproxy status without access: %d %s", code, stErr.String())
	}
}

func TestAdminBearerToken(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	head := "upstream: " + deadUpstream(t) + "\nlisten: 127.0.0.1:0\n"
	p := writeFile(t, "ttlproxy.yaml", head+"admin: {bearer_token_file: "+tokenFile+"}\n")
	base, _ := startServe(t, p)
	c := http.DefaultClient
	for _, auth := range []string{"", "Bearer wrong", "Basic czNjcmV0LXRva2Vu"} {
		if code, _ := do(t, c, "GET", base+"/status", auth); code != 401 {
			t.Errorf("/status with %q = %d, want 401", auth, code)
		}
		if code, _ := do(t, c, "POST", base+"/-/reload", auth); code != 401 {
			t.Errorf("POST /-/reload with %q = %d, want 401", auth, code)
		}
	}
	if code, body := do(t, c, "GET", base+"/status", "Bearer s3cret-token"); code != 200 || !strings.Contains(body, `"generation"`) {
		t.Errorf("/status with the token = %d %s", code, body)
	}
	var stOut, stErr bytes.Buffer
	if code := run(context.Background(), []string{"status", "--admin", base, "--token-file", tokenFile}, &stOut, &stErr); code != 0 ||
		!strings.Contains(stOut.String(), "configuration generation 1") {
		t.Errorf("ttlproxy status --token-file: %d\n%s%s", code, stOut.String(), stErr.String())
	}

	// A reload with the token opens /status to everyone.
	if err := os.WriteFile(p, []byte(head+"admin: {enable_status: true, bearer_token_file: "+tokenFile+"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, body := do(t, c, "POST", base+"/-/reload", "Bearer s3cret-token"); code != 200 {
		t.Fatalf("POST /-/reload with the token = %d %s", code, body)
	}
	if code, body := do(t, c, "GET", base+"/status", ""); code != 200 || !strings.Contains(body, `"generation": 2`) {
		t.Errorf("/status after enabling it = %d %s", code, body)
	}
	if code, _ := do(t, c, "POST", base+"/-/reload", ""); code != 401 {
		t.Errorf("POST /-/reload without the token = %d, want 401", code)
	}
}

// writeCert writes a self-signed certificate for 127.0.0.1 named cn to
// dir/cn.crt and dir/cn.key and returns the paths.
func writeCert(t *testing.T, dir, cn string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, cn+".crt"), filepath.Join(dir, cn+".key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// TestAdminWebConfig: the admin server takes exporter-toolkit's web
// configuration: TLS and basic auth on every endpoint.
func TestAdminWebConfig(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := writeCert(t, dir, "admin")
	hash, err := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webConfig := filepath.Join(dir, "web.yml")
	if err := os.WriteFile(webConfig, []byte("tls_server_config:\n  cert_file: "+certFile+"\n  key_file: "+keyFile+
		"\nbasic_auth_users:\n  prometheus: "+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := writeFile(t, "ttlproxy.yaml", "upstream: "+deadUpstream(t)+"\nlisten: 127.0.0.1:0\nadmin: {web_config_file: "+webConfig+", enable_status: true}\n")
	base, _ := startServe(t, p)
	if code, _ := do(t, http.DefaultClient, "GET", base+"/metrics", ""); code != http.StatusBadRequest {
		t.Errorf("plain HTTP to the TLS admin server = %d, want 400", code)
	}
	pool := x509.NewCertPool()
	pem, err := os.ReadFile(certFile) //nolint:gosec // the test's own certificate
	if err != nil {
		t.Fatal(err)
	}
	pool.AppendCertsFromPEM(pem)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer c.CloseIdleConnections()
	https := strings.Replace(base, "http://", "https://", 1)
	for _, path := range []string{"/metrics", "/healthz", "/status"} {
		if code, _ := do(t, c, "GET", https+path, ""); code != 401 {
			t.Errorf("%s without credentials = %d, want 401", path, code)
		}
		if code, _ := do(t, c, "GET", https+path, "Basic cHJvbWV0aGV1czp3cm9uZw=="); code != 401 {
			t.Errorf("%s with a wrong password = %d, want 401", path, code)
		}
		if code, body := do(t, c, "GET", https+path, "Basic cHJvbWV0aGV1czpwdw=="); code != 200 {
			t.Errorf("%s with basic auth = %d %s", path, code, body)
		}
	}
}

func TestAdminWebConfigInvalid(t *testing.T) {
	webConfig := writeFile(t, "web.yml", "basic_auth_users:\n  prometheus: not-a-bcrypt-hash\n  other: [\n")
	p := writeFile(t, "ttlproxy.yaml", "upstream: "+deadUpstream(t)+"\nadmin: {web_config_file: "+webConfig+"}\n")
	code, _, stderr := runCmd(t, context.Background(), "serve", "--config", p, "--admin-listen", "127.0.0.1:0")
	if code == 0 || !strings.Contains(stderr, "admin.web_config_file") {
		t.Errorf("serve with a broken web config: %d %s", code, stderr)
	}
}

// clientCertName is the subject of the certificate the proxy presents to a
// client asking for TLS with an SSLRequest.
func clientCertName(t *testing.T, addr string) string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}); err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil || b[0] != 'S' {
		t.Fatalf("SSLRequest answer %q, %v", b[:], err)
	}
	// Whatever certificate the proxy presents is what the test wants to see.
	tc := tls.Client(conn, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // read, not trusted
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	return tc.ConnectionState().PeerCertificates[0].Subject.CommonName
}

// TestClientCertReload: a reload reads the client-facing certificate files
// again, so rotating them needs no restart; files that do not load keep the
// running certificate and fail the reload.
func TestClientCertReload(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := writeCert(t, dir, "first")
	listen := freeAddr(t)
	p := writeFile(t, "ttlproxy.yaml", "upstream: "+deadUpstream(t)+"\nlisten: "+listen+
		"\nadmin: {enable_lifecycle: true}\ntls: {cert_file: "+certFile+", key_file: "+keyFile+"}\n")
	base, _ := startServe(t, p)
	if got := clientCertName(t, listen); got != "first" {
		t.Fatalf("certificate %q, want first", got)
	}
	// Rotation: the files are replaced in place.
	newCert, newKey := writeCert(t, dir, "second")
	for _, f := range [][2]string{{newCert, certFile}, {newKey, keyFile}} {
		if err := os.Rename(f[0], f[1]); err != nil {
			t.Fatal(err)
		}
	}
	if got := clientCertName(t, listen); got != "first" {
		t.Fatalf("certificate %q before the reload, want first", got)
	}
	if code, body := do(t, http.DefaultClient, "POST", base+"/-/reload", ""); code != 200 {
		t.Fatalf("reload: %d %s", code, body)
	}
	if got := clientCertName(t, listen); got != "second" {
		t.Fatalf("certificate %q after the reload, want second", got)
	}
	if err := os.WriteFile(keyFile, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, body := do(t, http.DefaultClient, "POST", base+"/-/reload", ""); code != 500 || !strings.Contains(body, "tls:") {
		t.Errorf("reload with a broken key: %d %q, want 500 naming tls", code, body)
	}
	if got := clientCertName(t, listen); got != "second" {
		t.Fatalf("certificate %q after a failed reload, want second", got)
	}
}
