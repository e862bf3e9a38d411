package wire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"testing"
	"time"
)

// rawPair returns the two ends of a loopback TCP connection: the server's
// end as a Conn, and the client's as a plain net.Conn.
func rawPair(t *testing.T) (*Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c
	}()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server := <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	rc, ok := NewConn(server).(*Conn)
	if !ok {
		t.Fatalf("NewConn(%T) did not wrap a TCP socket", server)
	}
	t.Cleanup(func() { _ = rc.Close(); _ = client.Close() })
	return rc, client
}

// frame is a length-prefixed test message: a 4-byte big-endian length,
// then that many bytes.
func frame(payload []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(payload)))
	return append(b, payload...)
}

// TestRawConnDrive: under Drive, a pump reading through a small bufio.Reader
// gets every byte in order, whether messages arrive one at a time (each read
// drains the socket and the next waits for readiness), pipelined, or larger
// than the buffer (reads that fill it), and sees io.EOF when the peer closes.
func TestRawConnDrive(t *testing.T) {
	rc, client := rawPair(t)
	rng := rand.New(rand.NewPCG(1, 2)) //nolint:gosec // G404: reproducible test data, not secrets
	var sent [][]byte
	for i := range 300 {
		n := rng.IntN(64)
		if i%10 == 0 {
			n = 1000 + rng.IntN(100_000) // larger than any buffer below
		}
		p := make([]byte, n)
		for j := range p {
			p[j] = byte(rng.UintN(256))
		}
		sent = append(sent, p)
	}

	got := make(chan []byte, len(sent))
	done := make(chan error, 1)
	go func() {
		done <- rc.Drive(func() error {
			r := bufio.NewReaderSize(rc, 64)
			for {
				var hdr [4]byte
				if _, err := io.ReadFull(r, hdr[:]); err != nil {
					return err
				}
				p := make([]byte, binary.BigEndian.Uint32(hdr[:]))
				if _, err := io.ReadFull(r, p); err != nil {
					return err
				}
				got <- p
			}
		})
	}()

	next := 0 // the message the pump should hand over next
	receive := func(upTo int) {
		t.Helper()
		for ; next <= upTo; next++ {
			select {
			case q := <-got:
				if !bytes.Equal(q, sent[next]) {
					t.Fatalf("message %d: got %d bytes, want %d", next, len(q), len(sent[next]))
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("message %d not received: a wake-up was lost", next)
			}
		}
	}
	for i, p := range sent {
		if _, err := client.Write(frame(p)); err != nil {
			t.Fatal(err)
		}
		switch i % 3 {
		case 0:
			// Wait for the pump: its next read finds the socket empty.
			receive(i)
		case 1:
			time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
		}
	}
	receive(len(sent) - 1)
	_ = client.Close()
	select {
	case err := <-done:
		if !errors.Is(err, io.EOF) {
			t.Fatalf("Drive returned %v, want io.EOF", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("drive did not return after the peer closed")
	}
}

// TestRawConnDriveDeadline: a read deadline fails the pending Read with a
// timeout; the pump can clear it and go on reading.
func TestRawConnDriveDeadline(t *testing.T) {
	rc, client := rawPair(t)
	done := make(chan error, 1)
	go func() {
		done <- rc.Drive(func() error {
			_ = rc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			buf := make([]byte, 16)
			_, err := rc.Read(buf)
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
				return errors.New("first read: want a timeout, got " + errString(err))
			}
			_ = rc.SetReadDeadline(time.Time{})
			if _, err := client.Write([]byte("after")); err != nil {
				return err
			}
			n, err := io.ReadFull(rc, buf[:5])
			if err != nil || string(buf[:n]) != "after" {
				return errors.New("second read: got " + string(buf[:n]) + ", " + errString(err))
			}
			return nil
		})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("drive did not return")
	}
}

// TestRawConnCloseWhileDriven: Close never waits for the pump. A pump
// waiting in Read gets net.ErrClosed; a pump busy elsewhere (blocked, as on
// a write to the other connection) does not hold up the Close, and its next
// Read fails; a pump may close its own connection.
func TestRawConnCloseWhileDriven(t *testing.T) {
	t.Run("waiting", func(t *testing.T) {
		rc, _ := rawPair(t)
		done := make(chan error, 1)
		go func() {
			done <- rc.Drive(func() error {
				_, err := rc.Read(make([]byte, 8))
				return err
			})
		}()
		time.Sleep(20 * time.Millisecond) // let the pump wait
		closeWithin(t, rc, time.Second)
		waitErr(t, done, net.ErrClosed)
	})
	t.Run("busy", func(t *testing.T) {
		rc, client := rawPair(t)
		if _, err := client.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		inside, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- rc.Drive(func() error {
				if _, err := rc.Read(make([]byte, 8)); err != nil {
					return err
				}
				close(inside)
				<-release
				_, err := rc.Read(make([]byte, 8))
				return err
			})
		}()
		<-inside
		closeWithin(t, rc, time.Second)
		close(release)
		waitErr(t, done, net.ErrClosed)
		// The peer sees the end.
		_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := client.Read(make([]byte, 1)); err == nil {
			t.Fatal("peer read data after Close, want the end of the stream")
		}
	})
	t.Run("own", func(t *testing.T) {
		rc, _ := rawPair(t)
		done := make(chan error, 1)
		go func() {
			done <- rc.Drive(func() error {
				if err := rc.Close(); err != nil {
					return err
				}
				_, err := rc.Read(make([]byte, 8))
				return err
			})
		}()
		waitErr(t, done, net.ErrClosed)
	})
}

func closeWithin(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	closed := make(chan struct{})
	go func() {
		_ = c.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(d):
		t.Fatalf("Close took longer than %v", d)
	}
}

func waitErr(t *testing.T, done <-chan error, want error) {
	t.Helper()
	select {
	case err := <-done:
		if !errors.Is(err, want) {
			t.Fatalf("Drive returned %v, want %v", err, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("drive did not return")
	}
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

// TestRawConnDriveEndWithData: when the peer's last data and its end of
// stream (a FIN, or a reset) are both queued before the pump reads, the
// read that drains the data consumes the only wake-up, and nothing wakes
// the pump for the end; CheckEnd, as the server's sweep calls it, finds it.
func TestRawConnDriveEndWithData(t *testing.T) {
	for _, c := range []struct {
		name  string
		reset bool
	}{{"fin", false}, {"reset", true}} {
		t.Run(c.name, func(t *testing.T) {
			rc, client := rawPair(t)
			if _, err := client.Write([]byte("last")); err != nil {
				t.Fatal(err)
			}
			if c.reset {
				_ = client.(*net.TCPConn).SetLinger(0)
			}
			_ = client.Close()
			time.Sleep(50 * time.Millisecond) // both queued before the pump reads
			done := make(chan error, 1)
			go func() {
				done <- rc.Drive(func() error {
					buf := make([]byte, 64)
					n, err := rc.Read(buf)
					if err != nil || string(buf[:n]) != "last" {
						return errors.New("first read: " + string(buf[:n]) + ", " + errString(err))
					}
					_, err = rc.Read(buf)
					return err
				})
			}()
			select {
			case err := <-done:
				// A reset may come back with the data; a FIN never does.
				if !c.reset {
					t.Fatalf("Drive returned %v before checkEnd: the test no longer sets up a lost end", err)
				}
				return
			case <-time.After(200 * time.Millisecond):
			}
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			deadline := time.After(5 * time.Second)
			for {
				select {
				case err := <-done:
					// CheckEnd's peek reports a reset, which the kernel
					// then forgets: the pump may read io.EOF instead.
					if err == nil || (!c.reset && !errors.Is(err, io.EOF)) {
						t.Fatalf("Drive returned %v, want the end of the stream", err)
					}
					return
				case <-tick.C:
					rc.CheckEnd()
				case <-deadline:
					t.Fatal("checkEnd did not wake the pump for the end of stream")
				}
			}
		})
	}
}
