package wire

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"slices"

	"github.com/jackc/pgx/v5/pgproto3"
)

// HeaderLen: messages after startup are framed as a type byte and a big-endian int32
// length that counts itself but not the type byte.
const HeaderLen = 5

// TerminateMsg is a Terminate message.
const TerminateMsg = "X\x00\x00\x00\x04"

// Startup-phase request codes (PostgreSQL pqcomm.h).
const (
	SSLRequestCode    = 80877103
	GSSEncRequestCode = 80877104
	CancelRequestCode = 80877102
	// MaxStartupPacket is PostgreSQL's MAX_STARTUP_PACKET_LENGTH.
	MaxStartupPacket = 10000
)

// WriteError marks an error from writing to the peer, as opposed to reading
// from the source, so that a forwarding loop knows which side failed.
type WriteError struct{ Err error }

func (e *WriteError) Error() string { return e.Err.Error() }
func (e *WriteError) Unwrap() error { return e.Err }

// IsTimeout reports a deadline's error. (Its net.Error escapes to the
// heap: only for errors.)
func IsTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// IsWriteError reports an error a WriteError marks.
func IsWriteError(err error) bool {
	var we *WriteError
	return errors.As(err, &we)
}

// PeekHeader returns the next message's type and total size (type byte
// included) without consuming it. The declared length is returned as is
// (possibly < 4 or huge); callers validate it.
func PeekHeader(r *Reader) (typ byte, length int64, err error) {
	hdr, err := r.Peek(HeaderLen)
	if err != nil {
		return 0, 0, err
	}
	return hdr[0], int64(int32(binary.BigEndian.Uint32(hdr[1:]))), nil
}

// NextBuffered reports whether the next whole message is already buffered,
// so reading it will not block: the writer is flushed only when it is not,
// which sends pipelined messages in one write.
func NextBuffered(r *Reader) bool {
	n := r.Buffered()
	if n < HeaderLen {
		return false
	}
	hdr, _ := r.Peek(HeaderLen)
	l := int64(binary.BigEndian.Uint32(hdr[1:]))
	return 1+l <= int64(n)
}

// RelayRaw copies one message of total bytes from r to w unchanged. Messages
// that fit in r's buffer are copied from it directly; larger ones are
// streamed. partial reports that part of the message was written before an
// error, so the caller must not append a message of its own.
func RelayRaw(r *Reader, w *Writer, total int) (partial bool, err error) {
	if total <= r.Size() {
		b, err := r.Peek(total)
		if err != nil {
			return false, err
		}
		if _, err := w.Write(b); err != nil {
			return false, &WriteError{Err: err}
		}
		_, _ = r.Discard(total)
		return false, nil
	}
	for total > 0 {
		if r.Buffered() == 0 {
			if _, err := r.Peek(1); err != nil {
				return partial, err
			}
		}
		n := min(r.Buffered(), total)
		b, _ := r.Peek(n)
		if _, err := w.Write(b); err != nil {
			return true, &WriteError{Err: err}
		}
		_, _ = r.Discard(n)
		total -= n
		partial = true
	}
	return false, nil
}

// ReadMessage reads one whole message of total bytes into buf and returns
// it, header included. A buf too small grows as the bytes arrive, by
// doubling, not to the length the header declares: a client that announces
// a message of max_message_bytes and sends a few bytes of it holds no more
// memory than it sent (twice that at most, and one BufSize).
func ReadMessage(r *Reader, buf []byte, total int) ([]byte, error) {
	if cap(buf) >= total {
		buf = buf[:total]
		_, err := io.ReadFull(r, buf)
		return buf, err
	}
	buf = buf[:0]
	for len(buf) < total {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(total-len(buf), max(len(buf), BufSize)))
		}
		n, err := r.Read(buf[len(buf):min(cap(buf), total)])
		buf = buf[:len(buf)+n]
		if err != nil && len(buf) < total {
			if errors.Is(err, io.EOF) && len(buf) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return buf, err
		}
	}
	return buf, nil
}

// ErrorResponse encodes an ErrorResponse with the given severity (ERROR or
// FATAL).
func ErrorResponse(dst []byte, severity, code, message, detail, hint string) []byte {
	e := pgproto3.ErrorResponse{
		Severity:            severity,
		SeverityUnlocalized: severity,
		Code:                code,
		Message:             message,
		Detail:              detail,
		Hint:                hint,
	}
	out, err := e.Encode(dst)
	if err != nil {
		// Encode fails only for messages over 1 GiB.
		panic(err)
	}
	return out
}

// CString returns the NUL-terminated string at the start of b and the rest
// after the NUL; ok is false when there is no NUL.
func CString(b []byte) (s []byte, rest []byte, ok bool) {
	for i, c := range b {
		if c == 0 {
			return b[:i], b[i+1:], true
		}
	}
	return nil, nil, false
}

// ProtocolError is a client's mistake, or a refusal at startup, that the
// proxy answers with a FATAL ErrorResponse of Code and Msg and then closes
// the connection.
type ProtocolError struct {
	// Code is the SQLSTATE.
	Code string
	// Msg is the message the client is shown.
	Msg string
}

func (e *ProtocolError) Error() string { return e.Msg }
