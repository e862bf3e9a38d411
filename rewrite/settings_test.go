package rewrite

import (
	"testing"

	"github.com/ttlproxy/ttlproxy/ttl"
)

func TestRewriteTTLSettingRejected(t *testing.T) {
	rw := newTestRewriter(t)
	bad := func(v string) []string { return []string{`invalid value for ttlproxy.ttl: "` + v + `"`} }
	cases := []rejCase{
		{"SET =", `SET ttlproxy.ttl = '3 parsecs'`, "22023", []string{`ttlproxy: invalid value for ttlproxy.ttl: "3 parsecs": unknown unit "parsecs"`}},
		{"SET SESSION TO", `SET SESSION ttlproxy.ttl TO '1 month'`, "22023", append(bad("1 month"), "no fixed length")},
		{"SET LOCAL", `set local ttlproxy.ttl = 'abc'`, "22023", bad("abc")},
		{"unquoted word", `SET ttlproxy.ttl TO forever`, "22023", bad("forever")},
		{"quoted parts", `SET "ttlproxy"."ttl" = 'x'`, "22023", bad("x")},
		{"one quoted name", `SET "ttlproxy.ttl" = 'x'`, "22023", bad("x")},
		{"spaced name", `SET ttlproxy . ttl = 'x'`, "22023", bad("x")},
		{"upper case", `SET TTLPROXY.TTL = 'x'`, "22023", bad("x")},
		{"negative number", `SET ttlproxy.ttl = -5`, "22023", append(bad("-5"), "negative")},
		{"negative interval", `SET ttlproxy.ttl = '-1h'`, "22023", bad("-1h")},
		{"on", `SET ttlproxy.ttl = on`, "22023", bad("on")},
		{"two values", `SET ttlproxy.ttl = '1h', '2h'`, "22023", []string{"only one value"}},
		{"set_config", `SELECT set_config('ttlproxy.ttl', '3 parsecs', false)`, "22023", bad("3 parsecs")},
		{"qualified set_config, cast", `SELECT pg_catalog.set_config('TTLPROXY.TTL', '1 year'::text, true)`, "22023", bad("1 year")},
		{"named arguments", `SELECT set_config(new_value => 'x', setting_name => 'ttlproxy.ttl', is_local => false)`, "22023", bad("x")},
		{"set_config in FROM", `SELECT * FROM set_config('ttlproxy.ttl', 'soon', false)`, "22023", bad("soon")},
		{"ALTER ROLE", `ALTER ROLE app SET ttlproxy.ttl = 'x'`, "22023", bad("x")},
		{"ALTER DATABASE", `ALTER DATABASE app SET ttlproxy.ttl TO 'x'`, "22023", bad("x")},
		{"function SET clause", `CREATE FUNCTION f() RETURNS int LANGUAGE sql SET ttlproxy.ttl = 'x' AS 'SELECT 1'`, "22023", bad("x")},
		{"later statement", `SELECT 1; SET ttlproxy.ttl = 'bad'`, "22023", bad("bad")},
		{"with a TTL table", `SELECT * FROM sessions; SET ttlproxy.ttl = 'bad'`, "22023", bad("bad")},
	}
	for _, c := range cases {
		checkReject(t, rw, nil, c)
	}
	checkReject(t, rw, NewState(Session{Bypass: true}), rejCase{"bypass session", `SET ttlproxy.ttl = 'bad'`, "22023", bad("bad")})
	// The cache holds rejections too.
	checkReject(t, rw, nil, cases[0])
}

