package upstream

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ttlproxy/ttlproxy/internal/pgtest"
	"github.com/ttlproxy/ttlproxy/internal/sqlstate"
	"github.com/ttlproxy/ttlproxy/proxy/internal/auth"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// login dials d and logs in as the harness's superuser to database with
// password.
func login(t *testing.T, d *Dialer, database, password string) (*Welcome, error) {
	t.Helper()
	nc, err := d.Dial(testContext(t))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	return Login(nc, map[string]string{"user": pgtest.Server(t).User, "database": database}, &auth.Login{Password: password})
}

// TestLogin logs in to the test server without a client: the welcome holds
// the ParameterStatus messages, the BackendKeyData and, after SCRAM, the
// keys; the server's refusals come back as ServerErrors with its SQLSTATE.
func TestLogin(t *testing.T) {
	srv := pgtest.Server(t)
	d := &Dialer{Addr: srv.Addr(), Timeout: 5 * time.Second}
	w, err := login(t, d, "postgres", srv.Password)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Key) != 8 {
		t.Errorf("BackendKeyData body %x, want 8 bytes", w.Key)
	}
	found := false
	for _, p := range w.Params {
		found = found || p.Name == "server_version" && p.Value != ""
	}
	if !found {
		t.Errorf("no server_version among %v", w.Params)
	}
	if srv.Password != "" && w.Keys == nil {
		t.Error("a SCRAM login left no keys")
	}

	var se *ServerError
	if _, err := login(t, d, "no_such_database_here", srv.Password); !errors.As(err, &se) || se.Code != sqlstate.InvalidCatalogName {
		t.Errorf("login to a missing database: %v, want SQLSTATE %s", err, sqlstate.InvalidCatalogName)
	}
	if srv.Password != "" {
		if _, err := login(t, d, "postgres", "wrong "+srv.Password); !errors.As(err, &se) || se.Code != sqlstate.InvalidPassword {
			t.Errorf("login with a wrong password: %v, want SQLSTATE %s", err, sqlstate.InvalidPassword)
		}
	}
}

// TestDial: a server that cannot be reached is named in the error, and
// sslmode prefer logs in whether or not the server takes TLS (the harness's
// does not).
func TestDial(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	_ = ln.Close()
	if _, err := (&Dialer{Addr: closed, Timeout: time.Second}).Dial(testContext(t)); err == nil || !strings.Contains(err.Error(), closed) {
		t.Errorf("dial of a closed port: %v, want an error naming %s", err, closed)
	}

	srv := pgtest.Server(t)
	prefer := &Dialer{Addr: srv.Addr(), Timeout: 5 * time.Second, TLS: &tls.Config{InsecureSkipVerify: true}, SSLMode: "prefer"} //nolint:gosec // the test server's own certificate, if any
	if _, err := login(t, prefer, "postgres", srv.Password); err != nil {
		t.Errorf("sslmode prefer: %v", err)
	}
}
