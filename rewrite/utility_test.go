package rewrite

import (
	"strings"
	"testing"
)

func TestRewriteUtility(t *testing.T) {
	rw := newTestRewriter(t)
	S := `"sessions"`
	cases := []rwCase{
		{"COPY TO", `COPY sessions TO STDOUT`,
			`COPY (SELECT * FROM "public".sessions WHERE ` + live(S) + `) TO STDOUT`},
		{"COPY TO with columns and options", `COPY public.sessions (id, note) TO STDOUT (FORMAT csv)`,
			`COPY (SELECT id, note FROM public.sessions WHERE ` + live(S) + `) TO STDOUT (FORMAT csv)`},
		{"COPY query TO", `COPY (SELECT id FROM sessions s) TO STDOUT`,
			`COPY (SELECT id FROM ` + join(`"public".sessions s`, `"s"`, 0) + `) TO STDOUT`},
		{"COPY DML query TO", `COPY (DELETE FROM sessions RETURNING id) TO STDOUT`,
			`COPY (DELETE FROM "public".sessions WHERE ` + live(S) + ` RETURNING id) TO STDOUT`},
		{"COPY FROM passes", `COPY sessions (id, note) FROM STDIN`, `COPY "public".sessions (id, note) FROM STDIN`},
		{"EXPLAIN", `EXPLAIN SELECT * FROM sessions`,
			`EXPLAIN SELECT * FROM ` + join(`"public".sessions`, S, 0)},
		{"EXPLAIN ANALYZE DELETE", `EXPLAIN (ANALYZE, BUFFERS) DELETE FROM sessions WHERE id = 1`,
			`EXPLAIN (ANALYZE, BUFFERS) DELETE FROM "public".sessions WHERE (id = 1) AND ` + live(S)},
		{"PREPARE", `PREPARE q(int) AS SELECT * FROM sessions WHERE id = $1`,
			`PREPARE q(int) AS SELECT * FROM ` + join(`"public".sessions`, S, 0) + ` WHERE id = $1`},
		{"PREPARE UPDATE", `PREPARE u AS UPDATE sessions SET note = $1`,
			`PREPARE u AS UPDATE "public".sessions SET note = $1, "expires_at" = ` + stamp + ` WHERE ` + live(S)},
		{"EXECUTE passes", `EXECUTE q(1)`, ``},
		{"DECLARE", `DECLARE c CURSOR WITH HOLD FOR SELECT * FROM sessions FOR UPDATE`,
			`DECLARE c CURSOR WITH HOLD FOR SELECT * FROM ` + join(`"public".sessions`, S, 0) + ` FOR UPDATE`},
		{"CREATE TABLE AS", `CREATE TABLE snap AS SELECT * FROM sessions WITH NO DATA`,
			`CREATE TABLE snap AS SELECT * FROM ` + join(`"public".sessions`, S, 0) + ` WITH NO DATA`},
		{"CREATE TABLE AS TABLE", `CREATE TEMP TABLE snap AS TABLE sessions`,
			`CREATE TEMP TABLE snap AS SELECT * FROM ` + join(`"public".sessions`, S, 0)},
		{"CREATE VIEW", `CREATE OR REPLACE VIEW v AS SELECT id FROM sessions`,
			`CREATE OR REPLACE VIEW v AS SELECT id FROM ` + join(`"public".sessions`, S, 0)},
		{"CREATE MATERIALIZED VIEW", `CREATE MATERIALIZED VIEW mv AS SELECT id FROM sessions`,
			`CREATE MATERIALIZED VIEW mv AS SELECT id FROM ` + join(`"public".sessions`, S, 0)},
		{"CREATE POLICY subquery", `CREATE POLICY p ON sessions USING (owner IN (SELECT owner FROM sessions))`,
			`CREATE POLICY p ON sessions USING (owner IN (SELECT owner FROM ` + join("sessions", S, 0) + `))`},
		{"ALTER TABLE", `ALTER TABLE sessions ADD COLUMN x int`, ``},
		{"DROP", `DROP TABLE IF EXISTS sessions CASCADE`, ``},
		{"TRUNCATE", `TRUNCATE sessions, users`, ``},
		{"LOCK", `LOCK TABLE sessions IN ACCESS EXCLUSIVE MODE`, ``},
		{"GRANT", `GRANT SELECT ON sessions TO app`, ``},
		{"CREATE INDEX", `CREATE INDEX ON sessions (expires_at) WHERE expires_at IS NOT NULL`, ``},
		{"COMMENT", `COMMENT ON TABLE sessions IS 'ttl'`, ``},
		{"VACUUM ANALYZE", `VACUUM (ANALYZE) sessions`, ``},
		{"ANALYZE", `ANALYZE sessions (expires_at)`, ``},
		{"CREATE TRIGGER", `CREATE TRIGGER t BEFORE INSERT ON sessions FOR EACH ROW EXECUTE FUNCTION f()`, ``},
		{"CREATE TABLE LIKE", `CREATE TABLE s2 (LIKE sessions INCLUDING ALL)`, ``},
		{"CREATE TABLE PARTITION OF", `CREATE TABLE s_2024 PARTITION OF sessions FOR VALUES FROM ('2024-01-01') TO ('2025-01-01')`, ``},
		{"ALTER TABLE RENAME another column", `ALTER TABLE sessions RENAME COLUMN note TO remark`, ``},
		{"ALTER TABLE DROP another column", `ALTER TABLE sessions DROP COLUMN note`, ``},
		{"CLUSTER", `CLUSTER sessions USING sessions_pkey`, ``},
		{"REINDEX", `REINDEX TABLE sessions`, ``},
		{"CREATE FUNCTION not mentioning", `CREATE FUNCTION sessions_count() RETURNS int LANGUAGE sql AS 'SELECT 1'`, ``},
		{"SET passes", `SET search_path TO sessions`, ``},
	}
	for _, c := range cases {
		checkRewrite(t, rw, nil, c)
	}
}

