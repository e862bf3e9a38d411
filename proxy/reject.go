package proxy

import (
	"bytes"
	"errors"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/ttlproxy/ttlproxy/internal/sqlstate"
	"github.com/ttlproxy/ttlproxy/rewrite"
)

// rejection is a statement replaced by rejectMarker(n), waiting for the
// server's error. It is stale after ReadyForQuery number z.
type rejection struct {
	n   uint64
	z   uint64
	err *rewrite.Error
}

// addRejection records err for the statement being forwarded and returns
// its marker number. Called by clientToServer only.
func (s *session) addRejection(err error) uint64 {
	var re *rewrite.Error
	if !errors.As(err, &re) {
		// Not a rejection but a rewriter failure: still fail closed.
		s.log.Error("rewriting statement", "err", err)
		re = &rewrite.Error{Code: codeInternalError, Message: "ttlproxy: could not rewrite the statement"}
	}
	s.rejectSeq++
	s.rejectMu.Lock()
	s.rejects = append(s.rejects, rejection{n: s.rejectSeq, z: s.expected, err: re})
	s.rejectMu.Unlock()
	s.nrejects.Add(1)
	return s.rejectSeq
}

// dropRejections forgets rejections whose statements are answered by
// ReadyForQuery number z or earlier: the server skipped them (a failed
// transaction, or an earlier error in the same Sync batch) and said what it
// would have said about the original.
func (s *session) dropRejections(z uint64) {
	s.rejectMu.Lock()
	kept := s.rejects[:0]
	for _, r := range s.rejects {
		if r.z > z {
			kept = append(kept, r)
		}
	}
	clear(s.rejects[len(kept):])
	s.rejects = kept
	s.nrejects.Store(int32(len(kept)))
	s.rejectMu.Unlock()
}

// substituteRejection returns the ErrorResponse to send for msg (a whole
// ErrorResponse from the server): the stored rejection if msg is the
// server's answer to a marker, msg itself otherwise.
func (s *session) substituteRejection(msg []byte, dst []byte) []byte {
	i := bytes.Index(msg, []byte(rejectPrefix))
	if i < 0 {
		return msg
	}
	var e pgproto3.ErrorResponse
	if err := e.Decode(msg[headerLen:]); err != nil || e.Code != sqlstate.InvalidTextRepresentation {
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
	var re *rewrite.Error
	s.rejectMu.Lock()
	for k, r := range s.rejects {
		if r.n == n {
			re = r.err
			s.rejects = slices.Delete(s.rejects, k, k+1)
			break
		}
	}
	s.nrejects.Store(int32(len(s.rejects)))
	s.rejectMu.Unlock()
	if re == nil {
		return msg
	}
	code := re.Code
	if code == "" {
		code = codeFeatureNotSupported
	}
	return errorResponse(dst, "ERROR", code, re.Message, re.Detail, re.Hint)
}
