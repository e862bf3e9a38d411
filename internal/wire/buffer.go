package wire

import (
	"bufio"
	"io"
	"sync"
)

// The pumps' buffers. A session spends most of its life idle, waiting for
// its client, and a buffer held for the session's life is paid for by every
// idle client: four bufio buffers of BufSize were 64 KiB a session. So
// only the reads that wait hold a buffer of their own, a small one sized
// for what the peer sends at once, and the BufSize buffers that move a
// large result or a pipeline are taken from bigBuffers while data flows and
// given back when it stops: a writer when it is flushed empty, a reader
// when it is empty and either the session owes nothing (the peer has
// nothing more to send) or its last read was short (a lull, not a stream).
//
// The cost: a burst larger than the small buffer that arrives after the
// reader went small is read in two reads instead of one (the small read
// comes back full, the next goes into a big buffer); bursts beyond BufSize
// are read BufSize at a time as before.

const (
	// BufSize is the read and write buffer of a direction while data
	// flows: large enough for typical pipelines and result pages. An idle
	// session holds only its two small read buffers.
	BufSize = 16 << 10
	// ClientBufSize is the buffer the client's reader keeps: a round trip
	// of an OLTP statement (Bind/Execute/Sync, a Query) fits in it.
	// PgBouncer's pkt_buf has the same default.
	ClientBufSize = 4 << 10
	// ServerBufSize is the buffer the server's reader keeps: PostgreSQL
	// sends from an 8 KiB buffer (PQ_SEND_BUFFER_SIZE), so one of its
	// writes fits.
	ServerBufSize = 8 << 10
)

// bigBuffers holds the BufSize buffers that readers and writers take while
// data moves. A pointer to an array, so Get and Put allocate nothing.
var bigBuffers = sync.Pool{New: func() any { return new([BufSize]byte) }}

// Reader is a bufio.Reader whose buffer is small while the pump waits
// and BufSize while data flows (see above). Peek takes up to Size bytes.
// Not safe for concurrent use.
type Reader struct {
	rd io.Reader
	// idle, when set, reports that the peer owes nothing: the next read
	// waits, and waits in the small buffer.
	idle func() bool
	// buf is small or big[:]; r and w are its read and write positions.
	buf   []byte
	small []byte
	big   *[BufSize]byte
	r, w  int
	err   error
	// more: the last read filled the room it was given, so more data is
	// probably waiting; the next read gets a big buffer. short: the last
	// read was shorter than the small buffer and did not fill its room.
	more, short bool
}

// NewReader reads rd through a buffer of small bytes while it waits
// (up to BufSize while data flows).
func NewReader(rd io.Reader, small int, idle func() bool) *Reader {
	buf := make([]byte, small)
	return &Reader{rd: rd, idle: idle, buf: buf, small: buf}
}

// Size is the largest n Peek can return.
func (b *Reader) Size() int { return BufSize }

// Buffered is the number of bytes that can be read without reading the
// source.
func (b *Reader) Buffered() int { return b.w - b.r }

// fill makes room for need bytes (need <= BufSize) and reads once.
func (b *Reader) fill(need int) {
	if b.r > 0 {
		copy(b.buf, b.buf[b.r:b.w])
		b.w -= b.r
		b.r = 0
	}
	switch {
	case b.big != nil && b.w == 0 && need <= len(b.small) && (b.short || b.idle != nil && b.idle()):
		// Empty, and nothing more is coming at once: the read that is
		// about to wait does it in the small buffer.
		bigBuffers.Put(b.big)
		b.big, b.buf = nil, b.small
	case b.big == nil && (b.more || need > len(b.buf)):
		b.big = bigBuffers.Get().(*[BufSize]byte)
		copy(b.big[:], b.buf[:b.w])
		b.buf = b.big[:]
	}
	// As bufio: a source that returns nothing, repeatedly, is broken.
	for range 100 {
		room := len(b.buf) - b.w
		n, err := b.rd.Read(b.buf[b.w:])
		if n < 0 || n > room {
			panic("wire: reader returned an invalid count")
		}
		b.w += n
		b.more = n == room
		b.short = !b.more && n < len(b.small)
		if err != nil {
			b.err = err
			return
		}
		if n > 0 {
			return
		}
	}
	b.err = io.ErrNoProgress
}

func (b *Reader) readErr() error {
	err := b.err
	b.err = nil
	return err
}

