package auth

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// authUser is what an authSource knows of one user.
type authUser struct {
	// secret is nil when the user exists but has no usable password (the
	// auth query's NULL: none set, or VALID UNTIL passed): every password
	// login fails, as an unknown user's does.
	secret *authSecret
	// settings is the auth query's settings hash (install.PlanAuthQuery);
	// "" from an auth_file or a two-column query.
	settings string
}

// authSource gives client authentication a user's secret: the auth_file's
// map or the auth query.
type authSource interface {
	// lookup returns user's entry, nil for a user the source does not know
	// (or who may not log in). database is the client's. An error means
	// the source could not answer.
	lookup(ctx context.Context, user, database string) (*authUser, error)
	// close releases what the source holds.
	close()
}

// fileSource is a loaded auth_file, read again by a reload (PgBouncer
// reads its auth_file again on RELOAD).
type fileSource struct {
	path  string
	users atomic.Pointer[map[string]*authSecret]
}

// newFileSource loads the auth_file at path (parseAuthFile's errors).
func newFileSource(path string) (*fileSource, error) {
	f := &fileSource{path: path}
	return f, f.reload()
}

// reload reads the file again; on an error the users loaded before stay.
func (f *fileSource) reload() error {
	users, err := loadAuthFile(f.path)
	if err != nil {
		return err
	}
	f.users.Store(&users)
	return nil
}

func (f *fileSource) lookup(_ context.Context, user, _ string) (*authUser, error) {
	if s, ok := (*f.users.Load())[user]; ok {
		return &authUser{secret: s}, nil
	}
	return nil, nil
}

func (*fileSource) close() {}

// DefaultQuery is the auth_query run when none is configured: the
// function ttlproxy install --auth-query creates, with the client's user as
// $1 and its database as $2 (the settings hash is the role's in that
// database).
const DefaultQuery = "SELECT username, password, settings FROM ttlproxy.user_lookup($1, $2)"

// QueryApplicationName is the application_name of the auth query's
// connections when auth_dsn sets none.
const QueryApplicationName = "ttlproxy auth query"

// authQueryMaxConns bounds the auth query's pool (design §1: a small pool;
// one query per client login, about one local round trip each).
const authQueryMaxConns = 2

// authQueryTimeout bounds one lookup, waiting for or opening a connection
// included: well below DefaultClientLoginTimeout, so that an unreachable
// auth_dsn answers the client with an error rather than a timeout.
const authQueryTimeout = 10 * time.Second

// authQueryStatement names the auth query's prepared statement on each of
// the pool's connections.
const authQueryStatement = "ttlproxy_auth_query"

// querySource runs the auth query on a small pool of auth_dsn connections,
// once per lookup: no cache, so a changed password or expiry applies to the
// next login.
type querySource struct {
	pool  *pgxpool.Pool
	query string
}

// newQuerySource parses dsn (its password from the DSN, PGPASSWORD or
// .pgpass, as libpq's) and makes the pool, whose connections dial with
// dial (nil: pgconn's dialer); it connects on the first lookup. Errors
// name the key: `auth_dsn: …`; pgconn's parse errors never show the
// password.
func newQuerySource(dsn, query string, dial pgconn.DialFunc) (*querySource, error) {
	if query == "" {
		query = DefaultQuery
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("auth_dsn: %w", err)
	}
	cfg.MaxConns = authQueryMaxConns
	cfg.MinConns = 0
	if dial != nil {
		cfg.ConnConfig.DialFunc = dial
	}
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = QueryApplicationName
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("auth_dsn: %w", err)
	}
	return &querySource{pool: pool, query: query}, nil
}

func (q *querySource) close() { q.pool.Close() }

// lookup runs the query with user as $1 and, when the query has a second
// parameter, database as $2. The first row's second column is the secret
// (NULL: none), its third, when there is one, the settings hash; no row is
// an unknown user. A user name the server cannot take as text (SQLSTATE
// class 22, e.g. invalid UTF-8) is unknown too: it is the client's input,
// not a failure of the source. Errors: the pool could not connect, or the
// query failed or has the wrong shape.
func (q *querySource) lookup(ctx context.Context, user, database string) (*authUser, error) {
	ctx, cancel := context.WithTimeout(ctx, authQueryTimeout)
	defer cancel()
	c, err := q.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("connecting to auth_dsn: %w", err)
	}
	defer c.Release()
	sd, err := c.Conn().Prepare(ctx, authQueryStatement, q.query)
	if err != nil {
		return nil, fmt.Errorf("preparing auth_query: %w", err)
	}
	args := []any{user, database}
	switch n := len(sd.ParamOIDs); n {
	case 1, 2:
		args = args[:n]
	default:
		return nil, fmt.Errorf("auth_query: has %d parameters, want $1 (the user) and optionally $2 (the database)", n)
	}
	if n := len(sd.Fields); n != 2 && n != 3 {
		return nil, fmt.Errorf("auth_query: returns %d columns, want username, password and optionally settings", n)
	}
	var name, password, settings *string
	dest := []any{&name, &password, &settings}[:len(sd.Fields)]
	found, err := scanOne(ctx, c.Conn(), args, dest)
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && strings.HasPrefix(pe.Code, "22") {
			return nil, nil
		}
		return nil, q.queryError(ctx, c, err)
	}
	if !found {
		return nil, nil
	}
	u := &authUser{}
	if settings != nil {
		u.settings = *settings
	}
	if password != nil {
		u.secret, err = newAuthSecret(*password)
		if err != nil {
			return nil, fmt.Errorf("auth_query: password of %q: %w", user, err)
		}
	}
	return u, nil
}

// queryError wraps err and, for an error of the server, forgets the
// connection's prepared statement, so that the next lookup prepares the
// query again (after a reinstall of the function changed its result type,
// say).
func (q *querySource) queryError(ctx context.Context, c *pgxpool.Conn, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		if derr := c.Conn().Deallocate(ctx, authQueryStatement); derr != nil {
			// The connection is in doubt: the pool drops it.
			_ = c.Conn().Close(ctx)
		}
	}
	return fmt.Errorf("running auth_query: %w", err)
}

// scanOne runs the prepared auth query and scans its row, if any, into
// dest. More than one row is an error.
func scanOne(ctx context.Context, conn *pgx.Conn, args, dest []any) (found bool, err error) {
	rows, err := conn.Query(ctx, authQueryStatement, args...)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	for rows.Next() {
		if found {
			return false, errors.New("auth_query: returned more than one row")
		}
		found = true
		if err := rows.Scan(dest...); err != nil {
			return false, fmt.Errorf("auth_query: %w", err)
		}
	}
	return found, rows.Err()
}
