package auth

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/ttlproxy/ttlproxy/internal/pgtest"
	"github.com/ttlproxy/ttlproxy/internal/scram"
	"github.com/ttlproxy/ttlproxy/internal/sqlstate"
	"github.com/ttlproxy/ttlproxy/internal/wire"
)

// authResult is what the test listener's Authenticate returned for one
// client.
type authResult struct {
	user  string
	login *Login
	err   error
}

// startAuthListener serves clients on a local port with a: the startup
// phase (SSLRequest answered 'N'), Authenticate, then a minimal welcome
// (BackendKeyData, ReadyForQuery) and nothing more until the client goes.
func startAuthListener(t *testing.T, a *Auth) (addr string, results <-chan authResult) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan authResult, 16)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
				user, database, err := readTestStartup(conn)
				if err != nil {
					out <- authResult{err: err}
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				login, err := a.Authenticate(ctx, conn, user, database)
				cancel()
				out <- authResult{user: user, login: login, err: err}
				var pe *wire.ProtocolError
				switch {
				case errors.As(err, &pe):
					_, _ = conn.Write(wire.ErrorResponse(nil, "FATAL", pe.Code, pe.Msg, "", ""))
					return
				case err != nil:
					return
				}
				buf, _ := (&pgproto3.BackendKeyData{ProcessID: 1, SecretKey: []byte{0, 0, 0, 1}}).Encode(login.OK)
				buf, _ = (&pgproto3.ReadyForQuery{TxStatus: 'I'}).Encode(buf)
				if _, err := conn.Write(buf); err != nil {
					return
				}
				var b [256]byte
				for {
					if _, err := conn.Read(b[:]); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
	})
	return ln.Addr().String(), out
}

// readTestStartup reads the startup phase up to the StartupMessage and
// returns its user and database (the user's name when it names none, as
// PostgreSQL's default).
func readTestStartup(conn net.Conn) (user, database string, err error) {
	for {
		pkt, err := wire.ReadStartupPacket(conn, nil)
		if err != nil {
			return "", "", err
		}
		if binary.BigEndian.Uint32(pkt[4:8]) == wire.SSLRequestCode {
			if _, err := conn.Write([]byte{'N'}); err != nil {
				return "", "", err
			}
			continue
		}
		var msg pgproto3.StartupMessage
		if err := msg.Decode(pkt[4:]); err != nil {
			return "", "", err
		}
		user, database = msg.Parameters["user"], msg.Parameters["database"]
		if database == "" {
			database = user
		}
		return user, database, nil
	}
}

// Users of the auth file the tests write: one per kind of secret.
const (
	scramUser, scramPassword = "scram_user", "s3cret é"
	md5User, md5Password     = "md5_user", "m5pass"
	plainUser, plainPassword = "plain_user", `pl"ain`
)

func writeAuthFile(t *testing.T) (path string, verifier *scram.Verifier) {
	t.Helper()
	v, err := scram.NewVerifier(scramPassword, []byte("0123456789abcdef"), 4096)
	if err != nil {
		t.Fatal(err)
	}
	content := fmt.Sprintf("; users for the tests\n\"%s\" \"%s\"\n\n\"%s\" \"%s\" \"\"\n# plain\r\n\"%s\" \"%s\"\r\n",
		scramUser, v, md5User, MD5Hash(md5Password, md5User), plainUser, strings.ReplaceAll(plainPassword, `"`, `""`))
	path = filepath.Join(t.TempDir(), "userlist.txt")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, v
}

// connectAs logs in through addr with pgx and returns the SQLSTATE of the
// failure, or "" on success.
func connectAs(t *testing.T, addr, user, password string) string {
	t.Helper()
	return connectTo(t, addr, "db", user, password)
}

// connectTo is connectAs into database.
func connectTo(t *testing.T, addr, database, user, password string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig("postgres://" + addr + "/" + database + "?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	cfg.User, cfg.Password = user, password
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			if pe.Code == sqlstate.InvalidPassword && pe.Message != `password authentication failed for user "`+user+`"` {
				t.Errorf("28P01 message %q", pe.Message)
			}
			return pe.Code
		}
		t.Fatalf("connecting as %s: %v", user, err)
	}
	_ = conn.Close(ctx)
	return ""
}

