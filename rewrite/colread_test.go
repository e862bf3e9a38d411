package rewrite

import (
	"strings"
	"testing"

	"github.com/ttlproxy/ttlproxy/internal/sqlstate"
	"github.com/ttlproxy/ttlproxy/ttl"
)

// colText spells what the reads of orders' expiring columns write, through
// the rule itself.
type colText struct{ q string }

func (c colText) ipV() string {
	r := &columnRules()[len(columnRules())-1]
	return r.ExpiringColumn("client_ip").ValueExpr(r, c.q, "inet")
}

func (c colText) noteV() string {
	r := &columnRules()[len(columnRules())-1]
	return r.ExpiringColumn("note").ValueExpr(r, c.q, "character varying(200)")
}

func (c colText) ipLive() string {
	r := &columnRules()[len(columnRules())-1]
	e := r.ExpiringColumn("client_ip").Expiry(r)
	return e.LiveCondition(c.q, ttl.Now)
}

func (c colText) ipExpired() string {
	r := &columnRules()[len(columnRules())-1]
	e := r.ExpiringColumn("client_ip").Expiry(r)
	return e.ExpiredCondition(c.q, ttl.Now)
}

func (c colText) noteLive() string {
	r := &columnRules()[len(columnRules())-1]
	e := r.ExpiringColumn("note").Expiry(r)
	return e.LiveCondition(c.q, ttl.Now)
}

func (c colText) noteExpired() string {
	r := &columnRules()[len(columnRules())-1]
	e := r.ExpiringColumn("note").Expiry(r)
	return e.ExpiredCondition(c.q, ttl.Now)
}

