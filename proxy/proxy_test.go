package proxy

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/internal/pgtest"
)

func TestRoundTrip(t *testing.T) {
	parallel(t) // owns its database and proxy
	p := startProxy(t, Config{})
	db := pgtest.NewDatabase(t)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			conn := p.connect(t, db, m.mode)
			ctx := testContext(t)
			table := "rt_" + m.name
			mustExec(t, conn, "CREATE TABLE "+table+" (id int PRIMARY KEY, note text)")
			for i := range 3 {
				mustExec(t, conn, "INSERT INTO "+table+" VALUES ($1, $2)", i, strings.Repeat("x", i))
			}
			var sum int
			if err := conn.QueryRow(ctx, "SELECT sum(id + $1::int) FROM "+table, 10).Scan(&sum); err != nil {
				t.Fatal(err)
			}
			if sum != 33 {
				t.Fatalf("sum = %d, want 33", sum)
			}
			// A large value crosses the proxy's buffers in both directions.
			big := strings.Repeat("abcdefgh", 100_000)
			var got string
			if err := conn.QueryRow(ctx, "SELECT $1::text", big).Scan(&got); err != nil || got != big {
				t.Fatalf("large value: err %v, equal %v", err, got == big)
			}
			if got := queryString(t, conn, "SELECT 'original'::text"); got != "rewritten" {
				t.Fatalf("rewritten statement returned %q", got)
			}
			if got := queryString(t, conn, "SELECT 'original'::text || $1::text", "!"); got != "rewritten!" {
				t.Fatalf("rewritten statement with a parameter returned %q", got)
			}
		})
	}
	if p.fake.callCount() == 0 {
		t.Fatal("rewriter never called")
	}
}

// TestParseKeepsNameAndParameterTypes: a rewritten Parse keeps the
// statement name and the parameter types the client gave.
func TestParseKeepsNameAndParameterTypes(t *testing.T) {
	p := startProxy(t, Config{})
	conn := p.connect(t, "postgres", pgx.QueryExecModeCacheStatement)
	ctx := testContext(t)
	sd, err := conn.PgConn().Prepare(ctx, "named", "SELECT 'original'::text || $1, $2", []uint32{25, 20})
	if err != nil {
		t.Fatal(err)
	}
	if len(sd.ParamOIDs) != 2 || sd.ParamOIDs[0] != 25 || sd.ParamOIDs[1] != 20 {
		t.Fatalf("parameter types %v", sd.ParamOIDs)
	}
	res := conn.PgConn().ExecPrepared(ctx, "named", [][]byte{[]byte("?"), []byte("42")}, nil, nil).Read()
	if res.Err != nil || len(res.Rows) != 1 || string(res.Rows[0][0]) != "rewritten?" || string(res.Rows[0][1]) != "42" {
		t.Fatalf("result %+v", res)
	}
}

func TestRejection(t *testing.T) {
	parallel(t) // owns its database and proxy
	p := startProxy(t, Config{})
	db := pgtest.NewDatabase(t)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			conn := p.connect(t, db, m.mode)
			ctx := testContext(t)

			// Outside a transaction the connection keeps working.
			_, err := conn.Exec(ctx, "SELECT * FROM reject_me")
			pe := requireCode(t, err, errRejectMe.Code)
			if pe.Message != errRejectMe.Message || pe.Detail != errRejectMe.Detail || pe.Hint != errRejectMe.Hint || pe.Severity != "ERROR" {
				t.Fatalf("rejection = %+v", pe)
			}
			if got := queryString(t, conn, "SELECT 'ok'::text"); got != "ok" {
				t.Fatalf("after rejection: %q", got)
			}

			// Inside a transaction: aborted as by a server error.
			mustExec(t, conn, "BEGIN")
			mustExec(t, conn, "SELECT 1")
			_, err = conn.Exec(ctx, "SELECT * FROM reject_me WHERE 1 = $1", 1)
			requireCode(t, err, errRejectMe.Code)
			_, err = conn.Exec(ctx, "SELECT 2")
			requireCode(t, err, "25P02")
			// A rejected statement in an aborted transaction gets what the
			// server says about any statement there.
			_, err = conn.Exec(ctx, "SELECT * FROM reject_me")
			requireCode(t, err, "25P02")
			mustExec(t, conn, "ROLLBACK")
			if conn.PgConn().TxStatus() != 'I' {
				t.Fatalf("tx status %c after ROLLBACK", conn.PgConn().TxStatus())
			}
			if got := queryString(t, conn, "SELECT 'after'::text"); got != "after" {
				t.Fatalf("after rollback: %q", got)
			}
		})
	}
}

