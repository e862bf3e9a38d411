package upstream

import (
	"errors"
	"fmt"
	"net"
	"slices"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/ttlproxy/ttlproxy/internal/scram"
	"github.com/ttlproxy/ttlproxy/internal/sqlstate"
	"github.com/ttlproxy/ttlproxy/internal/wire"
	"github.com/ttlproxy/ttlproxy/proxy/internal/auth"
)

// Server login without a client, for transaction pooling
// (docs/design/pooling.md §1, "Server connection lifecycle"): the proxy
// opens a server connection in a client's name with what that client's
// login left (auth.Login): its SCRAM keys (pass-through, as PgBouncer
// does since 1.14), its md5 hash (md5 is pass-the-hash) or a plain
// password, or nothing where the server trusts the user.

// Welcome is what the server sent while logging in: the reported
// parameters a client of this server is told at its own login, the
// BackendKeyData, and the SCRAM keys the exchange used (derived from a
// plain password the first time; kept so that later logins skip PBKDF2).
type Welcome struct {
	// Params are the ParameterStatus messages, in the order sent.
	Params []ParamStatus
	// Key is the BackendKeyData body: process ID and secret key.
	Key []byte
	// Keys are the SCRAM keys of the login, nil for other methods.
	Keys *scram.Keys
}

// ParamStatus is one ParameterStatus message.
type ParamStatus struct{ Name, Value string }

// ServerError is an ErrorResponse the server answered a login with: the
// waiting clients get it as a FATAL with the server's SQLSTATE (28P01,
// 3D000, 53300, …). Code is sqlstate.SQLClientUnableToEstablishSQLConnection (08001) when the proxy
// cannot answer the server's authentication request.
type ServerError struct {
	Code, Message string
	// Unanswerable: the server asks for an authentication the login has
	// nothing to answer with (cannotAuthenticate); it will not heal by
	// itself.
	Unanswerable bool
}

func (e *ServerError) Error() string { return e.Message + " (SQLSTATE " + e.Code + ")" }

// ErrLogin wraps a failed dial or an unreadable exchange: nothing from
// the server to pass on; the clients get 08001.
var ErrLogin = errors.New("server login failed")

// Login sends the StartupMessage with params (user, database, the other
// startup parameters) on nc and runs the authentication exchange up to
// ReadyForQuery, answering with secret (nil: only where the server asks for
// nothing). Errors: *ServerError for an ErrorResponse or a request secret
// cannot answer; ErrLogin wrapping a failed read or write. The server sends nothing
// after its first ReadyForQuery until asked, so the frontend's read-ahead
// buffer holds nothing of the relay's when this returns.
func Login(nc net.Conn, params map[string]string, secret *auth.Login) (*Welcome, error) {
	fe := pgproto3.NewFrontend(nc, nc)
	fe.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30, Parameters: params})
	if err := fe.Flush(); err != nil {
		return nil, fmt.Errorf("%w: sending StartupMessage: %w", ErrLogin, err)
	}
	if secret == nil {
		secret = &auth.Login{}
	}
	user := params["user"]
	w := &Welcome{}
	var sc *scram.Client
	for {
		msg, err := fe.Receive()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrLogin, err)
		}
		switch m := msg.(type) {
		case *pgproto3.AuthenticationOk:
			continue
		case *pgproto3.AuthenticationCleartextPassword:
			if secret.Password == "" {
				return nil, cannotAuthenticate(user, "a clear-text password")
			}
			fe.Send(&pgproto3.PasswordMessage{Password: secret.Password})
		case *pgproto3.AuthenticationMD5Password:
			hash := secret.MD5
			if hash == "" && secret.Password != "" {
				hash = auth.MD5Hash(secret.Password, user)
			}
			if hash == "" {
				return nil, cannotAuthenticate(user, "an md5 password")
			}
			fe.Send(&pgproto3.PasswordMessage{Password: auth.MD5Hash(hash[3:], string(m.Salt[:]))})
		case *pgproto3.AuthenticationSASL:
			if !slices.Contains(m.AuthMechanisms, scram.Mechanism) {
				return nil, cannotAuthenticate(user, fmt.Sprintf("SASL mechanisms %v", m.AuthMechanisms))
			}
			switch {
			case secret.Keys != nil:
				sc = scram.NewClient(secret.Keys)
			case secret.Password != "":
				sc = scram.NewPasswordClient(secret.Password)
			default:
				return nil, cannotAuthenticate(user, "SCRAM-SHA-256")
			}
			fe.Send(&pgproto3.SASLInitialResponse{AuthMechanism: scram.Mechanism, Data: sc.First()})
		case *pgproto3.AuthenticationSASLContinue:
			if sc == nil {
				return nil, fmt.Errorf("%w: SASLContinue before SASL", ErrLogin)
			}
			final, err := sc.Final(m.Data)
			if errors.Is(err, scram.ErrKeysMismatch) {
				// A new password: the server's verifier has another salt.
				return nil, &ServerError{Code: sqlstate.InvalidPassword, Message: `password authentication failed for user "` + user + `"`}
			}
			if err != nil {
				return nil, fmt.Errorf("%w: %w", ErrLogin, err)
			}
			fe.Send(&pgproto3.SASLResponse{Data: final})
		case *pgproto3.AuthenticationSASLFinal:
			if sc == nil {
				return nil, fmt.Errorf("%w: SASLFinal before SASL", ErrLogin)
			}
			if err := sc.Verify(m.Data); err != nil {
				return nil, fmt.Errorf("%w: %w", ErrLogin, err)
			}
			w.Keys = sc.Keys()
			continue
		case *pgproto3.ParameterStatus:
			w.Params = append(w.Params, ParamStatus{m.Name, m.Value})
			continue
		case *pgproto3.BackendKeyData:
			w.Key = append(w.Key[:0], KeyBody(m)...)
			continue
		case *pgproto3.ReadyForQuery:
			return w, nil
		case *pgproto3.ErrorResponse:
			return nil, &ServerError{Code: m.Code, Message: m.Message}
		case *pgproto3.NoticeResponse, *pgproto3.NegotiateProtocolVersion:
			continue
		default:
			return nil, fmt.Errorf("%w: unexpected %T during login", ErrLogin, msg)
		}
		if err := fe.Flush(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrLogin, err)
		}
	}
}

// KeyBody is the BackendKeyData body: process ID and secret key.
func KeyBody(m *pgproto3.BackendKeyData) []byte {
	b, _ := m.Encode(nil)
	return b[wire.HeaderLen:]
}

// cannotAuthenticate is the error for an authentication request the
// client's login left nothing to answer with (a server asking for SCRAM of
// a user the auth_file holds as an md5 hash, say).
func cannotAuthenticate(user, what string) error {
	return &ServerError{Code: sqlstate.SQLClientUnableToEstablishSQLConnection, Unanswerable: true,
		Message: fmt.Sprintf(`ttlproxy: cannot log in to the server as "%s": it asks for %s, and the client's login gave nothing to answer with`, user, what)}
}
