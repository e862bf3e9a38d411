package proxy

import (
	"slices"
	"testing"
)

func TestScanStatement(t *testing.T) {
	for _, c := range []struct {
		sql      string
		pin      string
		settings bool
		custom   []string
	}{
		{"SELECT 1", "", false, nil},
		{"UPDATE t SET x = 1", "", false, nil},
		{"ALTER TABLE t SET (fillfactor = 50)", "", false, nil},
		{"SELECT 'set' AS set", "", false, nil},
		{"SET LOCAL statement_timeout = 0", "", false, nil},
		{"SET LOCAL app.tenant = 1", "", false, nil},
		{"set transaction isolation level serializable", "", false, nil},
		{"SET CONSTRAINTS ALL DEFERRED", "", false, nil},
		{"BEGIN; SET LOCAL search_path = x; COMMIT", "", false, nil},
		{"PREPARE TRANSACTION 'x'", "", false, nil},
		{"SELECT * FROM temp_readings", "", false, nil},
		{"SET statement_timeout = 0", "", true, nil},
		{"  /* x */ -- y\n  sEt search_path = a", "", true, nil},
		{`SET search_path = "$user", public`, "", true, nil},
		{"SELECT 1; SET App.Tenant = 1", "", true, []string{"app.tenant"}},
		{"SET SESSION app.x TO 'y'", "", true, []string{"app.x"}},
		{"SET ttlproxy.ttl = '1 hour'", "", true, []string{"ttlproxy.ttl"}},
		{"RESET app.x", "", true, []string{"app.x"}},
		{"SET ROLE x", "", true, nil},
		{"SET TIME ZONE 'UTC'", "", true, nil},
		{"SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY", "", true, nil},
		{"RESET ALL", "", true, nil},
		{"DISCARD ALL", "", true, nil},
		{"DISCARD TEMP", "", true, nil},
		{"discard temporary; SELECT 1", "", true, nil},
		{"SELECT set_config('app.b', 'c', false)", "", true, []string{"app.b"}},
		{"SELECT pg_catalog.SET_CONFIG ( 'Work_Mem', '8MB', false)", "", true, nil},
		{"SELECT set_config('a.x', '1', false), set_config('b.y', '2', false)", "", true, []string{"a.x", "b.y"}},
		{"SET x.y = 1; LISTEN ch", pinListen, true, []string{"x.y"}},
		{"CREATE TEMP TABLE t (a int); SELECT set_config('app.z', '1', false)", pinTemp, true, []string{"app.z"}},
		{"LISTEN a; SELECT pg_advisory_lock(1); LOAD 'x'", pinLoad, false, nil}, // for life wins
		{"SELECT set_config($1, 'c', false)", pinSettings, false, nil},
		{"SELECT set_config('it''s', 'c', false)", pinSettings, false, nil},
		{`SET "app"."x" = 1`, pinSettings, false, nil},
		{"SET", pinSettings, false, nil},
		{"SET;", pinSettings, false, nil},
		{"SET SESSION AUTHORIZATION x", pinSessionAuth, false, nil},
		{"RESET SESSION AUTHORIZATION", pinSessionAuth, false, nil},
		{"SELECT set_config('session_authorization', 'x', false)", pinSessionAuth, false, nil},
		{"CREATE TEMP TABLE x (a int)", pinTemp, false, nil},
		{"CREATE TEMPORARY VIEW v AS SELECT 1", pinTemp, false, nil},
		{"SELECT 1 INTO TEMP x", pinTemp, false, nil},
		{"CREATE TABLE pg_temp.x (a int)", pinTemp, false, nil},
		{"SELECT pg_advisory_lock(1)", pinAdvisoryLock, false, nil},
		{"SELECT pg_advisory_xact_lock(1)", "", false, nil}, // released by the transaction's end
		{"SELECT pg_try_advisory_xact_lock_shared(1)", "", false, nil},
		{"SELECT my_advisory_helper(1)", pinAdvisoryLock, false, nil}, // errs toward a pin
		{"SELECT pg_try_advisory_lock_shared(1)", pinAdvisoryLock, false, nil},
		{"LISTEN ch", pinListen, false, nil},
		{"DECLARE c CURSOR WITH HOLD FOR SELECT 1", pinHoldCursor, false, nil},
		{"PREPARE p AS SELECT 1", pinSQLPrepare, false, nil},
		{"PREPARE", pinSettings, false, nil},
		{"LOAD 'auto_explain'", pinLoad, false, nil},
		{"SELECT dblink_connect('c', 'dbname=x')", pinExtensionConn, false, nil},
		// Literals, comments and quoted names are not words of the statement.
		{"SELECT * FROM t WHERE v = 'on hold'", "", false, nil},
		{"SELECT 'temporary', $$LISTEN x$$, E'it\\'s temp', 'a; SET x.y = 1'", "", false, nil},
		{`SELECT "temp", "hold" FROM t`, "", false, nil},
		{"SET application_name = 'a; LISTEN ch; LOAD x'", "", true, nil},
		{"/* /* nested */ CREATE TEMP TABLE x (a int) */ SELECT 1", "", false, nil},
		{"SELECT '--'; CREATE TEMP TABLE x (a int)", pinTemp, false, nil},
		{"SELECT '/*'; SET app.x = 1; SELECT '*/'", "", true, []string{"app.x"}},
		// Keywords only where the grammar takes them.
		{"SELECT temp, hold, advisory_note FROM readings", "", false, nil},
		{"DECLARE c CURSOR WITHOUT HOLD FOR SELECT 1", "", false, nil},
		{"CREATE OR REPLACE TEMP VIEW v AS SELECT 1", pinTemp, false, nil},
		{"CREATE LOCAL TEMPORARY TABLE x (a int)", pinTemp, false, nil},
		{"CREATE GLOBAL TEMP TABLE x (a int)", pinTemp, false, nil},
		{"SELECT 1 INTO TEMPORARY TABLE x", pinTemp, false, nil},
		{"CREATE /* c */ TEMP TABLE x (a int)", pinTemp, false, nil},
		{`SELECT "pg_advisory_lock"(1)`, pinAdvisoryLock, false, nil},
		{"SELECT pg_catalog.pg_advisory_lock /* c */ (1)", pinAdvisoryLock, false, nil},
		{`SELECT * FROM "pg_temp".x`, pinTemp, false, nil},
		{`SELECT "set_config"('app.q', '1', false)`, "", true, []string{"app.q"}},
		// A DO block's body is code: its words count, literals and all.
		{"DO $$BEGIN CREATE TEMP TABLE x (a int); END$$", pinTemp, false, nil},
		{"DO 'BEGIN PERFORM pg_advisory_lock(1); END'", pinAdvisoryLock, false, nil},
		{"DO LANGUAGE plpgsql $b$BEGIN PERFORM set_config('app.d', '1', false); END$b$", "", true, []string{"app.d"}},
		{"DO $$BEGIN PERFORM dblink_connect('c', 'x'); END$$; SET app.y = 1", pinExtensionConn, false, nil},
		{"DO $$BEGIN NULL; END$$; SELECT 'temp'", "", false, nil},
		// So is the query text a built-in runs.
		{"SELECT query_to_xml('SELECT pg_advisory_lock(1)', true, true, '')", pinAdvisoryLock, false, nil},
		{"SELECT * FROM ts_stat($q$SELECT set_config('app.t', '1', false)::tsvector$q$)", "", true, []string{"app.t"}},
		// Text the token reader cannot read is scanned by words.
		{"SELECT U&'temp'", pinTemp, false, nil},
		{"SELECT 'unterminated hold", pinHoldCursor, false, nil},
	} {
		got, _ := scanStatement(c.sql, false, nil)
		if got.pin != c.pin || got.settings != c.settings || !slices.Equal(got.custom, c.custom) {
			t.Errorf("scanStatement(%q) = %+v, want pin %q settings %v custom %v", c.sql, got, c.pin, c.settings, c.custom)
		}
	}
}