func TestRewriteTTLSettingAccepted(t *testing.T) {
	rw := newTestRewriter(t)
	for _, in := range []string{
		`SET ttlproxy.ttl = '10 minutes'`,
		`SET LOCAL ttlproxy.ttl TO '1h'`,
		`SET SESSION "ttlproxy"."ttl" = '00:10:00'`,
		`SET ttlproxy.ttl = 600`,
		`SET ttlproxy.ttl = 1.5`,
		`SET ttlproxy.ttl = ''`,
		`SET ttlproxy.ttl = 0`,
		`SET ttlproxy.ttl TO DEFAULT`,
		`SET ttlproxy.ttl = DEFAULT`,
		`SET ttlproxy.ttl FROM CURRENT`,
		`RESET ttlproxy.ttl`,
		`SELECT current_setting('ttlproxy.ttl', true)`,
		`SELECT set_config('ttlproxy.ttl', '7d', false)`,
		`SELECT set_config('ttlproxy.ttl', $1, false)`,
		`SELECT set_config('ttlproxy.ttl', NULL, false)`,
		`SELECT set_config('ttlproxy.other', 'x', false)`,
		`SELECT app.set_config('ttlproxy.ttl', 'x', false)`,
		`SELECT 'SET ttlproxy.ttl = bad'`,
		`SET ttlproxy.ttl =`, // the server rejects it
		`ALTER ROLE app RESET ttlproxy.ttl`,
		`SET "ttlproxy.other" = 'x'`,
	} {
		res, err := rw.Rewrite(in, nil)
		if err != nil || res.SQL != in || res.Rewritten {
			t.Errorf("%s: got %q, %v; want it unchanged", in, res.SQL, err)
		}
		if !res.Parsed {
			t.Errorf("%s: not checked", in)
		}
	}
	for _, in := range []string{`SET statement_timeout = 0`, `SELECT set_config('search_path', 'x', false)`, `SHOW search_path`} {
		if res, err := rw.Rewrite(in, nil); err != nil || res.SQL != in || res.Parsed {
			t.Errorf("%s: got %q, parsed %v, %v; want it passed unparsed", in, res.SQL, res.Parsed, err)
		}
	}
	// A statement naming a TTL table still gets its own rewrite.
	checkRewrite(t, rw, nil, rwCase{"SET LOCAL then a read in another query",
		`SELECT current_setting('ttlproxy.ttl'), id FROM sessions`,
		`SELECT current_setting('ttlproxy.ttl'), id FROM ` + join(`"public".sessions`, `"sessions"`, 0)})
	// Without rules the setting means nothing and nothing is parsed.
	none, err := New(nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := none.Rewrite(`SET ttlproxy.ttl = 'bad'`, nil); err != nil || res.Parsed {
		t.Errorf("no rules: got %+v, %v", res, err)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = rw.Rewrite(`SET statement_timeout = 1000`, nil) }); n != 0 {
		t.Errorf("fast path allocates %v times per call", n)
	}
}

// SHOW ttlproxy.ttl works before anything set it: it reads the setting with
// current_setting(…, true) instead of failing with 42704.
func TestRewriteShowTTLSetting(t *testing.T) {
	rw := newTestRewriter(t)
	const q = `SELECT COALESCE(pg_catalog.current_setting('ttlproxy.ttl', true), '') AS "ttlproxy.ttl"`
	for _, s := range []*State{nil, NewState(Session{Bypass: true})} {
		for _, c := range []rwCase{
			{"SHOW", `SHOW ttlproxy.ttl`, q},
			{"upper case", `show TTLPROXY.TTL`, q},
			{"in a list", `SELECT 1; SHOW ttlproxy.ttl; SELECT 2`, `SELECT 1; ` + q + `; SELECT 2`},
			{"next to a TTL read", `SHOW ttlproxy.ttl; SELECT id FROM sessions`, ""},
			{"other settings", `SHOW search_path`, ""},
		} {
			if c.name == "next to a TTL read" {
				if s != nil {
					continue
				}
				c.out = q + `; SELECT id FROM ("public".sessions JOIN (SELECT) AS _ttl_0 ON ` +
					(&ttl.Rule{Table: "sessions"}).LiveCondition(`"sessions"`, ttl.Now) + `)`
			}
			checkRewrite(t, rw, s, c)
		}
	}
}

// A session whose ttlproxy.ttl the proxy could not read (set where it could
// not be checked) stamps nothing: statements that would stamp are rejected,
// the others are rewritten as usual.
func TestRewriteInvalidSessionTTL(t *testing.T) {
	rw := newTestRewriter(t)
	s := NewState(Session{TTLInvalid: "3 parsecs"})
	checkReject(t, rw, s, rejCase{"stamping INSERT", `INSERT INTO sessions (id) VALUES (1)`, "22023",
		[]string{"public.sessions", `"3 parsecs"`}})
	checkRewrite(t, rw, s, rwCase{"INSERT that gives the expiry", `INSERT INTO sessions (id, expires_at) VALUES (1, NULL)`, `INSERT INTO "public".sessions (id, expires_at) VALUES (1, NULL)`})
	if _, err := rw.Rewrite(`SELECT id FROM sessions`, s); err != nil {
		t.Errorf("a read in a session with an invalid ttlproxy.ttl: %v", err)
	}
	// The invalid value is part of the cache key: a valid session is not
	// answered with the rejection.
	if _, err := rw.Rewrite(`INSERT INTO sessions (id) VALUES (1)`, nil); err != nil {
		t.Errorf("stamping INSERT in a valid session after a rejected one: %v", err)
	}
}
