package proxy

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ttlproxy/ttlproxy/internal/pgtest"
	"github.com/ttlproxy/ttlproxy/internal/wire"
)

// TestMaxClientConnections: a client beyond max_client_connections is
// refused at startup with 53300, and a freed slot serves again.
func TestMaxClientConnections(t *testing.T) {
	parallel(t) // owns its database and proxy
	db := pgtest.NewDatabase(t)
	p := startProxy(t, Config{MaxClientConnections: 2})
	c1 := p.connect(t, db, pgx.QueryExecModeSimpleProtocol)
	p.connect(t, db, pgx.QueryExecModeSimpleProtocol)
	cfg, err := pgx.ParseConfig(p.connString(t, db))
	if err != nil {
		t.Fatal(err)
	}
	if c, err := pgx.ConnectConfig(testContext(t), cfg); err == nil || pgCode(err) != codeTooManyConnections {
		if c != nil {
			c.Close(testContext(t))
		}
		t.Fatalf("third client: %v, want SQLSTATE %s", err, codeTooManyConnections)
	}
	if got := testutil.ToFloat64(p.srv.metrics.Refused); got != 1 {
		t.Errorf("refused metric %v, want 1", got)
	}
	if err := c1.Close(testContext(t)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := pgx.ConnectConfig(testContext(t), cfg)
		if err == nil {
			c.Close(testContext(t))
			break
		}
		if pgCode(err) != codeTooManyConnections || time.Now().After(deadline) {
			t.Fatalf("after a client left: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestIdleSessionTimeout: a client idle outside a transaction block for
// longer than IdleSessionTimeout is closed with 57P05; one idle inside a
// transaction block is not.
func TestIdleSessionTimeout(t *testing.T) {
	parallel(t) // owns its database and proxy
	db := pgtest.NewDatabase(t)
	p := startProxy(t, Config{IdleSessionTimeout: 300 * time.Millisecond})
	for i, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			inTx := p.connect(t, db, m.mode)
			mustExec(t, inTx, "BEGIN")
			idle := p.connect(t, db, m.mode)
			mustExec(t, idle, "SELECT 1")
			// Any statement would reset the idle clock: wait, without
			// one, until the proxy counts the idle client's timeout.
			waitCount(t, p.srv.metrics.IdleTimeouts, i+1, "idle timeout")
			if _, err := idle.Exec(testContext(t), "SELECT 1"); err == nil {
				t.Fatal("an idle client was not closed")
			} else if code := pgCode(err); code != "" && code != codeIdleSessionTimeout {
				t.Fatalf("idle client: %v, want SQLSTATE %s or a closed connection", err, codeIdleSessionTimeout)
			}
			mustExec(t, inTx, "SELECT 1")
			mustExec(t, inTx, "COMMIT")
		})
	}
	if got := testutil.ToFloat64(p.srv.metrics.IdleTimeouts); got != float64(len(modes)) {
		t.Errorf("idle timeout metric %v, want %d", got, len(modes))
	}
}

// waitCount waits up to 10 s for counter c to reach want, without a
// statement of its own (any statement would reset an idle clock).
func waitCount(t *testing.T, c prometheus.Counter, want int, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(c) < float64(want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 10s (metric %v, want %d)", what, testutil.ToFloat64(c), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestIdleTransactionTimeout: a client idle inside a transaction block for
// longer than IdleTransactionTimeout is closed with 25P03 and its
// transaction rolls back; a client idle outside one, or in a block but
// busy, is not.
func TestIdleTransactionTimeout(t *testing.T) {
	parallel(t) // owns its database and proxy
	db := pgtest.NewDatabase(t)
	execDirect(t, db, "CREATE TABLE idle_tx (id int)")
	p := startProxy(t, Config{IdleTransactionTimeout: 300 * time.Millisecond})
	for i, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			idle := p.connect(t, db, m.mode)
			mustExec(t, idle, "SELECT 1")
			inTx := p.connect(t, db, m.mode)
			mustExec(t, inTx, "BEGIN")
			mustExec(t, inTx, "INSERT INTO idle_tx VALUES (1)")
			busy := p.connect(t, db, m.mode)
			mustExec(t, busy, "BEGIN")
			done := make(chan error, 1)
			go func() {
				_, err := busy.Exec(context.Background(), "SELECT pg_sleep(1)")
				done <- err
			}()
			waitCount(t, p.srv.metrics.IdleTxTimeouts, i+1, "idle-in-transaction timeout")
			if _, err := inTx.Exec(testContext(t), "COMMIT"); err == nil {
				t.Fatal("a client idle in a transaction was not closed")
			} else if code := pgCode(err); code != "" && code != codeIdleInTxTimeout {
				t.Fatalf("idle client: %v, want SQLSTATE %s or a closed connection", err, codeIdleInTxTimeout)
			}
			if err := <-done; err != nil {
				t.Fatalf("a busy client in a block: %v", err)
			}
			mustExec(t, busy, "COMMIT")
			mustExec(t, idle, "SELECT 1")
			if n := queryString(t, directConn(t, db), "SELECT count(*) FROM idle_tx"); n != "0" {
				t.Fatalf("%s rows of the timed-out transaction committed", n)
			}
		})
	}
	if got := testutil.ToFloat64(p.srv.metrics.IdleTxTimeouts); got != float64(len(modes)) {
		t.Errorf("idle-in-transaction timeout metric %v, want %d", got, len(modes))
	}
}

