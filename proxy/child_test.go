package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ttlproxy/ttlproxy/internal/pgtest"
	"github.com/ttlproxy/ttlproxy/rewrite"
)

// A child proxy is this test binary run again as a proxy in a process of
// its own, for the tests that need a process to themselves: a lowered
// descriptor limit (fdChild), a resident size to read (memChild). TestMain
// (helpers_test.go) runs the child when its environment variable names the
// upstream.

// runChild runs a proxy in front of upstream on 127.0.0.1:0 for the parent
// test: prepare (nil: nothing) runs after the listener is open, then it
// writes "addr=HOST:PORT" and extra to stdout, serves until stdin closes,
// and calls report (nil: nothing) with the stopped server. It returns the
// exit status: 1 when anything failed or Serve returned before stdin
// closed.
func runChild(upstream string, log *slog.Logger, prepare func() error, extra string, report func(*Server)) int {
	rw, err := rewrite.New(testRules, rewrite.Options{})
	if err != nil {
		log.Error("rewriter", "err", err)
		return 1
	}
	srv, err := New(Config{Upstream: upstream, Rewriter: rw, Logger: log, Registerer: prometheus.NewRegistry()})
	if err != nil {
		log.Error("proxy", "err", err)
		return 1
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Error("listen", "err", err)
		return 1
	}
	if prepare != nil {
		if err := prepare(); err != nil {
			log.Error("preparing", "err", err)
			return 1
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	fmt.Printf("addr=%s%s\n", ln.Addr(), extra)
	stdinClosed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stdinClosed)
	}()
	select {
	case err := <-done:
		log.Error("Serve returned while clients were still expected", "err", err)
		return 1
	case <-stdinClosed:
	}
	cancel()
	if err := <-done; err != nil {
		log.Error("Serve", "err", err)
		return 1
	}
	if report != nil {
		report(srv)
	}
	return 0
}

// childProxy is a child proxy seen from the parent test.
type childProxy struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.Reader
	stderr *lockedBuffer
	// line is the child's first line ("addr=HOST:PORT..."), connString a
	// connection string to the test server through it.
	line       string
	connString string
	stopped    bool
}

// startChildProxy starts the child proxy that env selects in front of the
// test server; it is stopped when the test ends, its log shown when the
// test failed.
func startChildProxy(t *testing.T, env string) *childProxy {
	t.Helper()
	pg := pgtest.Server(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$") //nolint:gosec // the test binary itself, as the child
	cmd.Env = append(os.Environ(), env+"="+pg.Addr())
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdoutPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &childProxy{cmd: cmd, stdin: stdin, stderr: &lockedBuffer{}}
	cmd.Stderr = c.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !c.stopped {
			_, _ = c.stop()
		}
		if t.Failed() {
			t.Logf("proxy log:\n%s", c.stderr.String())
		}
	})
	stdout := bufio.NewReader(stdoutPipe)
	c.stdout = stdout
	line, err := stdout.ReadString('\n')
	if err != nil {
		t.Fatalf("child printed nothing: %v", err)
	}
	c.line = line
	var addr string
	if _, err := fmt.Sscanf(line, "addr=%s", &addr); err != nil {
		t.Fatalf("child said %q: %v", line, err)
	}
	u, err := url.Parse(pg.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	u.Host = addr
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	c.connString = u.String()
	return c
}

// stop closes the child's stdin, reads the rest of what it prints and
// waits for it to exit (killing it after 30 s): its output after the first
// line and its exit error.
func (c *childProxy) stop() ([]byte, error) {
	c.stopped = true
	_ = c.stdin.Close()
	var rest []byte
	exited := make(chan error, 1)
	go func() {
		// Wait closes the pipe: read it first.
		rest, _ = io.ReadAll(c.stdout)
		exited <- c.cmd.Wait()
	}()
	select {
	case err := <-exited:
		return rest, err
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		return rest, <-exited
	}
}
