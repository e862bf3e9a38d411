package scram

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/xdg-go/stringprep"
)

// Mechanism is the SASL mechanism name PostgreSQL announces in
// AuthenticationSASL and a client selects in SASLInitialResponse.
const Mechanism = "SCRAM-SHA-256"

// KeyLen is the length in bytes of every key and signature: SHA-256's output
// (RFC 7677 §3).
const KeyLen = sha256.Size

// DefaultIterations is the PBKDF2 iteration count of verifiers made here:
// PostgreSQL's scram_iterations default (4096, RFC 7677 §4's minimum).
const DefaultIterations = 4096

// SaltLen is the length in bytes of salts made here: PostgreSQL's
// SCRAM_DEFAULT_SALT_LEN.
const SaltLen = 16

// maxIterations bounds the iteration count accepted from a verifier or a
// server, so that a hostile server-first-message cannot make a client spin.
// PostgreSQL's scram_iterations is at most INT_MAX; libpq accepts any.
const maxIterations = 1 << 24

// Key is a SCRAM-SHA-256 key or signature (RFC 5802 §3): 32 bytes.
type Key [KeyLen]byte

// ErrAuthFailed is returned when a proof or a server signature does not
// match: a wrong password, or keys from another verifier.
var ErrAuthFailed = errors.New("SCRAM authentication failed")

// MalformedError is a SCRAM message or verifier that does not parse. Msg
// never holds a password or key.
type MalformedError struct {
	// What names the message: "client-first-message", "verifier", ….
	What string
	// Msg says what is wrong with it.
	Msg string
}

func (e *MalformedError) Error() string { return "malformed SCRAM " + e.What + ": " + e.Msg }

func malformed(what, format string, args ...any) error {
	return &MalformedError{What: what, Msg: fmt.Sprintf(format, args...)}
}

// Verifier is what PostgreSQL stores in pg_authid.rolpassword for a SCRAM
// password: enough to check a client's proof, not to log in as it.
type Verifier struct {
	// Iterations is the PBKDF2 iteration count (≥ 1).
	Iterations int
	// Salt is the PBKDF2 salt (PostgreSQL makes 16 bytes).
	Salt []byte
	// StoredKey is H(ClientKey) (RFC 5802 §3).
	StoredKey Key
	// ServerKey is HMAC(SaltedPassword, "Server Key") (RFC 5802 §3).
	ServerKey Key
}

// IsVerifier reports whether s has the shape of a SCRAM-SHA-256 verifier
// (it starts with "SCRAM-SHA-256$"), as PgBouncer and PostgreSQL tell a
// verifier from a plain password.
func IsVerifier(s string) bool { return strings.HasPrefix(s, Mechanism+"$") }

// ParseVerifier parses PostgreSQL's text form of a verifier,
// "SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>" with base64
// salt and keys (PostgreSQL's parse_scram_secret, auth-scram.c). Errors are
// *MalformedError.
func ParseVerifier(s string) (*Verifier, error) {
	const what = "verifier"
	rest, ok := strings.CutPrefix(s, Mechanism+"$")
	if !ok {
		return nil, malformed(what, "does not start with %s$", Mechanism)
	}
	params, keys, ok := strings.Cut(rest, "$")
	if !ok {
		return nil, malformed(what, "want <iterations>:<salt>$<StoredKey>:<ServerKey>")
	}
	iterText, saltText, ok := strings.Cut(params, ":")
	if !ok {
		return nil, malformed(what, "want <iterations>:<salt> before the $")
	}
	iter := parseIterations(iterText)
	if iter == 0 {
		return nil, malformed(what, "bad iteration count")
	}
	salt, err := base64.StdEncoding.DecodeString(saltText)
	if err != nil || len(salt) == 0 {
		return nil, malformed(what, "bad salt")
	}
	storedText, serverText, ok := strings.Cut(keys, ":")
	if !ok {
		return nil, malformed(what, "want <StoredKey>:<ServerKey> after the $")
	}
	v := &Verifier{Iterations: iter, Salt: salt}
	if err := decodeKey(&v.StoredKey, storedText); err != nil {
		return nil, malformed(what, "bad StoredKey")
	}
	if err := decodeKey(&v.ServerKey, serverText); err != nil {
		return nil, malformed(what, "bad ServerKey")
	}
	return v, nil
}

