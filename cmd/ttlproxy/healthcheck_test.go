package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

func TestHealthURL(t *testing.T) {
	dir := t.TempDir()
	tlsWeb := filepath.Join(dir, "tls.yml")
	plainWeb := filepath.Join(dir, "plain.yml")
	if err := os.WriteFile(tlsWeb, []byte("tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(plainWeb, []byte("http_server_config:\n  http2: false\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, file, want string }{
		{"no file", "", "http://127.0.0.1:9187/healthz"},
		{"default admin_listen", "upstream: db:5432\n", "http://127.0.0.1:9187/healthz"},
		{"IPv4 wildcard", "upstream: db:5432\nadmin_listen: 0.0.0.0:9000\n", "http://127.0.0.1:9000/healthz"},
		{"no host", "upstream: db:5432\nadmin_listen: :9000\n", "http://127.0.0.1:9000/healthz"},
		{"IPv6 wildcard", "upstream: db:5432\nadmin_listen: '[::]:9000'\n", "http://[::1]:9000/healthz"},
		{"a host", "upstream: db:5432\nadmin_listen: 10.1.2.3:9000\n", "http://10.1.2.3:9000/healthz"},
		{"TLS", "upstream: db:5432\nadmin_listen: 0.0.0.0:9187\nadmin: {web_config_file: " + tlsWeb + "}\n", "https://127.0.0.1:9187/healthz"},
		{"web config without TLS", "upstream: db:5432\nadmin: {web_config_file: " + plainWeb + "}\n", "http://127.0.0.1:9187/healthz"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := ""
			if tc.file != "" {
				p = writeFile(t, "ttlproxy.yaml", tc.file)
			}
			got, err := healthURL(p)
			if err != nil || got != tc.want {
				t.Errorf("healthURL = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	if _, err := healthURL(writeFile(t, "ttlproxy.yaml", "upstream: db:5432\nbogus: 1\n")); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("a broken configuration: %v", err)
	}
}

// TestHealthcheck runs `ttlproxy healthcheck` against a running proxy's
// admin server, plain and over TLS, as the image's HEALTHCHECK does: it
// finds the server from the configuration file.
func TestHealthcheck(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := writeCert(t, dir, "admin")
	tlsWeb := filepath.Join(dir, "web.yml")
	if err := os.WriteFile(tlsWeb, []byte("tls_server_config:\n  cert_file: "+certFile+"\n  key_file: "+keyFile+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hash, err := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	authWeb := filepath.Join(dir, "auth.yml")
	if err := os.WriteFile(authWeb, []byte("basic_auth_users:\n  prometheus: "+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	head := "upstream: " + deadUpstream(t) + "\nlisten: 127.0.0.1:0\n"
	for _, tc := range []struct {
		name, admin string
		code        int
		want        string
	}{
		{"plain", "", 0, "/healthz: ok"},
		{"TLS", "admin: {web_config_file: " + tlsWeb + "}\n", 0, "https://127.0.0.1:"},
		// The probe carries no credentials: an admin server behind basic
		// auth needs its own HEALTHCHECK (docs/install.md).
		{"basic auth", "admin: {web_config_file: " + authWeb + "}\n", 1, "401 Unauthorized"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base, _ := startServe(t, writeFile(t, "serve.yaml", head+tc.admin))
			port := base[strings.LastIndex(base, ":")+1:]
			// The file as the container reads it: the admin server on
			// every address.
			p := writeFile(t, "ttlproxy.yaml", head+"admin_listen: 0.0.0.0:"+port+"\n"+tc.admin)
			code, out, errOut := runCmd(t, context.Background(), "healthcheck", "--config", p)
			if code != tc.code || !strings.Contains(out+errOut, tc.want) {
				t.Errorf("code %d stdout %q stderr %q; want %d and %q", code, out, errOut, tc.code, tc.want)
			}
		})
	}

	// Basic auth from the URL (the compose kit's health check), the
	// password kept out of the output.
	authBase, _ := startServe(t, writeFile(t, "serve.yaml", head+"admin: {web_config_file: "+authWeb+"}\n"))
	withAuth := strings.Replace(authBase, "http://", "http://prometheus:pw@", 1) + "/healthz"
	if code, out, errOut := runCmd(t, context.Background(), "healthcheck", "--url", withAuth); code != 0 ||
		!strings.Contains(out, "/healthz: ok") || strings.Contains(out+errOut, ":pw@") {
		t.Errorf("basic auth in --url: code %d stdout %q stderr %q", code, out, errOut)
	}
	wrong := strings.Replace(withAuth, ":pw@", ":wrong@", 1)
	if code, out, errOut := runCmd(t, context.Background(), "healthcheck", "--url", wrong); code != 1 ||
		!strings.Contains(errOut, "401") || strings.Contains(out+errOut, "wrong") {
		t.Errorf("a wrong password in --url: code %d stdout %q stderr %q", code, out, errOut)
	}

	base, _ := startServe(t, writeFile(t, "serve.yaml", head))
	if code, out, errOut := runCmd(t, context.Background(), "healthcheck", "--url", base+"/healthz"); code != 0 || out != base+"/healthz: ok\n" {
		t.Errorf("--url: code %d stdout %q stderr %q", code, out, errOut)
	}
	if code, _, errOut := runCmd(t, context.Background(), "healthcheck", "--url", "http://"+freeAddr(t)+"/healthz"); code != 1 ||
		!strings.Contains(errOut, "connection refused") {
		t.Errorf("nothing listening: code %d stderr %q", code, errOut)
	}
	if code, _, errOut := runCmd(t, context.Background(), "healthcheck", "--url", base, "--config", "x"); code != 2 ||
		!strings.Contains(errOut, "exclude each other") {
		t.Errorf("--url and --config: code %d stderr %q", code, errOut)
	}
}
