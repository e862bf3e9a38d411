// Package scram is the SCRAM-SHA-256 arithmetic and message parsing of
// PostgreSQL's password authentication (RFC 5802, RFC 7677; PostgreSQL's
// auth-scram.c and libpq's fe-auth-scram.c), over the standard library's
// HMAC, SHA-256 and PBKDF2, without channel binding.
//
// It exists for pooling, where the proxy authenticates clients itself and
// later logs in to the server without them: a Server exchange against a
// stored Verifier recovers the client's Keys from its proof, and a Client
// logs in with those Keys (pass-through, as PgBouncer does), without the
// password.
//
//	v, err := scram.ParseVerifier(rolpassword) // "SCRAM-SHA-256$4096:…"
//	srv := scram.NewServer(v)
//	serverFirst, err := srv.First(clientFirst)  // SASLInitialResponse data
//	serverFinal, keys, err := srv.Final(clientFinal) // err: scram.ErrAuthFailed
//	…
//	cl := scram.NewClient(keys)
//	clientFirst := cl.First()
//	clientFinal, err := cl.Final(serverFirst) // err: scram.ErrKeysMismatch
//	err = cl.Verify(serverFinal)
package scram
