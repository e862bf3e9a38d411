// Package pgtest gives tests a real PostgreSQL: a throw-away cluster started
// once per test binary, or an existing server named by
// TTLPROXY_TEST_DATABASE_URL (a superuser URL). Without either, tests are
// skipped, except in CI (CI=true) where a missing database is a failure.
//
// Use it from TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// and in a test:
//
//	db := pgtest.NewDatabase(t)
//	conn, err := pgx.Connect(ctx, pgtest.Server(t).ConnString(db))
package pgtest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/internal/pgcluster"
)

// EnvURL names the environment variable holding an existing server's
// superuser URL, e.g. postgres://postgres:secret@127.0.0.1:5432/postgres.
const EnvURL = "TTLPROXY_TEST_DATABASE_URL"

// HBA are the pg_hba.conf lines the harness cluster puts before its default
// scram-sha-256 line, so tests can log in with every authentication method.
// The roles are not created by the harness.
var HBA = []string{
	"host all ttl_trust 127.0.0.1/32 trust",
	"host all ttl_password 127.0.0.1/32 password",
	"host all ttl_md5 127.0.0.1/32 md5",
}

var (
	server     *pgcluster.Cluster
	startErr   error
	dbCounter  atomic.Int64
	inCI       = os.Getenv("CI") == "true"
	testPrefix = fmt.Sprintf("t%d_", os.Getpid())
)

// Main starts the shared server, runs the tests, runs each of after (an
// error fails the run: checks that must wait for every test, parallel ones
// included) and stops the server.
func Main(m *testing.M, after ...func() error) {
	var cluster *pgcluster.Cluster
	if u := os.Getenv(EnvURL); u != "" {
		server, startErr = fromURL(u)
	} else {
		cluster, startErr = pgcluster.Start(context.Background(), pgcluster.Options{HBA: HBA})
		server = cluster
	}
	if startErr != nil {
		fmt.Fprintf(os.Stderr, "pgtest: no PostgreSQL for tests: %v\n", startErr)
		if inCI {
			os.Exit(1)
		}
	}
	code := m.Run()
	for _, f := range after {
		if err := f(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: after the tests: %v\n", err)
			code = 1
		}
	}
	if cluster != nil {
		if err := cluster.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: stopping cluster: %v\n", err)
		}
	}
	os.Exit(code)
}

func fromURL(raw string) (*pgcluster.Cluster, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvURL, err)
	}
	host, portStr, err := net.SplitHostPort(u.Host)
	if err != nil {
		host, portStr = u.Host, "5432"
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("%s: bad port %q", EnvURL, portStr)
	}
	pw, _ := u.User.Password()
	return &pgcluster.Cluster{Host: host, Port: port, User: u.User.Username(), Password: pw}, nil
}

// Server returns the shared server. It skips the test when there is none,
// or fails it in CI.
func Server(t testing.TB) *pgcluster.Cluster {
	t.Helper()
	if server == nil || startErr != nil {
		if startErr == nil {
			startErr = fmt.Errorf("pgtest.Main was not called from TestMain")
		}
		if inCI {
			t.Fatalf("no PostgreSQL for tests: %v", startErr)
		}
		t.Skipf("no PostgreSQL for tests: %v", startErr)
	}
	return server
}

// NewDatabase creates an empty database for this test and drops it when the
// test ends. It returns the database name.
func NewDatabase(t testing.TB) string {
	t.Helper()
	srv := Server(t)
	name := fmt.Sprintf("%s%d", testPrefix, dbCounter.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, srv.ConnString("postgres"))
	if err != nil {
		t.Fatalf("connecting to the test server: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("creating database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, srv.ConnString("postgres"))
		if err != nil {
			t.Errorf("dropping database %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("dropping database %s: %v", name, err)
		}
	})
	return name
}
