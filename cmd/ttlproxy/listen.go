package main

import (
	"context"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// Client keepalive: Go's defaults for accepted connections (net package:
// probes after 15 s idle, every 15 s, 9 unanswered drop the connection),
// set once on the listening socket, whose accepted sockets inherit them
// on Linux, instead of four setsockopt(2) calls per accepted connection.
const (
	clientKeepaliveIdleSecs     = 15
	clientKeepaliveIntervalSecs = 15
	clientKeepaliveCount        = 9
)

// listen opens the client listener with TCP keepalive set on it for every
// accepted connection; with reusePort it sets SO_REUSEPORT (Linux 3.9+, the
// BSDs), so that a second instance can listen on the same address while
// the first drains: the kernel spreads new connections over the open
// listeners, and a draining instance closes its own at once.
func listen(ctx context.Context, addr string, reusePort bool) (net.Listener, error) {
	lc := net.ListenConfig{
		// The listening socket carries the options (below).
		KeepAlive: -1,
		Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) {
				opts := []struct{ level, opt, value int }{
					{unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
					{unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, clientKeepaliveIdleSecs},
					{unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, clientKeepaliveIntervalSecs},
					{unix.IPPROTO_TCP, unix.TCP_KEEPCNT, clientKeepaliveCount},
				}
				if reusePort {
					opts = append(opts, struct{ level, opt, value int }{unix.SOL_SOCKET, unix.SO_REUSEPORT, 1})
				}
				for _, o := range opts {
					if serr = unix.SetsockoptInt(int(fd), o.level, o.opt, o.value); serr != nil {
						return
					}
				}
			}); err != nil {
				return err
			}
			return serr
		},
	}
	return lc.Listen(ctx, "tcp", addr)
}
