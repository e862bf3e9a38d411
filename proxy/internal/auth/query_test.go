package auth

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/install"
	"github.com/ttlproxy/ttlproxy/internal/pgcluster"
	"github.com/ttlproxy/ttlproxy/internal/pgtest"
	"github.com/ttlproxy/ttlproxy/internal/sqlstate"
)

// aqEnv is a database with ttlproxy.user_lookup installed for a login of
// its own, roles of each kind, and a second database clients log in to.
type aqEnv struct {
	t        *testing.T
	ctx      context.Context
	srv      *pgcluster.Cluster
	authDB   string // where the function lives, the auth_dsn's database
	clientDB string // the clients' database
	admin    *pgx.Conn
	login    string // the auth_dsn's login
	// Roles: SCRAM and md5 passwords, VALID UNTIL passed, NOLOGIN.
	scramRole, md5Role, expiredRole, nologinRole string
}

const (
	aqLoginPassword = "lookup secret"
	aqPassword      = "role pass"
)

func setupAuthQuery(t *testing.T) *aqEnv {
	t.Helper()
	srv := pgtest.Server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	e := &aqEnv{t: t, ctx: ctx, srv: srv, authDB: pgtest.NewDatabase(t), clientDB: pgtest.NewDatabase(t)}
	admin, err := pgx.Connect(ctx, srv.ConnString(e.authDB))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })
	e.admin = admin
	suffix := fmt.Sprint(os.Getpid())
	e.login, e.scramRole, e.md5Role = "aq_login_"+suffix, "aq_scram_"+suffix, "aq_md5_"+suffix
	e.expiredRole, e.nologinRole = "aq_expired_"+suffix, "aq_nologin_"+suffix
	roles := []string{e.login, e.scramRole, e.md5Role, e.expiredRole, e.nologinRole}
	t.Cleanup(func() {
		for _, r := range roles {
			_, _ = admin.Exec(context.Background(), "DROP OWNED BY "+r+" CASCADE")
			_, _ = admin.Exec(context.Background(), "DROP ROLE IF EXISTS "+r)
		}
	})
	e.exec("SET password_encryption = 'scram-sha-256'",
		"CREATE ROLE "+e.login+" LOGIN PASSWORD '"+aqLoginPassword+"'",
		"CREATE ROLE "+e.scramRole+" LOGIN PASSWORD '"+aqPassword+"'",
		"CREATE ROLE "+e.expiredRole+" LOGIN PASSWORD '"+aqPassword+"' VALID UNTIL '2000-01-01'",
		"CREATE ROLE "+e.nologinRole+" NOLOGIN PASSWORD '"+aqPassword+"'",
		"SET password_encryption = 'md5'",
		"CREATE ROLE "+e.md5Role+" LOGIN PASSWORD '"+aqPassword+"'",
		"RESET password_encryption")
	if _, err := install.ApplyAuthQuery(ctx, admin, e.login, false); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *aqEnv) exec(sqls ...string) {
	e.t.Helper()
	for _, s := range sqls {
		if _, err := e.admin.Exec(e.ctx, s); err != nil {
			e.t.Fatalf("%s: %v", s, err)
		}
	}
}

// dsn is the auth_dsn: the login, into authDB, with query's parameters
// added.
func (e *aqEnv) dsn(password string, query url.Values) string {
	q := url.Values{"sslmode": {"disable"}}
	for k, v := range query {
		q[k] = v
	}
	u := url.URL{Scheme: "postgres", User: url.UserPassword(e.login, password), Host: e.srv.Addr(), Path: "/" + e.authDB, RawQuery: q.Encode()}
	return u.String()
}

// auth makes a Auth with cfg, its log in a buffer, and serves it.
func (e *aqEnv) auth(cfg Config) (addr string, results <-chan authResult, log *lockedBuffer) {
	e.t.Helper()
	log = &lockedBuffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(log, nil))
	a, err := New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(a.Close)
	addr, results = startAuthListener(e.t, a)
	return addr, results, log
}

// login logs user in through addr into the client database and returns the
// SQLSTATE ("" on success) and what Authenticate returned.
func (e *aqEnv) loginAs(addr string, results <-chan authResult, user, password string) (string, authResult) {
	e.t.Helper()
	code := connectTo(e.t, addr, e.clientDB, user, password)
	return code, <-results
}

