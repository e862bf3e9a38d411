// Command poolfloor is the least a transaction pooler can do for a client
// that connects per transaction, as bench/pooling.sh (FLOOR=1) measures it
// beside ttlproxy's transaction mode and PgBouncer: it accepts the client,
// answers its StartupMessage with a fixed welcome (AuthenticationOk, a few
// ParameterStatus, BackendKeyData, ReadyForQuery: trust, no authentication
// exchange), relays each simple Query to one of its pooled server
// connections and the answer back up to the ReadyForQuery, and closes at
// Terminate. No rewrite, no session state, no metrics, and no reset between
// clients unless -reset asks for ttlproxy's: the CPU it spends per
// connection is the floor of an engine on this machine, and ttlproxy's
// distance to it is its own work.
//
//	poolfloor -listen 127.0.0.1:7100 -upstream 127.0.0.1:5432 -user postgres -database postgres \
//		[-pool 20] [-engine goroutine|epoll|hybrid] [-reset]
//
// Engines:
//
//   - goroutine (default): a goroutine per client over the net package, as
//     ttlproxy's sessions, with read(2) and write(2) as raw system calls on
//     clients and servers (ttlproxy's internal/wire/rawconn.go). accept(2),
//     close(2) and the socket options the net package sets on an accepted
//     socket go through the runtime's entersyscall, which wakes its sysmon
//     thread when the process was idle.
//   - epoll: one event loop over an epoll set of its own (edge-triggered,
//     one read per readiness unless the buffer filled), its descriptor
//     registered with Go's netpoller, so the loop is an ordinary goroutine
//     that parks when nothing is ready: every accept(2), read(2), write(2)
//     and close(2) is a raw system call, and the runtime never leaves
//     user code for the clients' sockets. Server connections log in on the
//     net package and are then driven by the loop.
//   - hybrid: the goroutine engine's sessions over the epoll engine's
//     sockets: a goroutine per client whose reads park on a channel the
//     loop signals, and raw accept(2), read(2), write(2), close(2). What
//     ttlproxy could adopt without turning its sessions into callbacks.
//
// Upstream logins use trust (the server must not ask for a password), only
// the simple query protocol is relayed, and a server is given to one client
// at a time in arrival order. GOMAXPROCS is 1 unless the environment sets
// it, as in ttlproxy. Meant for benchmarks on a trusted loopback only: no
// limits, no TLS, no logging beyond fatal errors.
package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"runtime"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ttlproxy/ttlproxy/bench/internal/rawsys"
)

// Protocol codes of the StartupMessage family (PostgreSQL's pqcomm.h).
const (
	protocol3  = 196608   // 3.0
	sslRequest = 80877103 // SSLRequest
	gssRequest = 80877104 // GSSENCRequest
)

func main() {
	listen := flag.String("listen", "127.0.0.1:7100", "address to accept clients on (host:port)")
	upstream := flag.String("upstream", "127.0.0.1:5432", "server to pool (host:port)")
	user := flag.String("user", "postgres", "role the pooled server connections log in as (trust)")
	database := flag.String("database", "postgres", "database of the pooled server connections")
	size := flag.Int("pool", 20, "server connections, opened at start")
	engine := flag.String("engine", "goroutine", "goroutine, epoll or hybrid")
	flag.BoolVar(&resetOnSwitch, "reset", false, "reset a server (RESET ROLE; RESET ALL) ahead of the first query of a client it did not serve last, as ttlproxy does")
	flag.Parse()
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	servers := make([]*server, *size)
	for i := range servers {
		s, err := login(*upstream, *user, *database)
		if err != nil {
			log.Fatal(err)
		}
		servers[i] = s
	}
	var err error
	switch *engine {
	case "goroutine":
		err = goroutineEngine(*listen, servers)
	case "epoll":
		err = epollEngine(*listen, servers)
	case "hybrid":
		err = hybridEngine(*listen, servers)
	default:
		err = fmt.Errorf("unknown -engine %q (goroutine, epoll or hybrid)", *engine)
	}
	log.Fatal(err)
}

// resetOnSwitch: -reset.
var resetOnSwitch bool

// resetQuery is the Query ttlproxy sends ahead of a client's first message
// on a server another client used last (proxy/settings.go).
var resetQuery = func() []byte {
	q := "RESET ROLE; RESET ALL"
	b := []byte{'Q'}
	b = binary.BigEndian.AppendUint32(b, uint32(len(q)+5)) //nolint:gosec // short
	return append(append(b, q...), 0)
}()