// TestClientAuthFile logs pgx in with each auth_type against an auth_file
// holding a SCRAM verifier, an md5 hash and a plain password, with the right
// and a wrong password, and as a user the file does not list; it checks the
// secret each login leaves for the server login.
func TestClientAuthFile(t *testing.T) {
	path, verifier := writeAuthFile(t)
	scramKeys, err := scram.PasswordKeys(scramPassword, verifier.Salt, verifier.Iterations)
	if err != nil {
		t.Fatal(err)
	}
	md5Secret := MD5Hash(md5Password, md5User)

	type want struct {
		code     string // "" for success
		keys     bool   // the SCRAM keys of scramPassword
		password string
		md5      string
	}
	fail := want{code: sqlstate.InvalidPassword}
	for _, c := range []struct {
		authType string
		scram    want
		md5      want
		plain    want
	}{
		{
			authType: SCRAM,
			scram:    want{keys: true},
			md5:      fail, // an md5 hash cannot answer SCRAM, as in PostgreSQL
			plain:    want{password: plainPassword},
		},
		{
			authType: MD5,
			scram:    want{keys: true}, // SCRAM for a verifier, as in PostgreSQL
			md5:      want{md5: md5Secret},
			plain:    want{password: plainPassword, md5: MD5Hash(plainPassword, plainUser)},
		},
		{
			authType: Plain,
			scram:    want{keys: true, password: scramPassword},
			md5:      want{md5: md5Secret, password: md5Password},
			plain:    want{password: plainPassword},
		},
	} {
		t.Run(c.authType, func(t *testing.T) {
			a, err := New(Config{Type: c.authType, File: path})
			if err != nil {
				t.Fatal(err)
			}
			addr, results := startAuthListener(t, a)
			for _, u := range []struct {
				user, password string
				want           want
			}{
				{scramUser, scramPassword, c.scram},
				{md5User, md5Password, c.md5},
				{plainUser, plainPassword, c.plain},
			} {
				check := func(password string, w want) {
					t.Helper()
					code := connectAs(t, addr, u.user, password)
					res := <-results
					if code != w.code {
						t.Fatalf("%s with %q: SQLSTATE %q, want %q (server: %v)", u.user, password, code, w.code, res.err)
					}
					if w.code != "" {
						return
					}
					got := res.login
					if (got.Keys != nil) != w.keys || got.Password != w.password || got.MD5 != w.md5 {
						t.Fatalf("%s: login secret keys=%v password=%q md5=%q, want %+v", u.user, got.Keys != nil, got.Password, got.MD5, w)
					}
					if w.keys && (got.Keys.ClientKey != scramKeys.ClientKey || got.Keys.ServerKey != scramKeys.ServerKey) {
						t.Fatalf("%s: the recovered SCRAM keys are not the password's", u.user)
					}
				}
				check(u.password, u.want)
				check(u.password+"x", fail)
			}
			// An unknown user fails as a wrong password does.
			if code := connectAs(t, addr, "nobody", "x"); code != sqlstate.InvalidPassword {
				t.Fatalf("unknown user: SQLSTATE %q", code)
			}
			<-results
		})
	}
}

func TestClientAuthTrust(t *testing.T) {
	path, _ := writeAuthFile(t)
	a, err := New(Config{Type: Trust, File: path})
	if err != nil {
		t.Fatal(err)
	}
	addr, results := startAuthListener(t, a)
	if code := connectAs(t, addr, plainUser, "anything"); code != "" {
		t.Fatalf("trust, listed user: SQLSTATE %q", code)
	}
	if res := <-results; res.login == nil || res.login.Password != plainPassword {
		t.Fatalf("trust: login secret %+v, want the file's password", res.login)
	}
	if code := connectAs(t, addr, "nobody", ""); code != sqlstate.InvalidAuthorizationSpecification {
		t.Fatalf("trust, unknown user: SQLSTATE %q, want 28000", code)
	}
	<-results

	// Without a file, trust lets anyone in.
	a, err = New(Config{Type: Trust})
	if err != nil {
		t.Fatal(err)
	}
	addr, results = startAuthListener(t, a)
	if code := connectAs(t, addr, "nobody", ""); code != "" {
		t.Fatalf("trust without a file: SQLSTATE %q", code)
	}
	<-results
}

func TestClientAuthConfigErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.txt", `"u" "p"`+"\n")
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Type: "scram", File: good}, `auth_type: "scram" is not one of scram-sha-256, md5, plain, trust`},
		{Config{}, "auth_file: required with auth_type scram-sha-256 (or auth_dsn)"},
		{Config{Type: MD5}, "auth_file: required with auth_type md5"},
		{Config{File: good, DSN: "postgres://u@127.0.0.1/db"}, "auth_file and auth_dsn: set one of them, not both"},
		{Config{Query: "SELECT 1"}, "auth_query: needs auth_dsn"},
		{Config{DSN: "postgres://u@127.0.0.1:99999999/db"}, "auth_dsn: cannot parse"},
		{Config{File: filepath.Join(dir, "missing.txt")}, "auth_file: open " + filepath.Join(dir, "missing.txt")},
		{Config{File: write("a.txt", "\"u\" \"p\"\n\nu p\n")}, "auth_file: " + filepath.Join(dir, "a.txt") + `:3: want "user" "secret": a field must be in double quotes`},
		{Config{File: write("b.txt", `"u" "p`)}, "b.txt:1: unterminated quoted field"},
		{Config{File: write("c.txt", `"u"`)}, `c.txt:1: want "user" "secret"`},
		{Config{File: write("d.txt", `"" "p"`)}, "d.txt:1: empty user name"},
		{Config{File: write("e.txt", "\"u\" \"p\"\n\"u\" \"q\"\n")}, `e.txt:2: user "u" is already listed on line 1`},
		{Config{File: write("f.txt", `"u" "SCRAM-SHA-256$4096:c2FsdA==$AAAA:AAAA"`)}, `f.txt:1: user "u": malformed SCRAM verifier: bad StoredKey`},
		{Config{File: write("g.txt", `"u""p"`)}, `g.txt:1: want "user" "secret"`},
		{Config{File: write("i.txt", `"u"x "p"`)}, "i.txt:1: want white space between quoted fields"},
		{Config{File: write("h.txt", `"u" "p" x`)}, "h.txt:1: want \"user\" \"secret\": a field must be in double quotes"},
	} {
		_, err := New(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v, want an error containing %q", c.cfg, err, c.want)
		}
	}
}

func TestParseAuthFile(t *testing.T) {
	users, err := parseAuthFile("f", []byte("  ; comment\n# comment\n\t\"a\"\"b\" \"x\"\"y\" \"ignored\"  \n\"m\" \"md5"+strings.Repeat("a", 32)+"\"\n\"M\" \"md5"+strings.Repeat("A", 32)+"\"\n\"e\" \"\""))
	if err != nil {
		t.Fatal(err)
	}
	for name, w := range map[string]struct {
		kind secretKind
		text string
	}{`a"b`: {secretPlain, `x"y`}, "m": {secretMD5, "md5" + strings.Repeat("a", 32)}, "M": {secretPlain, "md5" + strings.Repeat("A", 32)}, "e": {secretPlain, ""}} {
		s := users[name]
		if s == nil || s.kind != w.kind || s.text != w.text {
			t.Errorf("user %q: %+v, want %+v", name, s, w)
		}
	}
	if len(users) != 4 {
		t.Errorf("%d users, want 4", len(users))
	}
}

// TestClientAuthProtocol drives the exchange with a raw pgproto3 client:
// what PostgreSQL answers 08P01 to is answered 08P01, and an empty password
// closes the connection without an answer.
func TestClientAuthProtocol(t *testing.T) {
	path, _ := writeAuthFile(t)
	scramAuth, err := New(Config{File: path})
	if err != nil {
		t.Fatal(err)
	}
	plainAuth, err := New(Config{Type: Plain, File: path})
	if err != nil {
		t.Fatal(err)
	}
	scramAddr, scramResults := startAuthListener(t, scramAuth)
	plainAddr, plainResults := startAuthListener(t, plainAuth)

	for _, c := range []struct {
		name  string
		addr  string
		res   <-chan authResult
		send  []pgproto3.FrontendMessage
		code  string // "" for no ErrorResponse
		wantE error
	}{
		{"wrong mechanism", scramAddr, scramResults,
			[]pgproto3.FrontendMessage{&pgproto3.SASLInitialResponse{AuthMechanism: "SCRAM-SHA-256-PLUS", Data: []byte("p=tls-server-end-point,,n=,r=abc")}},
			sqlstate.ProtocolViolation, nil},
		{"channel binding", scramAddr, scramResults,
			[]pgproto3.FrontendMessage{&pgproto3.SASLInitialResponse{AuthMechanism: scram.Mechanism, Data: []byte("p=tls-server-end-point,,n=,r=abc")}},
			sqlstate.ProtocolViolation, nil},
		{"malformed client-final", scramAddr, scramResults,
			[]pgproto3.FrontendMessage{
				&pgproto3.SASLInitialResponse{AuthMechanism: scram.Mechanism, Data: []byte("n,,n=,r=abc")},
				&pgproto3.SASLResponse{Data: []byte("c=biws,r=abc,p=AAAA")},
			},
			sqlstate.ProtocolViolation, nil},
		{"query instead of SASL", scramAddr, scramResults,
			[]pgproto3.FrontendMessage{&pgproto3.Query{String: "SELECT 1"}},
			sqlstate.ProtocolViolation, nil},
		{"empty password", plainAddr, plainResults,
			[]pgproto3.FrontendMessage{&pgproto3.PasswordMessage{Password: ""}},
			"", errEmptyPassword},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", c.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			fe := pgproto3.NewFrontend(conn, conn)
			fe.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30, Parameters: map[string]string{"user": scramUser}})
			if err := fe.Flush(); err != nil {
				t.Fatal(err)
			}
			var code string
			for i, msg := range c.send {
				if _, err := fe.Receive(); err != nil { // the request this message answers
					t.Fatal(err)
				}
				fe.Send(msg)
				if err := fe.Flush(); err != nil {
					t.Fatal(err)
				}
				if i == len(c.send)-1 {
					for {
						m, err := fe.Receive()
						if err != nil {
							break
						}
						if e, ok := m.(*pgproto3.ErrorResponse); ok {
							code = e.Code
						}
					}
				}
			}
			res := <-c.res
			if code != c.code {
				t.Fatalf("SQLSTATE %q, want %q (server: %v)", code, c.code, res.err)
			}
			if c.wantE != nil && !errors.Is(res.err, c.wantE) {
				t.Fatalf("server error %v, want %v", res.err, c.wantE)
			}
		})
	}
}

