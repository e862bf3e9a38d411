package proxy

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// netns is a network namespace of the test's own, entered by one locked OS
// thread, whose loopback the test can take down: a real blackhole, like a
// crashed host or a pulled cable, for the sockets made in it, which then
// see no packet and no reset, so that keepalive and TCP_USER_TIMEOUT are
// what ends their connections. Making one needs CAP_SYS_ADMIN
// (unshare(CLONE_NEWNET)); the tests that use it skip without.
type netns struct {
	calls chan func()
	done  chan struct{}
	// ctl is a datagram socket in the namespace, for the loopback's flags.
	ctl int
}

// newNetns makes a namespace with its loopback up, or skips t.
func newNetns(t *testing.T) *netns {
	t.Helper()
	n := &netns{calls: make(chan func()), done: make(chan struct{}), ctl: -1}
	errc := make(chan error, 1)
	go func() {
		defer close(n.done)
		// Never unlocked: the thread, in the namespace, ends with this
		// goroutine instead of going back to the scheduler.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		n.ctl = fd
		errc <- nil
		for f := range n.calls {
			f()
		}
	}()
	if err := <-errc; err != nil {
		<-n.done
		t.Skipf("no network namespace of the test's own (needs CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() {
		close(n.calls)
		<-n.done
		_ = unix.Close(n.ctl)
	})
	if err := n.setLoopback(true); err != nil {
		t.Skipf("cannot bring up the namespace's loopback: %v", err)
	}
	return n
}

// do runs f on the namespace's thread: the sockets f makes are in it.
func (n *netns) do(f func()) {
	done := make(chan struct{})
	n.calls <- func() {
		defer close(done)
		f()
	}
	<-done
}

// setLoopback brings the namespace's loopback up or down. Down, its
// addresses have no route: every packet between its sockets vanishes.
func (n *netns) setLoopback(up bool) error {
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(n.ctl, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	flags := ifr.Uint16()
	if up {
		flags |= unix.IFF_UP
	} else {
		flags &^= unix.IFF_UP
	}
	ifr.SetUint16(flags)
	return unix.IoctlIfreq(n.ctl, unix.SIOCSIFFLAGS, ifr)
}
