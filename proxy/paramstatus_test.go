package proxy

import (
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// reportClient is a client that sees every ParameterStatus: a pgconn
// connection taken over after its login.
type reportClient struct {
	t  *testing.T
	fe *pgproto3.Frontend
}

func newReportClient(t *testing.T, connString string) *reportClient {
	t.Helper()
	pc, err := pgconn.Connect(testContext(t), connString)
	if err != nil {
		t.Fatal(err)
	}
	hc, err := pc.Hijack()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hc.Conn.Close() })
	_ = hc.Conn.SetDeadline(time.Now().Add(time.Minute))
	return &reportClient{t: t, fe: hc.Frontend}
}

// run sends sql as a simple Query and returns the TimeZone reports among its
// answer, in order.
func (c *reportClient) run(sql string) []string {
	c.t.Helper()
	c.fe.Send(&pgproto3.Query{String: sql})
	if err := c.fe.Flush(); err != nil {
		c.t.Fatal(err)
	}
	var got []string
	for {
		msg, err := c.fe.Receive()
		if err != nil {
			c.t.Fatalf("%s: %v", sql, err)
		}
		switch m := msg.(type) {
		case *pgproto3.ParameterStatus:
			if m.Name == "TimeZone" {
				got = append(got, m.Value)
			}
		case *pgproto3.ErrorResponse:
			c.t.Fatalf("%s: %s %s", sql, m.Code, m.Message)
		case *pgproto3.ReadyForQuery:
			return got
		}
	}
}

// TestPooledParameterStatus: on a pool of one server, the reports a reset
// and an apply cause when a client moves to the server never reach it; a
// client is told of a change only when its own statement makes it.
func TestPooledParameterStatus(t *testing.T) {
	p := startPooledProxy(t, 1)
	tz := queryString(t, directConn(t, "postgres"), "SHOW TimeZone")
	a := newReportClient(t, p.connString(t, "postgres"))
	b := newReportClient(t, p.connString(t, "postgres"))
	c := p.connect(t, "postgres", pgx.QueryExecModeSimpleProtocol)
	expect := func(who string, got []string, want ...string) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Fatalf("%s was sent TimeZone %q, want %q", who, got, want)
		}
	}
	expect("A", a.run("SET TimeZone = 'Asia/Tokyo'"), "Asia/Tokyo")
	for range 3 {
		// C takes the server: reset to the login's TimeZone, then its own.
		mustExec(t, c, "SET TimeZone = 'Europe/Berlin'")
		// A takes it: reset (the login's), apply (Tokyo): A is told nothing.
		expect("A moving to the server", a.run("SELECT 1"))
		// B, at the login's settings, takes it: the reset's report is B's view.
		expect("B moving to the server", b.run("SELECT 1"))
	}
	expect("A", a.run("RESET TimeZone"), tz)
	expect("A", a.run("SELECT 1"))
	expect("B", b.run("SET TimeZone = 'America/Lima'"), "America/Lima")
	expect("A", a.run("SELECT 1"))
}