// Peek returns the next n bytes without advancing the reader, valid until
// the next read; with fewer bytes it returns the error that stopped it
// (bufio.ErrBufferFull when n is over Size).
func (b *Reader) Peek(n int) ([]byte, error) {
	if n < 0 {
		return nil, bufio.ErrNegativeCount
	}
	if n > BufSize {
		return b.buf[b.r:b.w], bufio.ErrBufferFull
	}
	for b.w-b.r < n && b.err == nil {
		b.fill(n)
	}
	if avail := b.w - b.r; avail < n {
		err := b.readErr()
		if err == nil {
			err = bufio.ErrBufferFull
		}
		return b.buf[b.r:b.w], err
	}
	return b.buf[b.r : b.r+n], nil
}

// Discard skips the next n bytes, reading the source as needed.
func (b *Reader) Discard(n int) (int, error) {
	if n < 0 {
		return 0, bufio.ErrNegativeCount
	}
	remain := n
	for {
		skip := min(b.w-b.r, remain)
		b.r += skip
		remain -= skip
		if remain == 0 {
			return n, nil
		}
		if b.err != nil {
			return n - remain, b.readErr()
		}
		b.fill(1)
	}
}

// Read reads up to len(p) bytes: what is buffered, or else one read of the
// source (straight into p when p is at least as large as the buffer).
func (b *Reader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		if b.Buffered() > 0 {
			return 0, nil
		}
		return 0, b.readErr()
	}
	if b.r == b.w {
		if b.err != nil {
			return 0, b.readErr()
		}
		if len(p) >= len(b.buf) {
			n, err := b.rd.Read(p)
			if n < 0 || n > len(p) {
				panic("wire: reader returned an invalid count")
			}
			b.more, b.short = n == len(p), false
			return n, err
		}
		b.r, b.w = 0, 0
		b.fill(1)
		if b.r == b.w {
			return 0, b.readErr()
		}
	}
	n := copy(p, b.buf[b.r:b.w])
	b.r += n
	return n, nil
}

// Writer is a bufio.Writer of BufSize that holds a buffer (from
// bigBuffers) only while it has unflushed data. After a write error every
// call returns that error. Not safe for concurrent use.
type Writer struct {
	wr  io.Writer
	big *[BufSize]byte
	n   int
	err error
}

func NewWriter(wr io.Writer) *Writer { return &Writer{wr: wr} }

func (b *Writer) take() {
	if b.big == nil {
		b.big = bigBuffers.Get().(*[BufSize]byte)
	}
}

// Flush writes the buffered data and gives the buffer back.
func (b *Writer) Flush() error {
	if err := b.flush(); err != nil {
		return err
	}
	if b.big != nil {
		bigBuffers.Put(b.big)
		b.big = nil
	}
	return nil
}

// flush writes the buffered data, keeping the buffer.
func (b *Writer) flush() error {
	if b.err != nil {
		return b.err
	}
	if b.n == 0 {
		return nil
	}
	n, err := b.wr.Write(b.big[:b.n])
	if n < b.n && err == nil {
		err = io.ErrShortWrite
	}
	if err != nil {
		if n > 0 && n < b.n {
			copy(b.big[:], b.big[n:b.n])
		}
		b.n -= n
		b.err = err
		return err
	}
	b.n = 0
	return nil
}

// Write buffers p, writing the buffer out whenever it fills; a p larger
// than the buffer is written straight through when nothing is buffered.
func (b *Writer) Write(p []byte) (int, error) {
	nn := 0
	for len(p) > BufSize-b.n && b.err == nil {
		var n int
		if b.n == 0 {
			n, b.err = b.wr.Write(p)
		} else {
			n = copy(b.big[b.n:], p)
			b.n += n
			_ = b.flush()
		}
		nn += n
		p = p[n:]
	}
	if b.err != nil {
		return nn, b.err
	}
	if len(p) == 0 {
		return nn, nil
	}
	b.take()
	n := copy(b.big[b.n:], p)
	b.n += n
	return nn + n, nil
}

// WriteString is Write for a string, without converting it.
func (b *Writer) WriteString(s string) (int, error) {
	nn := 0
	for len(s) > 0 && b.err == nil {
		if b.n == BufSize {
			_ = b.flush()
			continue
		}
		b.take()
		n := copy(b.big[b.n:], s)
		b.n += n
		nn += n
		s = s[n:]
	}
	return nn, b.err
}

// WriteByte buffers one byte.
func (b *Writer) WriteByte(c byte) error {
	if b.err != nil {
		return b.err
	}
	if b.n == BufSize && b.flush() != nil {
		return b.err
	}
	b.take()
	b.big[b.n] = c
	b.n++
	return nil
}