// server is one pooled server connection.
type server struct {
	nc net.Conn
	br *bufio.Reader
	w  *rawWriter
	fd int
	// last is the client it served last (an id; 0 none).
	last uint64
}

// login opens a server connection as user (trust) and reads it to its
// first ReadyForQuery.
func login(addr, user, database string) (*server, error) {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	body := binary.BigEndian.AppendUint32(nil, protocol3)
	for _, kv := range [][2]string{{"user", user}, {"database", database}} {
		body = append(append(append(append(body, kv[0]...), 0), kv[1]...), 0)
	}
	body = append(body, 0)
	msg := binary.BigEndian.AppendUint32(nil, uint32(len(body)+4)) //nolint:gosec // a short packet
	if _, err := nc.Write(append(msg, body...)); err != nil {
		return nil, err
	}
	s := &server{nc: nc, br: bufio.NewReaderSize(nc, 16<<10)}
	for {
		typ, b, err := readMessage(s.br, nil)
		if err != nil {
			return nil, err
		}
		switch {
		case typ == 'E':
			return nil, fmt.Errorf("server login: %q", b)
		case typ == 'R' && binary.BigEndian.Uint32(b[5:]) != 0:
			return nil, errors.New("server login: the server asks for a password (trust only)")
		case typ == 'Z':
			if s.br.Buffered() > 0 {
				return nil, errors.New("server login: bytes after ReadyForQuery")
			}
			rc, err := nc.(*net.TCPConn).SyscallConn()
			if err != nil {
				return nil, err
			}
			_ = rc.Control(func(fd uintptr) { s.fd = int(fd) }) //nolint:gosec // a descriptor
			// From here on raw reads and writes, as ttlproxy's servers.
			in := &rawReader{rc: rc}
			in.fn = in.read
			s.br = bufio.NewReaderSize(in, 16<<10)
			s.w = &rawWriter{rc: rc}
			s.w.fn = s.w.write
			return s, nil
		}
	}
}

// readMessage reads one message (type, length, body) from r into buf.
func readMessage(r *bufio.Reader, buf []byte) (byte, []byte, error) {
	hdr, err := r.Peek(5)
	if err != nil {
		return 0, nil, err
	}
	n := int(binary.BigEndian.Uint32(hdr[1:]))
	if n < 4 {
		return 0, nil, fmt.Errorf("message length %d", n)
	}
	buf = append(buf[:0], make([]byte, n+1)...)
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, nil, err
	}
	return buf[0], buf, nil
}

// welcome is what a client is answered with after its StartupMessage.
var welcome = func() []byte {
	var b []byte
	msg := func(typ byte, body []byte) {
		b = append(b, typ)
		b = binary.BigEndian.AppendUint32(b, uint32(len(body)+4)) //nolint:gosec // short messages
		b = append(b, body...)
	}
	msg('R', []byte{0, 0, 0, 0})
	for _, kv := range [][2]string{
		{"server_version", "15.0"}, {"server_encoding", "UTF8"}, {"client_encoding", "UTF8"},
		{"DateStyle", "ISO, MDY"}, {"integer_datetimes", "on"}, {"standard_conforming_strings", "on"},
		{"TimeZone", "UTC"}, {"IntervalStyle", "postgres"}, {"is_superuser", "on"},
	} {
		msg('S', append(append(append([]byte(kv[0]), 0), kv[1]...), 0))
	}
	msg('K', []byte{0, 0, 0, 1, 0, 0, 0, 1})
	msg('Z', []byte{'I'})
	return b
}()

// pool hands servers to clients in arrival order.
type pool struct {
	mu      sync.Mutex
	idle    []*server
	waiters []chan *server
}

func (p *pool) get() *server {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		s := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return s
	}
	ch := make(chan *server, 1)
	p.waiters = append(p.waiters, ch)
	p.mu.Unlock()
	return <-ch
}

func (p *pool) put(s *server) {
	p.mu.Lock()
	if len(p.waiters) > 0 {
		ch := p.waiters[0]
		p.waiters = p.waiters[1:]
		p.mu.Unlock()
		ch <- s
		return
	}
	p.idle = append(p.idle, s)
	p.mu.Unlock()
}

