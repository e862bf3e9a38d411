package proxy

import "testing"

func TestPinReason(t *testing.T) {
	for _, c := range []struct{ sql, want string }{
		{"SELECT 1", ""},
		{"UPDATE t SET x = 1", ""},
		{"ALTER TABLE t SET (fillfactor = 50)", ""},
		{"SELECT 'set' AS set", ""},
		{"SET LOCAL statement_timeout = 0", ""},
		{"set transaction isolation level serializable", ""},
		{"SET CONSTRAINTS ALL DEFERRED", ""},
		{"BEGIN; SET LOCAL search_path = x; COMMIT", ""},
		{"PREPARE TRANSACTION 'x'", ""},
		{"SELECT * FROM temp_readings", ""},
		{"SELECT pg_advisory_xact_lock(1)", pinAdvisoryLock}, // errs toward a pin
		{"SET statement_timeout = 0", pinSet},
		{"  /* x */ -- y\n  sEt search_path = a", pinSet},
		{"SELECT 1; SET x.y = 1", pinSet},
		{"SET", pinSet},
		{"SET;", pinSet},
		{"SET SESSION AUTHORIZATION x", pinSet},
		{"SET ROLE x", pinSet},
		{"RESET ALL", pinSet},
		{"DISCARD ALL", pinSet},
		{"SELECT set_config('a.b', 'c', false)", pinSet},
		{"SELECT pg_catalog.SET_CONFIG('a.b', 'c', false)", pinSet},
		{"CREATE TEMP TABLE x (a int)", pinTemp},
		{"CREATE TEMPORARY VIEW v AS SELECT 1", pinTemp},
		{"SELECT 1 INTO TEMP x", pinTemp},
		{"CREATE TABLE pg_temp.x (a int)", pinTemp},
		{"SELECT pg_advisory_lock(1)", pinAdvisoryLock},
		{"SELECT pg_try_advisory_lock_shared(1)", pinAdvisoryLock},
		{"LISTEN ch", pinListen},
		{"DECLARE c CURSOR WITH HOLD FOR SELECT 1", pinHoldCursor},
		{"PREPARE p AS SELECT 1", pinSQLPrepare},
		{"PREPARE", pinSQLPrepare},
		{"LOAD 'auto_explain'", pinLoad},
		{"SELECT dblink_connect('c', 'dbname=x')", pinExtensionConn},
	} {
		if got := pinReason(c.sql); got != c.want {
			t.Errorf("pinReason(%q) = %q, want %q", c.sql, got, c.want)
		}
	}
}

func BenchmarkPinReason(b *testing.B) {
	sql := "SELECT aid, bid, abalance, filler FROM pgbench_accounts WHERE aid = $1 AND bid > 0 ORDER BY aid LIMIT 10"
	for b.Loop() {
		if pinReason(sql) != "" {
			b.Fatal("pinned")
		}
	}
}
