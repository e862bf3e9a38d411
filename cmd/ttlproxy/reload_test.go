package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// lockedBuffer is a bytes.Buffer safe for a logger writing while the test
// reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestServeReload: POST /-/reload and SIGHUP reread the file; an invalid
// file keeps the running configuration and sets the reload metric to 0; a
// key that needs a restart is reported and kept.
func TestServeReload(t *testing.T) {
	upstream, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer upstream.Close()
	adminAddr := freeAddr(t)
	good := "upstream: " + upstream.Addr().String() + "\nlisten: 127.0.0.1:0\nadmin: {enable_status: true, enable_lifecycle: true}\ntables:\n  - table: sessions\n    default_ttl: 1h\n"
	p := writeFile(t, "ttlproxy.yaml", good)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	var out bytes.Buffer
	var errOut lockedBuffer
	go func() {
		done <- run(ctx, []string{"serve", "--config", p, "--admin-listen", adminAddr, "--log-format", "json"}, &out, &errOut)
	}()
	base := "http://" + adminAddr
	waitHTTP(t, base+"/healthz")

	post := func() (int, string) {
		t.Helper()
		resp, err := http.Post(base+"/-/reload", "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	metric := func() string {
		t.Helper()
		_, body := get(t, base+"/metrics")
		for _, line := range strings.Split(body, "\n") {
			if strings.HasPrefix(line, "ttlproxy_config_last_reload_successful ") {
				return strings.TrimPrefix(line, "ttlproxy_config_last_reload_successful ")
			}
		}
		return "missing"
	}

	if code, body := post(); code != 200 {
		t.Fatalf("reload of the same file: %d %q", code, body)
	}
	// /status and ttlproxy status report the rules in force.
	if code, body := get(t, base+"/status"); code != 200 || !strings.Contains(body, `"table": "public.sessions"`) ||
		!strings.Contains(body, `"generation": 2`) {
		t.Errorf("/status = %d %s", code, body)
	}
	var stOut, stErr bytes.Buffer
	if code := run(context.Background(), []string{"status", "--admin", base}, &stOut, &stErr); code != 0 ||
		!strings.Contains(stOut.String(), "public.sessions") || !strings.Contains(stOut.String(), "configuration generation 2") {
		t.Errorf("ttlproxy status: %d\n%s%s", code, stOut.String(), stErr.String())
	}
	if m := metric(); m != "1" {
		t.Errorf("metric after a good reload %s, want 1", m)
	}

	if err := os.WriteFile(p, []byte(good+"    refresh_on_update: maybe\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, body := post(); code != 500 || !strings.Contains(body, "tables[0].refresh_on_update") {
		t.Errorf("reload of a bad file: %d %q, want 500 naming the key", code, body)
	}
	if m := metric(); m != "0" {
		t.Errorf("metric after a failed reload %s, want 0", m)
	}

	moved := strings.Replace(good, "listen: 127.0.0.1:0", "listen: 127.0.0.1:1", 1) +
		"  - table: tokens\nbypass_roles: [admin]\nidle_session_timeout: 1h\n"
	if err := os.WriteFile(p, []byte(moved), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, body := post(); code != 200 {
		t.Fatalf("reload with a new table: %d %q", code, body)
	}
	if m := metric(); m != "1" {
		t.Errorf("metric after a good reload %s, want 1", m)
	}
	if logs := errOut.String(); !strings.Contains(logs, "take effect only after a restart") || !strings.Contains(logs, `"keys":["listen"]`) {
		t.Errorf("the restart-only key was not reported:\n%s", logs)
	}

	// SIGHUP does the same.
	if err := os.WriteFile(p, []byte("upstream: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for metric() != "0" {
		if time.Now().After(deadline) {
			t.Fatalf("SIGHUP did not reload:\n%s", errOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("serve exited %d; stderr:\n%s", code, errOut.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not stop after cancel")
	}
}
