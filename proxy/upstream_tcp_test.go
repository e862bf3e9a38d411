package proxy

import (
	"context"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sys/unix"

	"github.com/ttlproxy/ttlproxy/internal/pgtest"
)

// tcpOptions are the keepalive and timeout options read back from a socket.
type tcpOptions struct {
	keepalive, idle, interval, count, userTimeoutMS int
}

func readTCPOptions(t *testing.T, c net.Conn) tcpOptions {
	t.Helper()
	sc, ok := c.(syscall.Conn)
	if !ok {
		t.Fatalf("%T is not a syscall.Conn", c)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var o tcpOptions
	var errs []error
	get := func(fd int, level, opt int, dst *int) {
		v, err := unix.GetsockoptInt(fd, level, opt)
		errs = append(errs, err)
		*dst = v
	}
	if err := raw.Control(func(fd uintptr) {
		get(int(fd), unix.SOL_SOCKET, unix.SO_KEEPALIVE, &o.keepalive)
		get(int(fd), unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, &o.idle)
		get(int(fd), unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, &o.interval)
		get(int(fd), unix.IPPROTO_TCP, unix.TCP_KEEPCNT, &o.count)
		get(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, &o.userTimeoutMS)
	}); err != nil {
		t.Fatal(err)
	}
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return o
}

// TestUpstreamKeepalive: the sockets to the server carry the configured
// keepalive and TCP_USER_TIMEOUT, the defaults when none is configured,
// and none of either when they are turned off.
func TestUpstreamKeepalive(t *testing.T) {
	db := pgtest.NewDatabase(t)
	for _, tc := range []struct {
		name string
		cfg  UpstreamTCP
		want tcpOptions
	}{
		{"defaults", UpstreamTCP{}, tcpOptions{1, 30, 10, 3, 60000}},
		{"configured", UpstreamTCP{KeepalivesIdle: 2 * time.Second, KeepalivesInterval: time.Second, KeepalivesCount: 5, TCPUserTimeout: 1500 * time.Millisecond},
			tcpOptions{1, 2, 1, 5, 1500}},
		{"off", UpstreamTCP{KeepalivesDisabled: true, TCPUserTimeout: -1}, tcpOptions{keepalive: 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var conns []net.Conn
			p := startProxy(t, Config{UpstreamTCP: tc.cfg, dialTCP: func(ctx context.Context, d *net.Dialer, addr string) (net.Conn, error) {
				c, err := d.DialContext(ctx, "tcp", addr)
				if err == nil {
					mu.Lock()
					conns = append(conns, c)
					mu.Unlock()
				}
				return c, err
			}})
			conn := p.connect(t, db, pgx.QueryExecModeSimpleProtocol)
			mustExec(t, conn, "SELECT 1")
			mu.Lock()
			defer mu.Unlock()
			if len(conns) == 0 {
				t.Fatal("the proxy dialled no upstream socket")
			}
			got := readTCPOptions(t, conns[0])
			if tc.want.keepalive == 0 {
				// Idle, interval and count are left as the kernel has them.
				got = tcpOptions{keepalive: got.keepalive, userTimeoutMS: got.userTimeoutMS}
			}
			if got != tc.want {
				t.Errorf("socket options %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestUpstreamDialFunc: the dial function of the proxy's other connections
// to PostgreSQL (sweeper, DDL events, auth query) sets the same options as
// the relay's dialer, its zero fields the defaults.
func TestUpstreamDialFunc(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	for _, tc := range []struct {
		name string
		cfg  UpstreamTCP
		want tcpOptions
	}{
		{"defaults", UpstreamTCP{}, tcpOptions{1, 30, 10, 3, 60000}},
		{"configured", UpstreamTCP{KeepalivesIdle: 4 * time.Second, KeepalivesInterval: 2 * time.Second, KeepalivesCount: 6, TCPUserTimeout: 2500 * time.Millisecond},
			tcpOptions{1, 4, 2, 6, 2500}},
	} {
		c, err := tc.cfg.DialFunc()(context.Background(), "tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if got := readTCPOptions(t, c); got != tc.want {
			t.Errorf("%s: socket options %+v, want %+v", tc.name, got, tc.want)
		}
		_ = c.Close()
	}
}
