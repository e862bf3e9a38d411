package proxy

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/ttlproxy/ttlproxy/internal/pgtest"
	"github.com/ttlproxy/ttlproxy/internal/scram"
	"github.com/ttlproxy/ttlproxy/internal/wire"
	"github.com/ttlproxy/ttlproxy/proxy/internal/auth"
	"github.com/ttlproxy/ttlproxy/proxy/internal/upstream"
	"github.com/ttlproxy/ttlproxy/rewrite"
)

// newLoginServer is a Server that is never served: loginServer only needs
// its upstream configuration.
func newLoginServer(t *testing.T) *Server {
	t.Helper()
	srv, err := New(Config{Upstream: pgtest.Server(t).Addr(), Rewriter: testRewriter(t)})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// captureLogin logs user in with password through a test listener that
// authenticates against an auth_file holding the server's own secret for
// user (pg_authid.rolpassword), with auth_type method, and returns what
// the login left.
func captureLogin(t *testing.T, method, user, password string) *auth.Login {
	t.Helper()
	var stored string
	conn := directConn(t, "postgres")
	if err := conn.QueryRow(testContext(t), "SELECT rolpassword FROM pg_authid WHERE rolname = $1", user).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "userlist.txt")
	if err := os.WriteFile(path, []byte(`"`+user+`" "`+stored+`"`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := auth.New(auth.Config{Type: method, File: path})
	if err != nil {
		t.Fatal(err)
	}
	return authenticateOnce(t, a, user, password)
}

// authenticateOnce logs pgx in as user with password to a listener that
// runs a's exchange for one client and returns what the login left.
func authenticateOnce(t *testing.T, a *auth.Auth, user, password string) *auth.Login {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		login *auth.Login
		err   error
	}
	done := make(chan result, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		var pkt []byte
		for {
			if pkt, err = wire.ReadStartupPacket(conn, nil); err != nil {
				done <- result{err: err}
				return
			}
			if binary.BigEndian.Uint32(pkt[4:8]) != wire.SSLRequestCode {
				break
			}
			if _, err := conn.Write([]byte{'N'}); err != nil {
				done <- result{err: err}
				return
			}
		}
		var msg pgproto3.StartupMessage
		if err := msg.Decode(pkt[4:]); err != nil {
			done <- result{err: err}
			return
		}
		login, err := a.Authenticate(testContext(t), conn, msg.Parameters["user"], msg.Parameters["database"])
		done <- result{login, err}
		if err != nil {
			return
		}
		buf, _ := (&pgproto3.BackendKeyData{ProcessID: 1, SecretKey: []byte{0, 0, 0, 1}}).Encode(login.OK)
		buf, _ = (&pgproto3.ReadyForQuery{TxStatus: 'I'}).Encode(buf)
		_, _ = conn.Write(buf)
		_, _ = io.Copy(io.Discard, conn)
	}()
	cfg, err := pgx.ParseConfig("postgres://" + ln.Addr().String() + "/db?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	cfg.User, cfg.Password = user, password
	conn, err := pgx.ConnectConfig(testContext(t), cfg)
	if err != nil {
		t.Fatalf("client login as %s: %v", user, err)
	}
	_ = conn.Close(testContext(t))
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	return res.login
}

// TestServerLogin logs in to PostgreSQL without a client, with what a
// client's login through the proxy's own authentication left, for every
// method the server may ask for.
func TestServerLogin(t *testing.T) {
	srv := newLoginServer(t)
	ensureRole(t,
		roleSQL("ttl_trust", "unused"),
		roleSQL("ttl_password", "cleartext-secret"),
		"SET password_encryption = 'md5'; "+roleSQL("ttl_md5", "md5-secret"),
		"SET password_encryption = 'scram-sha-256'; "+roleSQL("ttl_scram", "scram-secret"),
	)
	scramKeys := captureLogin(t, auth.SCRAM, "ttl_scram", "scram-secret")
	if scramKeys.Keys == nil || scramKeys.Password != "" {
		t.Fatalf("SCRAM login left %+v, want keys only", scramKeys)
	}
	md5Login := captureLogin(t, auth.MD5, "ttl_md5", "md5-secret")
	if md5Login.MD5 == "" || md5Login.Password != "" {
		t.Fatalf("md5 login left %+v, want the hash only", md5Login)
	}
	plain := captureLogin(t, auth.Plain, "ttl_password", "cleartext-secret")
	if plain.Password == "" {
		t.Fatalf("clear-text login left %+v, want the password", plain)
	}

	for _, c := range []struct {
		name, user string
		secret     *auth.Login
	}{
		{"scram pass-through", "ttl_scram", scramKeys},
		{"scram password", "ttl_scram", &auth.Login{Password: "scram-secret"}},
		{"md5 hash", "ttl_md5", md5Login},
		{"md5 password", "ttl_md5", &auth.Login{Password: "md5-secret"}},
		{"cleartext", "ttl_password", plain},
		{"trust", "ttl_trust", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			sc, w := mustLoginServer(t, srv, c.user, c.secret)
			if got := serverQuery(t, sc, "SELECT current_user"); got != c.user {
				t.Fatalf("current_user = %q, want %q", got, c.user)
			}
			if len(w.Key) != 8 || sc.cancelRequest() == nil {
				t.Fatalf("BackendKeyData %x not kept", w.Key)
			}
			if !hasParam(w.Params, "server_version") || !hasParam(w.Params, "client_encoding") {
				t.Fatalf("ParameterStatus not collected: %v", w.Params)
			}
			if (w.Keys != nil) != (c.user == "ttl_scram") {
				t.Fatalf("keys = %v after a login as %s", w.Keys, c.user)
			}
		})
	}

	t.Run("keys from a password log in again", func(t *testing.T) {
		_, w := mustLoginServer(t, srv, "ttl_scram", &auth.Login{Password: "scram-secret"})
		sc, _ := mustLoginServer(t, srv, "ttl_scram", &auth.Login{Keys: w.Keys})
		if got := serverQuery(t, sc, "SELECT session_user"); got != "ttl_scram" {
			t.Fatalf("session_user = %q", got)
		}
	})

	for _, c := range []struct {
		name, user, db, code string
		secret               *auth.Login
	}{
		{"wrong key", "ttl_scram", "postgres", codeInvalidPassword, withFlippedKey(scramKeys)},
		{"keys of another verifier", "ttl_scram", "postgres", codeInvalidPassword, withOtherSalt(t, scramKeys)},
		{"wrong password", "ttl_scram", "postgres", codeInvalidPassword, &auth.Login{Password: "nope"}},
		{"wrong md5 hash", "ttl_md5", "postgres", codeInvalidPassword, &auth.Login{MD5: auth.MD5Hash("other", "ttl_md5")}},
		{"md5 hash for SCRAM", "ttl_scram", "postgres", codeUnableToConnect, &auth.Login{MD5: auth.MD5Hash("scram-secret", "ttl_scram")}},
		{"keys for clear text", "ttl_password", "postgres", codeUnableToConnect, &auth.Login{Keys: scramKeys.Keys}},
		{"nothing for SCRAM", "ttl_scram", "postgres", codeUnableToConnect, nil},
		{"unknown database", "ttl_trust", "no_such_db", "3D000", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			sc, _, err := srv.loginServer(ctx, serverLogin{
				params: map[string]string{"user": c.user, "database": c.db}, secret: c.secret})
			if err == nil {
				sc.close()
				t.Fatal("login succeeded")
			}
			var se *upstream.ServerError
			if !errors.As(err, &se) || se.Code != c.code {
				t.Fatalf("err = %v, want SQLSTATE %s", err, c.code)
			}
		})
	}

	t.Run("upstream down", func(t *testing.T) {
		down, err := New(Config{Upstream: closedPortAddr(t), Rewriter: testRewriter(t)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _, err = down.loginServer(ctx, serverLogin{params: map[string]string{"user": "ttl_trust", "database": "postgres"}})
		var se *upstream.ServerError
		if !errors.Is(err, upstream.ErrLogin) || errors.As(err, &se) {
			t.Fatalf("err = %v, want upstream.ErrLogin", err)
		}
	})
}

func mustLoginServer(t *testing.T, srv *Server, user string, secret *auth.Login) (*serverConn, *upstream.Welcome) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sc, w, err := srv.loginServer(ctx, serverLogin{
		params: map[string]string{"user": user, "database": "postgres", "application_name": "serverlogin_test"},
		secret: secret})
	if err != nil {
		t.Fatalf("login as %s: %v", user, err)
	}
	t.Cleanup(sc.terminate)
	return sc, w
}

// serverQuery runs a one-value simple Query on a logged-in server
// connection.
func serverQuery(t *testing.T, sc *serverConn, sql string) string {
	t.Helper()
	nc := sc.conn()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	defer func() { _ = nc.SetDeadline(time.Time{}) }()
	fe := pgproto3.NewFrontend(nc, nc)
	fe.Send(&pgproto3.Query{String: sql})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	var got string
	for {
		msg, err := fe.Receive()
		if err != nil {
			t.Fatal(err)
		}
		switch m := msg.(type) {
		case *pgproto3.DataRow:
			got = string(m.Values[0])
		case *pgproto3.ErrorResponse:
			t.Fatalf("%s: %s", m.Code, m.Message)
		case *pgproto3.ReadyForQuery:
			return got
		}
	}
}

func hasParam(params []upstream.ParamStatus, name string) bool {
	for _, p := range params {
		if p.Name == name {
			return true
		}
	}
	return false
}

func withFlippedKey(s *auth.Login) *auth.Login {
	k := *s.Keys
	k.ClientKey[0] ^= 1
	return &auth.Login{Keys: &k}
}

// withOtherSalt gives keys of the same password under another salt: a
// verifier the server does not hold, as after a password change.
func withOtherSalt(t *testing.T, s *auth.Login) *auth.Login {
	t.Helper()
	salt := append([]byte(nil), s.Keys.Salt...)
	salt[0] ^= 1
	k, err := scram.PasswordKeys("scram-secret", salt, s.Keys.Iterations)
	if err != nil {
		t.Fatal(err)
	}
	return &auth.Login{Keys: k}
}

// directConn is a superuser connection straight to the test server.
func directConn(t *testing.T, db string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(testContext(t), pgtest.Server(t).ConnString(db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func testRewriter(t *testing.T) *rewrite.Rewriter {
	t.Helper()
	rw, err := rewrite.New(testRules, rewrite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return rw
}

// closedPortAddr is a local address nothing listens on.
func closedPortAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}