// TestClientAuthQuery logs pgx in with each auth_type against the
// installed function: SCRAM and md5 roles with their password, and with a
// wrong one; an unknown role, a role whose VALID UNTIL has passed and a
// NOLOGIN role with the right password fail as a wrong password does
// (28P01, one message; 28000 under trust). The SCRAM keys recovered from a
// login log in to PostgreSQL itself.
func TestClientAuthQuery(t *testing.T) {
	e := setupAuthQuery(t)
	type want struct {
		code     string // "" for success
		keys     bool
		password bool
		md5      bool
	}
	fail := want{code: sqlstate.InvalidPassword}
	for _, c := range []struct {
		authType   string
		scram, md5 want
		refused    want // unknown, expired and NOLOGIN roles
		expired    want
	}{
		{SCRAM, want{keys: true}, fail, fail, fail},
		{MD5, want{keys: true}, want{md5: true}, fail, fail},
		{Plain, want{keys: true, password: true}, want{md5: true, password: true}, fail, fail},
		// trust asks for no password, so VALID UNTIL does not apply, as in
		// PostgreSQL; a role the query does not return is unknown.
		{Trust, want{}, want{md5: true}, want{code: sqlstate.InvalidAuthorizationSpecification}, want{}},
	} {
		t.Run(c.authType, func(t *testing.T) {
			addr, results, _ := e.auth(Config{Type: c.authType, DSN: e.dsn(aqLoginPassword, nil)})
			check := func(user, password string, w want) {
				t.Helper()
				code, res := e.loginAs(addr, results, user, password)
				if code != w.code {
					t.Fatalf("%s with %q: SQLSTATE %q, want %q (server: %v)", user, password, code, w.code, res.err)
				}
				if w.code != "" {
					return
				}
				got := res.login
				if (got.Keys != nil) != w.keys || (got.Password != "") != w.password || (got.MD5 != "") != w.md5 {
					t.Fatalf("%s: login secret keys=%v password=%v md5=%v, want %+v", user, got.Keys != nil, got.Password != "", got.MD5 != "", w)
				}
				if len(got.Settings) != 64 {
					t.Fatalf("%s: settings hash %q, want 64 hex digits", user, got.Settings)
				}
				if got.Keys != nil {
					if code := scramLogin(t, e.srv.Addr(), user, got.Keys); code != "" {
						t.Fatalf("%s: the recovered keys do not log in to PostgreSQL: SQLSTATE %q", user, code)
					}
				}
			}
			check(e.scramRole, aqPassword, c.scram)
			check(e.md5Role, aqPassword, c.md5)
			if c.authType != Trust {
				check(e.scramRole, aqPassword+"x", fail)
				check(e.md5Role, aqPassword+"x", fail)
			}
			check("aq_nobody", aqPassword, c.refused)
			check(e.nologinRole, aqPassword, c.refused)
			check(e.expiredRole, aqPassword, c.expired)
		})
	}
}

