package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { Main(m) }

func TestNewDatabaseIsUsableAndIsolated(t *testing.T) {
	ctx := context.Background()
	a, b := NewDatabase(t), NewDatabase(t)
	if a == b {
		t.Fatalf("two databases share the name %q", a)
	}
	conn, err := pgx.Connect(ctx, Server(t).ConnString(a))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var got string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != a {
		t.Fatalf("connected to %q, want %q", got, a)
	}
	var method string
	if err := conn.QueryRow(ctx, "SELECT current_setting('password_encryption')").Scan(&method); err != nil {
		t.Fatal(err)
	}
	if method != "scram-sha-256" {
		t.Fatalf("password_encryption = %q, want scram-sha-256", method)
	}
}
