package auth

import (
	"bytes"
	"context"
	"crypto/md5" //nolint:gosec // PostgreSQL's md5 password method is md5
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/ttlproxy/ttlproxy/internal/scram"
	"github.com/ttlproxy/ttlproxy/internal/sqlstate"
	"github.com/ttlproxy/ttlproxy/internal/wire"
)

// Client authentication by the proxy itself, for transaction pooling
// (docs/design/pooling.md §1): the proxy answers the client's
// StartupMessage with an authentication exchange, as a PostgreSQL server
// would, against an auth_file or the answer of an auth query, and keeps
// what the exchange yields to log in to the server in the client's name.
// Session mode never uses it: there the server authenticates the client end
// to end.

// The auth_type values, PgBouncer's names.
const (
	// SCRAM runs SCRAM-SHA-256 against a verifier or a plain password;
	// a user with an md5 hash cannot log in (the default).
	SCRAM = "scram-sha-256"
	// MD5 runs md5 against an md5 hash or a plain password, and
	// SCRAM-SHA-256 for a user with a verifier (as PostgreSQL's md5 method
	// does).
	MD5 = "md5"
	// Plain asks for the password in clear text
	// (AuthenticationCleartextPassword, PostgreSQL's "password" method)
	// and checks it against any kind of secret.
	Plain = "plain"
	// Trust asks for nothing; with an auth_file, the user must be in it.
	Trust = "trust"
)

// maxAuthMessage bounds a password or SASL message from the client:
// PostgreSQL's PG_MAX_AUTH_TOKEN_LENGTH.
const maxAuthMessage = 65535

