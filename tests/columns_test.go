package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// TestExpiringColumnRead: through the proxy, an expiring column named in
// the target list of a SELECT of its table reads NULL once its value has
// expired, and the RowDescription names and types it as a direct read
// does (type OID and modifier); the table's expired rows stay hidden;
// other positions are refused with 0A000. Both query protocols.
func TestExpiringColumnRead(t *testing.T) {
	rules := []ttl.Rule{{Table: "orders", Columns: []ttl.ColumnRule{
		{Column: "client_ip", ExpiresAtColumn: "ip_expires_at"},
		{Column: "note", BaseColumn: "created_at", ExpireAfter: time.Hour},
	}}}
	s := newStack(t, stackOptions{rules: rules, setup: []string{
		`CREATE TABLE orders (id int PRIMARY KEY, client_ip varchar(20), ip_expires_at timestamptz,
			note numeric(10,2), created_at timestamptz, expires_at timestamptz)`,
		// 1: both values live; 2: both expired; 3: values that never
		// expire (NULL expiry); 4: NULL values; 5: an expired row.
		`INSERT INTO orders VALUES
			(1, '10.0.0.1', now() + interval '1 day', 1.50, now(), NULL),
			(2, '10.0.0.2', now() - interval '1 second', 2.50, now() - interval '2 hours', NULL),
			(3, '10.0.0.3', NULL, 3.50, NULL, NULL),
			(4, NULL, now() + interval '1 day', NULL, now(), NULL),
			(5, '10.0.0.5', NULL, 5.50, now(), now() - interval '1 second')`,
	}})
	ctx := context.Background()
	direct := s.connect(s.direct)
	const q = `SELECT id, client_ip, o.note AS n, note FROM orders o ORDER BY id`
	want := []struct {
		id      int32
		ip      *string
		n, note *float64
	}{
		{1, ptr("10.0.0.1"), ptr(1.5), ptr(1.5)},
		{2, nil, nil, nil},
		{3, ptr("10.0.0.3"), ptr(3.5), ptr(3.5)},
		{4, nil, nil, nil},
	}
	directFields := fields(t, direct, q)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		conn := s.connectMode(mode)
		got := fields(t, conn, q)
		if len(got) != len(directFields) {
			t.Fatalf("mode %v: %d fields, direct %d", mode, len(got), len(directFields))
		}
		for i, f := range got {
			d := directFields[i]
			if f.Name != d.Name || f.DataTypeOID != d.DataTypeOID || f.TypeModifier != d.TypeModifier {
				t.Errorf("mode %v: field %d = %s oid %d typmod %d, direct %s oid %d typmod %d",
					mode, i, f.Name, f.DataTypeOID, f.TypeModifier, d.Name, d.DataTypeOID, d.TypeModifier)
			}
		}
		rows, err := conn.Query(ctx, q)
		if err != nil {
			t.Fatalf("mode %v: %v", mode, err)
		}
		var n int
		for rows.Next() {
			var id int32
			var ip *string
			var nv, note *float64
			if err := rows.Scan(&id, &ip, &nv, &note); err != nil {
				t.Fatalf("mode %v: scan: %v", mode, err)
			}
			if n >= len(want) {
				t.Errorf("mode %v: extra row %d", mode, id)
				continue
			}
			w := want[n]
			if id != w.id || !eqPtr(ip, w.ip) || !eqPtr(nv, w.n) || !eqPtr(note, w.note) {
				t.Errorf("mode %v: row %d = (%d, %v, %v, %v), want (%d, %v, %v, %v)", mode, n, id, str(ip), str(nv), str(note), w.id, str(w.ip), str(w.n), str(w.note))
			}
			n++
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("mode %v: %v", mode, err)
		}
		if n != len(want) {
			t.Errorf("mode %v: %d rows, want %d", mode, n, len(want))
		}

		for _, refused := range []string{
			`SELECT * FROM orders o JOIN orders p USING (id)`,
			`SELECT client_ip FROM orders o, generate_series(1, 2) g`,
			`SELECT (SELECT 1), id FROM orders GROUP BY id ORDER BY client_ip`,
			`SELECT o FROM orders o, generate_series(1, 2) g`,
			`SELECT id FROM orders o WHERE EXISTS (SELECT 1 FROM generate_series(1, 2) g WHERE g = 1 AND client_ip IS NULL)`,
			`UPDATE orders SET note = 1 FROM orders p WHERE p.id = orders.id`,
			`INSERT INTO orders (id) VALUES (9) ON CONFLICT (client_ip) DO NOTHING`,
		} {
			_, err := conn.Exec(ctx, refused)
			if got := sqlstate(err); got != "0A000" {
				t.Errorf("mode %v: %s: SQLSTATE %q (%v), want 0A000", mode, refused, got, err)
			}
		}
		// Entries PostgreSQL names after the column keep the name.
		const named = `SELECT client_ip::text, (note)::text, CASE WHEN id > 2 THEN 1 ELSE note END, note AS x FROM orders`
		nf, df := fields(t, conn, named), fields(t, direct, named)
		for i := range df {
			if i >= len(nf) || nf[i].Name != df[i].Name || nf[i].DataTypeOID != df[i].DataTypeOID {
				t.Errorf("mode %v: %s: fields %v, direct %v", mode, named, nf, df)
				break
			}
		}
		// The session goes on, and the other columns are served filtered.
		var count int
		if err := conn.QueryRow(ctx, `SELECT count(id) FROM orders`).Scan(&count); err != nil || count != 4 {
			t.Errorf("mode %v: count of live rows = %d, %v; want 4", mode, count, err)
		}
	}
}

// fields returns the RowDescription of q.
func fields(t *testing.T, conn *pgx.Conn, q string) []pgconn.FieldDescription {
	t.Helper()
	rows, err := conn.Query(context.Background(), q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	return append([]pgconn.FieldDescription(nil), rows.FieldDescriptions()...)
}

func ptr[T any](v T) *T { return &v }

func eqPtr[T comparable](a, b *T) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func str[T any](p *T) string {
	if p == nil {
		return "NULL"
	}
	return fmt.Sprint(*p)
}
