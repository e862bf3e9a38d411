package proxy

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// faultShim is a TCP relay the tests put between the proxy and the test
// server to inject network faults: latency, a bandwidth limit, a reset
// after a number of bytes in one direction, and a blackhole. Toxiproxy
// does the same as a service; this is the part the tests need, in process,
// without a dependency.
//
// The blackhole is emulated: the shim stops reading from both sides and
// forwards nothing, so no byte gets through in either direction. The
// kernel still acknowledges what fits in the shim's receive buffer (kept
// small) and answers keepalive probes, which a vanished host would not:
// the proxy sees a peer whose receive window closes and stays closed, the
// case TCP_USER_TIMEOUT bounds while the proxy has data to send. A peer
// that has nothing to answer and whose kernel still answers is, to TCP, a
// server still executing a statement; only a real packet blackhole
// (netns_test.go) shows what keepalive does.
type faultShim struct {
	t      testing.TB
	ln     net.Listener
	target string

	mu      sync.Mutex
	latency time.Duration
	// rate is the bandwidth of each direction of each link, in bytes per
	// second; 0 is unlimited.
	rate int
	// hole is non-nil while blackholed, closed when healed.
	hole  chan struct{}
	links map[*shimLink]bool

	// resetAfter[d] is how many more bytes direction d forwards before the
	// link carrying them is reset; negative when not armed.
	resetAfter [2]atomic.Int64
	// resets counts the links reset; resetAt is when the last was
	// (UnixNano).
	resets, resetAt atomic.Int64

	wg sync.WaitGroup
}

// Directions of a link.
const (
	toServer = 0 // proxy → server
	toProxy  = 1 // server → proxy
)

// shimReadBuffer is the receive buffer of the shim's sockets: small, so
// that a blackhole closes the sender's window soon, but well above the
// loopback MSS (64 KiB), or the window would open only at delayed ACKs.
const shimReadBuffer = 256 << 10

type shimLink struct {
	shim         *faultShim
	proxy, serv  *net.TCPConn
	done         chan struct{}
	closeOnce    sync.Once
	forwarded    [2]atomic.Int64
	pipesRunning sync.WaitGroup
}

// newFaultShim listens on 127.0.0.1:0 and relays each connection to target.
// It is closed, every link with it, when the test ends; close it earlier
// with close, before a leak check.
func newFaultShim(t testing.TB, target string) *faultShim {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return newFaultShimOn(t, ln, target)
}

// newFaultShimOn is newFaultShim on a listener of the caller's.
func newFaultShimOn(t testing.TB, ln net.Listener, target string) *faultShim {
	s := &faultShim{t: t, ln: ln, target: target, links: map[*shimLink]bool{}}
	s.resetAfter[toServer].Store(-1)
	s.resetAfter[toProxy].Store(-1)
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(s.close)
	return s
}

func (s *faultShim) addr() string { return s.ln.Addr().String() }

func (s *faultShim) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		pc := c.(*net.TCPConn)
		_ = pc.SetReadBuffer(shimReadBuffer)
		sc, err := net.DialTimeout("tcp", s.target, 5*time.Second)
		if err != nil {
			s.t.Logf("fault shim: dialling %s: %v", s.target, err)
			_ = pc.Close()
			continue
		}
		l := &shimLink{shim: s, proxy: pc, serv: sc.(*net.TCPConn), done: make(chan struct{})}
		_ = l.serv.SetReadBuffer(shimReadBuffer)
		s.mu.Lock()
		if s.links == nil { // closed
			s.mu.Unlock()
			l.close()
			continue
		}
		s.links[l] = true
		s.mu.Unlock()
		s.wg.Add(3)
		l.pipesRunning.Add(2)
		go l.pipe(toServer, l.proxy, l.serv)
		go l.pipe(toProxy, l.serv, l.proxy)
		go func() {
			defer s.wg.Done()
			l.pipesRunning.Wait()
			l.close()
			s.mu.Lock()
			delete(s.links, l)
			s.mu.Unlock()
		}()
	}
}

// close stops accepting and closes every link; safe to call twice.
func (s *faultShim) close() {
	_ = s.ln.Close()
	s.mu.Lock()
	links := s.links
	s.links = nil
	if s.hole != nil {
		close(s.hole)
		s.hole = nil
	}
	s.mu.Unlock()
	for l := range links {
		l.close()
	}
	s.wg.Wait()
}

// setLatency delays every chunk forwarded, in both directions, by d.
func (s *faultShim) setLatency(d time.Duration) {
	s.mu.Lock()
	s.latency = d
	s.mu.Unlock()
}