// TestExpiringColumnPredicates: atoms in filter positions get the live
// condition in front, IS [NOT] NULL its two-valued condition beside it,
// everything else reads V; the proxy's output rewritten again keeps its
// conditions (no second copy).
func TestExpiringColumnPredicates(t *testing.T) {
	rw := newColumnRewriter(t)
	s := NewState(Session{Catalog: columnCatalog()})
	o := colText{`"orders"`}
	a := colText{`"o"`}
	from := `FROM ` + join(`"public".orders`, `"orders"`, 0)
	fromO := `FROM ` + join(`"public".orders o`, `"o"`, 0)
	cases := []rwCase{
		{"equality", `SELECT id FROM orders WHERE client_ip = '10.0.0.1'`,
			`SELECT id ` + from + ` WHERE ` + o.ipLive() + ` AND client_ip = '10.0.0.1'`},
		{"parameter, reversed", `SELECT id FROM orders o WHERE $1 = o.client_ip`,
			`SELECT id ` + fromO + ` WHERE ` + a.ipLive() + ` AND $1 = o.client_ip`},
		{"in list", `SELECT id FROM orders WHERE note IN ('a', 'b')`,
			`SELECT id ` + from + ` WHERE ` + o.noteLive() + ` AND note IN ('a', 'b')`},
		{"any", `SELECT id FROM orders WHERE note = ANY($1)`,
			`SELECT id ` + from + ` WHERE ` + o.noteLive() + ` AND note = ANY($1)`},
		{"like, between", `SELECT id FROM orders WHERE note LIKE 'p%' OR note BETWEEN 'a' AND 'b'`,
			`SELECT id ` + from + ` WHERE ` + o.noteLive() + ` AND note LIKE 'p%' OR ` + o.noteLive() + ` AND note BETWEEN 'a' AND 'b'`},
		{"a bound of between is a value", `SELECT id FROM orders WHERE 'm' BETWEEN note AND 'z'`,
			`SELECT id ` + from + ` WHERE 'm' BETWEEN ` + o.noteV() + ` AND 'z'`},
		{"a member of an in list is a value", `SELECT id FROM orders WHERE 'm' IN (note, 'z')`,
			`SELECT id ` + from + ` WHERE 'm' IN (` + o.noteV() + `, 'z')`},
		{"two columns in one atom", `SELECT id FROM orders WHERE note = host(client_ip)`,
			`SELECT id ` + from + ` WHERE ` + o.noteLive() + ` AND note = host(` + o.ipV() + `)`},
		{"lower", `SELECT id FROM orders WHERE lower(note) = 'x'`,
			`SELECT id ` + from + ` WHERE ` + o.noteLive() + ` AND lower(note) = 'x'`},
		{"the guard covers the whole atom", `SELECT id FROM orders WHERE note = coalesce(note, 'x')`,
			`SELECT id ` + from + ` WHERE ` + o.noteLive() + ` AND note = coalesce(note, 'x')`},
		{"no guard inside a window function", `SELECT CASE WHEN note = first_value(note) OVER (ORDER BY id) THEN 1 END AS f FROM orders`,
			`SELECT CASE WHEN ` + o.noteLive() + ` AND note = first_value(` + o.noteV() + `) OVER (ORDER BY id) THEN 1 END AS f ` + from},
		{"nor inside a function", `SELECT id FROM orders WHERE note = btrim(note)`,
			`SELECT id ` + from + ` WHERE ` + o.noteLive() + ` AND note = btrim(` + o.noteV() + `)`},
		{"is null", `SELECT id FROM orders WHERE client_ip IS NULL`,
			`SELECT id ` + from + ` WHERE (client_ip IS NULL OR ` + o.ipExpired() + `)`},
		{"is not null", `SELECT id FROM orders WHERE note IS NOT NULL AND id > 1`,
			`SELECT id ` + from + ` WHERE (note IS NOT NULL AND ` + o.noteLive() + `) AND id > 1`},
		{"isnull, bracketed", `SELECT id FROM orders WHERE (note) ISNULL`,
			`SELECT id ` + from + ` WHERE ((note) ISNULL OR ` + o.noteExpired() + `)`},
		{"is null under not", `SELECT id FROM orders WHERE NOT note IS NULL`,
			`SELECT id ` + from + ` WHERE NOT (note IS NULL OR ` + o.noteExpired() + `)`},
		{"under not", `SELECT id FROM orders WHERE NOT (note = 'x')`,
			`SELECT id ` + from + ` WHERE NOT (` + o.noteV() + ` = 'x')`},
		{"and, or, not", `SELECT id FROM orders WHERE (note = 'x' OR id = 1) AND NOT client_ip = '10.0.0.1'`,
			`SELECT id ` + from + ` WHERE (` + o.noteLive() + ` AND note = 'x' OR id = 1) AND NOT ` + o.ipV() + ` = '10.0.0.1'`},
		{"a bracketed operand", `SELECT id FROM orders WHERE (note) = 'x'`,
			`SELECT id ` + from + ` WHERE ` + o.noteLive() + ` AND (note) = 'x'`},
		{"a bracketed atom", `SELECT id FROM orders WHERE ((note = 'x'))`,
			`SELECT id ` + from + ` WHERE ((` + o.noteLive() + ` AND note = 'x'))`},
		{"is true", `SELECT id FROM orders WHERE (note = 'x') IS NOT TRUE`,
			`SELECT id ` + from + ` WHERE (` + o.noteV() + ` = 'x') IS NOT TRUE`},
		{"boolean comparison", `SELECT id FROM orders WHERE (note = 'x') = false`,
			`SELECT id ` + from + ` WHERE (` + o.noteV() + ` = 'x') = false`},
		{"is distinct from", `SELECT id FROM orders WHERE note IS DISTINCT FROM 'x'`,
			`SELECT id ` + from + ` WHERE ` + o.noteV() + ` IS DISTINCT FROM 'x'`},
		{"all", `SELECT id FROM orders WHERE note = ALL($1)`,
			`SELECT id ` + from + ` WHERE ` + o.noteV() + ` = ALL($1)`},
		{"coalesce", `SELECT id FROM orders WHERE coalesce(note, '') = ''`,
			`SELECT id ` + from + ` WHERE coalesce(` + o.noteV() + `, '') = ''`},
		{"searched case", `SELECT id FROM orders WHERE CASE WHEN note = 'x' THEN true ELSE note IS NULL END`,
			`SELECT id ` + from + ` WHERE CASE WHEN ` + o.noteLive() + ` AND note = 'x' THEN true ELSE (note IS NULL OR ` + o.noteExpired() + `) END`},
		{"simple case", `SELECT id FROM orders WHERE CASE note WHEN 'x' THEN true END`,
			`SELECT id ` + from + ` WHERE CASE ` + o.noteV() + ` WHEN 'x' THEN true END`},
		{"case in the target list", `SELECT CASE WHEN note LIKE 'a%' THEN 1 ELSE 0 END AS k FROM orders`,
			`SELECT CASE WHEN ` + o.noteLive() + ` AND note LIKE 'a%' THEN 1 ELSE 0 END AS k ` + from},
		{"a boolean in the target list", `SELECT note = 'x' AS b, note IS NULL AS n FROM orders`,
			`SELECT ` + o.noteV() + ` = 'x' AS b, (note IS NULL OR ` + o.noteExpired() + `) AS n ` + from},
		{"named after the column", `SELECT note::text, client_ip, note || 'x' FROM orders`,
			`SELECT ` + o.noteV() + `::text AS "note", ` + o.ipV() + ` AS "client_ip", ` + o.noteV() + ` || 'x' ` + from},
		{"bracketed cast", `SELECT (note)::text, id FROM orders WHERE id = 1`,
			`SELECT (` + o.noteV() + `)::text AS "note", id ` + from + ` WHERE id = 1`},
		{"subscript", `SELECT note[1] FROM orders`,
			`SELECT (` + o.noteV() + `)[1] AS "note" ` + from},
		{"aggregate and filter", `SELECT count(note) FILTER (WHERE client_ip = '10.0.0.1') FROM orders HAVING max(note) > 'a'`,
			`SELECT count(` + o.noteV() + `) FILTER (WHERE ` + o.ipLive() + ` AND client_ip = '10.0.0.1') ` + from + ` HAVING max(` + o.noteV() + `) > 'a'`},
		{"in a subquery", `SELECT name FROM users WHERE id IN (SELECT user_id FROM orders WHERE note = $1)`,
			`SELECT name FROM users WHERE id IN (SELECT user_id ` + from + ` WHERE ` + o.noteLive() + ` AND note = $1)`},
		{"in subquery of the column", `SELECT id FROM orders WHERE note IN (SELECT name FROM users)`,
			`SELECT id ` + from + ` WHERE ` + o.noteLive() + ` AND note IN (SELECT name FROM users)`},
		{"any of a subquery", `SELECT id FROM orders WHERE note = ANY (SELECT name FROM users) AND note > ALL (SELECT name FROM users)`,
			`SELECT id ` + from + ` WHERE ` + o.noteLive() + ` AND note = ANY (SELECT name FROM users) AND ` + o.noteV() + ` > ALL (SELECT name FROM users)`},
		{"update where", `UPDATE orders SET status = 'x' WHERE note = 'a' OR note IS NULL`,
			`UPDATE "public".orders SET status = 'x' WHERE (` + o.noteLive() + ` AND note = 'a' OR (note IS NULL OR ` + o.noteExpired() + `)) AND ` + live(`"orders"`)},
		{"update set reads the value", `UPDATE orders o SET status = o.note WHERE client_ip = $1`,
			`UPDATE "public".orders o SET status = ` + a.noteV() + ` WHERE (` + a.ipLive() + ` AND client_ip = $1) AND ` + live(`"o"`)},
		{"delete where", `DELETE FROM orders WHERE client_ip << '10.0.0.0/8'`,
			`DELETE FROM "public".orders WHERE (` + o.ipLive() + ` AND client_ip << '10.0.0.0/8') AND ` + live(`"orders"`)},
	}
	for _, c := range cases {
		checkRewrite(t, rw, s, c)
		checkStable(t, rw, s, c)
	}
	// Atoms and IS NULL need no column type: without the catalog they are
	// rewritten too, and a V is refused.
	for _, c := range cases[:1] {
		checkRewrite(t, rw, nil, c)
	}
	for _, c := range []rwCase{cases[12], cases[13], cases[len(cases)-1]} {
		checkRewrite(t, rw, nil, c)
	}
	for _, c := range []rejCase{
		{"a value needs the type", `SELECT id FROM orders WHERE NOT note = 'x'`, "", []string{"note"}},
		{"an unqualified reference of an outer level", `SELECT id FROM orders WHERE id IN (SELECT id FROM users WHERE name = note)`, "", []string{"note"}},
		{"update from", `UPDATE orders SET status = 'x' FROM users u WHERE note = u.name`, "", []string{"note"}},
		{"a field of the column", `SELECT id FROM orders o WHERE o.client_ip.x = 1`, "", []string{"client_ip"}},
		{"a field of the unqualified column", `SELECT client_ip.x FROM orders`, "", []string{"client_ip"}},
	} {
		c.code = sqlstate.FeatureNotSupported
		st := s
		if c.name == "a value needs the type" {
			st = nil
		}
		checkReject(t, rw, st, c)
	}
}