func goroutineEngine(listen string, servers []*server) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	p := &pool{idle: servers}
	for id := uint64(1); ; id++ {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go serveClient(c.(*net.TCPConn), p, id)
	}
}

// serveClient is the goroutine engine's session over a net package socket.
func serveClient(c *net.TCPConn, p *pool, id uint64) {
	defer func() { _ = c.Close() }()
	rc, err := c.SyscallConn()
	if err != nil {
		return
	}
	in := &rawReader{rc: rc}
	in.fn = in.read
	out := &rawWriter{rc: rc}
	out.fn = out.write
	serveSession(in, out.Write, p, id)
}

// serveSession is a client's session on the goroutine and hybrid engines:
// startup, then each Query relayed on a server held to its ReadyForQuery.
func serveSession(in io.Reader, write func([]byte) error, p *pool, id uint64) {
	br := bufio.NewReaderSize(in, 8<<10)
	for {
		hdr, err := br.Peek(8)
		if err != nil {
			return
		}
		n := int(binary.BigEndian.Uint32(hdr))
		code := binary.BigEndian.Uint32(hdr[4:])
		if _, err := br.Discard(n); err != nil {
			return
		}
		if code == sslRequest || code == gssRequest {
			if write([]byte{'N'}) != nil {
				return
			}
			continue
		}
		break
	}
	if write(welcome) != nil {
		return
	}
	var msg, answer []byte
	for {
		typ, b, err := readMessage(br, msg)
		if err != nil || typ != 'Q' {
			return // Terminate, or what a floor tool does not relay
		}
		msg = b
		s := p.get()
		reset := resetOnSwitch && s.last != 0 && s.last != id
		s.last = id
		answer, err = exchange(s, reset, msg, answer[:0])
		if err != nil {
			return // the server is lost with the client: a floor tool
		}
		p.put(s)
		if write(answer) != nil {
			return
		}
	}
}

// exchange writes msg to s, after the reset when reset is set (in one
// write, its answer dropped), and appends its answer up to the
// ReadyForQuery.
func exchange(s *server, reset bool, msg, answer []byte) ([]byte, error) {
	out := msg
	if reset {
		out = append(append([]byte(nil), resetQuery...), msg...)
	}
	if err := s.w.Write(out); err != nil {
		return nil, err
	}
	for reset {
		typ, _, err := readMessage(s.br, nil)
		if err != nil {
			return nil, err
		}
		reset = typ != 'Z'
	}
	for {
		typ, b, err := readMessage(s.br, nil)
		if err != nil {
			return nil, err
		}
		answer = append(answer, b...)
		if typ == 'Z' {
			return answer, nil
		}
	}
}

// rawReader reads a socket with raw read(2) inside RawConn.Read.
type rawReader struct {
	rc interface {
		Read(func(uintptr) bool) error
	}
	fn  func(uintptr) bool
	buf []byte
	n   int
	err error
}

func (r *rawReader) read(fd uintptr) bool {
	n, ok, err := rawsys.ReadWrite(unix.SYS_READ, fd, r.buf)
	r.n, r.err = n, err
	return ok
}

func (r *rawReader) Read(b []byte) (int, error) {
	r.buf = b
	if err := r.rc.Read(r.fn); err != nil {
		return 0, err
	}
	if r.err != nil {
		return 0, r.err
	}
	if r.n == 0 {
		return 0, io.EOF
	}
	return r.n, nil
}

// rawWriter writes a socket with raw write(2) inside RawConn.Write.
type rawWriter struct {
	rc interface {
		Write(func(uintptr) bool) error
	}
	fn  func(uintptr) bool
	buf []byte
	err error
}

func (w *rawWriter) write(fd uintptr) bool {
	for len(w.buf) > 0 {
		n, ok, err := rawsys.ReadWrite(unix.SYS_WRITE, fd, w.buf)
		if !ok {
			return false
		}
		if err != nil {
			w.err = err
			return true
		}
		w.buf = w.buf[n:]
	}
	return true
}

func (w *rawWriter) Write(b []byte) error {
	w.buf, w.err = b, nil
	if err := w.rc.Write(w.fn); err != nil {
		return err
	}
	return w.err
}

//nolint:gosec // G103: system calls take the addresses of their arguments.
func unsafePointer[T any](p *T) unsafe.Pointer { return unsafe.Pointer(p) }