// TestClientAuthQueryChanges: no cache (a new password applies to the next
// login, and the old one fails), the settings hash follows ALTER ROLE … SET
// for the client's database only, and a two-column query works, with an
// empty settings hash.
func TestClientAuthQueryChanges(t *testing.T) {
	e := setupAuthQuery(t)
	addr, results, _ := e.auth(Config{DSN: e.dsn(aqLoginPassword, nil)})
	settings := func() string {
		t.Helper()
		code, res := e.loginAs(addr, results, e.scramRole, aqPassword)
		if code != "" {
			t.Fatalf("login: SQLSTATE %q (server: %v)", code, res.err)
		}
		return res.login.Settings
	}
	before := settings()
	e.exec("ALTER ROLE " + e.scramRole + " IN DATABASE " + e.authDB + " SET work_mem = '8MB'")
	if got := settings(); got != before {
		t.Errorf("a setting in the auth_dsn's database changed the hash of logins into another: %s -> %s", before, got)
	}
	e.exec("ALTER ROLE " + e.scramRole + " SET work_mem = '8MB'")
	role := settings()
	if role == before {
		t.Error("ALTER ROLE … SET did not change the settings hash")
	}
	e.exec("ALTER ROLE " + e.scramRole + " IN DATABASE " + e.clientDB + " SET statement_timeout = '5s'")
	if got := settings(); got == role || got == before {
		t.Error("ALTER ROLE … IN DATABASE … SET did not change the settings hash")
	}

	e.exec("ALTER ROLE " + e.scramRole + " PASSWORD 'new pass'")
	if code, res := e.loginAs(addr, results, e.scramRole, "new pass"); code != "" {
		t.Fatalf("login with the new password: SQLSTATE %q (server: %v)", code, res.err)
	}
	if code, _ := e.loginAs(addr, results, e.scramRole, aqPassword); code != sqlstate.InvalidPassword {
		t.Fatalf("login with the old password: SQLSTATE %q, want 28P01", code)
	}

	addr, results, _ = e.auth(Config{DSN: e.dsn(aqLoginPassword, nil),
		Query: "SELECT username, password FROM ttlproxy.user_lookup($1)"})
	code, res := e.loginAs(addr, results, e.scramRole, "new pass")
	if code != "" || res.login.Keys == nil || res.login.Settings != "" {
		t.Fatalf("two-column query: SQLSTATE %q, login %+v (server: %v)", code, res.login, res.err)
	}
	if code, _ := e.loginAs(addr, results, e.expiredRole, aqPassword); code != sqlstate.InvalidPassword {
		t.Fatalf("two-column query, expired role: SQLSTATE %q, want 28P01", code)
	}
}

// TestClientAuthQuerySearchPath: a user who may create objects in public
// shadows the operators the function's body uses (name = text, which
// finds the role, and timestamptz >= timestamptz, which checks VALID
// UNTIL) with ones that always hold, and the auth_dsn's sessions put public
// first in search_path: the shadows work in such a session, and the
// function, whose search_path is pinned, ignores them. (Objects in
// pg_temp belong to the session that made them: only the auth_dsn's own
// sessions could shadow through it, and functions and operators are never
// looked up there.)
func TestClientAuthQuerySearchPath(t *testing.T) {
	e := setupAuthQuery(t)
	e.exec("GRANT CREATE ON SCHEMA public TO "+e.login, "SET ROLE "+e.login,
		"CREATE FUNCTION public.always(name, text) RETURNS bool LANGUAGE sql AS 'SELECT true'",
		"CREATE OPERATOR public.= (LEFTARG = name, RIGHTARG = text, FUNCTION = public.always)",
		"CREATE FUNCTION public.always(timestamptz, timestamptz) RETURNS bool LANGUAGE sql AS 'SELECT true'",
		"CREATE OPERATOR public.>= (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = public.always)",
		"RESET ROLE")
	hijacked := url.Values{"search_path": {"public,pg_catalog"}}
	conn, err := pgx.Connect(e.ctx, e.dsn(aqLoginPassword, hijacked))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(e.ctx)
	var n int
	if err := conn.QueryRow(e.ctx, "SELECT count(*) FROM pg_catalog.pg_roles r WHERE r.rolname = 'aq_nobody'::text").Scan(&n); err != nil || n < 2 {
		t.Fatalf("the shadowing operator is not used by a session with public first: %d rows, %v", n, err)
	}

	addr, results, _ := e.auth(Config{DSN: e.dsn(aqLoginPassword, hijacked)})
	if code, res := e.loginAs(addr, results, e.scramRole, aqPassword); code != "" {
		t.Fatalf("login: SQLSTATE %q (server: %v)", code, res.err)
	}
	if code, res := e.loginAs(addr, results, "aq_nobody", aqPassword); code != sqlstate.InvalidPassword {
		t.Fatalf("unknown role: SQLSTATE %q, want 28P01 (server: %v)", code, res.err)
	}
	if code, res := e.loginAs(addr, results, e.expiredRole, aqPassword); code != sqlstate.InvalidPassword {
		t.Fatalf("expired role: SQLSTATE %q, want 28P01 (server: %v)", code, res.err)
	}
}