// checkStable rewrites c's output again: the conditions the first rewrite
// added are recognised, so none is added twice (the second rewrite adds
// only another row filter join).
func checkStable(t *testing.T, rw *Rewriter, s *State, c rwCase) {
	t.Helper()
	again, err := rw.Rewrite(c.out, s)
	if err != nil {
		t.Errorf("%s: rewriting the output: %v", c.name, err)
		return
	}
	for _, col := range []string{`"client_ip_expires_at" IS NULL OR`, `"created_at" IS NULL OR`, `ELSE NULL::`} {
		if n, m := strings.Count(c.out, col), strings.Count(again.SQL, col); n != m {
			t.Errorf("%s: rewritten again, %q occurs %d times, first %d:\n %s\n %s", c.name, col, m, n, c.out, again.SQL)
		}
	}
}

// TestExpiringColumnPredicateShapes: a predicate's rewrite is a shape
// template: statements of one shape with other literals get the first's
// rewrite with their own literals, and the cache counts no mismatch; the
// proxy's own conditions, which hold literals for a derived column, are
// recognised under exact texts.
func TestExpiringColumnPredicateShapes(t *testing.T) {
	rw := newColumnRewriter(t)
	s := NewState(Session{Catalog: columnCatalog()})
	o := colText{`"orders"`}
	from := `FROM ` + join(`"public".orders`, `"orders"`, 0)
	before := rw.Stats()
	for _, lit := range []string{"'a'", "'bb'", "'ccc'", "'dddd'"} {
		checkRewrite(t, rw, s, rwCase{"shape " + lit,
			`SELECT id, note FROM orders WHERE note = ` + lit + ` AND client_ip IS NULL OR NOT client_ip = ` + lit,
			`SELECT id, ` + o.noteV() + ` AS "note" ` + from + ` WHERE ` + o.noteLive() + ` AND note = ` + lit +
				` AND (client_ip IS NULL OR ` + o.ipExpired() + `) OR NOT ` + o.ipV() + ` = ` + lit})
	}
	// Writes too: the NULL that clears an expiry is a keyword, not a
	// literal, so it makes a shape of its own.
	r := &columnRules()[len(columnRules())-1]
	ip := r.ExpiringColumn("client_ip")
	e := ip.Expiry(r)
	cstamp := e.ExpiryValue(ip.DefaultTTL)
	for _, lit := range []string{"'10.0.0.1'", "'10.0.0.2'", "'10.0.0.3'"} {
		checkRewrite(t, rw, s, rwCase{"insert shape " + lit,
			`INSERT INTO orders (id, client_ip) VALUES (1, ` + lit + `), (2, NULL)`,
			`INSERT INTO "public".orders (id, client_ip, "client_ip_expires_at") VALUES (1, ` + lit + `, ` + cstamp + `), (2, NULL, NULL)`})
		checkRewrite(t, rw, s, rwCase{"update shape " + lit,
			`UPDATE orders SET client_ip = ` + lit + ` WHERE client_ip = ` + lit,
			`UPDATE "public".orders SET client_ip = ` + lit + `, "client_ip_expires_at" = ` + cstamp + ` WHERE (` + o.ipLive() + ` AND client_ip = ` + lit + `) AND ` + live(`"orders"`)})
	}
	after := rw.Stats()
	if after.ShapeHits < before.ShapeHits+4 || after.ShapeMismatches != 0 {
		t.Errorf("shape hits %d → %d, mismatches %d: want hits and no mismatch", before.ShapeHits, after.ShapeHits, after.ShapeMismatches)
	}
	// The recognised guard of a derived column holds an interval literal:
	// one with another interval is no guard, and the cache must not take
	// one for the other.
	guarded := `SELECT id FROM orders WHERE ` + o.noteLive() + ` AND note = 'x'`
	other := strings.Replace(guarded, "31536000", "31536001", 1)
	for i := 0; i < 2; i++ {
		checkRewrite(t, rw, s, rwCase{"recognised guard", guarded,
			`SELECT id ` + from + ` WHERE ` + o.noteLive() + ` AND note = 'x'`})
		checkRewrite(t, rw, s, rwCase{"another interval is no guard", other,
			`SELECT id ` + from + ` WHERE ` + strings.Replace(o.noteLive(), "31536000", "31536001", 1) + ` AND ` + o.noteLive() + ` AND note = 'x'`})
	}
	if m := rw.Stats().ShapeMismatches; m != 0 {
		t.Errorf("shape mismatches %d, want 0", m)
	}
}