// TestClientLoginTimeout: a client that does not finish its startup within
// ClientLoginTimeout is disconnected.
func TestClientLoginTimeout(t *testing.T) {
	parallel(t) // owns its proxy
	p := startProxy(t, Config{ClientLoginTimeout: 300 * time.Millisecond})
	conn, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	var b [1]byte
	if _, err := conn.Read(b[:]); err == nil {
		t.Fatal("read a byte from a proxy that should have hung up")
	} else if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the proxy kept a client that never logged in")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("closed after %v", d)
	}
	deadline := time.Now().Add(5 * time.Second)
	for testutil.ToFloat64(p.srv.metrics.LoginTimeouts) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("login timeout metric %v, want 1", testutil.ToFloat64(p.srv.metrics.LoginTimeouts))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestIdleSweepLateDeadline: the idle sweep may set a client's read deadline
// just as the session becomes busy again; such a deadline is taken back and
// the session goes on, also when it lands in the middle of a message larger
// than the read buffer. A client that logs in and sends nothing is closed
// once idle, as the server's idle_session_timeout does.
func TestIdleSweepLateDeadline(t *testing.T) {
	parallel(t) // owns its database and proxy
	db := pgtest.NewDatabase(t)
	p := startProxy(t, Config{IdleSessionTimeout: time.Hour})
	conn := p.connect(t, db, pgx.QueryExecModeSimpleProtocol)
	mustExec(t, conn, "SELECT 1")
	var sess *clientConn
	p.srv.mu.Lock()
	for s := range p.srv.sessions {
		sess = s
	}
	p.srv.mu.Unlock()
	if sess == nil {
		t.Fatal("no session")
	}
	big := "SELECT length('" + strings.Repeat("x", 4*wire.BufSize) + "')"
	for i := range 3 {
		// As the sweep does for a session it found idle.
		_ = sess.conn().SetReadDeadline(time.Unix(1, 0))
		q := "SELECT 1"
		if i == 2 {
			q = big
		}
		if _, err := conn.Exec(testContext(t), q); err != nil {
			t.Fatalf("statement %d after a stale deadline: %v", i, err)
		}
	}
	if got := testutil.ToFloat64(p.srv.metrics.IdleTimeouts); got != 0 {
		t.Errorf("idle timeout metric %v, want 0", got)
	}

	short := startProxy(t, Config{IdleSessionTimeout: 200 * time.Millisecond})
	silent := short.connect(t, db, pgx.QueryExecModeSimpleProtocol)
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(short.srv.metrics.IdleTimeouts) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("a client silent since its login was not closed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := silent.Exec(testContext(t), "SELECT 1"); err == nil {
		t.Fatal("the silent client's session still runs statements")
	}
}
