package proxy

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/internal/pgtest"
)

// TestStatus reports the rules in force and each session's state and
// counts.
func TestStatus(t *testing.T) {
	parallel(t) // owns its database and proxy
	db := pgtest.NewDatabase(t)
	p := startProxy(t, Config{})
	idle := p.connect(t, db, pgx.QueryExecModeSimpleProtocol)
	mustExec(t, idle, "SELECT 1")
	if _, err := idle.Exec(testContext(t), "SELECT * FROM reject_me"); err == nil {
		t.Fatal("the stand-in rewriter did not reject")
	}
	inTx := p.connect(t, db, pgx.QueryExecModeSimpleProtocol)
	mustExec(t, inTx, "BEGIN")

	st := p.srv.Status()
	if st.Generation != 1 || len(st.Tables) != len(testRules) || st.Tables[0].Table != "public.items" {
		t.Errorf("rules in force %+v", st)
	}
	if len(st.Sessions) != 2 {
		t.Fatalf("sessions %+v", st.Sessions)
	}
	a, b := st.Sessions[0], st.Sessions[1]
	if a.State != "idle" || a.Statements < 2 || a.Rejected != 1 || a.User == "" || a.Database != db || a.Generation != 1 {
		t.Errorf("idle session %+v", a)
	}
	if b.State != "idle in transaction" {
		t.Errorf("session in a transaction block %+v", b)
	}
}
