// Package rewrite turns SQL text into SQL text that hides expired rows of TTL
// tables, or rejects it. It does no I/O.
//
// Usage:
//
//	rw, err := rewrite.New([]ttl.Rule{{Table: "sessions", DefaultTTL: 24 * time.Hour}}, rewrite.Options{})
//	if err != nil {
//		return err
//	}
//	res, err := rw.Rewrite("SELECT * FROM sessions WHERE id = $1", rewrite.NewState(rewrite.Session{}))
//	var rej *rewrite.Error
//	if errors.As(err, &rej) {
//		// Send rej.Code and rej.Message to the client as an ErrorResponse.
//	}
//	// Send res.SQL: here
//	// SELECT * FROM (sessions JOIN (SELECT) AS _ttl_0 ON ("sessions"."expires_at" IS NULL OR "sessions"."expires_at" >= now())) WHERE id = $1
//
// What it does to a statement that names a TTL table (docs/contract.md;
// ARCHITECTURE.md, "The rewrite contract"):
//
//   - A read in a FROM item, at any depth, becomes
//     (t [AS] a JOIN (SELECT) AS _ttl_N ON <live(a)>): the planner flattens
//     the join into a filter on the base scan, so whole-row references,
//     qualified system columns, row locks, NATURAL/USING and outer joins keep
//     their meaning (filtering happens at the base relation, like row-level
//     security). Unqualified ctid/xmin… of a single filtered table are
//     qualified.
//   - UPDATE and DELETE get the live condition of their target in WHERE.
//   - INSERT stamps the expiry column (every VALUES row, every leaf target
//     list of INSERT … SELECT, DEFAULT VALUES) unless the statement gives it;
//     UPDATE and ON CONFLICT DO UPDATE refresh it when the rule asks.
//   - ON CONFLICT DO UPDATE gets the target's live condition in its WHERE:
//     an expired row that still holds the key is neither updated nor
//     resurrected (the INSERT affects no row for it; the collision triggers
//     of package install delete it first so that the new row goes in).
//   - INSERT into a sidecar table with a lifetime registers each inserted
//     row: WITH _ttl_ins AS (<insert> RETURNING <keys>) INSERT INTO
//     <registry> … SELECT … FROM _ttl_ins ON CONFLICT (<keys>) DO UPDATE SET
//     expires_at = EXCLUDED.expires_at; the command tag stays INSERT 0 n.
//     With RETURNING, inside a WITH query, as a MERGE action, or as an upsert
//     without refresh_on_update it is rejected.
//   - MERGE: the target's live condition joins the ON condition (an expired
//     target row matches nothing, so its source row takes WHEN NOT MATCHED),
//     and WHEN NOT MATCHED BY SOURCE gets it too; the source is a read;
//     WHEN … THEN INSERT is stamped and THEN UPDATE refreshed as above.
//   - COPY t TO, COPY (query) TO, EXPLAIN, PREPARE, DECLARE, CREATE TABLE AS,
//     SELECT INTO and CREATE [MATERIALIZED] VIEW are rewritten inside; DDL
//     naming the table passes. In a PREPARE body an unqualified TTL table
//     name is qualified with the schema it resolves to now ("public".t), as
//     EXECUTE analyses it again under a later search_path.
//   - A query string in which a statement that may change search_path, the
//     role, ttlproxy.ttl or temporary relations (SessionStateMayChange) comes
//     before a statement naming a TTL table is rejected: the whole text is
//     rewritten under the state from before it.
//   - SET ttlproxy.ttl and set_config('ttlproxy.ttl', …) with a literal value
//     ttl.ParseTTLSetting does not accept are rejected with 22023.
//   - TABLESAMPLE on a TTL table is wrapped whole: the sample is drawn, then
//     its expired rows are dropped.
//   - SHOW ttlproxy.ttl reads the setting with current_setting(…, true), so
//     it works before anything set it.
//   - Anything else that touches a TTL table is rejected with an *Error
//     carrying a SQLSTATE: DO blocks and function bodies, rules, calls of
//     the built-in functions that read rows inside the server
//     (serverreads.go), unparseable text, statements over the size and
//     nesting limits.
//
// Text is edited at the parser's node locations, never deparsed, so comments
// and planner hints survive, and text that cannot name a TTL table is
// returned as is without being parsed.
//
// Rewrites are cached by shape: the text with its literals masked to their
// kind (shape_lex.go), under a fingerprint of the session facts. A statement
// that differs from an earlier one only in its literals (numbers, strings,
// booleans) is rewritten by pasting its literals into the earlier rewrite,
// without the parser. This holds because the rewrite of a single SELECT,
// INSERT, UPDATE, DELETE or MERGE never depends on a literal's value; the
// checks that do read one say so and their statements are cached by exact
// text (shape.go).
package rewrite
