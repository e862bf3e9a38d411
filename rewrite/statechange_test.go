package rewrite

import (
	"testing"
)

func TestSessionStateMayChange(t *testing.T) {
	for _, c := range []struct {
		in   string
		want bool
	}{
		{`SET search_path TO app, public`, true},
		{`set LOCAL Search_Path = app`, true},
		{`SET "search_path" = app`, true},
		{`SELECT pg_catalog.set_config('search_path', 'app', false)`, true},
		{`SELECT SET_CONFIG($1, $2, true)`, true},
		{`SET ttlproxy.ttl = '10min'`, true},
		{`SET "ttlproxy"."ttl" = '1h'`, true},
		{`RESET ALL`, true},
		{`reset ttlproxy.ttl`, true},
		{`DISCARD ALL`, true},
		{`ROLLBACK TO SAVEPOINT a`, true},
		{`SET U&"search\005fpath" = app`, true},
		{`SET ROLE alice`, true},
		{`set session role alice`, true},
		{`SET LOCAL ROLE NONE`, true},
		{`SET "role" = 'alice'`, true},
		{`RESET ROLE`, true},
		{`SET SESSION AUTHORIZATION bob`, true},
		{`SET session_authorization = bob`, true},
		{`SET SCHEMA 'app'`, true},
		{`CREATE TEMP TABLE t (id int)`, true},
		{`create temporary view v as select 1`, true},
		{`CREATE GLOBAL TEMPORARY TABLE t ()`, true},
		{`CREATE LOCAL TEMP TABLE t ()`, true},
		{`CREATE OR REPLACE TEMP VIEW v AS SELECT 1`, true},
		{`CREATE /* a note */ TEMP TABLE t ()`, true},
		{"CREATE -- a note\nTEMP TABLE t ()", true},
		{`SELECT 1 INTO TEMP t`, true},
		{`SELECT * INTO TEMPORARY TABLE t FROM u`, true},
		{`CREATE TABLE pg_temp.t (id int)`, true},
		{`SELECT * FROM pg_temp_3.t`, true},
		{`DISCARD TEMP`, true},
		{`UPDATE users SET role = 'admin'`, true}, // errs toward true
		{`SELECT role, schema FROM users`, false},
		{`CREATE TABLE temp (id int)`, false},
		{`SELECT temp FROM readings`, false},
		{`CREATE TABLE t (temporary int)`, false},
		{`SELECT * FROM sessions WHERE id = $1`, false},
		{`SET statement_timeout = 1000`, false},
		{`BEGIN`, false},
		{``, false},
	} {
		if got := SessionStateMayChange(c.in); got != c.want {
			t.Errorf("SessionStateMayChange(%q) = %v, want %v", c.in, got, c.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() {
		SessionStateMayChange(`SELECT a, b FROM users WHERE id = $1 ORDER BY created_at`)
		SessionStateMayChange(`CREATE /* x */ TEMP TABLE t (role int); -- set role`)
	}); n != 0 {
		t.Errorf("allocates %v times per call", n)
	}
}
