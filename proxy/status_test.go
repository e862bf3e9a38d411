package proxy

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/internal/pgtest"
	"github.com/ttlproxy/ttlproxy/rewrite"
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

// TestStatusRowSecurity: /status says how sessions follow DDL made outside
// the proxy, and, at row_security required, which TTL tables the catalog
// a session read shows without the live policy.
func TestStatusRowSecurity(t *testing.T) {
	parallel(t) // owns its database and proxy
	db := pgtest.NewDatabase(t)
	rw, err := rewrite.New(testRules, rewrite.Options{RequireRowSecurity: true})
	if err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, Config{Rewriter: rw})
	c := p.connect(t, db, pgx.QueryExecModeSimpleProtocol)
	mustExec(t, c, "SELECT 1")
	st := p.srv.Status()
	if st.CatalogRefresh != "catalog_ttl" || st.RowSecurity.Level != "required" {
		t.Errorf("catalog_refresh %q, row_security %+v", st.CatalogRefresh, st.RowSecurity)
	}
	// No table of testRules exists in the database, so none is protected.
	if len(st.RowSecurity.Unprotected) == 0 || st.RowSecurity.Unprotected[0].Database != db {
		t.Errorf("unprotected %+v, want the tables of %s", st.RowSecurity.Unprotected, db)
	}
	off := startProxy(t, Config{})
	if st := off.srv.Status(); st.RowSecurity.Level != "off" || len(st.RowSecurity.Unprotected) != 0 {
		t.Errorf("row_security off: %+v", st.RowSecurity)
	}
}
