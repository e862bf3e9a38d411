package wire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
	"testing/iotest"
)

// chunkReader returns data in reads of the sizes it is given in turn
// (bounded by the room offered), then io.EOF.
type chunkReader struct {
	data  []byte
	sizes []int
	i     int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(c.data), c.sizes[c.i%len(c.sizes)])
	c.i++
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

// TestMsgReader: Peek, Discard and Read return the source's bytes in order
// whatever the sizes of the source's reads, and Peek takes up to Size.
func TestMsgReader(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2)) //nolint:gosec // G404: reproducible test data, not secrets
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	for _, sizes := range [][]int{{1}, {7, 4096, 3}, {ClientBufSize}, {BufSize, 100}, {1 << 20}} {
		r := NewReader(&chunkReader{data: data, sizes: sizes}, ClientBufSize, nil)
		off := 0
		for off < len(data) {
			n := min(1+rng.IntN(BufSize), len(data)-off)
			switch rng.IntN(3) {
			case 0:
				b, err := r.Peek(n)
				if err != nil || !bytes.Equal(b, data[off:off+n]) {
					t.Fatalf("sizes %v: Peek(%d) at %d: %d bytes, %v", sizes, n, off, len(b), err)
				}
				if _, err := r.Discard(n); err != nil {
					t.Fatal(err)
				}
			case 1:
				n = min(n*3, len(data)-off) // past the buffer too
				if _, err := r.Discard(n); err != nil {
					t.Fatalf("sizes %v: Discard(%d) at %d: %v", sizes, n, off, err)
				}
			case 2:
				b := make([]byte, n*3)
				n = min(len(b), len(data)-off)
				if _, err := io.ReadFull(r, b[:n]); err != nil || !bytes.Equal(b[:n], data[off:off+n]) {
					t.Fatalf("sizes %v: ReadFull(%d) at %d: %v", sizes, n, off, err)
				}
			}
			off += n
		}
		if b, err := r.Peek(1); len(b) != 0 || !errors.Is(err, io.EOF) {
			t.Fatalf("sizes %v: Peek at the end: %d bytes, %v", sizes, len(b), err)
		}
	}
	r := NewReader(iotest.OneByteReader(bytes.NewReader(data)), ClientBufSize, nil)
	if b, err := r.Peek(BufSize + 1); len(b) > BufSize || !errors.Is(err, bufio.ErrBufferFull) {
		t.Fatalf("Peek over Size: %d bytes, %v", len(b), err)
	}
}

// TestMsgReaderGivesBack: a reader takes a big buffer for a burst and
// goes back to its small one, once it has read everything, when its last
// read was short or when the peer owes nothing.
func TestMsgReaderGivesBack(t *testing.T) {
	// A small read, a big one, and a third of half a big buffer.
	burst := bytes.Repeat([]byte{'x'}, ClientBufSize+BufSize+2*ClientBufSize)
	for _, c := range []struct {
		name  string
		sizes []int
		// short: the last read is short, and the reader gives the big
		// buffer back without being told the peer is idle.
		short bool
	}{
		{"short_last_read", []int{ClientBufSize, BufSize, 2 * ClientBufSize, 1}, true},
		{"long_last_read", []int{ClientBufSize, BufSize, 2*ClientBufSize + 1}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			idle := false
			r := NewReader(&chunkReader{data: append(burst, 'y'), sizes: c.sizes}, ClientBufSize, func() bool { return idle })
			if _, err := r.Discard(len(burst)); err != nil {
				t.Fatal(err)
			}
			if r.big == nil {
				t.Fatal("a burst was read in the small buffer")
			}
			if b, err := r.Peek(1); err != nil || b[0] != 'y' {
				t.Fatalf("Peek: %q, %v", b, err)
			}
			if _, err := r.Discard(1); err != nil {
				t.Fatal(err)
			}
			if _, err := r.Peek(1); !errors.Is(err, io.EOF) {
				t.Fatalf("Peek at the end: %v", err)
			}
			if c.short != (r.big == nil) {
				t.Fatalf("after the burst the reader holds %d bytes", len(r.buf))
			}
			idle = true
			if _, err := r.Peek(1); !errors.Is(err, io.EOF) {
				t.Fatalf("Peek at the end: %v", err)
			}
			if r.big != nil || len(r.buf) != ClientBufSize {
				t.Fatalf("an idle reader holds %d bytes", len(r.buf))
			}
		})
	}
}

// failWriter accepts limit bytes, then fails.
type failWriter struct {
	bytes.Buffer
	limit int
}

var errWriteFailed = errors.New("write failed")

func (w *failWriter) Write(p []byte) (int, error) {
	if room := w.limit - w.Len(); len(p) > room {
		w.Buffer.Write(p[:max(room, 0)])
		return max(room, 0), errWriteFailed
	}
	return w.Buffer.Write(p)
}

// TestMsgWriter: what is written comes out in order; a Flush gives the
// buffer back; an error sticks.
func TestMsgWriter(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4)) //nolint:gosec // G404: reproducible test data, not secrets
	var want bytes.Buffer
	out := &failWriter{limit: 1 << 30}
	w := NewWriter(out)
	for range 2000 {
		b := make([]byte, rng.IntN(3*BufSize/2))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		want.Write(b)
		var err error
		switch rng.IntN(4) {
		case 0:
			_, err = w.WriteString(string(b))
		case 1:
			for _, c := range b {
				if err = w.WriteByte(c); err != nil {
					break
				}
			}
		default:
			_, err = w.Write(b)
		}
		if err != nil {
			t.Fatal(err)
		}
		if rng.IntN(3) == 0 {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			if w.big != nil {
				t.Fatal("a flushed writer holds its buffer")
			}
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), want.Bytes()) {
		t.Fatal("the bytes written differ from those given")
	}

	out = &failWriter{limit: 10}
	w = NewWriter(out)
	if _, err := w.WriteString("0123456789abcdef"); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); !errors.Is(err, errWriteFailed) {
		t.Fatalf("Flush: %v", err)
	}
	if _, err := w.Write([]byte("x")); !errors.Is(err, errWriteFailed) {
		t.Fatalf("Write after a failure: %v", err)
	}
	if err := w.WriteByte('x'); !errors.Is(err, errWriteFailed) {
		t.Fatalf("WriteByte after a failure: %v", err)
	}
}