// TestScanStatementBackslash: while the server reads backslashes in
// ordinary strings as escapes, a text whose reading depends on it is
// scanned by words: the CREATE TEMP that the server sees outside a literal
// is seen.
func TestScanStatementBackslash(t *testing.T) {
	sql := `SELECT 'a\' AS x, ' ; CREATE TEMP TABLE t (a int); SELECT '`
	if got, _ := scanStatement(sql, false, nil); got.pin != "" {
		t.Errorf("standard_conforming_strings on: pin %q, want none", got.pin)
	}
	if got, _ := scanStatement(sql, true, nil); got.pin != pinTemp {
		t.Errorf("standard_conforming_strings off: pin %q, want %q", got.pin, pinTemp)
	}
}

func BenchmarkScanStatement(b *testing.B) {
	for _, c := range []struct{ name, sql string }{
		{"parameters", "SELECT aid, bid, abalance, filler FROM pgbench_accounts WHERE aid = $1 AND bid > 0 ORDER BY aid LIMIT 10"},
		{"literals", "SELECT id, status FROM orders WHERE status = 'on hold' AND region = 'temporary' ORDER BY id LIMIT 10"},
	} {
		b.Run(c.name, func(b *testing.B) {
			var spans []int
			b.ReportAllocs()
			for b.Loop() {
				var sc statementScan
				if sc, spans = scanStatement(c.sql, false, spans); sc.pin != "" || sc.settings {
					b.Fatal("pinned")
				}
			}
		})
	}
}
