package main

import (
	"context"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// listen opens the client listener; with reusePort it sets SO_REUSEPORT
// (Linux 3.9+, the BSDs), so that a second instance can listen on the same
// address while the first drains: the kernel spreads new connections over
// the open listeners, and a draining instance closes its own at once.
func listen(ctx context.Context, addr string, reusePort bool) (net.Listener, error) {
	lc := net.ListenConfig{}
	if reusePort {
		lc.Control = func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
			}); err != nil {
				return err
			}
			return serr
		}
	}
	return lc.Listen(ctx, "tcp", addr)
}
