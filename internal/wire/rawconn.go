package wire

import (
	"crypto/tls"
	"errors"
	"io"
	"iter"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Conn is a net.Conn over a non-blocking TCP or Unix socket whose Read and
// Write make read(2) and write(2) with unix.RawSyscall inside
// syscall.RawConn's Read and Write. The netpoller still parks the goroutine
// while the socket is not ready, and deadlines and Close still wake it; what
// goes is the runtime's entersyscall/exitsyscall around each call, which
// wakes the sysmon thread with a futex whenever the Ps are idle
// (entersyscallWakeSysmon in Go's runtime/proc.go) and then keeps it polling
// in 20 µs naps. gnet and other event loops call RawSyscall for the same
// reason. Raw calls are fine here because a call on a non-blocking socket
// never blocks, which NewConn checks.
//
// A session's pump reads its connection under Drive, which saves the other
// system call net.Conn makes per message: the read that returns EAGAIN.
//
// As with net.Conn, Read and Write are safe for concurrent use, and each
// Write is written whole before another starts (the startup's catalog query
// and a pump can both write upstream). Everything else (deadlines,
// addresses) is the wrapped connection's.
type Conn struct {
	net.Conn
	rc syscall.RawConn

	// The arguments and results of the read in progress, under rmu (or, in
	// Drive, handed between the driver and the pump): the callbacks are
	// built once, so a call allocates nothing.
	rmu    sync.Mutex
	rbuf   []byte
	rn     int
	rerr   error
	readFn func(fd uintptr) bool

	// Drive's state: yield is set while the pump runs as Drive's coroutine
	// (only the pump reads then); next resumes the pump.
	driving atomic.Bool
	closed  atomic.Bool
	// skipped: the driven pump waits without the read that would have
	// returned EAGAIN, so an end of stream or an error that came with the
	// last data waits for CheckEnd. poked: CheckEnd woke that wait with a
	// read deadline of its own.
	skipped  atomic.Bool
	poked    atomic.Bool
	yield    func(struct{}) bool
	next     func() (struct{}, bool)
	drained  bool
	pumpDone bool
	driveFn  func(fd uintptr) bool

	// dmu orders read deadlines: rdeadline is the caller's, which a poke
	// replaces for a moment.
	dmu       sync.Mutex
	rdeadline time.Time

	// peekFn is PeekEnded's Control callback, built once; it sets ended.
	// Called by the one goroutine that holds the connection.
	peekFn func(fd uintptr)
	ended  bool

	wmu     sync.Mutex
	wbuf    []byte
	wn      int
	werr    syscall.Errno
	writeFn func(fd uintptr) bool
}

// syscallConn is what NewConn needs: *net.TCPConn and *net.UnixConn.
type syscallConn interface {
	net.Conn
	SyscallConn() (syscall.RawConn, error)
}

// NewConn wraps c when it is a TCP or Unix socket in non-blocking mode
// (every socket the net package opens is); any other net.Conn (a net.Pipe in
// tests, a conn already wrapped) is returned as it is.
func NewConn(c net.Conn) net.Conn {
	sc, ok := c.(syscallConn)
	if !ok {
		return c
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return c
	}
	nonblocking := false
	if err := rc.Control(func(fd uintptr) {
		// Raw: fcntl(F_GETFL) never blocks, and a raw call does not wake
		// the runtime's sysmon thread as a syscall.Syscall does when the
		// process was idle (one wake-up less per accepted connection).
		flags, _, errno := unix.RawSyscall(unix.SYS_FCNTL, fd, unix.F_GETFL, 0)
		nonblocking = errno == 0 && flags&unix.O_NONBLOCK != 0
	}); err != nil || !nonblocking {
		// A blocking socket would hold an OS thread and its P in a raw
		// call: keep the runtime's path.
		return c
	}
	r := &Conn{Conn: c, rc: rc}
	r.readFn = r.read
	r.driveFn = r.driven
	r.writeFn = r.write
	r.peekFn = r.peek
	return r
}

// ConnOf returns the Conn under c (through TLS and the replay of
// bytes read before a direct TLS handshake), or nil.
func ConnOf(c net.Conn) *Conn {
	for {
		switch v := c.(type) {
		case *Conn:
			return v
		case *tls.Conn:
			c = v.NetConn()
		case *PrefixConn:
			c = v.Conn
		default:
			return nil
		}
	}
}

// sysRead is read(2) into b, again after EINTR: ok is false when the
// socket has nothing to read (EAGAIN), else n bytes were read or err
// (an *os.SyscallError) says why not.
func sysRead(fd uintptr, b []byte) (n int, ok bool, err error) {
	for {
		//nolint:gosec // G103: read(2) takes the buffer's address; b outlives the call.
		r, _, errno := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		switch errno {
		case 0:
			return int(r), true, nil
		case unix.EINTR:
		case unix.EAGAIN:
			return 0, false, nil
		default:
			return 0, true, os.NewSyscallError("read", errno)
		}
	}
}

// read is the syscall.RawConn.Read callback of Read: false means "not
// ready, wait".
func (c *Conn) read(fd uintptr) bool {
	n, ok, err := sysRead(fd, c.rbuf)
	c.rn, c.rerr = n, err
	return ok
}

// write is the syscall.RawConn.Write callback: it writes until wbuf is
// sent, and returns false to wait when the socket's buffer is full.
func (c *Conn) write(fd uintptr) bool {
	for c.wn < len(c.wbuf) {
		p := c.wbuf[c.wn:]
		//nolint:gosec // G103: write(2) takes the buffer's address; p outlives the call.
		n, _, errno := unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		switch errno {
		case 0:
			c.wn += int(n)
		case unix.EINTR:
		case unix.EAGAIN:
			return false
		default:
			c.werr = errno
			return true
		}
	}
	return true
}

// Read reads up to len(b) bytes: io.EOF at the peer's end of stream; a
// *net.OpError for a failed read, a deadline (Timeout() true) or a closed
// connection (net.ErrClosed), as net.Conn's Read.
func (c *Conn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	if c.yield != nil {
		// The pump under Drive: the driver reads into b.
		c.rbuf, c.rn, c.rerr = b, 0, nil
		if !c.yield(struct{}{}) {
			return 0, c.opError("read", net.ErrClosed)
		}
		n, err := c.rn, c.rerr
		c.rbuf = nil
		return c.readResult(b, n, err)
	}
	c.rmu.Lock()
	c.rbuf, c.rn, c.rerr = b, 0, nil
	err := c.rc.Read(c.readFn)
	n := c.rn
	if err == nil {
		err = c.rerr
	}
	c.rbuf = nil
	c.rmu.Unlock()
	return c.readResult(b, n, err)
}

func (c *Conn) readResult(b []byte, n int, err error) (int, error) {
	if err != nil {
		return 0, c.opError("read", err)
	}
	raceReadDone(b[:n])
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// Drive runs pump, the one reader of c, so that c is read inside a single
// syscall.RawConn.Read for as long as nothing fails. Its callback reads into
// the buffer of the pump's pending Read, hands the result over and resumes
// the pump (a coroutine, iter.Pull) until it asks for more. After a read
// that drained the socket (fewer bytes than asked for), the callback waits
// for readiness instead of reading again: within one RawConn.Read the
// netpoller's readiness is never reset (internal/poll resets it only when a
// RawRead starts), so data that arrived since that read is not missed, and
// the EAGAIN read that net.Conn makes before each wait goes. That read also
// finds an end of stream or an error that arrived with the data: Go's
// netpoller is edge-triggered, so when the peer's last message and its FIN
// come in one wake-up, nothing wakes the pump again. CheckEnd, which the
// proxy's session sweep calls about twice a second (proxy/sweep.go), looks for
// such an end with a peek and wakes the pump to read it. A deadline, a
// Close or a failed read ends that RawConn.Read, hands its error to the
// pump and starts another. Drive returns pump's error when pump returns.
func (c *Conn) Drive(pump func() error) (err error) {
	c.driving.Store(true)
	defer c.driving.Store(false)
	next, stop := iter.Pull(func(yield func(struct{}) bool) {
		_ = GrowStack(0)
		c.yield = yield
		defer func() { c.yield = nil }()
		err = pump()
	})
	defer stop()
	c.next = next
	defer func() { c.next = nil }()
	if _, ok := next(); !ok {
		return err
	}
	for {
		c.drained, c.pumpDone = false, false
		if rerr := c.rc.Read(c.driveFn); rerr != nil {
			if IsTimeout(rerr) && c.poked.Swap(false) {
				// CheckEnd's deadline: the next RawConn.Read reads first.
				c.restoreDeadline()
				continue
			}
			c.rerr = rerr
			if _, ok := next(); !ok {
				return err
			}
			continue
		}
		if c.pumpDone {
			return err
		}
	}
}

// driven is Drive's RawConn.Read callback: false means "wait for
// readiness", true that the pump has returned.
func (c *Conn) driven(fd uintptr) bool {
	for {
		if c.drained {
			c.drained = false
			c.skipped.Store(true)
			return false
		}
		if c.skipped.Load() {
			c.skipped.Store(false)
		}
		if c.closed.Load() {
			c.rerr = net.ErrClosed
		} else {
			n, ok, err := sysRead(fd, c.rbuf)
			if !ok {
				return false
			}
			c.rn, c.rerr = n, err
			c.drained = err == nil && n > 0 && n < len(c.rbuf)
		}
		if _, ok := c.next(); !ok {
			c.pumpDone = true
			return true
		}
	}
}

// CheckEnd looks whether a driven pump that waits without having read
// EAGAIN has an end of stream, an error or data to read all the same, with
// one recv(MSG_PEEK|MSG_DONTWAIT), and if so wakes it to read. Safe to call
// from any goroutine; cheap when the pump is busy or reading as usual.
func (c *Conn) CheckEnd() {
	if !c.driving.Load() || !c.skipped.Load() {
		return
	}
	pending := false
	_ = c.rc.Control(func(fd uintptr) {
		var b [1]byte
		//nolint:gosec // G103: recvfrom(2) takes the buffer's address; b outlives the call.
		_, _, errno := unix.RawSyscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1,
			unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
		pending = errno != unix.EAGAIN && errno != unix.EINTR
	})
	if pending {
		c.dmu.Lock()
		c.poked.Store(true)
		_ = c.Conn.SetReadDeadline(time.Unix(1, 0))
		c.dmu.Unlock()
	}
}

// PeekEnded reports whether the socket has an end of stream, an error or
// bytes to read, with one recv(MSG_PEEK|MSG_DONTWAIT) and no allocation
// (a pooled server's check before reuse). Not safe for concurrent use.
func (c *Conn) PeekEnded() bool {
	c.ended = false
	_ = c.rc.Control(c.peekFn)
	return c.ended
}

func (c *Conn) peek(fd uintptr) {
	var b [1]byte
	//nolint:gosec // G103: recvfrom(2) takes the buffer's address; b outlives the call.
	_, _, errno := unix.RawSyscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1,
		unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
	c.ended = errno != unix.EAGAIN && errno != unix.EINTR
}

// restoreDeadline puts back the caller's read deadline after a poke.
func (c *Conn) restoreDeadline() {
	c.dmu.Lock()
	_ = c.Conn.SetReadDeadline(c.rdeadline)
	c.dmu.Unlock()
}

// SetReadDeadline is net.Conn's; the deadline is kept for restoreDeadline.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.dmu.Lock()
	defer c.dmu.Unlock()
	c.rdeadline = t
	return c.Conn.SetReadDeadline(t)
}

// SetDeadline is net.Conn's; the read deadline is kept for
// restoreDeadline.
func (c *Conn) SetDeadline(t time.Time) error {
	c.dmu.Lock()
	defer c.dmu.Unlock()
	c.rdeadline = t
	return c.Conn.SetDeadline(t)
}

// Write writes all of b, or returns how much it wrote with a *net.OpError,
// as net.Conn's Write.
func (c *Conn) Write(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	raceWriteStart(b)
	c.wmu.Lock()
	c.wbuf, c.wn, c.werr = b, 0, 0
	err := c.rc.Write(c.writeFn)
	n, errno := c.wn, c.werr
	c.wbuf = nil
	c.wmu.Unlock()
	if err == nil && errno != 0 {
		err = os.NewSyscallError("write", errno)
	}
	if err != nil {
		return n, c.opError("write", err)
	}
	return n, nil
}

// Close closes the connection. While a pump drives it, the pump holds the
// descriptor inside RawConn.Read, and net's Close would wait for that to
// return: the pump may be the caller, or blocked on what the caller is
// about to close next. So the socket is shut down at once (the peer sees
// the end, the pump's next read fails) and closed when the pump lets go.
func (c *Conn) Close() error {
	c.closed.Store(true)
	if !c.driving.Load() {
		return c.Conn.Close()
	}
	// shutdown(2) of a non-blocking socket does not block: raw, as fcntl
	// in NewConn.
	_ = c.rc.Control(func(fd uintptr) { _, _, _ = unix.RawSyscall(unix.SYS_SHUTDOWN, fd, unix.SHUT_RDWR, 0) })
	go func() { _ = c.Conn.Close() }()
	return nil
}

func (c *Conn) opError(op string, err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) {
		return err
	}
	return &net.OpError{Op: op, Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// HalfClose sends the end of the stream on c (a FIN, or TLS's
// close_notify) and leaves its reading side open.
func HalfClose(c net.Conn) error {
	for {
		switch v := c.(type) {
		case *tls.Conn:
			return v.CloseWrite()
		case *Conn:
			c = v.Conn
		case *PrefixConn:
			c = v.Conn
		case interface{ CloseWrite() error }:
			return v.CloseWrite()
		default:
			return errors.ErrUnsupported
		}
	}
}

// PrefixConn replays bytes already read before reading from Conn.
type PrefixConn struct {
	net.Conn
	Prefix []byte
}

func (c *PrefixConn) Read(b []byte) (int, error) {
	if len(c.Prefix) > 0 {
		n := copy(b, c.Prefix)
		c.Prefix = c.Prefix[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}
