package main

import (
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// epollSet is the epoll and hybrid engines' epoll set of their own,
// holding the listening socket (level-triggered) and whatever the engine
// adds; its descriptor waits in Go's netpoller, so the goroutine running
// it parks while nothing is ready.
type epollSet struct {
	// ln is kept referenced: its finalizer would close the descriptor.
	ln       net.Listener
	ep, lnfd int
	events   []unix.EpollEvent
}

func newEpollSet(listen string) (*epollSet, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(ep, true); err != nil {
		return nil, err
	}
	e := &epollSet{ln: ln, ep: ep, events: make([]unix.EpollEvent, 128)}
	lrc, err := ln.(*net.TCPListener).SyscallConn()
	if err != nil {
		return nil, err
	}
	_ = lrc.Control(func(fd uintptr) { e.lnfd = int(fd) }) //nolint:gosec // a descriptor
	return e, e.add(e.lnfd, unix.EPOLLIN)
}

func (e *epollSet) add(fd int, events uint32) error {
	return unix.EpollCtl(e.ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: events, Fd: int32(fd)}) //nolint:gosec // a descriptor
}

// run hands what is ready to dispatch, a batch at a time (epoll_wait with
// a zero timeout, again while a batch fills the buffer), and parks in Go's
// netpoller when the set has nothing more; it returns dispatch's first
// error, or the set's.
func (e *epollSet) run(dispatch func([]unix.EpollEvent) error) error {
	f := os.NewFile(uintptr(e.ep), "epoll") //nolint:gosec // a descriptor
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var failed error
	for failed == nil {
		if err := rc.Read(func(uintptr) bool {
			for {
				r, _, errno := unix.RawSyscall6(unix.SYS_EPOLL_WAIT, uintptr(e.ep),
					uintptr(unsafePointer(&e.events[0])), uintptr(len(e.events)), 0, 0, 0)
				if errno == unix.EINTR {
					continue
				}
				if errno != 0 {
					failed = errno
					return true
				}
				n := int(r)
				if failed = dispatch(e.events[:n]); failed != nil {
					return true
				}
				if n < len(e.events) {
					return false
				}
			}
		}); err != nil {
			return err
		}
	}
	return failed
}
