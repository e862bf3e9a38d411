package main

import (
	"crypto/subtle"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/prometheus/exporter-toolkit/web"

	"github.com/ttlproxy/ttlproxy/config"
)

// The admin server's guarded endpoints. /metrics, /healthz and /readyz are
// open to whoever passes the web configuration's TLS and basic auth (the
// Prometheus convention); /status shows users, databases and client
// addresses and POST /-/reload changes what the proxy does, so they answer
// 403 unless the admin section enables them (Prometheus keeps its
// lifecycle endpoints behind --web.enable-lifecycle the same way) or the
// request carries the bearer token.
type endpoint int

const (
	endpointStatus endpoint = iota
	endpointLifecycle
)

// adminAccess is the admin section in force.
type adminAccess struct {
	status, lifecycle bool
	// token is the bearer token's bytes; nil: no token.
	token []byte
}

// newAdminAccess reads the admin section's files: the bearer token and,
// to report a broken one at start, the web configuration (exporter-toolkit
// reads it again per request).
func newAdminAccess(a *config.Admin) (*adminAccess, error) {
	if err := web.Validate(a.WebConfigFile); err != nil {
		return nil, fmt.Errorf("admin.web_config_file: %s: %w", a.WebConfigFile, err)
	}
	acc := &adminAccess{status: a.EnableStatus, lifecycle: a.EnableLifecycle}
	if a.BearerTokenFile != "" {
		tok, err := readToken(a.BearerTokenFile)
		if err != nil {
			return nil, fmt.Errorf("admin.bearer_token_file: %w", err)
		}
		acc.token = []byte(tok)
	}
	return acc, nil
}

// allows reports whether r may use e, and what to answer when not.
func (a *adminAccess) allows(e endpoint, r *http.Request) (int, string) {
	enabled, key := a.status, "admin.enable_status"
	if e == endpointLifecycle {
		enabled, key = a.lifecycle, "admin.enable_lifecycle"
	}
	if enabled {
		return http.StatusOK, ""
	}
	if a.token == nil {
		return http.StatusForbidden, fmt.Sprintf("%s is disabled: set %s or admin.bearer_token_file", r.URL.Path, key)
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if ok && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), a.token) == 1 {
		return http.StatusOK, ""
	}
	return http.StatusUnauthorized, "a bearer token is required (admin.bearer_token_file)"
}

// guard serves h for the requests the admin section allows to use e.
func (s *stack) guard(e endpoint, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		code, msg := s.access.Load().allows(e, r)
		if code != http.StatusOK {
			if code == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="ttlproxy"`)
			}
			http.Error(w, msg, code)
			return
		}
		h(w, r)
	}
}

// loadClientCert reads the certificate presented to clients; the running
// one stays when the files do not load.
func (s *stack) loadClientCert(t *config.TLS) error {
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return fmt.Errorf("tls: %w", err)
	}
	s.clientCert.Store(&cert)
	return nil
}

// readToken reads a bearer token file (admin.bearer_token_file, and
// `ttlproxy status --token-file`); surrounding white space is not part of
// the token.
func readToken(path string) (string, error) {
	b, err := os.ReadFile(path) //nolint:gosec // the file the operator names

	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return tok, nil
}
