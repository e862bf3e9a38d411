package scram

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"strconv"
)

// nonceLen is the number of random bytes in a nonce made here, base64
// encoded on the wire: PostgreSQL's SCRAM_RAW_NONCE_LEN.
const nonceLen = 18

// Server is the server side of one SCRAM-SHA-256 exchange (RFC 5802 §5)
// against a stored verifier, as PostgreSQL runs it (auth-scram.c): First
// answers the client-first-message, Final checks the client-final-message.
// It is used once, by one goroutine.
type Server struct {
	v *Verifier
	// nonce is the server's part of the nonce; made at First unless set
	// (the RFC 7677 test vector sets it).
	nonce string

	first       *clientFirst
	serverFirst string
	done        bool
}

// NewServer starts an exchange against v.
func NewServer(v *Verifier) *Server { return &Server{v: v} }

// MockVerifier is a verifier no proof matches, for a user that does not
// exist or has no usable password, as PostgreSQL's scram_mock_salt: the
// exchange runs to the end and fails like a wrong password, and its salt is
// the same for every attempt of user (HMAC-SHA-256(secret, user), first
// SaltLen bytes), so that the answer does not tell whether user exists.
// secret is a per-process random value of any length.
func MockVerifier(user string, secret []byte) *Verifier {
	return &Verifier{
		Iterations: DefaultIterations,
		Salt:       hmacSHA256(secret, []byte(user))[:SaltLen],
		// A StoredKey of zeroes would need H(ClientKey) = 0.
	}
}

// First parses the client-first-message (the data of PostgreSQL's
// SASLInitialResponse) and returns the server-first-message
// "r=<client nonce><server nonce>,s=<salt>,i=<iterations>". Errors are
// *MalformedError (PostgreSQL answers them with SQLSTATE 08P01).
func (s *Server) First(clientFirstMessage []byte) ([]byte, error) {
	if s.first != nil {
		return nil, errors.New("scram: First called twice")
	}
	cf, err := parseClientFirst(string(clientFirstMessage))
	if err != nil {
		return nil, err
	}
	if s.nonce == "" {
		var raw [nonceLen]byte
		_, _ = rand.Read(raw[:])
		s.nonce = base64.StdEncoding.EncodeToString(raw[:])
	}
	s.first = cf
	s.serverFirst = "r=" + cf.nonce + s.nonce +
		",s=" + base64.StdEncoding.EncodeToString(s.v.Salt) +
		",i=" + strconv.Itoa(s.v.Iterations)
	return []byte(s.serverFirst), nil
}

// Final parses the client-final-message (the data of PostgreSQL's
// SASLResponse), checks its channel binding, nonce and proof, and returns
// the server-final-message "v=<ServerSignature>" and the client's keys:
// ClientKey = ClientProof XOR HMAC(StoredKey, AuthMessage), accepted when
// H(ClientKey) = StoredKey (RFC 5802 §3). A proof that does not match is
// ErrAuthFailed; a message that does not parse, or whose binding or nonce
// differs from the first message's, is a *MalformedError.
func (s *Server) Final(clientFinalMessage []byte) (serverFinal []byte, keys *Keys, err error) {
	if s.first == nil || s.done {
		return nil, nil, errors.New("scram: Final called out of order")
	}
	s.done = true
	cf, err := parseClientFinal(string(clientFinalMessage))
	if err != nil {
		return nil, nil, err
	}
	if string(cf.binding) != s.first.gs2Header {
		return nil, nil, malformed("client-final-message", "channel binding differs from the client-first-message's")
	}
	if cf.nonce != s.first.nonce+s.nonce {
		return nil, nil, malformed("client-final-message", "nonce does not match")
	}
	authMessage := []byte(s.first.bare + "," + s.serverFirst + "," + cf.withoutProof)
	clientSignature := hmacSHA256(s.v.StoredKey[:], authMessage)
	k := &Keys{Iterations: s.v.Iterations, Salt: append([]byte(nil), s.v.Salt...), ServerKey: s.v.ServerKey}
	xor(&k.ClientKey, cf.proof[:], clientSignature)
	stored := sha256.Sum256(k.ClientKey[:])
	if subtle.ConstantTimeCompare(stored[:], s.v.StoredKey[:]) != 1 {
		return nil, nil, ErrAuthFailed
	}
	serverSignature := hmacSHA256(s.v.ServerKey[:], authMessage)
	return []byte("v=" + base64.StdEncoding.EncodeToString(serverSignature)), k, nil
}
