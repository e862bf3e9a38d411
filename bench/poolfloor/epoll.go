package main

import (
	"encoding/binary"
	"errors"

	"golang.org/x/sys/unix"

	"github.com/ttlproxy/ttlproxy/bench/internal/rawsys"
)

// loop is the epoll engine's state; only its goroutine touches it.
type loop struct {
	*epollSet
	clients map[int]*floorClient
	servers map[int]*floorServer
	idle    []*floorServer
	queue   []*floorClient // clients waiting for a server, head first
	buf     []byte
	out     []byte
	nextID  uint64
}

type floorClient struct {
	id      uint64
	fd      int
	in      []byte // bytes read and not yet handled
	started bool
	srv     *floorServer
	waiting bool
}

type floorServer struct {
	s  *server
	in []byte
	cl *floorClient // nil when idle, or when its client left mid-answer
	// swallow: the reset's answer is still to be dropped.
	swallow bool
}

func epollEngine(listen string, servers []*server) error {
	set, err := newEpollSet(listen)
	if err != nil {
		return err
	}
	l := &loop{epollSet: set, clients: map[int]*floorClient{}, servers: map[int]*floorServer{},
		buf: make([]byte, 16<<10)}
	for _, s := range servers {
		fs := &floorServer{s: s}
		l.servers[s.fd] = fs
		l.idle = append(l.idle, fs)
		if err := l.add(s.fd, unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLET); err != nil {
			return err
		}
	}
	return l.run(l.dispatch)
}

// dispatch handles a batch of ready descriptors.
func (l *loop) dispatch(events []unix.EpollEvent) error {
	for _, ev := range events {
		fd := int(ev.Fd)
		switch {
		case fd == l.lnfd:
			if err := l.accept(); err != nil {
				return err
			}
		case l.clients[fd] != nil:
			l.clientReady(l.clients[fd])
		case l.servers[fd] != nil:
			if err := l.serverReady(l.servers[fd]); err != nil {
				return err
			}
		}
	}
	return nil
}

// accept takes every pending connection.
func (l *loop) accept() error {
	for {
		fd, ok, err := acceptRaw(l.lnfd, l.ep)
		if err != nil || !ok {
			return err
		}
		l.nextID++
		l.clients[fd] = &floorClient{fd: fd, id: l.nextID}
	}
}

// acceptRaw takes one pending connection of the listening socket lnfd
// (raw accept4, TCP_NODELAY) and adds it to the epoll set ep,
// edge-triggered for reading; ok is false when none is pending.
func acceptRaw(lnfd, ep int) (fd int, ok bool, err error) {
	for {
		r, _, errno := unix.RawSyscall6(unix.SYS_ACCEPT4, uintptr(lnfd), 0, 0,
			unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0, 0)
		switch errno {
		case 0:
		case unix.EAGAIN:
			return 0, false, nil
		case unix.EINTR, unix.ECONNABORTED:
			continue
		default:
			return 0, false, errno
		}
		fd := int(r)
		one := int32(1)
		_, _, _ = unix.RawSyscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.IPPROTO_TCP, unix.TCP_NODELAY,
			uintptr(unsafePointer(&one)), 4, 0)
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLET, Fd: int32(fd)} //nolint:gosec // a descriptor
		if _, _, errno := unix.RawSyscall6(unix.SYS_EPOLL_CTL, uintptr(ep), unix.EPOLL_CTL_ADD, uintptr(fd),
			uintptr(unsafePointer(&ev)), 0, 0); errno != 0 {
			rawClose(fd)
			continue
		}
		return fd, true, nil
	}
}

// readAll appends what fd has to in: reads until one returns less than
// the buffer (edge-triggered: that read emptied the socket); eof at the
// end of stream or an error.
func (l *loop) readAll(fd int, in []byte) (out []byte, eof bool) {
	for {
		n, ok, err := rawsys.ReadWrite(unix.SYS_READ, uintptr(fd), l.buf)
		if !ok {
			return in, false
		}
		if err != nil || n == 0 {
			return in, true
		}
		in = append(in, l.buf[:n]...)
		if n < len(l.buf) {
			return in, false
		}
	}
}

func (l *loop) clientReady(c *floorClient) {
	var eof bool
	c.in, eof = l.readAll(c.fd, c.in)
	if !l.handle(c) || eof {
		l.closeClient(c)
	}
}