func TestRewriteRejects(t *testing.T) {
	rw := newTestRewriter(t)
	cases := []rejCase{
		{"DO block", `DO $$ BEGIN PERFORM * FROM sessions; END $$`, "0A000", []string{"public.sessions", "DO", "function bodies"}},
		// DDL that leaves a TTL table under a name or shape the session's
		// catalog does not know (protect.go).
		{"ALTER TABLE RENAME", `ALTER TABLE sessions RENAME TO sessions_old`, "42501", []string{"public.sessions", "renaming"}},
		{"ALTER TABLE IF EXISTS RENAME", `ALTER TABLE IF EXISTS public.sessions RENAME TO s2`, "42501", []string{"public.sessions"}},
		{"SET SCHEMA", `ALTER TABLE sessions SET SCHEMA other`, "42501", []string{"public.sessions", "schema"}},
		{"RENAME expiry column", `ALTER TABLE sessions RENAME COLUMN expires_at TO e`, "42501", []string{"public.sessions", "expires_at"}},
		{"DROP expiry column", `ALTER TABLE sessions DROP COLUMN IF EXISTS expires_at`, "42501", []string{"expires_at"}},
		{"retype expiry column", `ALTER TABLE sessions ALTER COLUMN expires_at TYPE text`, "42501", []string{"expires_at"}},
		{"NO INHERIT", `ALTER TABLE sessions NO INHERIT base`, "42501", []string{"inheritance"}},
		{"INHERIT a TTL table", `ALTER TABLE other_t INHERIT sessions`, "42501", []string{"public.sessions", "inheritance"}},
		{"DETACH PARTITION", `ALTER TABLE sessions DETACH PARTITION s_2024`, "42501", []string{"partition"}},
		{"CREATE FUNCTION body", `CREATE FUNCTION f() RETURNS bigint LANGUAGE sql AS $$ SELECT count(*) FROM sessions $$`, "0A000", []string{"public.sessions", "CREATE FUNCTION"}},
		{"CREATE PROCEDURE body", `CREATE PROCEDURE p() LANGUAGE plpgsql AS $$ BEGIN DELETE FROM Sessions; END $$`, "0A000", []string{"public.sessions", "CREATE PROCEDURE"}},
		{"SQL-standard function body", `CREATE FUNCTION f() RETURNS bigint LANGUAGE sql BEGIN ATOMIC SELECT count(*) FROM sessions; END`, "0A000", []string{"public.sessions", "CREATE FUNCTION"}},
		{"CREATE RULE", `CREATE RULE r AS ON INSERT TO sessions DO ALSO NOTIFY x`, "0A000", []string{"public.sessions", "CREATE RULE"}},
		{"column alias list without catalog", `SELECT * FROM sessions AS s(a, b)`, "0A000", []string{"public.sessions", "column alias"}},
		{"unparseable", `SELECT * FROM sessions WHERE`, "42601", []string{"syntax error"}},
		{"unparseable quoted", `SELEC * FROM "sessions"`, "42601", []string{"syntax error"}},
		{"multi-statement with one rejection", `SELECT 1; CREATE RULE r AS ON INSERT TO sessions DO ALSO NOTIFY x; SELECT 2`, "0A000", []string{"CREATE RULE"}},
		{"too long", `SELECT * FROM sessions WHERE note = '` + strings.Repeat("x", 1<<20) + `'`, "54000", []string{"bytes"}},
		{"too deep", `SELECT * FROM sessions WHERE id = ` + strings.Repeat("(", 1001) + "1" + strings.Repeat(")", 1001), "54001", []string{"nested"}},
		{"too deep in arrays", `SELECT ARRAY` + strings.Repeat("[", 1001) + "1" + strings.Repeat("]", 1001) + ` FROM sessions`, "54001", []string{"nested"}},
		{"long left-deep chain", `SELECT ` + strings.Repeat("1+", 5000) + `1 FROM sessions`, "54001", []string{"nested"}},
		{"long chain of casts", `SELECT 1` + strings.Repeat("::int", 5000) + ` FROM sessions`, "54001", []string{"nested"}},
	}
	for _, c := range cases {
		checkReject(t, rw, nil, c)
	}
}

func TestRewriteUnparseableWithoutTTLTable(t *testing.T) {
	rw := newTestRewriter(t)
	// The needle matches only inside a string: the server gets to reject it.
	in := `SELEC 'sessions'`
	res, err := rw.Rewrite(in, nil)
	if err != nil || res.SQL != in {
		t.Fatalf("got %q, %v; want the text unchanged", res.SQL, err)
	}
}

func TestRewriteLimitsSkipQuotedText(t *testing.T) {
	rw := newTestRewriter(t)
	deep := strings.Repeat("(", 2000)
	for _, in := range []string{
		`SELECT '` + deep + `' FROM sessions`,
		`SELECT $$` + deep + `$$ FROM sessions`,
		`SELECT $t$` + deep + `$t$ FROM sessions`,
		`SELECT E'\'` + deep + `' FROM sessions`,
		`SELECT "` + deep + `" FROM sessions`,
		"SELECT 1 -- " + deep + "\nFROM sessions",
		`SELECT /* /* ` + deep + ` */ */ 1 FROM sessions`,
	} {
		if _, err := rw.Rewrite(in, nil); err != nil {
			t.Errorf("%.40s…: %v", in, err)
		}
	}
}
