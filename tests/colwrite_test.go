package tests

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// TestExpiringColumnWrites: through the proxy, a write of a value gets
// its expiry stamped (default_ttl), cleared with the literal NULL, beside
// the row's own stamp; an INSERT without a column list is stamped from
// the catalog's columns; `SET c = c || 'x'` reads an expired value as
// NULL; refresh_on_update moves a live value's expiry and leaves an
// expired one expired; ON CONFLICT DO UPDATE alike; RETURNING reads the
// row written under the expiry it holds after the write.
func TestExpiringColumnWrites(t *testing.T) {
	rules := []ttl.Rule{{Table: "t", DefaultTTL: 24 * time.Hour, Columns: []ttl.ColumnRule{
		{Column: "c", ExpiresAtColumn: "c_exp", DefaultTTL: time.Hour, RefreshOnUpdate: true},
		{Column: "d", BaseColumn: "created_at", ExpireAfter: time.Hour},
	}}}
	s := newStack(t, stackOptions{rules: rules, setup: []string{
		`CREATE TABLE t (id int PRIMARY KEY, c text, c_exp timestamptz, d int, created_at timestamptz, expires_at timestamptz)`,
	}})
	ctx := context.Background()
	direct := s.connect(s.direct)
	conn := s.connectMode(pgx.QueryExecModeSimpleProtocol)
	exec := func(q string) {
		t.Helper()
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// state returns, read directly, c, c_exp - now() in minutes (rounded,
	// "NULL" for NULL) and whether expires_at is stamped a day ahead.
	state := func(id int) (c, exp string, rowStamped bool) {
		t.Helper()
		var cv, ev *string
		if err := direct.QueryRow(ctx, `SELECT c, round(extract(epoch FROM c_exp - now()) / 60)::text,
			expires_at BETWEEN now() + interval '23 hours' AND now() + interval '25 hours' FROM t WHERE id = $1`, id).Scan(&cv, &ev, &rowStamped); err != nil {
			t.Fatalf("row %d: %v", id, err)
		}
		return str(cv), str(ev), rowStamped
	}
	check := func(id int, wantC, wantExp string) {
		t.Helper()
		c, exp, row := state(id)
		if c != wantC || exp != wantExp || !row {
			t.Errorf("row %d: c %s, c_exp in %s min, row stamped %v; want %s, %s, true", id, c, exp, row, wantC, wantExp)
		}
	}

	exec(`INSERT INTO t (id, c, created_at) VALUES (1, 'a', now()), (2, NULL, now())`)
	check(1, "a", "60")
	check(2, "NULL", "NULL")
	exec(`INSERT INTO t VALUES (3, 'b')`)
	check(3, "b", "60")
	exec(`INSERT INTO t (id, c, c_exp) VALUES (4, 'x', now() - interval '1 second'), (5, 'y', now() + interval '5 minutes')`)
	check(4, "x", "0")
	check(5, "y", "5")
	exec(`INSERT INTO t (id, c) SELECT 6, 'z' UNION ALL SELECT 7, NULL`)
	check(6, "z", "60")
	exec(`INSERT INTO t SELECT 9, 'q'`)
	check(9, "q", "60")
	check(7, "NULL", "60") // a query's NULL is stamped: it reads NULL either way

	// The expired value reads NULL through the proxy, and so in SET.
	var got *string
	if err := conn.QueryRow(ctx, `SELECT c FROM t WHERE id = 4`).Scan(&got); err != nil || got != nil {
		t.Errorf("expired value read %v, %v; want NULL", str(got), err)
	}
	exec(`UPDATE t SET c = c || '!' WHERE id IN (4, 5)`)
	check(4, "NULL", "60")
	check(5, "y!", "60")
	exec(`UPDATE t SET c = NULL WHERE id = 1`)
	check(1, "NULL", "NULL")

	// Refresh: a live value's expiry moves, an expired one stays.
	if _, err := direct.Exec(ctx, `UPDATE t SET c_exp = now() + interval '2 minutes' WHERE id = 3;
		UPDATE t SET c = 'old', c_exp = now() - interval '1 minute' WHERE id = 6`); err != nil {
		t.Fatal(err)
	}
	exec(`UPDATE t SET d = 1 WHERE id IN (3, 6)`)
	check(3, "b", "60")
	check(6, "old", "-1")
	exec(`UPDATE t SET d = 2, c_exp = now() + interval '3 minutes' WHERE id = 3`)
	check(3, "b", "3")

	// An upsert reads the stored value through V, EXCLUDED's as it is, and
	// stamps or refreshes as an UPDATE does.
	if _, err := direct.Exec(ctx, `INSERT INTO t (id, c, c_exp, created_at, expires_at) VALUES (8, 'old', now() - interval '1 second', now(), now() + interval '1 day');
		UPDATE t SET c_exp = now() + interval '2 minutes' WHERE id = 3`); err != nil {
		t.Fatal(err)
	}
	exec(`INSERT INTO t (id, c) VALUES (8, 'new') ON CONFLICT (id) DO UPDATE SET c = EXCLUDED.c || '+' || coalesce(t.c, '?')`)
	check(8, "new+?", "60")
	exec(`INSERT INTO t (id) VALUES (3) ON CONFLICT (id) DO UPDATE SET d = 9`)
	check(3, "b", "60")

	// RETURNING reads the row written, under the expiry it holds after the
	// write: given and past, or stamped.
	for _, c := range []struct{ q, want string }{
		{`INSERT INTO t (id, c, c_exp) VALUES (31, 'z', now() - interval '1 second') RETURNING c`, "NULL"},
		{`UPDATE t SET d = 1 WHERE id = 31 RETURNING c`, "NULL"},
		{`UPDATE t SET c = 'r' WHERE id = 31 RETURNING c`, "r"},
		{`DELETE FROM t WHERE id = 31 RETURNING c`, "r"},
	} {
		var got *string
		if err := conn.QueryRow(ctx, c.q).Scan(&got); err != nil || str(got) != c.want {
			t.Errorf("%s: %s, %v; want %s", c.q, str(got), err, c.want)
		}
	}

	// What is not handled yet is refused.
	for _, q := range []string{
		`INSERT INTO t SELECT * FROM generate_series(20, 21)`,
		`INSERT INTO t (id, c) VALUES (1, 'a') ON CONFLICT (c) DO NOTHING`,
		`MERGE INTO t USING (SELECT 1 AS id) s ON t.id = s.id WHEN MATCHED THEN UPDATE SET c = 'm'`,
		`UPDATE t SET d = 1 FROM (SELECT 1 AS id) s WHERE s.id = t.id RETURNING t.c`,
	} {
		if _, err := conn.Exec(ctx, q); sqlstate(err) != "0A000" {
			t.Errorf("%s: %v, want 0A000", q, err)
		}
	}
}
