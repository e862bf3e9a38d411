package install

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// The auth query function: the proxy's source of password verifiers for
// client authentication in transaction pooling (docs/design/pooling.md §1),
// PgBouncer's auth_query with a function of ttlproxy's own.
//
// ttlproxy.user_lookup(name text, dbname text DEFAULT NULL) returns at most
// one row (username text, password text, settings text) for the role name:
//   - no row when the role does not exist or may not log in (rolcanlogin);
//   - password is pg_authid.rolpassword (a SCRAM-SHA-256 verifier or an md5
//     hash), NULL when the role has none or its VALID UNTIL has passed
//     (rolvaliduntil < now(), PostgreSQL's get_role_password;
//     CVE-2025-2291 was PgBouncer ignoring it);
//   - settings is the settings hash: the lower-case hex SHA-256 of the
//     pg_db_role_setting rows that apply to a login of the role into the
//     database (role in database, role anywhere, database for anyone, and
//     ALTER ROLE ALL's row), each as "setdatabase setrole setconfig" (OIDs
//     in decimal, setconfig as a text array), ordered by setdatabase then
//     setrole and joined with newlines; the hash of "" when there are none.
//     An ALTER ROLE … SET or ALTER DATABASE … SET that a new session would
//     see changes it, so the pool key (design §1) follows it. SHA-256
//     rather than md5, whose md5() fails on a server built for FIPS mode.
//
// It is SECURITY DEFINER, so its owner must be a superuser (pg_authid is
// readable by superusers only), and pins search_path to pg_catalog,
// pg_temp: a caller's search_path, or objects a user creates in public or
// pg_temp, cannot change what it reads (CVE-2025-12819 was such a hijack
// of PgBouncer's auth function). EXECUTE is revoked from PUBLIC and
// granted to one login, the one the proxy's auth_dsn names.
//
// pg_authid and pg_db_role_setting are shared catalogs: one function in
// the auth_dsn's database serves clients of every database (PgBouncer's
// auth_dbname), which the proxy passes as dbname.

// AuthQueryFunction is the function's name in schema Schema, and
// AuthQuerySignature its argument types, as DROP and GRANT name it.
const (
	AuthQueryFunction  = "user_lookup"
	AuthQuerySignature = Schema + "." + AuthQueryFunction + "(text, text)"
)

// authQueryBody is user_lookup's SQL body. Every name is qualified; the
// pinned search_path covers the operators. dbname NULL means the current
// database.
const authQueryBody = `
SELECT a.rolname::text,
       CASE WHEN a.rolvaliduntil IS NULL OR a.rolvaliduntil >= pg_catalog.now() THEN a.rolpassword END,
       pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(COALESCE((
         SELECT pg_catalog.string_agg(s.setdatabase::text || ' ' || s.setrole::text || ' ' || s.setconfig::text,
                                      E'\n' ORDER BY s.setdatabase, s.setrole)
         FROM pg_catalog.pg_db_role_setting s
         WHERE s.setrole IN (0, a.oid)
           AND s.setdatabase IN (0, (SELECT d.oid FROM pg_catalog.pg_database d
                                      WHERE d.datname = COALESCE($2, pg_catalog.current_database())))
       ), ''), 'UTF8')), 'hex')
FROM pg_catalog.pg_authid a
WHERE a.rolname = $1 AND a.rolcanlogin
`

// PlanAuthQuery returns the statements that install (or, with uninstall,
// remove) ttlproxy.user_lookup, in order, for one transaction. grantee is
// the login that may execute it (the auth_dsn's user); it is not read when
// uninstalling. Installing drops the function first, so that a reinstall
// with another grantee leaves the earlier one without EXECUTE. Uninstalling
// drops schema ttlproxy too unless something else lives in it.
func PlanAuthQuery(grantee string, uninstall bool) []string {
	if uninstall {
		return []string{"DROP FUNCTION IF EXISTS " + AuthQuerySignature, dropSchemaIfEmpty}
	}
	who := ttl.QuoteIdent(grantee)
	return []string{
		"CREATE SCHEMA IF NOT EXISTS " + Schema,
		"DROP FUNCTION IF EXISTS " + AuthQuerySignature,
		"CREATE FUNCTION " + Schema + "." + AuthQueryFunction + "(name text, dbname text DEFAULT NULL)\n" +
			"RETURNS TABLE (username text, password text, settings text)\n" +
			"LANGUAGE sql STABLE SECURITY DEFINER\n" +
			"SET search_path = pg_catalog, pg_temp AS " + dollarQuote(authQueryBody[1:]),
		"REVOKE ALL ON FUNCTION " + AuthQuerySignature + " FROM PUBLIC",
		"GRANT USAGE ON SCHEMA " + Schema + " TO " + who,
		"GRANT EXECUTE ON FUNCTION " + AuthQuerySignature + " TO " + who,
	}
}

// ApplyAuthQuery installs (or, with uninstall, removes) ttlproxy.user_lookup
// in conn's database, in one transaction, and returns the statements run.
// Installing needs a superuser login (the function reads pg_authid with its
// owner's rights) and a grantee that exists; either missing is an error that
// says so. The grantee should be a dedicated login that is not a superuser.
func ApplyAuthQuery(ctx context.Context, conn *pgx.Conn, grantee string, uninstall bool) ([]string, error) {
	return runAuthQuery(ctx, conn, grantee, uninstall, true)
}

// PreviewAuthQuery is ApplyAuthQuery without changing anything.
func PreviewAuthQuery(ctx context.Context, conn *pgx.Conn, grantee string, uninstall bool) ([]string, error) {
	return runAuthQuery(ctx, conn, grantee, uninstall, false)
}

func runAuthQuery(ctx context.Context, conn *pgx.Conn, grantee string, uninstall, execute bool) ([]string, error) {
	if !uninstall {
		if grantee == "" {
			return nil, errors.New("the auth query function needs a grantee: the login of the proxy's auth_dsn")
		}
		var super bool
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT pg_catalog.current_setting('is_superuser') = 'on',
  EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = $1)`, grantee).Scan(&super, &exists); err != nil {
			return nil, fmt.Errorf("reading the login's privileges: %w", err)
		}
		if !super {
			return nil, errors.New("the auth query function must be installed by a superuser: it reads pg_authid with its owner's rights")
		}
		if !exists {
			return nil, fmt.Errorf("role %q does not exist: create the auth_dsn login first", grantee)
		}
	}
	stmts := PlanAuthQuery(grantee, uninstall)
	if !execute {
		return stmts, nil
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("beginning a transaction: %w", err)
	}
	// After Commit, Rollback does nothing; before it, the error that ended
	// the transaction is the one returned.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			return nil, fmt.Errorf("%s: %w", firstLine(s), err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("committing: %w", err)
	}
	return stmts, nil
}
