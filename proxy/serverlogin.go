package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/ttlproxy/ttlproxy/internal/scram"
	"github.com/ttlproxy/ttlproxy/internal/wire"
	"github.com/ttlproxy/ttlproxy/proxy/internal/auth"
)

// Server login without a client, for transaction pooling
// (docs/design/pooling.md §1, "Server connection lifecycle"): the proxy
// opens a server connection in a client's name with what that client's
// login left (auth.Login): its SCRAM keys (pass-through, as PgBouncer
// does since 1.14), its md5 hash (md5 is pass-the-hash) or a plain
// password, or nothing where the server trusts the user.

// serverLogin is what one server connection logs in with.
type serverLogin struct {
	// params are the StartupMessage's parameters: user and database, and
	// the client's other startup parameters of the pool key.
	params map[string]string
	// secret answers the server's authentication request; nil logs in only
	// where the server asks for nothing (trust).
	secret *auth.Login
}

// serverWelcome is what the server sent while logging in: the reported
// parameters a client of this server is told at its own login, the
// BackendKeyData, and the SCRAM keys the exchange used (derived from a
// plain password the first time; kept so that later logins skip PBKDF2).
type serverWelcome struct {
	// params are the ParameterStatus messages, in the order sent.
	params []paramStatus
	// key is the BackendKeyData body: process ID and secret key.
	key []byte
	// keys are the SCRAM keys of the login, nil for other methods.
	keys *scram.Keys
}

// paramStatus is one ParameterStatus message.
type paramStatus struct{ name, value string }

// serverError is an ErrorResponse the server answered a login with: the
// waiting clients get it as a FATAL with the server's SQLSTATE (28P01,
// 3D000, 53300, …). Code is codeUnableToConnect (08001) when the proxy
// cannot answer the server's authentication request.
type serverError struct {
	Code, Message string
	// unanswerable: the server asks for an authentication the login has
	// nothing to answer with (cannotAuthenticate); it will not heal by
	// itself.
	unanswerable bool
}

func (e *serverError) Error() string { return e.Message + " (SQLSTATE " + e.Code + ")" }

// errServerLogin wraps a failed dial or an unreadable exchange: nothing from
// the server to pass on; the clients get 08001.
var errServerLogin = errors.New("server login failed")

// loginServer dials the upstream server (TCP and TLS as dialUpstream) and
// logs in with lg, until the server's first ReadyForQuery; ctx bounds it
// all (server_connect_timeout). It returns the connection with its relay
// buffers set up and BackendKeyData kept, and what the server sent. Errors:
// *serverError for an ErrorResponse from the server or an authentication
// request the proxy cannot answer with lg.secret; errServerLogin wrapping a
// failed dial, read or write. On error the socket is closed.
func (srv *Server) loginServer(ctx context.Context, lg serverLogin) (*serverConn, *serverWelcome, error) {
	nc, err := srv.dialUpstream(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", errServerLogin, err)
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(srv.cfg.DialTimeout)
	}
	_ = nc.SetDeadline(deadline)
	welcome, err := startServerSession(nc, lg)
	if err != nil {
		_ = nc.Close()
		return nil, nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	sc := &serverConn{nc: nc}
	sc.setBackendKey(welcome.key)
	return sc, welcome, nil
}

// startServerSession sends the StartupMessage on nc and runs the
// authentication exchange up to ReadyForQuery. The server sends nothing
// after its first ReadyForQuery until asked, so the frontend's read-ahead
// buffer holds nothing of the relay's when this returns.
func startServerSession(nc net.Conn, lg serverLogin) (*serverWelcome, error) {
	fe := pgproto3.NewFrontend(nc, nc)
	fe.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30, Parameters: lg.params})
	if err := fe.Flush(); err != nil {
		return nil, fmt.Errorf("%w: sending StartupMessage: %w", errServerLogin, err)
	}
	secret := lg.secret
	if secret == nil {
		secret = &auth.Login{}
	}
	user := lg.params["user"]
	w := &serverWelcome{}
	var sc *scram.Client
	for {
		msg, err := fe.Receive()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errServerLogin, err)
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
				return nil, fmt.Errorf("%w: SASLContinue before SASL", errServerLogin)
			}
			final, err := sc.Final(m.Data)
			if errors.Is(err, scram.ErrKeysMismatch) {
				// A new password: the server's verifier has another salt.
				return nil, &serverError{Code: codeInvalidPassword, Message: `password authentication failed for user "` + user + `"`}
			}
			if err != nil {
				return nil, fmt.Errorf("%w: %w", errServerLogin, err)
			}
			fe.Send(&pgproto3.SASLResponse{Data: final})
		case *pgproto3.AuthenticationSASLFinal:
			if sc == nil {
				return nil, fmt.Errorf("%w: SASLFinal before SASL", errServerLogin)
			}
			if err := sc.Verify(m.Data); err != nil {
				return nil, fmt.Errorf("%w: %w", errServerLogin, err)
			}
			w.keys = sc.Keys()
			continue
		case *pgproto3.ParameterStatus:
			w.params = append(w.params, paramStatus{m.Name, m.Value})
			continue
		case *pgproto3.BackendKeyData:
			w.key = append(w.key[:0], keyBody(m)...)
			continue
		case *pgproto3.ReadyForQuery:
			return w, nil
		case *pgproto3.ErrorResponse:
			return nil, &serverError{Code: m.Code, Message: m.Message}
		case *pgproto3.NoticeResponse, *pgproto3.NegotiateProtocolVersion:
			continue
		default:
			return nil, fmt.Errorf("%w: unexpected %T during login", errServerLogin, msg)
		}
		if err := fe.Flush(); err != nil {
			return nil, fmt.Errorf("%w: %w", errServerLogin, err)
		}
	}
}

// keyBody is the BackendKeyData body: process ID and secret key.
func keyBody(m *pgproto3.BackendKeyData) []byte {
	b, _ := m.Encode(nil)
	return b[wire.HeaderLen:]
}

// cannotAuthenticate is the error for an authentication request the
// client's login left nothing to answer with (a server asking for SCRAM of
// a user the auth_file holds as an md5 hash, say).
func cannotAuthenticate(user, what string) error {
	return &serverError{Code: codeUnableToConnect, unanswerable: true,
		Message: fmt.Sprintf(`ttlproxy: cannot log in to the server as "%s": it asks for %s, and the client's login gave nothing to answer with`, user, what)}
}