// TestClientAuthQueryFailures: an auth_dsn that cannot connect (nothing
// listening, a wrong password) and an auth query that fails (the function
// uninstalled) answer FATAL 08001 and log the cause, never the password;
// once the function is back, logins work again on the same pool.
func TestClientAuthQueryFailures(t *testing.T) {
	e := setupAuthQuery(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := ln.Addr().String()
	_ = ln.Close()

	for _, c := range []struct {
		name, dsn, log string
	}{
		{"nothing listening", strings.Replace(e.dsn(aqLoginPassword, nil), e.srv.Addr(), closedAddr, 1), "connect"},
		{"wrong password", e.dsn("wrong-secret", nil), "28P01"},
	} {
		t.Run(c.name, func(t *testing.T) {
			addr, results, log := e.auth(Config{DSN: c.dsn})
			code, res := e.loginAs(addr, results, e.scramRole, aqPassword)
			if code != sqlstate.SQLClientUnableToEstablishSQLConnection {
				t.Fatalf("SQLSTATE %q, want 08001 (server: %v)", code, res.err)
			}
			out := log.String()
			if !strings.Contains(out, "auth query failed") || !strings.Contains(out, c.log) || !strings.Contains(out, e.scramRole) {
				t.Errorf("log lacks the failure, the user or %q:\n%s", c.log, out)
			}
			if strings.Contains(out, "wrong-secret") || strings.Contains(out, aqLoginPassword) {
				t.Errorf("log shows a password:\n%s", out)
			}
		})
	}

	addr, results, log := e.auth(Config{DSN: e.dsn(aqLoginPassword, nil)})
	if code, res := e.loginAs(addr, results, e.scramRole, aqPassword); code != "" {
		t.Fatalf("login: SQLSTATE %q (server: %v)", code, res.err)
	}
	// A name the server cannot take as text is the client's input, not a
	// failure of the source: an unknown user.
	if code, res := e.loginAs(addr, results, "bad\xff", aqPassword); code != sqlstate.InvalidPassword {
		t.Fatalf("a user name that is not UTF-8: SQLSTATE %q, want 28P01 (server: %v)", code, res.err)
	}
	if _, err := install.ApplyAuthQuery(e.ctx, e.admin, "", true); err != nil {
		t.Fatal(err)
	}
	if code, res := e.loginAs(addr, results, e.scramRole, aqPassword); code != sqlstate.SQLClientUnableToEstablishSQLConnection {
		t.Fatalf("without the function: SQLSTATE %q, want 08001 (server: %v)", code, res.err)
	}
	if out := log.String(); !strings.Contains(out, "42P01") && !strings.Contains(out, "42883") && !strings.Contains(out, "3F000") {
		t.Errorf("log lacks the server's error:\n%s", out)
	}
	if _, err := install.ApplyAuthQuery(e.ctx, e.admin, e.login, false); err != nil {
		t.Fatal(err)
	}
	for range authQueryMaxConns + 1 { // every pooled connection prepares again
		if code, res := e.loginAs(addr, results, e.scramRole, aqPassword); code != "" {
			t.Fatalf("after the reinstall: SQLSTATE %q (server: %v)", code, res.err)
		}
	}
}

// TestClientAuthQueryReprepare: a custom auth_query whose result type
// changes under it (a column altered) fails the login that meets the
// change (the server refuses the connection's prepared statement, 0A000),
// and the next logins prepare it again and succeed.
func TestClientAuthQueryReprepare(t *testing.T) {
	e := setupAuthQuery(t)
	e.exec("CREATE TABLE public.aq_users (username text, password text)",
		"INSERT INTO public.aq_users SELECT rolname, rolpassword FROM pg_authid WHERE rolname = '"+e.scramRole+"'",
		"GRANT SELECT ON public.aq_users TO "+e.login)
	addr, results, log := e.auth(Config{DSN: e.dsn(aqLoginPassword, nil),
		Query: "SELECT username, password FROM public.aq_users WHERE username = $1"})
	if code, res := e.loginAs(addr, results, e.scramRole, aqPassword); code != "" {
		t.Fatalf("login: SQLSTATE %q (server: %v)", code, res.err)
	}
	e.exec("ALTER TABLE public.aq_users ALTER password TYPE varchar")
	var codes []string
	for range authQueryMaxConns + 2 {
		code, _ := e.loginAs(addr, results, e.scramRole, aqPassword)
		codes = append(codes, code)
	}
	if codes[len(codes)-1] != "" || codes[len(codes)-2] != "" {
		t.Fatalf("logins after the change: SQLSTATEs %q, want the last ones to succeed\n%s", codes, log.String())
	}
}

// lockedBuffer is a log sink safe for the auth query's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
