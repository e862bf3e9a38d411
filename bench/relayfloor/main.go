// Command relayfloor is a TCP byte relay that bench/compare.sh runs beside
// ttlproxy (FLOOR=1) to show what an engine alone costs: it moves bytes
// between a client and the upstream server and does nothing per message
// (no framing, no rewrite, no session state), so the CPU it spends per
// transaction is the floor any relay on Go's runtime pays on this machine,
// and the difference to ttlproxy is ttlproxy's own work per message.
//
//	relayfloor -listen 127.0.0.1:7000 -upstream 127.0.0.1:5432 [-engine goroutine|epoll]
//
// Engines:
//
//   - goroutine (default): ttlproxy's engine itself, package internal/wire:
//     one goroutine per direction, each a pump under wire.Conn.Drive as
//     ttlproxy's pumps are: read(2) and write(2) as raw system calls inside
//     syscall.RawConn's Read and Write, and after a short read a wait for
//     readiness instead of the read that would return EAGAIN.
//   - epoll: an event loop of its own on one locked OS thread: one
//     level-triggered epoll set, epoll_wait(2) as a raw system call (the
//     runtime never sees the thread idle), one read per readiness, writes
//     straight from the loop. Accepts and upstream dials run in the loop
//     too (blocking connect: for benchmarks whose clients connect once).
//     A write that finds the peer's buffer full waits with poll(2); a
//     benchmark's small messages never do.
//
// GOMAXPROCS is 1 unless the environment sets it, as in ttlproxy. Meant for
// benchmarks on a trusted loopback only: no limits, no TLS, no logging
// beyond fatal errors.
package main

import (
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/netip"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ttlproxy/ttlproxy/bench/internal/rawsys"
	"github.com/ttlproxy/ttlproxy/internal/wire"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:7000", "address to accept clients on (host:port)")
	upstream := flag.String("upstream", "127.0.0.1:5432", "server to relay to (host:port)")
	engine := flag.String("engine", "goroutine", "goroutine or epoll")
	flag.Parse()
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	var err error
	switch *engine {
	case "goroutine":
		err = goroutineEngine(*listen, *upstream)
	case "epoll":
		err = epollEngine(*listen, *upstream)
	default:
		err = fmt.Errorf("unknown -engine %q (goroutine or epoll)", *engine)
	}
	log.Fatal(err)
}

func goroutineEngine(listen, upstream string) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		s, err := net.Dial("tcp", upstream)
		if err != nil {
			_ = c.Close()
			log.Print(err)
			continue
		}
		c, s = wire.NewConn(c), wire.NewConn(s)
		go relay(c, s)
		go relay(s, c)
	}
}

// relay copies src to dst under src's Drive, ttlproxy's own pump loop
// (internal/wire), for as long as both sockets work, then closes both.
func relay(src, dst net.Conn) {
	defer func() { _ = src.Close(); _ = dst.Close() }()
	rc, ok := src.(*wire.Conn)
	if !ok {
		log.Print("relayfloor: not a non-blocking socket")
		return
	}
	buf := make([]byte, wire.BufSize)
	_ = rc.Drive(func() error {
		for {
			n, err := rc.Read(buf)
			if err != nil {
				return err
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return err
			}
		}
	})
}

func epollEngine(listen, upstream string) error {
	runtime.LockOSThread()
	la, err := netip.ParseAddrPort(listen)
	if err != nil {
		return err
	}
	ua, err := netip.ParseAddrPort(upstream)
	if err != nil {
		return err
	}
	if !la.Addr().Is4() || !ua.Addr().Is4() {
		return errors.New("the epoll engine takes IPv4 addresses")
	}
	lfd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	if err := unix.SetsockoptInt(lfd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return err
	}
	if err := unix.Bind(lfd, &unix.SockaddrInet4{Port: int(la.Port()), Addr: la.Addr().As4()}); err != nil {
		return err
	}
	if err := unix.Listen(lfd, 128); err != nil {
		return err
	}
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return err
	}
	watch := func(fd int) error {
		return unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)})
	}
	if err := watch(lfd); err != nil {
		return err
	}
	peer := map[int]int{}
	closePair := func(fd int) {
		p := peer[fd]
		delete(peer, fd)
		delete(peer, p)
		_ = unix.Close(fd)
		_ = unix.Close(p)
	}
	accept := func() {
		c, _, err := unix.Accept4(lfd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		if err != nil {
			return
		}
		s, err := dial(ua)
		if err != nil {
			log.Print(err)
			_ = unix.Close(c)
			return
		}
		peer[c], peer[s] = s, c
		if watch(c) != nil || watch(s) != nil {
			closePair(c)
		}
	}
	buf := make([]byte, 16<<10)
	events := make([]unix.EpollEvent, 128)
	for {
		//nolint:gosec // G103: epoll_wait(2) takes the events array's address; events outlives the call.
		r, _, errno := unix.RawSyscall6(unix.SYS_EPOLL_WAIT, uintptr(ep), uintptr(unsafe.Pointer(&events[0])),
			uintptr(len(events)), ^uintptr(0), 0, 0)
		if errno == unix.EINTR {
			continue // a signal (the runtime's preemption): wait again
		}
		if errno != 0 {
			return os.NewSyscallError("epoll_wait", errno)
		}
		for _, ev := range events[:r] {
			fd := int(ev.Fd)
			if fd == lfd {
				accept()
				continue
			}
			dst, ok := peer[fd]
			if !ok {
				continue
			}
			n, ok, err := rawsys.ReadWrite(unix.SYS_READ, uintptr(fd), buf)
			if !ok {
				continue
			}
			if err != nil || n == 0 || rawsys.WriteAll(dst, buf[:n]) != nil {
				closePair(fd)
			}
		}
	}
}

// dial connects to a, blocking, and returns the socket in non-blocking mode
// with TCP_NODELAY (as Go's net package sets it).
func dial(a netip.AddrPort) (int, error) {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.Connect(s, &unix.SockaddrInet4{Port: int(a.Port()), Addr: a.Addr().As4()}); err != nil {
		_ = unix.Close(s)
		return -1, err
	}
	if err := unix.SetNonblock(s, true); err != nil {
		_ = unix.Close(s)
		return -1, err
	}
	return s, unix.SetsockoptInt(s, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
}
