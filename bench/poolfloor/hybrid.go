package main

import (
	"io"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/ttlproxy/ttlproxy/bench/internal/rawsys"
)

// hybridEngine keeps the goroutine engine's session (a goroutine per
// client, blocking reads) but takes the clients' sockets off the net
// package: accept(2), read(2), write(2) and close(2) are raw system calls,
// and a goroutine waiting to read parks on a channel that the loop over an
// epoll set of its own (whose descriptor waits in Go's netpoller) signals.
// Server connections stay on the net package.
func hybridEngine(listen string, servers []*server) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return err
	}
	if err := unix.SetNonblock(ep, true); err != nil {
		return err
	}
	h := &hybrid{ln: ln, ep: ep, conns: map[int]*fdConn{}, pool: &pool{idle: servers}}
	lrc, err := ln.(*net.TCPListener).SyscallConn()
	if err != nil {
		return err
	}
	_ = lrc.Control(func(fd uintptr) { h.lnfd = int(fd) })                                                                           //nolint:gosec // a descriptor
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, h.lnfd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(h.lnfd)}); err != nil { //nolint:gosec // a descriptor
		return err
	}
	f := os.NewFile(uintptr(ep), "epoll") //nolint:gosec // a descriptor
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	events := make([]unix.EpollEvent, 128)
	var failed error
	for failed == nil {
		if err := rc.Read(func(uintptr) bool {
			for {
				r, _, errno := unix.RawSyscall6(unix.SYS_EPOLL_WAIT, uintptr(ep),
					uintptr(unsafePointer(&events[0])), uintptr(len(events)), 0, 0, 0)
				if errno == unix.EINTR {
					continue
				}
				if errno != 0 {
					failed = errno
					return true
				}
				n := int(r)
				for _, ev := range events[:n] {
					if int(ev.Fd) == h.lnfd {
						if failed = h.accept(); failed != nil {
							return true
						}
						continue
					}
					h.mu.Lock()
					c := h.conns[int(ev.Fd)]
					h.mu.Unlock()
					if c != nil {
						select {
						case c.ready <- struct{}{}:
						default:
						}
					}
				}
				if n < len(events) {
					return false
				}
			}
		}); err != nil {
			return err
		}
	}
	return failed
}

type hybrid struct {
	ln       net.Listener // kept referenced: its finalizer would close the descriptor
	ep, lnfd int
	pool     *pool
	nextID   uint64 // the loop's: ids of clients, for -reset
	mu       sync.Mutex
	conns    map[int]*fdConn
}

// fdConn is a client socket of the hybrid engine.
type fdConn struct {
	h     *hybrid
	id    uint64
	fd    int
	ready chan struct{}
}

func (h *hybrid) accept() error {
	for {
		fd, ok, err := acceptRaw(h.lnfd, h.ep)
		if err != nil || !ok {
			return err
		}
		h.nextID++
		c := &fdConn{h: h, id: h.nextID, fd: fd, ready: make(chan struct{}, 1)}
		h.mu.Lock()
		h.conns[fd] = c
		h.mu.Unlock()
		go func() {
			defer c.Close()
			serveSession(c, c.Write, h.pool, c.id)
		}()
	}
}

// Read reads what the socket has, parking until the loop signals it when
// it has nothing.
func (c *fdConn) Read(b []byte) (int, error) {
	for {
		n, ok, err := rawsys.ReadWrite(unix.SYS_READ, uintptr(c.fd), b)
		if ok {
			if err != nil {
				return 0, err
			}
			if n == 0 {
				return 0, io.EOF
			}
			return n, nil
		}
		<-c.ready
	}
}

func (c *fdConn) Write(b []byte) error { return rawWrite(c.fd, b) }

// Close forgets c and closes its socket (which leaves the epoll set).
func (c *fdConn) Close() {
	c.h.mu.Lock()
	delete(c.h.conns, c.fd)
	c.h.mu.Unlock()
	rawClose(c.fd)
}
