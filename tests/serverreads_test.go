package tests

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// TestServerReadFunctions: PostgreSQL's functions that read rows inside
// the server (query_to_xml, table_to_xml, schema_to_xml, database_to_xml,
// ts_stat) never return an expired row or value through the proxy: a call
// that may read a TTL table is refused with 0A000, and one that reads
// another table is served as the server answers it.
func TestServerReadFunctions(t *testing.T) {
	setup := []string{
		`CREATE TABLE srt (id int PRIMARY KEY, note text, expires_at timestamptz)`,
		`INSERT INTO srt VALUES (1, 'gone row', now() - interval '1 hour'), (2, 'kept', NULL)`,
		`CREATE TABLE src (id int PRIMARY KEY, email text, email_exp timestamptz)`,
		`INSERT INTO src VALUES (1, 'gone value', now() - interval '1 hour'), (2, 'kept', NULL)`,
		`CREATE TABLE plain (id int, v text)`,
		`INSERT INTO plain VALUES (1, 'p1')`,
	}
	rules := []ttl.Rule{
		{Table: "srt", DefaultTTL: time.Hour},
		{Table: "src", Kind: ttl.KindNone, Columns: []ttl.ColumnRule{{Column: "email", ExpiresAtColumn: "email_exp"}}},
	}
	s := newStack(t, stackOptions{setup: setup, rules: rules})
	ctx := context.Background()
	proxied := s.connect(s.proxied).PgConn()
	direct := s.connect(s.direct).PgConn()

	// Directly, each call shows what has expired: the refusal is what
	// stands between it and the client.
	for _, q := range []string{
		`SELECT query_to_xml('SELECT * FROM srt', true, false, '')`,
		`SELECT query_to_xml('select email from SRC', true, false, '')`,
		`SELECT table_to_xml('srt', true, false, '')`,
		`SELECT table_to_xml('public.src'::regclass, true, false, '')`,
		`SELECT table_to_xml_and_xmlschema('src', true, false, '')`,
		`SELECT schema_to_xml('public', true, false, '')`,
		`SELECT database_to_xml(true, false, '')`,
		`SELECT string_agg(word, ',') FROM ts_stat('SELECT to_tsvector(''simple'', email) FROM src')`,
	} {
		res, err := direct.Exec(ctx, q).ReadAll()
		if err != nil {
			t.Fatalf("directly: %s: %v", q, err)
		}
		if out := renderRow(res[0].Rows[0]); !strings.Contains(out, "gone") {
			t.Fatalf("directly: %s shows nothing expired: %s", q, out)
		}
		_, err = proxied.Exec(ctx, q).ReadAll()
		if sqlstate(err) != "0A000" || !strings.HasPrefix(errMessage(err), "ttlproxy") {
			t.Errorf("through the proxy: %s: %v, want the proxy's 0A000", q, err)
		}
	}
	for _, q := range []string{
		`SELECT query_to_xml('SELECT * FROM plain', true, false, '')`,
		`SELECT table_to_xml('plain', true, false, '')`,
	} {
		want, err := direct.Exec(ctx, q).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		got, err := proxied.Exec(ctx, q).ReadAll()
		if err != nil {
			t.Errorf("through the proxy: %s: %v", q, err)
			continue
		}
		if g, w := renderRow(got[0].Rows[0]), renderRow(want[0].Rows[0]); g != w {
			t.Errorf("through the proxy: %s: %s, directly %s", q, g, w)
		}
	}
}