// TestClientAuthPassThrough: a verifier PostgreSQL made goes into the
// auth_file; pgx logs in through the listener with the password; the keys
// recovered from its proof then log in to PostgreSQL itself, without the
// password, and a wrong key is refused there with 28P01.
func TestClientAuthPassThrough(t *testing.T) {
	srv := pgtest.Server(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, srv.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	role := fmt.Sprintf("auth_pass_%d", os.Getpid())
	const password = "pass-through"
	if _, err := admin.Exec(ctx, "SET password_encryption = 'scram-sha-256'"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" LOGIN PASSWORD '"+password+"'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP ROLE "+pgx.Identifier{role}.Sanitize()) })
	var stored string
	if err := admin.QueryRow(ctx, "SELECT rolpassword FROM pg_authid WHERE rolname = $1", role).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "userlist.txt")
	if err := os.WriteFile(path, []byte(`"`+role+`" "`+stored+`"`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{File: path})
	if err != nil {
		t.Fatal(err)
	}
	addr, results := startAuthListener(t, a)
	if code := connectAs(t, addr, role, password); code != "" {
		t.Fatalf("login through the listener: SQLSTATE %q", code)
	}
	keys := (<-results).login.Keys
	if keys == nil {
		t.Fatal("no SCRAM keys recovered")
	}
	if code := scramLogin(t, srv.Addr(), role, keys); code != "" {
		t.Fatalf("login to PostgreSQL with the recovered keys: SQLSTATE %q", code)
	}
	wrong := *keys
	wrong.ClientKey[0] ^= 1
	if code := scramLogin(t, srv.Addr(), role, &wrong); code != sqlstate.InvalidPassword {
		t.Fatalf("login to PostgreSQL with a wrong key: SQLSTATE %q, want 28P01", code)
	}
}

// scramLogin logs in to addr as user with keys (scram.NewClient) and
// returns the SQLSTATE of the failure, or "" once ReadyForQuery arrives.
func scramLogin(t *testing.T, addr, user string, keys *scram.Keys) string {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fe := pgproto3.NewFrontend(conn, conn)
	fe.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersion30,
		Parameters: map[string]string{"user": user, "database": "postgres"}})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	client := scram.NewClient(keys)
	for {
		msg, err := fe.Receive()
		if err != nil {
			t.Fatal(err)
		}
		switch m := msg.(type) {
		case *pgproto3.AuthenticationSASL:
			fe.Send(&pgproto3.SASLInitialResponse{AuthMechanism: scram.Mechanism, Data: client.First()})
		case *pgproto3.AuthenticationSASLContinue:
			final, err := client.Final(m.Data)
			if err != nil {
				t.Fatal(err)
			}
			fe.Send(&pgproto3.SASLResponse{Data: final})
		case *pgproto3.AuthenticationSASLFinal:
			if err := client.Verify(m.Data); err != nil {
				t.Fatal(err)
			}
			continue
		case *pgproto3.ErrorResponse:
			return m.Code
		case *pgproto3.ReadyForQuery:
			fe.Send(&pgproto3.Terminate{})
			_ = fe.Flush()
			return ""
		default:
			continue
		}
		if err := fe.Flush(); err != nil {
			t.Fatal(err)
		}
	}
}

