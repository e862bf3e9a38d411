package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ttlproxy/ttlproxy/config"
)

// runCmd runs one command line in-process.
func runCmd(t *testing.T, ctx context.Context, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRunCommands(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		code       int
		wantOut    string // substring of stdout
		wantErr    string // substring of stderr
		wantNoOut  bool
		wantNoErrs bool
	}{
		{name: "no command", args: nil, code: 2, wantErr: "Usage:", wantNoOut: true},
		{name: "unknown command", args: []string{"serv"}, code: 2, wantErr: `unknown command "serv"`},
		{name: "help", args: []string{"help"}, code: 0, wantOut: "ttlproxy serve --config FILE", wantNoErrs: true},
		{name: "--help", args: []string{"--help"}, code: 0, wantOut: "ttlproxy demo"},
		{name: "serve -h", args: []string{"serve", "-h"}, code: 0, wantErr: "-admin-listen host:port"},
		{name: "serve without config", args: []string{"serve"}, code: 2, wantErr: "--config is required"},
		{name: "serve unknown flag", args: []string{"serve", "--port", "1"}, code: 2, wantErr: "flag provided but not defined: -port"},
		{name: "serve extra argument", args: []string{"serve", "--config", "x.yaml", "now"}, code: 2, wantErr: `unexpected argument "now"`},
		{name: "serve bad upstream flag", args: []string{"serve", "--config", "x.yaml", "--upstream", ":5432"}, code: 2,
			wantErr: `--upstream: invalid address ":5432": host is empty`},
		{name: "serve bad listen flag", args: []string{"serve", "--config", "x.yaml", "--listen", "6432"}, code: 2,
			wantErr: `--listen: invalid address "6432": want host:port`},
		{name: "serve bad log level", args: []string{"serve", "--config", "x.yaml", "--log-level", "loud"}, code: 2,
			wantErr: `invalid log level "loud"`},
		{name: "serve bad log format", args: []string{"serve", "--config", "x.yaml", "--log-format", "xml"}, code: 2,
			wantErr: `invalid log format "xml" (want text or json)`},
		{name: "serve missing file", args: []string{"serve", "--config", "/nonexistent/ttlproxy.yaml"}, code: 1,
			wantErr: "open /nonexistent/ttlproxy.yaml: no such file or directory"},
		{name: "rewrite without config", args: []string{"rewrite", "SELECT 1"}, code: 2, wantErr: "--config is required"},
		{name: "rewrite without sql", args: []string{"rewrite", "--config", "x.yaml"}, code: 2, wantErr: "missing SQL argument"},
		{name: "rewrite two args", args: []string{"rewrite", "--config", "x.yaml", "SELECT", "1"}, code: 2,
			wantErr: "want one SQL argument, got 2 (quote the statement)"},
		{name: "demo bad port", args: []string{"demo", "--port", "70000"}, code: 2, wantErr: "--port 70000: out of range"},
		{name: "demo bad duration", args: []string{"demo", "--duration", "soon"}, code: 2, wantErr: `invalid value "soon" for flag -duration`},
		{name: "demo extra argument", args: []string{"demo", "x"}, code: 2, wantErr: `unexpected argument "x"`},
		{name: "install without config", args: []string{"install", "--dsn", "postgres://x@y/z"}, code: 2, wantErr: "--config is required"},
		{name: "install without dsn", args: []string{"install", "--config", "x.yaml"}, code: 2, wantErr: "--dsn is required"},
		{name: "install missing file", args: []string{"install", "--config", "/nonexistent/t.yaml", "--dsn", "postgres://x@y/z"}, code: 1,
			wantErr: "open /nonexistent/t.yaml"},
		{name: "version extra argument", args: []string{"version", "x"}, code: 2, wantErr: `unexpected argument "x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runCmd(t, context.Background(), tt.args...)
			if code != tt.code {
				t.Errorf("exit code %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, out, errOut)
			}
			if !strings.Contains(out, tt.wantOut) {
				t.Errorf("stdout %q does not contain %q", out, tt.wantOut)
			}
			if !strings.Contains(errOut, tt.wantErr) {
				t.Errorf("stderr %q does not contain %q", errOut, tt.wantErr)
			}
			if tt.wantNoOut && out != "" {
				t.Errorf("unexpected stdout %q", out)
			}
			if tt.wantNoErrs && errOut != "" {
				t.Errorf("unexpected stderr %q", errOut)
			}
		})
	}
}

func TestParseServeFlagsOverrides(t *testing.T) {
	o, code, ok := parseServeFlags([]string{"--config", "c.yaml", "--listen", ":7000",
		"--upstream", "db:5433", "--admin-listen", "127.0.0.1:0", "--log-format", "json"}, io.Discard)
	if !ok || code != 0 {
		t.Fatalf("parseServeFlags: code %d ok %v", code, ok)
	}
	cfg := &config.Config{Listen: "a:1", Upstream: "b:2", AdminListen: "c:3"}
	o.applyOverrides(cfg)
	if cfg.Listen != ":7000" || cfg.Upstream != "db:5433" || cfg.AdminListen != "127.0.0.1:0" {
		t.Errorf("overrides not applied: %+v", cfg)
	}
	if o.logFormat != "json" || o.logLevel != "info" {
		t.Errorf("log flags: %+v", o)
	}

	o, _, _ = parseServeFlags([]string{"--config", "c.yaml"}, io.Discard)
	cfg = &config.Config{Listen: "a:1", Upstream: "b:2", AdminListen: "c:3", PeerID: 4}
	o.applyOverrides(cfg)
	if cfg.Listen != "a:1" || cfg.Upstream != "b:2" || cfg.AdminListen != "c:3" || cfg.PeerID != 4 {
		t.Errorf("empty flags changed the file's values: %+v", cfg)
	}

	// --peer-id overrides peer_id, 0 included.
	for _, id := range []int{0, 3, 16383} {
		o, code, ok := parseServeFlags([]string{"--config", "c.yaml", "--peer-id", strconv.Itoa(id)}, io.Discard)
		if !ok || code != 0 {
			t.Fatalf("--peer-id %d: code %d ok %v", id, code, ok)
		}
		cfg = &config.Config{PeerID: 7}
		o.applyOverrides(cfg)
		if cfg.PeerID != id {
			t.Errorf("--peer-id %d: peer_id %d", id, cfg.PeerID)
		}
	}
	for _, bad := range []string{"-1", "16384", "x"} {
		var errOut strings.Builder
		if _, code, ok := parseServeFlags([]string{"--config", "c.yaml", "--peer-id", bad}, &errOut); ok || code != exitUsage {
			t.Errorf("--peer-id %s: code %d ok %v", bad, code, ok)
		} else if !strings.Contains(errOut.String(), "peer-id") {
			t.Errorf("--peer-id %s: %q", bad, errOut.String())
		}
	}
}

func TestServeConfigError(t *testing.T) {
	p := writeFile(t, "bad.yaml", "upstream: db:5432\ntables:\n  - table: s\n    default_ttl: 3x\n")
	code, _, errOut := runCmd(t, context.Background(), "serve", "--config", p)
	want := p + `: tables[0].default_ttl: invalid duration "3x"`
	if code != 1 || !strings.Contains(errOut, want) {
		t.Errorf("code %d, stderr %q; want 1 and %q", code, errOut, want)
	}
}

// TestServeStartsAndStops runs serve against a TCP listener standing in for
// the database (it refuses TLS), checks the admin endpoints, then cancels as SIGTERM would.
func TestServeStartsAndStops(t *testing.T) {
	upstream, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer upstream.Close()
	go func() {
		// Answer the SSLRequest (upstream_tls defaults to prefer) as a
		// server without TLS does.
		for {
			c, err := upstream.Accept()
			if err != nil {
				return
			}
			var req [8]byte
			if _, err := io.ReadFull(c, req[:]); err == nil {
				_, _ = c.Write([]byte{'N'})
			}
			_ = c.Close()
		}
	}()
	adminAddr := freeAddr(t)
	p := writeFile(t, "ttlproxy.yaml", "upstream: "+upstream.Addr().String()+
		"\nlisten: 127.0.0.1:0\ntables:\n  - table: sessions\n    default_ttl: 1h\n")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	var out, errOut bytes.Buffer
	go func() {
		done <- run(ctx, []string{"serve", "--config", p, "--admin-listen", adminAddr, "--log-format", "json"}, &out, &errOut)
	}()
	base := "http://" + adminAddr
	waitHTTP(t, base+"/healthz")

	if code, body := get(t, base+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz = %d %q", code, body)
	}
	if code, body := get(t, base+"/readyz"); code != 200 || body != "ok\n" {
		t.Errorf("/readyz = %d %q", code, body)
	}
	code, body := get(t, base+"/metrics")
	if code != 200 {
		t.Errorf("/metrics = %d", code)
	}
	for _, m := range []string{"go_goroutines", "process_cpu_seconds_total", "ttlproxy_build_info{",
		"ttlproxy_proxy_client_connections "} {
		if !strings.Contains(body, m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
	if strings.Contains(body, "ttlproxy_sweeper_") {
		t.Errorf("/metrics has sweeper metrics without a sweeper section")
	}

	upstream.Close()
	if code, body := get(t, base+"/readyz"); code != 503 || !strings.Contains(body, "connecting to upstream") {
		t.Errorf("/readyz with the upstream down = %d %q", code, body)
	}

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("serve exited %d after cancel; stderr:\n%s", code, errOut.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not stop after cancel")
	}
	logs := errOut.String()
	if !strings.Contains(logs, `"msg":"ttlproxy starting"`) || !strings.Contains(logs, `"msg":"stopped"`) {
		t.Errorf("logs lack start or stop:\n%s", logs)
	}
}

func TestServeListenError(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	p := writeFile(t, "ttlproxy.yaml", "upstream: 127.0.0.1:1\nlisten: "+busy.Addr().String()+"\n")
	code, _, errOut := runCmd(t, context.Background(), "serve", "--config", p)
	if code != 1 || !strings.Contains(errOut, "address already in use") {
		t.Errorf("code %d, stderr %q", code, errOut)
	}
}

func TestAdminReadyzWhileDraining(t *testing.T) {
	cfg, err := config.Parse([]byte("upstream: 127.0.0.1:1\n"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := newStack(cfg, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	st.draining.Store(true)
	rec := httptest.NewRecorder()
	st.adminHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != 503 || !strings.Contains(rec.Body.String(), "shutting down") {
		t.Errorf("/readyz while draining = %d %q", rec.Code, rec.Body.String())
	}
	rec = httptest.NewRecorder()
	st.adminHandler().ServeHTTP(rec, httptest.NewRequest("POST", "/healthz", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /healthz = %d", rec.Code)
	}
}

func TestServeTLSFilesMissing(t *testing.T) {
	p := writeFile(t, "ttlproxy.yaml", "upstream: 127.0.0.1:1\ntls: {cert_file: /nonexistent/c.pem, key_file: /nonexistent/k.pem}\n")
	code, _, errOut := runCmd(t, context.Background(), "serve", "--config", p)
	if code != 1 || !strings.Contains(errOut, "tls: open /nonexistent/c.pem") {
		t.Errorf("code %d, stderr %q", code, errOut)
	}
}

const rewriteConfig = `upstream: 127.0.0.1:5432
limits: {max_nesting_depth: 5}
tables:
  - table: sessions
    default_ttl: 1h
  - table: app.events
`

func TestRewriteCommand(t *testing.T) {
	p := writeFile(t, "ttlproxy.yaml", rewriteConfig)
	tests := []struct {
		name string
		args []string
		code int
		out  *regexp.Regexp // stdout must match
		err  *regexp.Regexp // stderr must match
	}{
		{name: "untouched", args: []string{"SELECT 1"}, code: 0,
			out: regexp.MustCompile(`^SELECT 1\n$`), err: regexp.MustCompile(`^$`)},
		{name: "other table byte for byte", args: []string{"select *  from   users -- hi"}, code: 0,
			out: regexp.MustCompile(`^select \*  from   users -- hi\n$`)},
		{name: "read filtered", args: []string{"SELECT id FROM sessions"}, code: 0,
			out: regexp.MustCompile(`expires_at.*now\(\)`)},
		{name: "insert stamped", args: []string{"INSERT INTO sessions (id) VALUES (1)"}, code: 0,
			out: regexp.MustCompile(`expires_at[\s\S]*interval '3600 seconds'`)},
		{name: "search path", args: []string{"--search-path", "app,public", "SELECT * FROM events"}, code: 0,
			out: regexp.MustCompile(`expires_at`)},
		// A TTL table name the search path does not place is refused: the
		// rewriter writes the schema of every such name.
		{name: "not on search path", args: []string{"SELECT * FROM events"}, code: 1,
			out: regexp.MustCompile(`^$`), err: regexp.MustCompile(`^rejected: SQLSTATE 0A000: .*cannot tell which schema`)},
		{name: "rejected", args: []string{"SELECT * FROM sessions WHERE id IN ((((((((1))))))))"}, code: 1,
			out: regexp.MustCompile(`^$`), err: regexp.MustCompile(`^rejected: SQLSTATE [0-9A-Z]{5}: .+\n`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"rewrite", "--config", p}, tt.args...)
			code, out, errOut := runCmd(t, context.Background(), args...)
			if code != tt.code {
				t.Errorf("exit code %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, out, errOut)
			}
			if tt.out != nil && !tt.out.MatchString(out) {
				t.Errorf("stdout %q does not match %s", out, tt.out)
			}
			if tt.err != nil && !tt.err.MatchString(errOut) {
				t.Errorf("stderr %q does not match %s", errOut, tt.err)
			}
		})
	}
}

func TestRewriteStdin(t *testing.T) {
	p := writeFile(t, "ttlproxy.yaml", rewriteConfig)
	old := stdinReader
	defer func() { stdinReader = old }()
	stdinReader = strings.NewReader("SELECT 2;\nSELECT 3")
	code, out, errOut := runCmd(t, context.Background(), "rewrite", "--config", p, "-")
	if code != 0 || out != "SELECT 2;\nSELECT 3\n" {
		t.Errorf("code %d stdout %q stderr %q", code, out, errOut)
	}
}

func TestRewriteConfigError(t *testing.T) {
	p := writeFile(t, "ttlproxy.yaml", "upstream: db:1\ntables: [{table: s, rule: derived}]\n")
	code, _, errOut := runCmd(t, context.Background(), "rewrite", "--config", p, "SELECT 1")
	if want := "tables[0].base_column: required with rule derived"; code != 1 || !strings.Contains(errOut, want) {
		t.Errorf("code %d stderr %q, want %q", code, errOut, want)
	}
}

func TestVersion(t *testing.T) {
	code, out, errOut := runCmd(t, context.Background(), "version")
	if code != 0 || errOut != "" {
		t.Fatalf("code %d stderr %q", code, errOut)
	}
	if !regexp.MustCompile(`^ttlproxy \S+\n`).MatchString(out) || !strings.Contains(out, "go:      go1.") ||
		!regexp.MustCompile(`\nparser:  pg_query_go v\d+\.\d+\.\d+, PostgreSQL 1\d\.\d+ \(1\d{5}\) grammar\n`).MatchString(out) {
		t.Errorf("version output:\n%s", out)
	}

	old := version
	defer func() { version = old }()
	version = "v9.8.7"
	_, out, _ = runCmd(t, context.Background(), "version")
	if !strings.HasPrefix(out, "ttlproxy v9.8.7\n") {
		t.Errorf("with -X main.version: %q", out)
	}
	if v := readVersion(); v.Version != "v9.8.7" {
		t.Errorf("readVersion().Version = %q", v.Version)
	}
}

func TestNewLogger(t *testing.T) {
	var buf bytes.Buffer
	log, err := newLogger(&buf, "warn", "json")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hidden")
	log.Warn("shown", "listen_addr", "x")
	if got := buf.String(); strings.Contains(got, "hidden") || !strings.Contains(got, `"listen_addr":"x"`) {
		t.Errorf("log output %q", got)
	}
	if _, err := newLogger(&buf, "DEBUG", "TEXT"); err != nil {
		t.Errorf("upper case level and format: %v", err)
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url) //nolint:gosec // the admin server the test started on localhost
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func waitHTTP(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(url) //nolint:gosec // the admin server the test started on localhost
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not up: %v", url, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
