package scram

import (
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
)

// ErrKeysMismatch is returned by a Client made from Keys when the server
// names another salt or iteration count than the keys': its verifier has
// changed (a new password), so the keys cannot log in.
var ErrKeysMismatch = errors.New("SCRAM keys do not belong to the server's verifier (the password has changed)")

// Client is the client side of one SCRAM-SHA-256 exchange (RFC 5802 §5) as
// libpq runs it (fe-auth-scram.c): no channel binding, an empty user name
// (PostgreSQL takes the startup packet's). It logs in with a password or,
// without one, with Keys recovered by a Server from an earlier client's
// proof (pass-through, as PgBouncer does). It is used once, by one
// goroutine.
type Client struct {
	keys     *Keys
	password string
	user     string // sent as n=; the RFC 7677 vector sets it
	nonce    string // made at First unless set

	clientFirstBare string
	serverSignature []byte
}

// NewClient starts an exchange that logs in with keys.
func NewClient(keys *Keys) *Client { return &Client{keys: keys} }

// NewPasswordClient starts an exchange that logs in with password (prepared
// by Normalize).
func NewPasswordClient(password string) *Client { return &Client{password: password} }

// First returns the client-first-message "n,,n=,r=<nonce>" (the data of
// SASLInitialResponse).
func (c *Client) First() []byte {
	if c.nonce == "" {
		var raw [nonceLen]byte
		_, _ = rand.Read(raw[:])
		c.nonce = base64.StdEncoding.EncodeToString(raw[:])
	}
	c.clientFirstBare = "n=" + c.user + ",r=" + c.nonce
	return []byte("n,," + c.clientFirstBare)
}

// Final parses the server-first-message (the data of
// AuthenticationSASLContinue) and returns the client-final-message
// "c=biws,r=<nonce>,p=<ClientProof>" (RFC 5802 §3: ClientProof = ClientKey
// XOR HMAC(H(ClientKey), AuthMessage)). Errors: *MalformedError for a
// message that does not parse or whose nonce does not extend the client's;
// ErrKeysMismatch for a Client made from Keys of another salt or iteration
// count.
func (c *Client) Final(serverFirstMessage []byte) ([]byte, error) {
	if c.clientFirstBare == "" {
		return nil, errors.New("scram: Final called before First")
	}
	msg := string(serverFirstMessage)
	sf, err := parseServerFirst(msg)
	if err != nil {
		return nil, err
	}
	if len(sf.nonce) <= len(c.nonce) || sf.nonce[:len(c.nonce)] != c.nonce {
		return nil, malformed("server-first-message", "the nonce does not extend the client's")
	}
	keys := c.keys
	if keys == nil {
		if keys, err = PasswordKeys(c.password, sf.salt, sf.iterations); err != nil {
			return nil, err
		}
		c.keys = keys
	} else if keys.Iterations != sf.iterations || !bytes.Equal(keys.Salt, sf.salt) {
		return nil, ErrKeysMismatch
	}
	withoutProof := "c=biws,r=" + sf.nonce // biws: base64 of "n,,"
	authMessage := []byte(c.clientFirstBare + "," + msg + "," + withoutProof)
	stored := keys.Verifier().StoredKey
	var proof Key
	xor(&proof, keys.ClientKey[:], hmacSHA256(stored[:], authMessage))
	c.serverSignature = hmacSHA256(keys.ServerKey[:], authMessage)
	return []byte(withoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof[:])), nil
}

// Verify checks the server-final-message (the data of
// AuthenticationSASLFinal): "v=<ServerSignature>" must be HMAC(ServerKey,
// AuthMessage), else ErrAuthFailed (the server does not know the
// verifier); "e=<error>" is returned as an error naming it.
func (c *Client) Verify(serverFinalMessage []byte) error {
	const what = "server-final-message"
	if c.serverSignature == nil {
		return errors.New("scram: Verify called before Final")
	}
	a := attrs{what: what, s: string(serverFinalMessage)}
	name, value, _, err := a.next()
	if err != nil {
		return err
	}
	switch name {
	case 'e':
		return fmt.Errorf("SCRAM server error: %q", value)
	case 'v':
	default:
		return malformed(what, "attribute 'v' expected")
	}
	for !a.done() {
		if _, _, _, err := a.next(); err != nil {
			return err
		}
	}
	sig, err := base64.StdEncoding.DecodeString(value)
	if err != nil || len(sig) != KeyLen {
		return malformed(what, "bad server signature")
	}
	if subtle.ConstantTimeCompare(sig, c.serverSignature) != 1 {
		return ErrAuthFailed
	}
	return nil
}

// Keys returns the keys the exchange logs in with: those given to
// NewClient, or those derived from the password once Final has run (nil
// before).
func (c *Client) Keys() *Keys { return c.keys }
