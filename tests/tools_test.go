package tests

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ttlproxy/ttlproxy/internal/pgcluster"
	"github.com/ttlproxy/ttlproxy/internal/pgtest"
)

// pgTool returns the path of a PostgreSQL client program (psql, pgbench):
// from the server's binary directory, else PATH. In CI a missing tool fails.
func pgTool(t *testing.T, name string) string {
	t.Helper()
	if dir, err := pgcluster.BinDir(); err == nil {
		if p := filepath.Join(dir, name); fileExists(p) {
			return p
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s not found (install the postgresql package)", name)
	}
	t.Skipf("%s not found", name)
	return ""
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// runTool runs a client program against host:port as the test superuser.
func runTool(t *testing.T, ctx context.Context, tool, addr string, args ...string) (string, error) {
	t.Helper()
	host, port := splitAddr(t, addr)
	srv := pgtest.Server(t)
	cmd := exec.CommandContext(ctx, tool, append([]string{"-h", host, "-p", port, "-U", srv.User}, args...)...) //nolint:gosec // psql or pgbench found on PATH by the test
	cmd.Env = append(os.Environ(), "PGPASSWORD="+srv.Password, "PGSSLMODE=disable", "PGAPPNAME=ttlproxy-tests", "PGTZ=UTC", "LC_ALL=C")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func splitAddr(t *testing.T, addr string) (string, string) {
	t.Helper()
	i := strings.LastIndex(addr, ":")
	if i < 0 {
		t.Fatalf("bad address %q", addr)
	}
	return addr[:i], addr[i+1:]
}

// corpusDir returns the directory TTLPROXY_CORPUS_DIR names, or else finds
// shared/corpus/pg-regress-15 above the working directory (CONTRIBUTING.md,
// "The SQL corpus").
func corpusDir(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("TTLPROXY_CORPUS_DIR"); d != "" {
		if st, err := os.Stat(d); err != nil || !st.IsDir() { //nolint:gosec // the corpus directory the developer names
			t.Fatalf("TTLPROXY_CORPUS_DIR=%s: not a directory (%v)", d, err)
		}
		return d
	}
	dir, _ := os.Getwd()
	for i := 0; i < 6; i++ {
		p := filepath.Join(dir, "shared", "corpus", "pg-regress-15")
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			return p
		}
		dir = filepath.Dir(dir)
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("TTLPROXY_CORPUS_DIR is not set and shared/corpus/pg-regress-15 is not above the working directory")
	}
	t.Skip("TTLPROXY_CORPUS_DIR is not set and shared/corpus/pg-regress-15 is not above the working directory")
	return ""
}

func withTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