// TestBatchRejection compares a pipelined batch holding a rejected statement
// with the same batch sent straight to the server holding a statement the
// server rejects at parse time: the outcomes must match query by query.
func TestBatchRejection(t *testing.T) {
	parallel(t) // owns its database and proxy
	p := startProxy(t, Config{})
	db := pgtest.NewDatabase(t)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			// The server rejects the whole text of a simple Query when
			// one statement in it has a syntax error, as the proxy does
			// with a rejected statement, so compare with a syntax error.
			run := func(conn *pgx.Conn, bad string, inTx bool) []string {
				ctx := testContext(t)
				b := &pgx.Batch{}
				if inTx {
					b.Queue("BEGIN")
				}
				b.Queue("SELECT 1")
				b.Queue(bad)
				b.Queue("SELECT 2")
				if inTx {
					b.Queue("COMMIT")
				}
				br := conn.SendBatch(ctx, b)
				var out []string
				for range b.Len() {
					_, err := br.Exec()
					code := pgCode(err)
					if code == "42601" {
						code = errRejectMe.Code
					}
					if err != nil && code == "" {
						code = "other: " + err.Error()
					}
					out = append(out, code)
				}
				if err := br.Close(); err != nil {
					code := pgCode(err)
					if code == "42601" {
						code = errRejectMe.Code
					}
					out = append(out, "close:"+code)
				}
				// The connection is usable and idle afterwards.
				if got := queryString(t, conn, "SELECT 'next'::text"); got != "next" {
					t.Fatalf("after batch: %q", got)
				}
				out = append(out, string(conn.PgConn().TxStatus()))
				return out
			}
			direct := connectDirect(t, db, m.mode)
			proxied := p.connect(t, db, m.mode)
			for _, inTx := range []bool{false, true} {
				want := run(direct, "SELECT * FROM no_such_table WHERE", inTx)
				got := run(proxied, "SELECT * FROM reject_me", inTx)
				if strings.Join(got, ",") != strings.Join(want, ",") {
					t.Errorf("inTx=%v: through proxy %q, direct %q", inTx, got, want)
				}
			}
		})
	}
}

func TestPanicInRewriterClosesOnlyThatClient(t *testing.T) {
	parallel(t) // owns its database and proxy
	p := startProxy(t, Config{})
	db := pgtest.NewDatabase(t)
	other := p.connect(t, db, pgx.QueryExecModeCacheStatement)
	victim := p.connect(t, db, pgx.QueryExecModeSimpleProtocol)
	_, err := victim.Exec(testContext(t), "SELECT 'panic_me'")
	requireCode(t, err, codeInternalError)
	if got := queryString(t, other, "SELECT 'still here'::text"); got != "still here" {
		t.Fatalf("other client: %q", got)
	}
	fresh := p.connect(t, db, pgx.QueryExecModeSimpleProtocol)
	mustExec(t, fresh, "SELECT 1")
}

func TestCopyRelay(t *testing.T) {
	parallel(t) // owns its database and proxy
	p := startProxy(t, Config{})
	db := pgtest.NewDatabase(t)
	conn := p.connect(t, db, pgx.QueryExecModeCacheStatement)
	ctx := testContext(t)
	mustExec(t, conn, "CREATE TABLE c (seq int, id int, note text)")

	var sb strings.Builder
	for i := range 5000 {
		fmt.Fprintf(&sb, "%d\t%s\n", i, strings.Repeat("n", i%50))
	}
	tag, err := conn.PgConn().CopyFrom(ctx, strings.NewReader(sb.String()), "COPY c (seq, note) FROM STDIN")
	if err != nil || tag.RowsAffected() != 5000 {
		t.Fatalf("COPY FROM STDIN: %v %v", tag, err)
	}
	rows := make([][]any, 3000)
	for i := range rows {
		rows[i] = []any{i, "binary"}
	}
	n, err := conn.CopyFrom(ctx, pgx.Identifier{"c"}, []string{"id", "note"}, pgx.CopyFromRows(rows))
	if err != nil || n != 3000 {
		t.Fatalf("binary COPY FROM: %d %v", n, err)
	}
	var out strings.Builder
	tag, err = conn.PgConn().CopyTo(ctx, &out, "COPY (SELECT seq, note FROM c WHERE id IS NULL ORDER BY seq) TO STDOUT")
	if err != nil || tag.RowsAffected() != 5000 || out.String() != sb.String() {
		t.Fatalf("COPY TO STDOUT: %v %v (%d bytes, want %d)", tag, err, out.Len(), sb.Len())
	}
	// A failed COPY leaves the connection usable.
	_, err = conn.PgConn().CopyFrom(ctx, strings.NewReader("not a number\n"), "COPY c (id) FROM STDIN")
	requireCode(t, err, "22P02")
	mustExec(t, conn, "SELECT 1")
}

func TestNotifyRelay(t *testing.T) {
	parallel(t) // owns its database and proxy
	p := startProxy(t, Config{})
	db := pgtest.NewDatabase(t)
	listener := p.connect(t, db, pgx.QueryExecModeCacheStatement)
	notifier := p.connect(t, db, pgx.QueryExecModeSimpleProtocol)
	mustExec(t, listener, "LISTEN ttl_channel")
	mustExec(t, notifier, "NOTIFY ttl_channel, 'hello'")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := listener.WaitForNotification(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n.Channel != "ttl_channel" || n.Payload != "hello" {
		t.Fatalf("notification %+v", n)
	}
}
