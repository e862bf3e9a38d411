package main

import (
	"io"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/ttlproxy/ttlproxy/bench/internal/rawsys"
)

// hybridEngine keeps the goroutine engine's session (a goroutine per
// client, blocking reads) but takes the clients' sockets off the net
// package: accept(2), read(2), write(2) and close(2) are raw system calls,
// and a goroutine waiting to read parks on a channel that the loop over an
// epoll set of its own (whose descriptor waits in Go's netpoller) signals.
// Server connections are the goroutine engine's.
func hybridEngine(listen string, servers []*server) error {
	set, err := newEpollSet(listen)
	if err != nil {
		return err
	}
	h := &hybrid{epollSet: set, conns: map[int]*fdConn{}, pool: &pool{idle: servers}}
	return h.run(h.dispatch)
}

type hybrid struct {
	*epollSet
	pool   *pool
	nextID uint64 // the loop's: ids of clients, for -reset
	mu     sync.Mutex
	conns  map[int]*fdConn
}

// dispatch accepts, and wakes the clients whose sockets are ready.
func (h *hybrid) dispatch(events []unix.EpollEvent) error {
	for _, ev := range events {
		if int(ev.Fd) == h.lnfd {
			if err := h.accept(); err != nil {
				return err
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
	return nil
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

func (c *fdConn) Write(b []byte) error { return rawsys.WriteAll(c.fd, b) }

// Close forgets c and closes its socket (which leaves the epoll set).
func (c *fdConn) Close() {
	c.h.mu.Lock()
	delete(c.h.conns, c.fd)
	c.h.mu.Unlock()
	rawClose(c.fd)
}
