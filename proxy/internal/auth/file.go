package auth

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/ttlproxy/ttlproxy/internal/scram"
)

// secretKind is what an auth_file line holds for a user.
type secretKind uint8

const (
	secretPlain secretKind = iota // the password itself
	secretMD5                     // "md5" + hex(md5(password + user))
	secretSCRAM                   // a SCRAM-SHA-256 verifier
)

// authSecret is one user's secret from an auth_file.
type authSecret struct {
	kind secretKind
	// text is the password (secretPlain) or the md5 hash (secretMD5).
	text string
	// verifier is the SCRAM verifier: parsed from the file (secretSCRAM),
	// or made from the password at its first SCRAM login (secretPlain),
	// under once, with a random salt.
	verifier *scram.Verifier
	once     sync.Once
}

// scramVerifier returns the verifier a SCRAM exchange checks the user
// against, or nil for an md5 hash, which cannot give one.
func (s *authSecret) scramVerifier() *scram.Verifier {
	switch s.kind {
	case secretSCRAM:
		return s.verifier
	case secretPlain:
		s.once.Do(func() {
			salt := make([]byte, scram.SaltLen)
			_, _ = rand.Read(salt)
			v, err := scram.NewVerifier(s.text, salt, scram.DefaultIterations)
			if err != nil {
				panic(err) // a fixed salt length and iteration count
			}
			s.verifier = v
		})
		return s.verifier
	}
	return nil
}

// newAuthSecret classifies secret as pg_authid.rolpassword or an auth_file
// holds it: a SCRAM-SHA-256 verifier ("SCRAM-SHA-256$…"), an md5 hash ("md5"
// and 32 hex digits) or the password itself. A malformed verifier is an
// error.
func newAuthSecret(secret string) (*authSecret, error) {
	s := &authSecret{kind: secretPlain, text: secret}
	switch {
	case scram.IsVerifier(secret):
		v, err := scram.ParseVerifier(secret)
		if err != nil {
			return nil, err
		}
		s.kind, s.text, s.verifier = secretSCRAM, "", v
	case isMD5Hash(secret):
		s.kind = secretMD5
	}
	return s, nil
}

// isMD5Hash reports PostgreSQL's md5 password form: "md5" and 32 lower-case
// hexadecimal digits (get_password_type, crypt.c).
func isMD5Hash(s string) bool {
	if len(s) != 35 || !strings.HasPrefix(s, "md5") {
		return false
	}
	for _, c := range s[3:] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// loadAuthFile reads an auth_file (see parseAuthFile).
func loadAuthFile(path string) (map[string]*authSecret, error) {
	data, err := os.ReadFile(path) //nolint:gosec // reading the file the operator names is the point
	if err != nil {
		return nil, err
	}
	return parseAuthFile(path, data)
}

// parseAuthFile parses PgBouncer's userlist.txt format: one user a line,
// `"user" "secret"`, each field in double quotes with a quote inside written
// twice; further quoted fields are ignored (old PgBouncer files have a
// third). Blank lines and lines starting with ';' or '#' are comments. The
// secret is a SCRAM-SHA-256 verifier ("SCRAM-SHA-256$…", as in
// pg_authid.rolpassword), an md5 hash ("md5" and 32 hex digits) or the
// password itself. Unlike PgBouncer, which skips lines it cannot read, a
// malformed line, a malformed verifier or a user listed twice is an error
// naming name and the line.
func parseAuthFile(name string, data []byte) (map[string]*authSecret, error) {
	users := map[string]*authSecret{}
	firstLine := map[string]int{}
	for i, line := range bytes.Split(data, []byte("\n")) {
		lineNo := i + 1
		fields, err := authFileFields(strings.TrimRight(string(line), "\r"))
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, lineNo, err)
		}
		if fields == nil {
			continue
		}
		if len(fields) < 2 {
			return nil, fmt.Errorf("%s:%d: want \"user\" \"secret\"", name, lineNo)
		}
		user, secret := fields[0], fields[1]
		if user == "" {
			return nil, fmt.Errorf("%s:%d: empty user name", name, lineNo)
		}
		if prev, ok := firstLine[user]; ok {
			return nil, fmt.Errorf("%s:%d: user %q is already listed on line %d", name, lineNo, user, prev)
		}
		firstLine[user] = lineNo
		s, err := newAuthSecret(secret)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: user %q: %w", name, lineNo, user, err)
		}
		users[user] = s
	}
	return users, nil
}

// authFileFields splits one auth_file line into its quoted fields; nil for a
// blank or comment line.
func authFileFields(line string) ([]string, error) {
	rest := strings.TrimLeft(line, " \t")
	if rest == "" || rest[0] == ';' || rest[0] == '#' {
		return nil, nil
	}
	var fields []string
	for rest != "" {
		if rest[0] != '"' {
			return nil, errors.New("want \"user\" \"secret\": a field must be in double quotes")
		}
		var b strings.Builder
		i := 1
		for {
			if i >= len(rest) {
				return nil, errors.New("unterminated quoted field")
			}
			if rest[i] == '"' {
				if i+1 < len(rest) && rest[i+1] == '"' {
					b.WriteByte('"')
					i += 2
					continue
				}
				break
			}
			b.WriteByte(rest[i])
			i++
		}
		fields = append(fields, b.String())
		rest = rest[i+1:]
		trimmed := strings.TrimLeft(rest, " \t")
		if trimmed != "" && len(trimmed) == len(rest) {
			return nil, errors.New("want white space between quoted fields")
		}
		rest = trimmed
	}
	return fields, nil
}
