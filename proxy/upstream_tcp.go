package proxy

import (
	"context"
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// The sockets to the upstream server carry TCP keepalive and
// TCP_USER_TIMEOUT (tcp(7)), as libpq's keepalives_* and tcp_user_timeout
// parameters set them. A server host that crashes, or a network that drops
// every packet, sends no reset: without them a session waiting for a result
// waits for Go's default keepalive to give up (15 s idle, then 9 probes 15 s
// apart: 150 s), and one with unacknowledged data for the kernel's
// retransmissions to give up, about 15 minutes.

// DialFunc returns a dial function with u's keepalive and TCP_USER_TIMEOUT,
// for the proxy's other connections to PostgreSQL (the sweeper's, the DDL
// events' and the auth query's: pgconn.Config.DialFunc), which bound the
// connect with their own context. Zero fields take the defaults, as in
// Config; invalid settings are refused by Config's checks, not here.
func (u UpstreamTCP) DialFunc() func(ctx context.Context, network, addr string) (net.Conn, error) {
	_ = u.setDefaults()
	return u.dialer().DialContext
}

func (u UpstreamTCP) dialer() *net.Dialer {
	d := &net.Dialer{}
	if u.KeepalivesDisabled {
		d.KeepAliveConfig = net.KeepAliveConfig{Enable: false}
		d.KeepAlive = -1
	} else {
		d.KeepAliveConfig = net.KeepAliveConfig{
			Enable:   true,
			Idle:     u.KeepalivesIdle,
			Interval: u.KeepalivesInterval,
			Count:    u.KeepalivesCount,
		}
	}
	if u.TCPUserTimeout > 0 {
		ms := int(u.TCPUserTimeout.Milliseconds())
		d.Control = func(_, _ string, c syscall.RawConn) error {
			return setTCPUserTimeout(c, ms)
		}
	}
	return d
}

// setTCPUserTimeout sets TCP_USER_TIMEOUT (milliseconds) on a socket before
// it connects, so that the handshake is bounded by it too.
func setTCPUserTimeout(c syscall.RawConn, ms int) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, ms)
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("setting TCP_USER_TIMEOUT: %w", err)
	}
	return nil
}
