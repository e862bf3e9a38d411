package tests

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// TestColumnsOnlyTable: through the proxy, a table with no row rule (rule
// none) serves every row, one whose expires_at has passed included (the
// column means nothing to the proxy), while its expiring columns read NULL
// once expired and a write of a value gets its expiry stamped; UPDATE and
// DELETE reach every row. Both query protocols.
func TestColumnsOnlyTable(t *testing.T) {
	rules := []ttl.Rule{{Table: "contacts", Kind: ttl.KindNone, Columns: []ttl.ColumnRule{
		{Column: "phone", ExpiresAtColumn: "phone_exp", DefaultTTL: time.Hour},
		{Column: "note", BaseColumn: "created_at", ExpireAfter: time.Hour},
	}}}
	s := newStack(t, stackOptions{rules: rules, setup: []string{
		`CREATE TABLE contacts (id int PRIMARY KEY, phone text, phone_exp timestamptz, note text,
			created_at timestamptz, expires_at timestamptz)`,
		// 1: live values; 2: expired values; 3: an expired-looking row
		// with live values.
		`INSERT INTO contacts VALUES
			(1, 'p1', now() + interval '1 day', 'n1', now(), NULL),
			(2, 'p2', now() - interval '1 second', 'n2', now() - interval '2 hours', NULL),
			(3, 'p3', NULL, 'n3', now(), now() - interval '1 day')`,
	}})
	ctx := context.Background()
	direct := s.connect(s.direct)
	type row struct {
		id          int32
		phone, note *string
	}
	want := []row{{1, ptr("p1"), ptr("n1")}, {2, nil, nil}, {3, ptr("p3"), ptr("n3")}}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		conn := s.connectMode(mode)
		for _, q := range []string{
			`SELECT id, phone, note FROM contacts ORDER BY id`,
			`SELECT c.id, c.phone, c.note FROM contacts c WHERE c.id > 0 ORDER BY 1`,
		} {
			rows, err := conn.Query(ctx, q)
			if err != nil {
				t.Fatalf("mode %v: %s: %v", mode, q, err)
			}
			got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
				var x row
				err := r.Scan(&x.id, &x.phone, &x.note)
				return x, err
			})
			if err != nil {
				t.Fatalf("mode %v: %s: %v", mode, q, err)
			}
			if len(got) != len(want) {
				t.Fatalf("mode %v: %s: %d rows, want %d (no row is hidden)", mode, q, len(got), len(want))
			}
			for i, w := range want {
				if g := got[i]; g.id != w.id || !eqPtr(g.phone, w.phone) || !eqPtr(g.note, w.note) {
					t.Errorf("mode %v: %s: row %d = (%d, %s, %s), want (%d, %s, %s)", mode, q, i, g.id, str(g.phone), str(g.note), w.id, str(w.phone), str(w.note))
				}
			}
		}
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM contacts WHERE expires_at < now()`).Scan(&n); err != nil || n != 1 {
			t.Errorf("mode %v: rows whose expires_at has passed: %d, %v; want 1 (no row rule)", mode, n, err)
		}
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM contacts WHERE phone IS NULL`).Scan(&n); err != nil || n != 1 {
			t.Errorf("mode %v: rows whose phone reads NULL: %d, %v; want 1", mode, n, err)
		}
		var phone *string
		if err := conn.QueryRow(ctx, `SELECT * FROM contacts WHERE id = 2`).Scan(new(int32), &phone, new(*time.Time), new(*string), new(*time.Time), new(*time.Time)); err != nil || phone != nil {
			t.Errorf("mode %v: SELECT * of row 2: phone %s, %v; want NULL", mode, str(phone), err)
		}
	}

	conn := s.connectMode(pgx.QueryExecModeSimpleProtocol)
	if tag, err := conn.Exec(ctx, `UPDATE contacts SET note = 'x' WHERE id = 3`); err != nil || tag.RowsAffected() != 1 {
		t.Errorf("UPDATE of the expired-looking row: %v, %v; want 1 row", tag, err)
	}
	if tag, err := conn.Exec(ctx, `INSERT INTO contacts (id, phone, created_at, expires_at) VALUES (4, 'p4', now(), now() - interval '1 day')`); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("INSERT: %v, %v", tag, err)
	}
	var stamped bool
	if err := direct.QueryRow(ctx, `SELECT phone_exp BETWEEN now() + interval '50 minutes' AND now() + interval '70 minutes' FROM contacts WHERE id = 4`).Scan(&stamped); err != nil || !stamped {
		t.Errorf("the inserted phone's expiry is not stamped an hour ahead: %v", err)
	}
	var phone *string
	if err := conn.QueryRow(ctx, `SELECT phone FROM contacts WHERE id = 4`).Scan(&phone); err != nil || str(phone) != "p4" {
		t.Errorf("the inserted row's phone: %s, %v; want p4", str(phone), err)
	}
	if tag, err := conn.Exec(ctx, `DELETE FROM contacts WHERE expires_at < now()`); err != nil || tag.RowsAffected() != 2 {
		t.Errorf("DELETE of the expired-looking rows: %v, %v; want 2 rows", tag, err)
	}
}