// setRate limits each direction of each link to bytesPerSecond (0: none).
func (s *faultShim) setRate(bytesPerSecond int) {
	s.mu.Lock()
	s.rate = bytesPerSecond
	s.mu.Unlock()
}

// resetAfterBytes resets the link that forwards the n-th byte from now in
// direction dir (toServer or toProxy), after forwarding exactly n bytes:
// the proxy's side gets a RST (SO_LINGER 0), the server's a close.
func (s *faultShim) resetAfterBytes(dir int, n int64) {
	s.resetAfter[dir].Store(n)
}

// blackhole stops all traffic until heal.
func (s *faultShim) blackhole() {
	s.mu.Lock()
	if s.hole == nil {
		s.hole = make(chan struct{})
	}
	s.mu.Unlock()
}

// heal ends a blackhole, latency and rate limit: what the shim held goes
// on.
func (s *faultShim) heal() {
	s.mu.Lock()
	if s.hole != nil {
		close(s.hole)
		s.hole = nil
	}
	s.latency, s.rate = 0, 0
	s.mu.Unlock()
	s.resetAfter[toServer].Store(-1)
	s.resetAfter[toProxy].Store(-1)
}

// dropLinks closes the links open, as their peers' resets would.
func (s *faultShim) dropLinks() {
	s.mu.Lock()
	var links []*shimLink
	for l := range s.links {
		links = append(links, l)
	}
	s.mu.Unlock()
	for _, l := range links {
		l.close()
	}
}

// linkCount is the number of links open.
func (s *faultShim) linkCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.links)
}

// gate waits while the shim is blackholed; false when the link closed.
func (l *shimLink) gate() bool {
	for {
		l.shim.mu.Lock()
		hole := l.shim.hole
		l.shim.mu.Unlock()
		if hole == nil {
			return true
		}
		select {
		case <-hole:
		case <-l.done:
			return false
		}
	}
}

// take claims n bytes of direction dir against an armed reset: it returns
// how many of them to forward and whether to reset the link after them.
func (l *shimLink) take(dir int, n int) (int, bool) {
	c := &l.shim.resetAfter[dir]
	for {
		rem := c.Load()
		if rem < 0 {
			return n, false
		}
		if int64(n) < rem {
			if c.CompareAndSwap(rem, rem-int64(n)) {
				return n, false
			}
			continue
		}
		if c.CompareAndSwap(rem, -1) {
			return int(rem), true
		}
	}
}

// pipe forwards src to dst with the shim's faults until either side ends.
func (l *shimLink) pipe(dir int, src, dst *net.TCPConn) {
	defer l.shim.wg.Done()
	defer l.pipesRunning.Done()
	buf := make([]byte, 32<<10)
	for {
		if !l.gate() {
			return
		}
		n, rerr := src.Read(buf)
		if n > 0 {
			if !l.gate() {
				return
			}
			l.shim.mu.Lock()
			latency, rate := l.shim.latency, l.shim.rate
			l.shim.mu.Unlock()
			if latency > 0 && !l.sleep(latency) {
				return
			}
			k, reset := l.take(dir, n)
			if err := l.write(dst, buf[:k], rate); err != nil {
				return
			}
			l.forwarded[dir].Add(int64(k))
			if reset {
				l.reset()
				return
			}
		}
		if rerr != nil {
			if errors.Is(rerr, net.ErrClosed) {
				return
			}
			// Pass the end of stream on: the other direction may still
			// carry an answer.
			_ = dst.CloseWrite()
			return
		}
	}
}

// write writes b to dst, in slices paced to rate bytes per second.
func (l *shimLink) write(dst *net.TCPConn, b []byte, rate int) error {
	for len(b) > 0 {
		n := len(b)
		if rate > 0 {
			n = min(n, max(rate/50, 1))
		}
		if _, err := dst.Write(b[:n]); err != nil {
			return err
		}
		b = b[n:]
		if rate > 0 && !l.sleep(time.Duration(n)*time.Second/time.Duration(rate)) {
			return net.ErrClosed
		}
	}
	return nil
}

// sleep waits d; false when the link closed meanwhile.
func (l *shimLink) sleep(d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-l.done:
		return false
	}
}

// reset ends the link: a RST to the proxy, a close to the server.
func (l *shimLink) reset() {
	l.shim.resets.Add(1)
	l.shim.resetAt.Store(time.Now().UnixNano())
	_ = l.proxy.SetLinger(0)
	l.close()
}

func (l *shimLink) close() {
	l.closeOnce.Do(func() {
		close(l.done)
		_ = l.proxy.Close()
		_ = l.serv.Close()
	})
}