// Config is the client authentication the proxy runs: the auth_type,
// auth_file, auth_dsn and auth_query keys (reserved for pool_mode:
// transaction; not keys of the configuration file yet).
type Config struct {
	// Type is one of scram-sha-256 (""), md5, plain or trust.
	Type string
	// File is an auth_file in PgBouncer's userlist.txt format. One of File
	// and DSN is required unless Type is trust; not both.
	File string
	// DSN is the auth_dsn: a connection string (URL or key=value) whose
	// login runs Query, its password from the string, PGPASSWORD or
	// .pgpass.
	DSN string
	// Query is the auth_query, run on DSN for each client login with the
	// user as $1 and, if it has a second parameter, the client's database
	// as $2; it returns at most one row (username, password[, settings]).
	// "" is DefaultQuery.
	Query string
	// Logger receives the failures of the auth query; nil discards them.
	Logger *slog.Logger
	// DialFunc dials DSN's server (UpstreamTCP.DialFunc); nil is pgconn's.
	DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Auth authenticates clients against one loaded auth_file or an auth
// query.
type Auth struct {
	method string
	// source gives the users' secrets; nil with trust and neither a file
	// nor a DSN (anyone).
	source authSource
	log    *slog.Logger
	// mockSecret salts the mock exchange of unknown users
	// (scram.MockVerifier): random per process.
	mockSecret [32]byte
}

// New validates cfg and loads its auth_file, or makes the auth
// query's pool (which connects at the first login). Errors name the key:
// `auth_type: "x" is not one of …`, `auth_file: users.txt:3: …`,
// `auth_dsn: …`. Close releases the pool.
func New(cfg Config) (*Auth, error) {
	a := &Auth{method: cfg.Type, log: cfg.Logger}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	switch cfg.Type {
	case "":
		a.method = SCRAM
	case SCRAM, MD5, Plain, Trust:
	default:
		return nil, fmt.Errorf("auth_type: %q is not one of %s, %s, %s, %s", cfg.Type, SCRAM, MD5, Plain, Trust)
	}
	switch {
	case cfg.File != "" && cfg.DSN != "":
		return nil, errors.New("auth_file and auth_dsn: set one of them, not both")
	case cfg.Query != "" && cfg.DSN == "":
		return nil, errors.New("auth_query: needs auth_dsn, the login that runs it")
	case cfg.File != "":
		f, err := newFileSource(cfg.File)
		if err != nil {
			return nil, fmt.Errorf("auth_file: %w", err)
		}
		a.source = f
	case cfg.DSN != "":
		q, err := newQuerySource(cfg.DSN, cfg.Query, cfg.DialFunc)
		if err != nil {
			return nil, err
		}
		a.source = q
	case a.method != Trust:
		return nil, fmt.Errorf("auth_file: required with auth_type %s (or auth_dsn)", a.method)
	}
	_, _ = rand.Read(a.mockSecret[:])
	return a, nil
}

// Reload reads the auth_file again, when there is one; on an error
// (`auth_file: …`) the users loaded before stay in force.
func (a *Auth) Reload() error {
	f, ok := a.source.(*fileSource)
	if !ok {
		return nil
	}
	if err := f.reload(); err != nil {
		return fmt.Errorf("auth_file: %w", err)
	}
	return nil
}

// Close releases the auth query's connections; a no-op otherwise.
func (a *Auth) Close() {
	if a.source != nil {
		a.source.close()
	}
}

// Login is what a client's login leaves for logging in to the server
// in its name (design §1): any of the three, by what the exchange and the
// auth_file gave.
type Login struct {
	// Keys are the client's SCRAM keys, recovered from its proof or
	// derived from its clear-text password; they log in to a server whose
	// verifier has the same salt and iteration count (pass-through).
	Keys *scram.Keys
	// Password is the plain password, from the auth_file or the client.
	Password string
	// MD5 is the "md5…" hash (md5 is pass-the-hash).
	MD5 string
	// Settings is the auth query's settings hash of the role in the
	// client's database (install.PlanAuthQuery), part of the pool key: ""
	// from an auth_file or a two-column auth_query.
	Settings string
	// OK is the end of the exchange still to send: AuthenticationOk,
	// after AuthenticationSASLFinal for SCRAM. The caller sends it with
	// the rest of the welcome, in one write.
	OK []byte
}

// authFailed is PostgreSQL's answer to a wrong password, an unknown user or
// a user without a usable secret: one message for all, so that it does not
// tell which.
func authFailed(user string) error {
	return &wire.ProtocolError{Code: sqlstate.InvalidPassword, Msg: `password authentication failed for user "` + user + `"`}
}

// Authenticate runs the authentication exchange on conn, whose client has
// sent its StartupMessage for user and database; when it succeeds the
// caller sends the login's ok (AuthenticationOk) with ParameterStatus,
// BackendKeyData and ReadyForQuery. It reads conn unbuffered, so nothing after the exchange
// is consumed; ctx bounds the auth query. Errors: a *wire.ProtocolError the
// caller answers with a FATAL ErrorResponse (28P01 for a failed login, 28000
// for a user trust does not know, 08001 when the auth query could not
// answer, whose cause is logged, 08P01 for a malformed message); any other
// error (the client went away, a deadline the caller set) ends the
// connection without an answer.
func (a *Auth) Authenticate(ctx context.Context, conn net.Conn, user, database string) (*Login, error) {
	var entry *authUser
	if a.source != nil {
		var err error
		if entry, err = a.source.lookup(ctx, user, database); err != nil {
			a.log.Error("client authentication: the auth query failed", "user", user, "database", database, "error", err)
			return nil, &wire.ProtocolError{Code: sqlstate.SQLClientUnableToEstablishSQLConnection, Msg: `could not look up the password of user "` + user + `"`}
		}
	}
	var secret *authSecret
	var settings string
	if entry != nil {
		secret, settings = entry.secret, entry.settings
	}
	login, err := a.exchange(conn, user, entry != nil, secret)
	if err != nil {
		return nil, err
	}
	login.Settings = settings
	return login, nil
}

// exchange runs the exchange of a.method for user, whose entry the source
// has (known) with secret (nil: no usable password).
func (a *Auth) exchange(conn net.Conn, user string, known bool, secret *authSecret) (*Login, error) {
	if a.method == Trust {
		if a.source != nil && !known {
			return nil, &wire.ProtocolError{Code: sqlstate.InvalidAuthorizationSpecification, Msg: `role "` + user + `" does not exist`}
		}
		login := &Login{}
		if secret != nil {
			switch secret.kind {
			case secretPlain:
				login.Password = secret.text
			case secretMD5:
				login.MD5 = secret.text
			}
		}
		login.OK = authOK(nil)
		return login, nil
	}

	var (
		login *Login
		final pgproto3.BackendMessage
		err   error
	)
	switch {
	case a.method == Plain:
		login, err = a.cleartext(conn, user, secret)
	case a.method == MD5 && (secret == nil || secret.kind != secretSCRAM):
		login, err = a.md5(conn, user, secret)
	default:
		login, final, err = a.scram(conn, user, secret)
	}
	if err != nil {
		return nil, err
	}
	login.OK = authOK(final)
	return login, nil
}

// scram runs a SCRAM-SHA-256 exchange (PostgreSQL's CheckSASLAuth). A user
// without a verifier gets a mock exchange that fails at the end, as
// PostgreSQL's does. It returns the AuthenticationSASLFinal to send with
// AuthenticationOk.
func (a *Auth) scram(conn net.Conn, user string, secret *authSecret) (*Login, pgproto3.BackendMessage, error) {
	var v *scram.Verifier
	if secret != nil {
		v = secret.scramVerifier()
	}
	if v == nil {
		v = scram.MockVerifier(user, a.mockSecret[:])
	}
	if err := writeMessage(conn, &pgproto3.AuthenticationSASL{AuthMechanisms: []string{scram.Mechanism}}); err != nil {
		return nil, nil, err
	}
	body, err := readAuthMessage(conn, "SASL")
	if err != nil {
		return nil, nil, err
	}
	data, ok := saslInitialData(body)
	if !ok {
		return nil, nil, &wire.ProtocolError{Code: sqlstate.ProtocolViolation, Msg: "invalid SASLInitialResponse message"}
	}
	var initial pgproto3.SASLInitialResponse
	_ = initial.Decode(body) // checked by saslInitialData
	if initial.AuthMechanism != scram.Mechanism {
		return nil, nil, &wire.ProtocolError{Code: sqlstate.ProtocolViolation, Msg: "client selected an invalid SASL authentication mechanism"}
	}
	srv := scram.NewServer(v)
	first, err := srv.First(data)
	if err != nil {
		return nil, nil, scramError(err, user)
	}
	if err := writeMessage(conn, &pgproto3.AuthenticationSASLContinue{Data: first}); err != nil {
		return nil, nil, err
	}
	if body, err = readAuthMessage(conn, "SASL"); err != nil {
		return nil, nil, err
	}
	final, keys, err := srv.Final(body)
	if err != nil {
		return nil, nil, scramError(err, user)
	}
	login := &Login{Keys: keys}
	if secret != nil && secret.kind == secretPlain {
		// The keys belong to a verifier the proxy made, which the server
		// does not have: its login uses the password.
		login = &Login{Password: secret.text}
	}
	return login, &pgproto3.AuthenticationSASLFinal{Data: final}, nil
}

// saslInitialData checks a SASLInitialResponse body (mechanism, NUL, int32
// length, data) and returns its data; pgproto3's Decode ignores the
// length, which must match (PostgreSQL's pq_getmsgend).
func saslInitialData(body []byte) ([]byte, bool) {
	nul := bytes.IndexByte(body, 0)
	if nul < 0 || len(body)-nul-1 < 4 {
		return nil, false
	}
	data := body[nul+5:]
	if int64(int32(binary.BigEndian.Uint32(body[nul+1:]))) != int64(len(data)) {
		return nil, false
	}
	return data, true
}

// scramError maps an error of the SCRAM exchange to PostgreSQL's answer.
func scramError(err error, user string) error {
	var me *scram.MalformedError
	if errors.As(err, &me) {
		return &wire.ProtocolError{Code: sqlstate.ProtocolViolation, Msg: me.Error()}
	}
	return authFailed(user)
}

// md5 runs PostgreSQL's md5 method: AuthenticationMD5Password with a random
// 4-byte salt; the client answers "md5" + hex(md5(hex(md5(password + user))
// + salt)) (PostgreSQL's md5_crypt_verify). An unknown user is asked too,
// and fails.
func (a *Auth) md5(conn net.Conn, user string, secret *authSecret) (*Login, error) {
	var salt [4]byte
	_, _ = rand.Read(salt[:])
	if err := writeMessage(conn, &pgproto3.AuthenticationMD5Password{Salt: salt}); err != nil {
		return nil, err
	}
	answer, err := readPassword(conn)
	if err != nil {
		return nil, err
	}
	if secret == nil {
		return nil, authFailed(user)
	}
	hash := secret.text
	if secret.kind == secretPlain {
		hash = MD5Hash(secret.text, user)
	}
	want := MD5Hash(hash[3:], string(salt[:]))
	if subtle.ConstantTimeCompare([]byte(answer), []byte(want)) != 1 {
		return nil, authFailed(user)
	}
	login := &Login{MD5: hash}
	if secret.kind == secretPlain {
		login.Password = secret.text
	}
	return login, nil
}

// MD5Hash is "md5" + hex(md5(password + salt)): PostgreSQL's pg_md5_encrypt.
func MD5Hash(password, salt string) string {
	sum := md5.Sum([]byte(password + salt)) //nolint:gosec // PostgreSQL's md5 method
	return "md5" + hex.EncodeToString(sum[:])
}

// cleartext runs PostgreSQL's password method: the client sends the
// password itself, checked against a plain password, an md5 hash or a SCRAM
// verifier (PostgreSQL's plain_crypt_verify).
func (a *Auth) cleartext(conn net.Conn, user string, secret *authSecret) (*Login, error) {
	if err := writeMessage(conn, &pgproto3.AuthenticationCleartextPassword{}); err != nil {
		return nil, err
	}
	password, err := readPassword(conn)
	if err != nil {
		return nil, err
	}
	if secret == nil {
		return nil, authFailed(user)
	}
	login := &Login{Password: password}
	switch secret.kind {
	case secretPlain:
		if subtle.ConstantTimeCompare([]byte(password), []byte(secret.text)) != 1 {
			return nil, authFailed(user)
		}
	case secretMD5:
		if subtle.ConstantTimeCompare([]byte(MD5Hash(password, user)), []byte(secret.text)) != 1 {
			return nil, authFailed(user)
		}
		login.MD5 = secret.text
	case secretSCRAM:
		v := secret.verifier
		keys, err := scram.PasswordKeys(password, v.Salt, v.Iterations)
		if err != nil {
			return nil, authFailed(user)
		}
		got := keys.Verifier()
		if subtle.ConstantTimeCompare(got.StoredKey[:], v.StoredKey[:])&
			subtle.ConstantTimeCompare(got.ServerKey[:], v.ServerKey[:]) != 1 {
			return nil, authFailed(user)
		}
		login.Keys = keys
	}
	return login, nil
}

// errEmptyPassword ends a login whose client sent an empty password:
// PostgreSQL closes such a connection without an answer
// (recv_password_packet).
var errEmptyPassword = errors.New("empty password returned by client")

// readPassword reads a PasswordMessage and returns the password.
func readPassword(conn net.Conn) (string, error) {
	body, err := readAuthMessage(conn, "password")
	if err != nil {
		return "", err
	}
	var msg pgproto3.PasswordMessage
	if err := msg.Decode(body); err != nil || len(msg.Password)+1 != len(body) {
		return "", &wire.ProtocolError{Code: sqlstate.ProtocolViolation, Msg: "invalid password packet size"}
	}
	if msg.Password == "" {
		return "", errEmptyPassword
	}
	return msg.Password, nil
}

// readAuthMessage reads one message of type 'p' straight from conn (no
// read-ahead) and returns its body. what names the expected response in
// PostgreSQL's words ("SASL", "password").
func readAuthMessage(conn net.Conn, what string) ([]byte, error) {
	var hdr [wire.HeaderLen]byte
	if _, err := io.ReadFull(conn, hdr[:]); err != nil {
		return nil, fmt.Errorf("reading %s response: %w", what, err)
	}
	if hdr[0] != 'p' {
		return nil, &wire.ProtocolError{Code: sqlstate.ProtocolViolation,
			Msg: fmt.Sprintf("expected %s response, got message type %d", what, hdr[0])}
	}
	n := int64(int32(binary.BigEndian.Uint32(hdr[1:]))) - 4
	if n < 0 || n > maxAuthMessage {
		return nil, &wire.ProtocolError{Code: sqlstate.ProtocolViolation, Msg: "invalid message length"}
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(conn, body); err != nil {
		return nil, fmt.Errorf("reading %s response: %w", what, err)
	}
	return body, nil
}

// writeMessage encodes msg and writes it to conn.
func writeMessage(conn net.Conn, msg pgproto3.BackendMessage) error {
	buf, err := msg.Encode(nil)
	if err != nil {
		panic(err) // only messages over 1 GiB fail
	}
	if _, err := conn.Write(buf); err != nil {
		return fmt.Errorf("writing %T: %w", msg, err)
	}
	return nil
}

// authOK encodes first, when not nil, and AuthenticationOk.
func authOK(first pgproto3.BackendMessage) []byte {
	var buf []byte
	var err error
	if first != nil {
		if buf, err = first.Encode(nil); err != nil {
			panic(err)
		}
	}
	if buf, err = (&pgproto3.AuthenticationOk{}).Encode(buf); err != nil {
		panic(err)
	}
	return buf
}
