package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fdChildEnv, set to the upstream address, makes the test binary run
// fdChild instead of the tests: a proxy whose process may open only a few
// more file descriptors.
const fdChildEnv = "TTLPROXY_TEST_FD_CHILD"

// fdChildSessions is how many sessions (two descriptors each, client and
// upstream) fit under the child's descriptor limit, plus one descriptor.
const fdChildSessions = 8

// fdChild runs a proxy in front of upstream on 127.0.0.1:0 with
// RLIMIT_NOFILE set so that fdChildSessions sessions and one more
// descriptor fit. It writes "addr=HOST:PORT sessions=N" to stdout, serves
// until stdin closes, then writes "accept_errors=N" and exits 0, or 1 when
// Serve returned before stdin closed.
func fdChild(upstream string) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	limitDescriptors := func() error {
		// The kernel hands out the lowest free descriptor below the limit:
		// the sessions may use the numbers below it that no open descriptor
		// (ReadDir's own is closed by now; inherited ones may lie above) holds.
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			return fmt.Errorf("listing descriptors: %w", err)
		}
		held := make(map[int]bool)
		for _, e := range ents {
			if _, err := os.Readlink("/proc/self/fd/" + e.Name()); err != nil {
				continue
			}
			fd, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			held[fd] = true
		}
		limit, free := 0, 0
		for free < 2*fdChildSessions+1 {
			if !held[limit] {
				free++
			}
			limit++
		}
		var rl syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
			return fmt.Errorf("getrlimit: %w", err)
		}
		rl.Cur = uint64(limit)
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
			return fmt.Errorf("setrlimit: %w", err)
		}
		log.Info("descriptor limit", "limit", limit, "free", free)
		return nil
	}
	return runChild(upstream, log, limitDescriptors, fmt.Sprintf(" sessions=%d", fdChildSessions), func(srv *Server) {
		fmt.Printf("accept_errors=%v\n", testutil.ToFloat64(srv.metrics.AcceptErrors.WithLabelValues("emfile")))
	})
}

// lockedBuffer is a bytes.Buffer safe for a writer and a reader.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestFDExhaustion runs the proxy in a child process that can open only
// 2×fdChildSessions+1 more descriptors, fills them, and sends 30 clients at
// once: the proxy must keep serving (accept backs off on EMFILE), a client
// whose upstream dial fails gets SQLSTATE 08001 instead of a hang, the
// clients waiting in the backlog are served once descriptors free up, and so
// is a client arriving after the spike.
func TestFDExhaustion(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	child := startChildProxy(t, fdChildEnv)
	var addr string
	var sessions int
	if _, err := fmt.Sscanf(child.line, "addr=%s sessions=%d", &addr, &sessions); err != nil {
		t.Fatalf("child said %q: %v", child.line, err)
	}
	connString := child.connString
	connect := func(ctx context.Context) (*pgx.Conn, error) {
		conn, err := pgx.Connect(ctx, connString)
		if err != nil {
			return nil, err
		}
		if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
			_ = conn.Close(context.Background())
			return nil, err
		}
		return conn, nil
	}
	ctx := testContext(t)

	// The sessions that fit are served and held.
	holders := make([]*pgx.Conn, 0, sessions)
	defer func() {
		for _, c := range holders {
			_ = c.Close(context.Background())
		}
	}()
	for i := range sessions {
		c, err := connect(ctx)
		if err != nil {
			t.Fatalf("client %d of the %d that fit: %v", i+1, sessions, err)
		}
		holders = append(holders, c)
	}
	// One descriptor is left: the proxy accepts the next client but cannot
	// dial upstream for it.
	if _, err := connect(ctx); pgCode(err) != codeUnableToConnect {
		t.Fatalf("client past the limit: %v, want SQLSTATE %s", err, codeUnableToConnect)
	}
	// A client that stays in startup takes the last descriptor; the proxy's
	// answer to its SSLRequest shows it was accepted (the previous client's
	// descriptor may take a moment to be closed).
	idle, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	_ = idle.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := idle.Write([]byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}); err != nil {
		t.Fatal(err)
	}
	var answer [1]byte
	if _, err := io.ReadFull(idle, answer[:]); err != nil || answer[0] != 'N' {
		t.Fatalf("SSLRequest answer %q, %v", answer[:], err)
	}

	// The spike: 30 clients at once, while no descriptor is free.
	const spike = 30
	errs := make(chan error, spike)
	for range spike {
		go func() {
			c, err := connect(ctx)
			if err == nil {
				err = c.Close(ctx)
			}
			errs <- err
		}()
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		log := child.stderr.String()
		if strings.Contains(log, `msg="accepting connection"`) && strings.Contains(log, "too many open files") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the proxy never logged an accept failure")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Nothing is served while the descriptors are held; once released, the
	// waiting clients are served, or told the upstream dial failed.
	for _, c := range holders {
		if err := c.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	holders = holders[:0]
	_ = idle.Close()
	served := 0
	for range spike {
		select {
		case err := <-errs:
			switch code := pgCode(err); {
			case err == nil:
				served++
			case code == codeUnableToConnect, code == codeConnectionFailure, code == codeTooManyConnections:
			default:
				t.Errorf("client of the spike: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("a client of the spike got no answer in 20 s")
		}
	}
	if served == 0 {
		t.Error("no client of the spike was served")
	}
	t.Logf("descriptors for %d sessions: %d of %d spike clients served", sessions, served, spike)

	// After the spike, a new client is served (the spike's sessions may
	// still be closing for a moment).
	for deadline := time.Now().Add(5 * time.Second); ; {
		c, err := connect(ctx)
		if err == nil {
			_ = c.Close(ctx)
			break
		}
		if pgCode(err) != codeUnableToConnect || time.Now().After(deadline) {
			t.Fatalf("client after the spike: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	rest, err := child.stop()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("proxy process: %v", err)
		}
		t.Fatal(err)
	}
	var acceptErrors float64
	if _, err := fmt.Sscanf(strings.TrimSpace(string(rest)), "accept_errors=%g", &acceptErrors); err != nil {
		t.Fatalf("child said %q: %v", rest, err)
	}
	if acceptErrors < 1 {
		t.Fatalf("ttlproxy_proxy_accept_errors_total{reason=\"emfile\"} = %v", acceptErrors)
	}
}

func TestAcceptErrorReason(t *testing.T) {
	for _, tc := range []struct {
		err       error
		reason    string
		transient bool
	}{
		{&net.OpError{Op: "accept", Err: os.NewSyscallError("accept4", syscall.EMFILE)}, "emfile", true},
		{&net.OpError{Op: "accept", Err: os.NewSyscallError("accept4", syscall.ENFILE)}, "enfile", true},
		{&net.OpError{Op: "accept", Err: os.NewSyscallError("accept4", syscall.ENOBUFS)}, "enobufs", true},
		{&net.OpError{Op: "accept", Err: os.NewSyscallError("accept4", syscall.ENOMEM)}, "enomem", true},
		{&net.OpError{Op: "accept", Err: os.ErrDeadlineExceeded}, "timeout", true},
		{net.ErrClosed, "", false},
		{&net.OpError{Op: "accept", Err: os.NewSyscallError("accept4", syscall.EBADF)}, "", false},
	} {
		reason, transient := acceptErrorReason(tc.err)
		if reason != tc.reason || transient != tc.transient {
			t.Errorf("%v: %q, %v; want %q, %v", tc.err, reason, transient, tc.reason, tc.transient)
		}
	}
}