// String gives the verifier in PostgreSQL's text form (see ParseVerifier).
func (v *Verifier) String() string {
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("%s$%d:%s$%s:%s", Mechanism, v.Iterations, b64(v.Salt), b64(v.StoredKey[:]), b64(v.ServerKey[:]))
}

// NewVerifier derives the verifier of password with salt and iterations, as
// PostgreSQL's scram_build_secret does (RFC 5802 §3; the password prepared
// by Normalize). It fails only on an iteration count below 1 or an empty
// salt.
func NewVerifier(password string, salt []byte, iterations int) (*Verifier, error) {
	keys, err := PasswordKeys(password, salt, iterations)
	if err != nil {
		return nil, err
	}
	return keys.Verifier(), nil
}

// Keys are what a client needs to log in with SCRAM-SHA-256 in place of
// the password: the ClientKey and ServerKey of RFC 5802 §3, valid with the
// salt and iteration count they were derived with. A server exchange
// recovers them from a client's proof (Server.Final); PasswordKeys derives
// them from a password.
type Keys struct {
	// Iterations and Salt are those of the verifier the keys belong to.
	Iterations int
	Salt       []byte
	// ClientKey is HMAC(SaltedPassword, "Client Key").
	ClientKey Key
	// ServerKey is HMAC(SaltedPassword, "Server Key").
	ServerKey Key
}

// PasswordKeys derives the keys of password (RFC 5802 §3):
// SaltedPassword = PBKDF2-HMAC-SHA-256(Normalize(password), salt,
// iterations, 32 bytes). It fails only on an iteration count below 1 or an
// empty salt.
func PasswordKeys(password string, salt []byte, iterations int) (*Keys, error) {
	if iterations < 1 || iterations > maxIterations {
		return nil, fmt.Errorf("scram: iteration count %d out of range 1..%d", iterations, maxIterations)
	}
	if len(salt) == 0 {
		return nil, errors.New("scram: empty salt")
	}
	salted, err := pbkdf2.Key(sha256.New, Normalize(password), salt, iterations, KeyLen)
	if err != nil {
		return nil, fmt.Errorf("scram: PBKDF2: %w", err)
	}
	k := &Keys{Iterations: iterations, Salt: append([]byte(nil), salt...)}
	copy(k.ClientKey[:], hmacSHA256(salted, []byte("Client Key")))
	copy(k.ServerKey[:], hmacSHA256(salted, []byte("Server Key")))
	return k, nil
}

// Verifier gives the verifier the keys belong to: StoredKey = H(ClientKey).
func (k *Keys) Verifier() *Verifier {
	return &Verifier{
		Iterations: k.Iterations,
		Salt:       append([]byte(nil), k.Salt...),
		StoredKey:  sha256.Sum256(k.ClientKey[:]),
		ServerKey:  k.ServerKey,
	}
}

// Normalize prepares a password as PostgreSQL's pg_saslprep does before
// hashing it (RFC 4013 SASLprep over RFC 3454 stringprep): ASCII passwords
// are used as they are, others are mapped and NFKC-normalised; a password
// that is not valid UTF-8, or that SASLprep prohibits, is used as it is
// (PostgreSQL's scram_SaltedPassword callers do the same, so such passwords
// still work).
func Normalize(password string) string {
	if isASCII(password) || !utf8.ValidString(password) {
		return password
	}
	p, err := stringprep.SASLprep.Prepare(password)
	if err != nil || p == "" {
		return password
	}
	return p
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func hmacSHA256(key, msg []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write(msg)
	return h.Sum(nil)
}

func decodeKey(dst *Key, s string) error {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return err
	}
	if len(b) != KeyLen {
		return fmt.Errorf("%d bytes, want %d", len(b), KeyLen)
	}
	copy(dst[:], b)
	return nil
}

func xor(dst *Key, a, b []byte) {
	subtle.XORBytes(dst[:], a, b)
}
