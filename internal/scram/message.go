package scram

import (
	"encoding/base64"
	"strings"
)

// attrs walks the comma-separated attribute=value list of a SCRAM message
// (RFC 5802 §7).
type attrs struct {
	what string // message name for errors
	s    string // what is left
	pos  int    // offset of s in the whole message
}

// next returns the next attribute: its letter, its value and the offset of
// the attribute in the whole message. Errors are *MalformedError.
func (a *attrs) next() (name byte, value string, at int, err error) {
	if a.s == "" {
		return 0, "", a.pos, malformed(a.what, "attribute expected at the end of the message")
	}
	item, rest, more := strings.Cut(a.s, ",")
	at = a.pos
	if len(item) < 2 || item[1] != '=' || !isAttrName(item[0]) {
		return 0, "", at, malformed(a.what, "attribute expected at offset %d", at)
	}
	a.pos += len(item)
	if more {
		a.pos++
		if rest == "" {
			return 0, "", at, malformed(a.what, "empty attribute at the end of the message")
		}
	}
	a.s = rest
	return item[0], item[2:], at, nil
}

// expect returns the value of the next attribute, which must be name.
func (a *attrs) expect(name byte) (string, error) {
	got, value, at, err := a.next()
	if err != nil {
		return "", err
	}
	if got != name {
		return "", malformed(a.what, "attribute %q expected at offset %d", name, at)
	}
	return value, nil
}

func (a *attrs) done() bool { return a.s == "" }

func isAttrName(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// validNonce reports a non-empty nonce of printable characters other than
// a comma (RFC 5802 §7, "printable").
func validNonce(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x21 || c > 0x7e || c == ',' {
			return false
		}
	}
	return true
}

// clientFirst is a parsed client-first-message.
type clientFirst struct {
	gs2Header string // "n,," or "y,,"
	bare      string // client-first-message-bare
	nonce     string
}

// parseClientFirst parses a client-first-message (RFC 5802 §7) as
// PostgreSQL's read_client_first_message does for a server that does not
// offer channel binding: gs2-cbind-flag "n" or "y", no authzid, no
// mandatory extension; the user name is ignored (PostgreSQL takes the
// startup packet's), and optional extensions after the nonce are allowed.
func parseClientFirst(msg string) (*clientFirst, error) {
	const what = "client-first-message"
	if len(msg) < 3 {
		return nil, malformed(what, "too short")
	}
	switch msg[0] {
	case 'n', 'y':
		if msg[1] != ',' {
			return nil, malformed(what, "comma expected after the channel binding flag")
		}
	case 'p':
		return nil, malformed(what, "the client selected channel binding, which the server did not offer")
	default:
		return nil, malformed(what, "unexpected channel binding flag %q", msg[0])
	}
	rest := msg[2:]
	if strings.HasPrefix(rest, "a=") {
		return nil, malformed(what, "authorization identities are not supported")
	}
	if rest == "" || rest[0] != ',' {
		return nil, malformed(what, "comma expected after the authorization identity")
	}
	cf := &clientFirst{gs2Header: msg[:3], bare: msg[3:]}
	a := attrs{what: what, s: cf.bare, pos: 3}
	name, _, at, err := a.next()
	if err != nil {
		return nil, err
	}
	if name == 'm' {
		return nil, malformed(what, "mandatory extensions are not supported")
	}
	if name != 'n' {
		return nil, malformed(what, "attribute 'n' expected at offset %d", at)
	}
	if cf.nonce, err = a.expect('r'); err != nil {
		return nil, err
	}
	if !validNonce(cf.nonce) {
		return nil, malformed(what, "the nonce has characters that are not printable")
	}
	for !a.done() {
		if _, _, _, err := a.next(); err != nil {
			return nil, err
		}
	}
	return cf, nil
}

// clientFinal is a parsed client-final-message.
type clientFinal struct {
	withoutProof string
	binding      []byte
	nonce        string
	proof        Key
}

// parseClientFinal parses a client-final-message (RFC 5802 §7): channel
// binding, nonce, optional extensions, and the proof last.
func parseClientFinal(msg string) (*clientFinal, error) {
	const what = "client-final-message"
	a := attrs{what: what, s: msg}
	cb, err := a.expect('c')
	if err != nil {
		return nil, err
	}
	cf := &clientFinal{}
	if cf.binding, err = base64.StdEncoding.DecodeString(cb); err != nil {
		return nil, malformed(what, "channel binding is not base64")
	}
	if cf.nonce, err = a.expect('r'); err != nil {
		return nil, err
	}
	for {
		name, value, at, err := a.next()
		if err != nil {
			return nil, err
		}
		if name != 'p' {
			continue
		}
		if !a.done() {
			return nil, malformed(what, "garbage after the proof")
		}
		cf.withoutProof = msg[:max(at-1, 0)]
		if err := decodeKey(&cf.proof, value); err != nil {
			return nil, malformed(what, "bad proof")
		}
		return cf, nil
	}
}

// serverFirst is a parsed server-first-message.
type serverFirst struct {
	nonce      string
	salt       []byte
	iterations int
}

// parseServerFirst parses a server-first-message (RFC 5802 §7) as libpq's
// read_server_first_message does: nonce, salt, iteration count, optional
// extensions; a mandatory extension is refused.
func parseServerFirst(msg string) (*serverFirst, error) {
	const what = "server-first-message"
	if strings.HasPrefix(msg, "m=") {
		return nil, malformed(what, "mandatory extensions are not supported")
	}
	a := attrs{what: what, s: msg}
	sf := &serverFirst{}
	var err error
	if sf.nonce, err = a.expect('r'); err != nil {
		return nil, err
	}
	if !validNonce(sf.nonce) {
		return nil, malformed(what, "the nonce has characters that are not printable")
	}
	salt, err := a.expect('s')
	if err != nil {
		return nil, err
	}
	if sf.salt, err = base64.StdEncoding.DecodeString(salt); err != nil || len(sf.salt) == 0 {
		return nil, malformed(what, "bad salt")
	}
	iter, err := a.expect('i')
	if err != nil {
		return nil, err
	}
	if sf.iterations = parseIterations(iter); sf.iterations == 0 {
		return nil, malformed(what, "bad iteration count")
	}
	for !a.done() {
		if _, _, _, err := a.next(); err != nil {
			return nil, err
		}
	}
	return sf, nil
}

// parseIterations returns a decimal iteration count in 1..maxIterations,
// or 0.
func parseIterations(s string) int {
	if s == "" || len(s) > 9 {
		return 0
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0
		}
		n = n*10 + int(s[i]-'0')
	}
	if n < 1 || n > maxIterations {
		return 0
	}
	return n
}