// handle runs c's complete messages until it holds or waits for a
// server; false when c is to be closed.
func (l *loop) handle(c *floorClient) bool {
	for c.srv == nil && !c.waiting {
		if !c.started {
			if len(c.in) < 8 {
				return true
			}
			n := int(binary.BigEndian.Uint32(c.in))
			if len(c.in) < n {
				return true
			}
			code := binary.BigEndian.Uint32(c.in[4:])
			c.in = c.in[n:]
			if code == sslRequest || code == gssRequest {
				if rawsys.WriteAll(c.fd, []byte{'N'}) != nil {
					return false
				}
				continue
			}
			c.started = true
			if rawsys.WriteAll(c.fd, welcome) != nil {
				return false
			}
			continue
		}
		if len(c.in) < 5 {
			return true
		}
		n := int(binary.BigEndian.Uint32(c.in[1:])) + 1
		if len(c.in) < n {
			return true
		}
		switch c.in[0] {
		case 'X':
			return false
		case 'Q':
		default:
			return false
		}
		k := len(l.idle)
		if k == 0 {
			c.waiting = true
			l.queue = append(l.queue, c)
			return true
		}
		s := l.idle[k-1]
		l.idle = l.idle[:k-1]
		c.srv, s.cl = s, c
		out := c.in[:n]
		if resetOnSwitch && s.s.last != 0 && s.s.last != c.id {
			l.out = append(append(l.out[:0], resetQuery...), out...)
			out, s.swallow = l.out, true
		}
		s.s.last = c.id
		if rawsys.WriteAll(s.s.fd, out) != nil {
			return false
		}
		c.in = c.in[n:]
	}
	return true
}

func (l *loop) serverReady(s *floorServer) error {
	var eof bool
	s.in, eof = l.readAll(s.s.fd, s.in)
	if eof {
		return errors.New("a pooled server connection ended")
	}
	// Drop the reset's answer; relay the complete messages; at the
	// ReadyForQuery the server is free.
	for s.swallow && len(s.in) >= 5 {
		n := int(binary.BigEndian.Uint32(s.in[1:])) + 1
		if n > len(s.in) {
			return nil
		}
		s.swallow = s.in[0] != 'Z'
		s.in = append(s.in[:0], s.in[n:]...)
	}
	if s.swallow {
		return nil
	}
	end, done := 0, false
	for end+5 <= len(s.in) {
		n := int(binary.BigEndian.Uint32(s.in[end+1:])) + 1
		if end+n > len(s.in) {
			break
		}
		typ := s.in[end]
		end += n
		if typ == 'Z' {
			done = true
			break
		}
	}
	if end == 0 {
		return nil
	}
	c := s.cl
	if c != nil && rawsys.WriteAll(c.fd, s.in[:end]) != nil {
		l.closeClient(c)
		c = nil
	}
	s.in = append(s.in[:0], s.in[end:]...)
	if !done {
		return nil
	}
	s.cl = nil
	if c != nil {
		c.srv = nil
	}
	if len(l.queue) > 0 {
		w := l.queue[0]
		l.queue = l.queue[1:]
		w.waiting = false
		l.idle = append(l.idle, s)
		if !l.handle(w) {
			l.closeClient(w)
		}
	} else {
		l.idle = append(l.idle, s)
	}
	if c != nil && len(c.in) > 0 {
		if !l.handle(c) {
			l.closeClient(c)
		}
	}
	if len(s.in) > 0 {
		return errors.New("a pooled server sent more after ReadyForQuery")
	}
	return nil
}

// closeClient closes c (raw close(2), which takes it out of the set); a
// server it holds finishes its answer unrelayed and is then free.
func (l *loop) closeClient(c *floorClient) {
	if _, ok := l.clients[c.fd]; !ok {
		return
	}
	delete(l.clients, c.fd)
	if c.srv != nil {
		c.srv.cl = nil
		c.srv = nil
	}
	if c.waiting {
		for i, w := range l.queue {
			if w == c {
				l.queue = append(l.queue[:i], l.queue[i+1:]...)
				break
			}
		}
	}
	rawClose(c.fd)
}

func rawClose(fd int) { _, _, _ = unix.RawSyscall(unix.SYS_CLOSE, uintptr(fd), 0, 0) }