// FuzzParseAuthFile: any input parses or fails with an error naming the
// file and a line, and what parses is written back and read again the same.
func FuzzParseAuthFile(f *testing.F) {
	for _, s := range []string{
		"\"u\" \"p\"\n", "; c\n# c\n\"a\"\"b\" \"x\" \"\"\r\n", `"u" "md5` + strings.Repeat("0", 32) + `"`,
		`"u" "SCRAM-SHA-256$4096:c2FsdA==$AAAA:AAAA"`, `"u" "p`, `"u"x`, "\"u\" \"p\"\n\"u\" \"q\"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		users, err := parseAuthFile("f", []byte(data))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f:") {
				t.Fatalf("error without file and line: %v", err)
			}
			return
		}
		var b strings.Builder
		for name, s := range users {
			text := s.text
			if s.kind == secretSCRAM {
				text = s.verifier.String()
			}
			fmt.Fprintf(&b, "\"%s\" \"%s\"\n", strings.ReplaceAll(name, `"`, `""`), strings.ReplaceAll(text, `"`, `""`))
		}
		again, err := parseAuthFile("f", []byte(b.String()))
		if err != nil {
			t.Fatalf("written back: %v\n%s", err, b.String())
		}
		for name, s := range users {
			if a := again[name]; a == nil || a.kind != s.kind || a.text != s.text {
				t.Fatalf("user %q read back as %+v, was %+v", name, a, s)
			}
		}
	})
}

// FuzzClientAuth feeds Authenticate arbitrary client bytes for each
// auth_type: it answers, fails or waits for more, and never panics.
func FuzzClientAuth(f *testing.F) {
	enc := func(msgs ...pgproto3.FrontendMessage) []byte {
		var buf []byte
		for _, m := range msgs {
			buf, _ = m.Encode(buf)
		}
		return buf
	}
	f.Add(uint8(0), enc(&pgproto3.SASLInitialResponse{AuthMechanism: scram.Mechanism, Data: []byte("n,,n=,r=abc")},
		&pgproto3.SASLResponse{Data: []byte("c=biws,r=abc,p=AAAA")}))
	f.Add(uint8(0), []byte("p\x00\x00\x00\x08x\x00"))
	f.Add(uint8(1), enc(&pgproto3.PasswordMessage{Password: "md5" + strings.Repeat("0", 32)}))
	f.Add(uint8(2), enc(&pgproto3.PasswordMessage{Password: plainPassword}))
	f.Add(uint8(2), []byte("p\xff\xff\xff\xff"))
	dir := f.TempDir()
	v, _ := scram.NewVerifier(scramPassword, []byte("salt"), 1)
	path := filepath.Join(dir, "userlist.txt")
	content := fmt.Sprintf("%q %q\n%q %q\n%q %q\n", scramUser, v.String(), md5User, MD5Hash(md5Password, md5User), "p", "pw")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		f.Fatal(err)
	}
	var auths []*Auth
	for _, typ := range []string{SCRAM, MD5, Plain} {
		a, err := New(Config{Type: typ, File: path})
		if err != nil {
			f.Fatal(err)
		}
		auths = append(auths, a)
	}
	users := []string{scramUser, md5User, "p", "nobody"}
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		a := auths[int(which)%len(auths)]
		server, client := net.Pipe()
		_ = server.SetDeadline(time.Now().Add(time.Second))
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = a.Authenticate(context.Background(), server, users[int(which/4)%len(users)], "db")
			_ = server.Close()
		}()
		go func() {
			var b [512]byte
			for {
				if _, err := client.Read(b[:]); err != nil {
					return
				}
			}
		}()
		_, _ = client.Write(data)
		_ = client.Close()
		<-done
	})
}

// TestClientAuthFileReload: a reload reads the auth_file again (a user
// added logs in, one removed no longer does); a file that does not load
// fails the reload and leaves the users loaded before.
func TestClientAuthFileReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "userlist.txt")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`"alice" "alice-pw"` + "\n")
	a, err := New(Config{Type: Plain, File: path})
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := startAuthListener(t, a)
	login := func(user, password, want string) {
		t.Helper()
		if code := connectAs(t, addr, user, password); code != want {
			t.Fatalf("%s: SQLSTATE %q, want %q", user, code, want)
		}
	}
	login("alice", "alice-pw", "")
	login("bob", "bob-pw", sqlstate.InvalidPassword)
	write(`"bob" "bob-pw"` + "\n")
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	login("bob", "bob-pw", "")
	login("alice", "alice-pw", sqlstate.InvalidPassword)
	write(`"carol" unquoted` + "\n")
	if err := a.Reload(); err == nil || !strings.HasPrefix(err.Error(), "auth_file: ") {
		t.Fatalf("reload of a broken file: %v", err)
	}
	login("bob", "bob-pw", "")
}
