package rewrite

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// TestServerReadFunctions: the built-in functions that read rows inside
// the server are refused when what they read may be a TTL table, and
// passed unchanged otherwise; the decision reads a literal, so a cached
// rewrite of one call never answers another.
func TestServerReadFunctions(t *testing.T) {
	rules := []ttl.Rule{
		{Table: "sessions", DefaultTTL: time.Hour},
		{Table: "cust", Kind: ttl.KindNone, Columns: []ttl.ColumnRule{{Column: "email", ExpiresAtColumn: "email_exp"}}},
	}
	cases := []struct {
		sql    string
		refuse string // a part of the message; "" passes unchanged
	}{
		{`SELECT query_to_xml('SELECT * FROM sessions', true, false, '')`, "names TTL table public.sessions"},
		{`SELECT query_to_xml('select email from CUST', true, false, '')`, "names TTL table public.cust"},
		{`SELECT query_to_xml_and_xmlschema('TABLE sessions', true, false, '')`, "names TTL table"},
		{`SELECT pg_catalog.query_to_xml('SELECT 1 FROM sessions', true, false, '')`, "names TTL table"},
		{`SELECT query_to_xml($1, true, false, '')`, "not a constant"},
		{`SELECT query_to_xml(q, true, false, '') FROM (VALUES ('SELECT 1')) v(q)`, "not a constant"},
		{`SELECT query_to_xml('SELECT query_to_xml(''SELECT 1'', true, false, '''')', true, false, '')`, "view or function"},
		{`SELECT query_to_xml('SELECT * FROM U&"sessions"', true, false, '')`, "names a name spelled with U&"},
		{`SELECT table_to_xml('sessions', true, false, '')`, "names TTL table public.sessions"},
		{`SELECT table_to_xml('public.cust'::regclass, true, false, '')`, "names TTL table public.cust"},
		{`SELECT table_to_xml_and_xmlschema('"sessions"', true, false, '')`, "names TTL table"},
		{`SELECT schema_to_xml('public', true, false, '')`, "every table"},
		{`SELECT schema_to_xml_and_xmlschema('other', true, false, '')`, "every table"},
		{`SELECT database_to_xml(true, false, '')`, "every table"},
		{`SELECT database_to_xml_and_xmlschema(true, false, '')`, "every table"},
		{`SELECT * FROM ts_stat('SELECT to_tsvector(email) FROM cust')`, "names TTL table public.cust"},
		{`SELECT ts_rewrite('a & b'::tsquery, 'SELECT t, s FROM sessions')`, "names TTL table"},
		{`SELECT x FROM other WHERE query_to_xml('SELECT 1 FROM sessions', true, false, '') IS NOT NULL`, "names TTL table"},
		{`WITH q AS (SELECT table_to_xml('sessions', true, false, '')) SELECT * FROM q`, "names TTL table"},
		{`EXPLAIN SELECT table_to_xml('sessions', true, false, '')`, "names TTL table"},
		{`SELECT * FROM dblink('dbname=app', 'SELECT note FROM sessions') AS r(note text)`, "names TTL table"},
		{`SELECT * FROM dblink('SELECT email FROM cust', false) AS r(e text)`, "names TTL table"},
		{`SELECT dblink_open('c', 'SELECT * FROM sessions')`, "names TTL table"},
		{`SELECT dblink_send_query('conn', $1)`, "not a constant"},
		// What reads no TTL table passes as it is.
		{`SELECT * FROM dblink('dbname=app', 'SELECT v FROM other', true) AS r(v text)`, ""},
		{`SELECT query_to_xml('SELECT * FROM other', true, false, '')`, ""},
		{`SELECT table_to_xml('other', true, false, '')`, ""},
		{`SELECT table_to_xml('other'::regclass, true, false, '')`, ""},
		{`SELECT * FROM ts_stat('SELECT v FROM docs_other')`, ""},
		{`SELECT ts_rewrite('a & b'::tsquery, 'a'::tsquery, 'c'::tsquery)`, ""},
		{`SELECT query_to_xmlschema('SELECT * FROM sessions', true, false, '')`, ""},
		{`SELECT cursor_to_xml('c', 10, true, false, '')`, ""},
		{`SELECT 'query_to_xml'`, ""},
	}
	for _, cacheSize := range []int{-1, 0} {
		rw, err := New(rules, Options{CacheSize: cacheSize})
		if err != nil {
			t.Fatal(err)
		}
		// Twice: the second round is answered from the cache when there is
		// one, each text after another of its shape.
		for round := range 2 {
			for _, c := range cases {
				res, err := rw.Rewrite(c.sql, nil)
				var e *Error
				switch {
				case c.refuse == "" && err != nil:
					t.Errorf("cache %d, round %d: %s: refused: %v", cacheSize, round, c.sql, err)
				case c.refuse == "" && res.SQL != c.sql:
					t.Errorf("cache %d, round %d: %s: changed to %s", cacheSize, round, c.sql, res.SQL)
				case c.refuse != "" && !errors.As(err, &e):
					t.Errorf("cache %d, round %d: %s: served as %q, want refused (%s)", cacheSize, round, c.sql, res.SQL, c.refuse)
				case c.refuse != "" && (e.Code != "0A000" || !strings.Contains(e.Message, c.refuse)):
					t.Errorf("cache %d, round %d: %s: %s %s, want 0A000 naming %q", cacheSize, round, c.sql, e.Code, e.Message, c.refuse)
				}
			}
		}
	}
}

// TestServerReadFunctionsShape: calls that differ only in the literal
// that names what they read do not share a cached answer, in either order.
func TestServerReadFunctionsShape(t *testing.T) {
	rw, err := New([]ttl.Rule{{Table: "sessions", DefaultTTL: time.Hour}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	safe := []string{`SELECT table_to_xml('other', true, false, '')`, `SELECT table_to_xml('other2', true, false, '')`, `SELECT table_to_xml('other3', true, false, '')`}
	for _, sql := range safe {
		if _, err := rw.Rewrite(sql, nil); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	for _, sql := range []string{`SELECT table_to_xml('sessions', true, false, '')`, `SELECT table_to_xml('public.sessions', true, false, '')`} {
		if res, err := rw.Rewrite(sql, nil); err == nil {
			t.Errorf("%s: served as %q after calls of its shape on other tables", sql, res.SQL)
		}
	}
	if st := rw.Stats(); st.ShapeMismatches != 0 {
		t.Errorf("ShapeMismatches = %d: the check read a literal without saying so", st.ShapeMismatches)
	}
}
