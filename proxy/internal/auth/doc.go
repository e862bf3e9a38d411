// Package auth owns client authentication by the proxy itself, for
// transaction pooling: the auth_type methods (SCRAM-SHA-256, md5, plain,
// trust) run against an auth_file in PgBouncer's userlist.txt format or
// the answer of an auth query on auth_dsn, and the Login an exchange leaves
// for logging in to servers in the client's name (SCRAM keys recovered from
// the client's proof, a password, an md5 hash).
//
// It stands on internal/wire (startup packets, ProtocolError) and
// internal/scram; it must not import proxy or any package that holds
// sessions, servers or pools.
//
// Usage:
//
//	a, err := auth.New(auth.Config{File: "userlist.txt"})
//	if err != nil {
//		return err
//	}
//	defer a.Close()
//	login, err := a.Authenticate(ctx, conn, user, database)
//	// on success send login.OK with the rest of the welcome
package auth
