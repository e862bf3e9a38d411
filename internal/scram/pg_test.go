package scram

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestPostgreSQLVerifier checks the arithmetic against verifiers PostgreSQL
// made itself: CREATE ROLE … PASSWORD, then rolpassword from pg_authid.
func TestPostgreSQLVerifier(t *testing.T) {
	srv := pgtest.Server(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, srv.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SET password_encryption = 'scram-sha-256'"); err != nil {
		t.Fatal(err)
	}
	for i, password := range []string{
		"pencil",
		"I\u00adX", // SASLprep maps the soft hyphen to nothing
		"\u2168",   // and normalises ROMAN NUMERAL NINE to "IX"
		"caf\u00e9 au\u00a0lait",
		"a\u0007\u00e9", // prohibited by SASLprep: used raw
	} {
		role := fmt.Sprintf("scram_t%d_%d", os.Getpid(), i)
		ident := pgx.Identifier{role}.Sanitize()
		if _, err := conn.Exec(ctx, "CREATE ROLE "+ident+" LOGIN PASSWORD "+quoteLiteral(password)); err != nil {
			t.Fatalf("%q: %v", password, err)
		}
		t.Cleanup(func() { _, _ = conn.Exec(context.Background(), "DROP ROLE "+ident) })
		var stored string
		if err := conn.QueryRow(ctx, "SELECT rolpassword FROM pg_authid WHERE rolname = $1", role).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		v, err := ParseVerifier(stored)
		if err != nil {
			t.Fatalf("%q: %v", password, err)
		}
		if v.String() != stored {
			t.Errorf("%q: round trip %q, PostgreSQL stored %q", password, v.String(), stored)
		}
		mine, err := NewVerifier(password, v.Salt, v.Iterations)
		if err != nil {
			t.Fatal(err)
		}
		if mine.String() != stored {
			t.Errorf("%q: NewVerifier gives %q, PostgreSQL stored %q", password, mine, stored)
		}
		if err := exchange(v, password); err != nil {
			t.Errorf("%q: exchange with the right password: %v", password, err)
		}
		if err := exchange(v, password+"x"); !errors.Is(err, ErrAuthFailed) {
			t.Errorf("%q: exchange with a wrong password = %v, want ErrAuthFailed", password, err)
		}
	}
}

// exchange runs a whole exchange between a password client and a server
// holding v, then logs in again with the keys the server recovered.
func exchange(v *Verifier, password string) error {
	run := func(c *Client) (*Keys, error) {
		s := NewServer(v)
		first, err := s.First(c.First())
		if err != nil {
			return nil, err
		}
		final, err := c.Final(first)
		if err != nil {
			return nil, err
		}
		last, keys, err := s.Final(final)
		if err != nil {
			return nil, err
		}
		return keys, c.Verify(last)
	}
	keys, err := run(NewPasswordClient(password))
	if err != nil {
		return err
	}
	_, err = run(NewClient(keys))
	return err
}

func quoteLiteral(s string) string {
	out := []byte{'\''}
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' {
			out = append(out, '\'')
		}
		out = append(out, s[i])
	}
	return string(append(out, '\''))
}
