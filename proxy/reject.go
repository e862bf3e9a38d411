package proxy

import (
	"bytes"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/ttlproxy/ttlproxy/internal/sqlstate"
	"github.com/ttlproxy/ttlproxy/internal/wire"
	"github.com/ttlproxy/ttlproxy/rewrite"
)

// rejection is a statement replaced by rejectMarker(n), waiting for the
// server's error. It is stale after ReadyForQuery number z.
type rejection struct {
	n   uint64
	z   uint64
	err *rewrite.Error
}

// rejections hands the rejected statements from clientToServer, which
// forwards a marker in their place, to serverToClient, which swaps the
// server's answer to the marker for the rejection.
type rejections struct {
	seq  uint64 // owned by clientToServer
	mu   sync.Mutex
	list []rejection
	// n is len(list), read without the lock on every relayed message.
	n atomic.Int32
}

// pending reports whether any rejection waits for its answer.
func (r *rejections) pending() bool { return r.n.Load() > 0 }

// add records re, stale after ReadyForQuery number z, and returns its marker
// number. Called by clientToServer only.
func (r *rejections) add(re *rewrite.Error, z uint64) uint64 {
	r.seq++
	r.mu.Lock()
	r.list = append(r.list, rejection{n: r.seq, z: z, err: re})
	r.n.Store(int32(len(r.list)))
	r.mu.Unlock()
	return r.seq
}

// drop forgets rejections whose statements are answered by ReadyForQuery
// number z or earlier: the server skipped them (a failed transaction, or an
// earlier error in the same Sync batch) and said what it would have said
// about the original.
func (r *rejections) drop(z uint64) {
	r.mu.Lock()
	kept := r.list[:0]
	for _, x := range r.list {
		if x.z > z {
			kept = append(kept, x)
		}
	}
	clear(r.list[len(kept):])
	r.list = kept
	r.n.Store(int32(len(kept)))
	r.mu.Unlock()
}

// take removes and returns rejection n, or nil.
func (r *rejections) take(n uint64) *rewrite.Error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, x := range r.list {
		if x.n == n {
			r.list = slices.Delete(r.list, k, k+1)
			r.n.Store(int32(len(r.list)))
			return x.err
		}
	}
	return nil
}

// addRejection records err for the statement being forwarded and returns
// its marker number. Called by clientToServer only.
func (s *clientConn) addRejection(err error) uint64 {
	var re *rewrite.Error
	if !errors.As(err, &re) {
		// Not a rejection but a rewriter failure: still fail closed.
		s.log.Error("rewriting statement", "err", err)
		re = &rewrite.Error{Code: codeInternalError, Message: "ttlproxy: could not rewrite the statement"}
	}
	return s.link.rejects.add(re, s.link.expected)
}

// substituteRejection returns the ErrorResponse to send for msg (a whole
// ErrorResponse from the server): the stored rejection if msg is the
// server's answer to a marker, msg itself otherwise.
func (l *link) substituteRejection(msg []byte, dst []byte) []byte {
	i := bytes.Index(msg, []byte(rejectPrefix))
	if i < 0 {
		return msg
	}
	var e pgproto3.ErrorResponse
	if err := e.Decode(msg[wire.HeaderLen:]); err != nil || e.Code != sqlstate.InvalidTextRepresentation {
		return msg
	}
	j := bytes.Index([]byte(e.Message), []byte(rejectPrefix))
	if j < 0 {
		return msg
	}
	digits := e.Message[j+len(rejectPrefix):]
	end := 0
	for end < len(digits) && digits[end] >= '0' && digits[end] <= '9' {
		end++
	}
	n, err := strconv.ParseUint(digits[:end], 10, 64)
	if err != nil {
		return msg
	}
	re := l.rejects.take(n)
	if re == nil {
		return msg
	}
	code := re.Code
	if code == "" {
		code = codeFeatureNotSupported
	}
	return wire.ErrorResponse(dst, "ERROR", code, re.Message, re.Detail, re.Hint)
}
