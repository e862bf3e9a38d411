package proxy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/ttlproxy/ttlproxy/internal/pgtest"
)

// transcript sends msgs on a fresh authenticated connection to connString
// and returns the backend messages received up to the expected number of
// ReadyForQuery, one short line each.
func transcript(t *testing.T, connString string, msgs []pgproto3.FrontendMessage) []string {
	t.Helper()
	ctx := testContext(t)
	pc, err := pgconn.Connect(ctx, connString)
	if err != nil {
		t.Fatal(err)
	}
	hc, err := pc.Hijack()
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Conn.Close()
	_ = hc.Conn.SetDeadline(time.Now().Add(20 * time.Second))
	fe := hc.Frontend
	wantZ := 0
	for _, m := range msgs {
		switch m.(type) {
		case *pgproto3.Query, *pgproto3.Sync:
			wantZ++
		}
		fe.Send(m)
	}
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	var out []string
	for wantZ > 0 {
		msg, err := fe.Receive()
		if err != nil {
			t.Fatalf("after %q: %v", out, err)
		}
		switch m := msg.(type) {
		case *pgproto3.ReadyForQuery:
			wantZ--
			out = append(out, "Z:"+string(m.TxStatus))
		case *pgproto3.ErrorResponse:
			code := m.Code
			if code == "42P01" {
				code = errRejectMe.Code
			}
			out = append(out, "E:"+m.Severity+":"+code)
		case *pgproto3.DataRow:
			var vals []string
			for _, v := range m.Values {
				vals = append(vals, string(v))
			}
			out = append(out, "D:"+strings.Join(vals, ","))
		case *pgproto3.CommandComplete:
			out = append(out, "C:"+string(m.CommandTag))
		case *pgproto3.ParameterStatus, *pgproto3.NoticeResponse:
		default:
			out = append(out, fmt.Sprintf("%T", msg)[len("*pgproto3."):])
		}
	}
	return out
}

// TestRejectionProtocolState replays hand-written message sequences, each
// holding a statement the server fails in parse analysis (a missing table,
// sent directly) or the proxy rejects (sent through the proxy), and requires the same answers
// message by message: same errors in the same places, same skipped
// messages, same transaction status.
func TestRejectionProtocolState(t *testing.T) {
	parallel(t) // owns its database and proxy
	p := startProxy(t, Config{})
	db := pgtest.NewDatabase(t)
	const bad = "{BAD}"
	q := func(sql string) *pgproto3.Query { return &pgproto3.Query{String: sql} }
	parse := func(name, sql string) *pgproto3.Parse { return &pgproto3.Parse{Name: name, Query: sql} }
	bind := func(stmt string) *pgproto3.Bind { return &pgproto3.Bind{PreparedStatement: stmt} }
	exec := &pgproto3.Execute{}
	sync := &pgproto3.Sync{}
	describe := &pgproto3.Describe{ObjectType: 'P'}
	scenarios := []struct {
		name string
		msgs []pgproto3.FrontendMessage
	}{
		{"simple", []pgproto3.FrontendMessage{q("SELECT 1"), q(bad), q("SELECT 2")}},
		{"simple_tx", []pgproto3.FrontendMessage{q("BEGIN"), q(bad), q("SELECT 1"), q(bad), q("ROLLBACK"), q("SELECT 3")}},
		{"simple_failed_tx", []pgproto3.FrontendMessage{q("BEGIN"), q("SELECT 1/0"), q(bad), q("ROLLBACK")}},
		{"extended", []pgproto3.FrontendMessage{
			parse("", bad), bind(""), describe, exec, sync,
			parse("", "SELECT 1"), bind(""), exec, sync,
		}},
		{"extended_named_statement", []pgproto3.FrontendMessage{
			parse("st", bad), sync,
			bind("st"), exec, sync,
			parse("st", "SELECT 4"), bind("st"), exec, sync,
		}},
		{"extended_after_error_in_batch", []pgproto3.FrontendMessage{
			parse("", "SELECT 1/0"), bind(""), exec,
			parse("", bad), bind(""), exec, sync,
			q(bad), q("SELECT 5"),
		}},
		{"extended_pipeline_several", []pgproto3.FrontendMessage{
			parse("", bad), bind(""), exec, sync,
			parse("", "SELECT 6"), bind(""), exec, sync,
			parse("", bad), bind(""), exec, sync,
			parse("", "SELECT 7"), bind(""), exec, sync,
		}},
		{"extended_tx", []pgproto3.FrontendMessage{
			q("BEGIN"),
			parse("", "SELECT 8"), bind(""), exec, sync,
			parse("", bad), bind(""), exec, sync,
			parse("", "SELECT 9"), bind(""), exec, sync,
			q("ROLLBACK"), q("SELECT 10"),
		}},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			with := func(badSQL string) []pgproto3.FrontendMessage {
				var out []pgproto3.FrontendMessage
				for _, m := range sc.msgs {
					switch m := m.(type) {
					case *pgproto3.Query:
						out = append(out, &pgproto3.Query{String: strings.ReplaceAll(m.String, bad, badSQL)})
					case *pgproto3.Parse:
						out = append(out, &pgproto3.Parse{Name: m.Name, Query: strings.ReplaceAll(m.Query, bad, badSQL)})
					default:
						out = append(out, m)
					}
				}
				return out
			}
			want := transcript(t, pgtest.Server(t).ConnString(db), with("SELECT * FROM no_such_table"))
			got := transcript(t, p.connString(t, db), with("SELECT * FROM reject_me"))
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Fatalf("through proxy:\n  %s\ndirect:\n  %s", strings.Join(got, " "), strings.Join(want, " "))
			}
			if !strings.Contains(strings.Join(want, " "), "E:ERROR:"+errRejectMe.Code) && !strings.Contains(sc.name, "failed") {
				t.Fatalf("scenario never reaches the bad statement: %s", strings.Join(want, " "))
			}
		})
	}
}
