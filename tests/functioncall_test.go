package tests

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// TestFunctionCallProtocol: a FunctionCall message runs a function by OID
// with no SQL text to check, so with TTL rules the proxy refuses it (0A000)
// but for the large-object functions libpq's lo_* calls use.
func TestFunctionCallProtocol(t *testing.T) {
	setup := []string{
		`CREATE TABLE fct (id int PRIMARY KEY, note text, expires_at timestamptz)`,
		`INSERT INTO fct VALUES (1, 'gone row', now() - interval '1 hour'), (2, 'kept', NULL)`,
	}
	s := newStack(t, stackOptions{setup: setup, rules: []ttl.Rule{{Table: "fct"}}})
	ctx := context.Background()

	// The large-object functions by their fixed OIDs (proxy/functioncall.go).
	var got []int
	rows, err := s.connect(s.direct).Query(ctx, `SELECT oid::int FROM pg_proc WHERE proname IN ('lo_create', 'lo_open', 'lo_close',
		'loread', 'lowrite', 'lo_lseek', 'lo_creat', 'lo_tell', 'lo_unlink', 'lo_truncate', 'lo_lseek64', 'lo_tell64', 'lo_truncate64')
		AND pronamespace = 'pg_catalog'::regnamespace ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var oid int
		if err := rows.Scan(&oid); err != nil {
			t.Fatal(err)
		}
		got = append(got, oid)
	}
	if want := []int{715, 952, 953, 954, 955, 956, 957, 958, 964, 1004, 3170, 3171, 3172}; !slices.Equal(got, want) {
		t.Fatalf("large-object function OIDs %v, the proxy lets through %v", got, want)
	}

	var queryToXML uint32
	if err := s.connect(s.direct).QueryRow(ctx, `SELECT 'query_to_xml(text,bool,bool,text)'::regprocedure::oid`).Scan(&queryToXML); err != nil {
		t.Fatal(err)
	}
	call := func(connString string, oid uint32, args ...string) (string, *pgproto3.ErrorResponse) {
		t.Helper()
		c := s.connect(connString).PgConn()
		fc := &pgproto3.FunctionCall{Function: oid, ArgFormatCodes: []uint16{0}}
		for _, a := range args {
			fc.Arguments = append(fc.Arguments, []byte(a))
		}
		return functionCall(t, c, fc)
	}
	// Directly the call shows the expired row; through the proxy it is
	// refused, and the session goes on.
	if out, e := call(s.direct, queryToXML, "SELECT * FROM fct", "t", "f", ""); e != nil || !strings.Contains(out, "gone row") {
		t.Fatalf("directly: %q, %v", out, e)
	}
	if out, e := call(s.proxied, queryToXML, "SELECT * FROM fct", "t", "f", ""); e == nil || e.Code != "0A000" || !strings.HasPrefix(e.Message, "ttlproxy") {
		t.Errorf("through the proxy: %q, %v; want the proxy's 0A000", out, e)
	}
	// lo_creat(-1), then lo_unlink of the new object.
	oid, e := call(s.proxied, 957, "-1")
	if e != nil {
		t.Fatalf("lo_creat through the proxy: %v", e)
	}
	n, err := strconv.ParseUint(oid, 10, 32)
	if err != nil {
		t.Fatalf("lo_creat returned %q", oid)
	}
	if out, e := call(s.proxied, 964, strconv.FormatUint(n, 10)); e != nil || out != "1" {
		t.Errorf("lo_unlink through the proxy: %q, %v", out, e)
	}
}

// functionCall sends fc on c and returns the result as text, or the
// ErrorResponse, reading up to ReadyForQuery.
func functionCall(t *testing.T, c *pgconn.PgConn, fc *pgproto3.FunctionCall) (string, *pgproto3.ErrorResponse) {
	t.Helper()
	fe := c.Frontend()
	fe.Send(fc)
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	var out string
	var fail *pgproto3.ErrorResponse
	for {
		msg, err := fe.Receive()
		if err != nil {
			t.Fatal(err)
		}
		switch m := msg.(type) {
		case *pgproto3.FunctionCallResponse:
			out = string(m.Result)
		case *pgproto3.ErrorResponse:
			e := *m
			fail = &e
		case *pgproto3.ReadyForQuery:
			return out, fail
		}
	}
}
