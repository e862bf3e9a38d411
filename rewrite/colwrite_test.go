package rewrite

import (
	"strings"
	"testing"
	"time"

	"github.com/ttlproxy/ttlproxy/internal/sqlstate"
)

// TestExpiringColumnWrites: a write of a value with default_ttl gets its
// expiry stamped (NULL for the literal NULL), beside the row's own stamp
// in the same column list; a write that gives the expiry, or of a derived
// column, is left as it is; refresh_on_update moves a live value's expiry.
func TestExpiringColumnWrites(t *testing.T) {
	rules := columnRules()
	orders := &rules[len(rules)-1]
	orders.Columns[0].RefreshOnUpdate = true
	rw, err := New(rules, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The same table with a row stamp of its own.
	stamped := columnRules()
	stamped[len(stamped)-1].DefaultTTL = time.Hour
	rwRow, err := New(stamped, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := NewState(Session{Catalog: columnCatalog()})
	o := colText{`"orders"`}
	ip := orders.ExpiringColumn("client_ip")
	st := ip.Expiry(orders)
	cstamp := st.ExpiryValue(ip.DefaultTTL)
	rstamp := stamped[len(stamped)-1].StampValue(time.Hour)
	refresh := `"client_ip_expires_at" = CASE WHEN "orders"."client_ip" IS NOT NULL AND ` + o.ipLive() + ` THEN ` + cstamp +
		` ELSE "orders"."client_ip_expires_at" END`
	rowLive := live(`"orders"`)

	for _, c := range []rwCase{
		{"insert", `INSERT INTO orders (id, client_ip) VALUES (1, '10.0.0.1')`,
			`INSERT INTO "public".orders (id, client_ip, "client_ip_expires_at") VALUES (1, '10.0.0.1', ` + cstamp + `)`},
		{"insert rows, NULL clears", `INSERT INTO orders (client_ip, id) VALUES ('10.0.0.1', 1), (NULL, 2), (NULL::inet, 3), (DEFAULT, 4)`,
			`INSERT INTO "public".orders (client_ip, id, "client_ip_expires_at") VALUES ('10.0.0.1', 1, ` + cstamp + `), (NULL, 2, NULL), (NULL::inet, 3, NULL), (DEFAULT, 4, ` + cstamp + `)`},
		{"insert with the expiry", `INSERT INTO orders (id, client_ip, client_ip_expires_at) VALUES (1, '10.0.0.1', now())`, `INSERT INTO "public".orders (id, client_ip, client_ip_expires_at) VALUES (1, '10.0.0.1', now())`},
		{"insert with the expiry DEFAULT", `INSERT INTO orders (id, client_ip, client_ip_expires_at) VALUES (1, '10.0.0.1', DEFAULT), (2, '10.0.0.2', now())`,
			`INSERT INTO "public".orders (id, client_ip, client_ip_expires_at) VALUES (1, '10.0.0.1', ` + cstamp + `), (2, '10.0.0.2', now())`},
		{"insert of a derived column", `INSERT INTO orders (id, note) VALUES (1, 'x')`, `INSERT INTO "public".orders (id, note) VALUES (1, 'x')`},
		{"insert select", `INSERT INTO orders (id, client_ip) SELECT id, ip FROM users`,
			`INSERT INTO "public".orders (id, client_ip, "client_ip_expires_at") SELECT id, ip, ` + cstamp + ` FROM users`},
		{"insert of a query wrapped", `INSERT INTO orders (id, client_ip) VALUES (1, '10.0.0.1') LIMIT 1`,
			`INSERT INTO "public".orders (id, client_ip, "client_ip_expires_at") SELECT *, ` + cstamp + ` FROM (VALUES (1, '10.0.0.1') LIMIT 1) AS _ttl_src`},
		{"insert without a column list, from the catalog", `INSERT INTO orders VALUES (1, 'new', '10.0.0.1')`,
			`INSERT INTO "public".orders ("id", "status", "client_ip", "client_ip_expires_at") VALUES (1, 'new', '10.0.0.1', ` + cstamp + `)`},
		{"insert without a column list short of the column", `INSERT INTO orders VALUES (1, 'new')`, `INSERT INTO "public".orders VALUES (1, 'new')`},
		{"insert of a query without a column list", `INSERT INTO orders SELECT id, 'new', ip FROM users UNION ALL SELECT 2, 'x', NULL`,
			`INSERT INTO "public".orders ("id", "status", "client_ip", "client_ip_expires_at") SELECT id, 'new', ip, ` + cstamp + ` FROM users UNION ALL SELECT 2, 'x', NULL, ` + cstamp},
		{"update", `UPDATE orders SET client_ip = '10.0.0.1' WHERE id = 1`,
			`UPDATE "public".orders SET client_ip = '10.0.0.1', "client_ip_expires_at" = ` + cstamp + ` WHERE (id = 1) AND ` + rowLive},
		{"update clears", `UPDATE orders SET client_ip = NULL`,
			`UPDATE "public".orders SET client_ip = NULL, "client_ip_expires_at" = NULL WHERE ` + rowLive},
		{"update reads the value", `UPDATE orders SET client_ip = client_ip, note = note || 'x' WHERE client_ip IS NULL RETURNING id`,
			`UPDATE "public".orders SET client_ip = ` + o.ipV() + `, note = ` + o.noteV() + ` || 'x', "client_ip_expires_at" = ` + cstamp +
				` WHERE ((client_ip IS NULL OR ` + o.ipExpired() + `)) AND ` + rowLive + ` RETURNING id`},
		{"update of several columns", `UPDATE orders o SET (status, client_ip) = ('x', '10.0.0.1')`,
			`UPDATE "public".orders o SET (status, client_ip) = ('x', '10.0.0.1'), "client_ip_expires_at" = ` + cstamp + ` WHERE ` + live(`"o"`)},
		{"update with the expiry", `UPDATE orders SET client_ip = '10.0.0.1', client_ip_expires_at = NULL`,
			`UPDATE "public".orders SET client_ip = '10.0.0.1', client_ip_expires_at = NULL WHERE ` + rowLive},
		{"update refreshes", `UPDATE orders SET status = 'x' WHERE id = $1`,
			`UPDATE "public".orders SET status = 'x', ` + refresh + ` WHERE (id = $1) AND ` + rowLive},
		{"on conflict", `INSERT INTO orders (id, client_ip) VALUES (1, '10.0.0.1') ON CONFLICT (id) DO UPDATE SET client_ip = EXCLUDED.client_ip`,
			`INSERT INTO "public".orders (id, client_ip, "client_ip_expires_at") VALUES (1, '10.0.0.1', ` + cstamp + `) ON CONFLICT (id) DO UPDATE SET client_ip = EXCLUDED.client_ip, "client_ip_expires_at" = ` + cstamp + ` WHERE ` + rowLive},
		{"on conflict reads and refreshes", `INSERT INTO orders AS o (id) VALUES (1) ON CONFLICT (id) DO UPDATE SET status = o.note || EXCLUDED.status WHERE o.client_ip IS NULL RETURNING id`,
			`INSERT INTO "public".orders AS o (id) VALUES (1) ON CONFLICT (id) DO UPDATE SET status = ` + colText{`"o"`}.noteV() + ` || EXCLUDED.status, ` +
				strings.ReplaceAll(refresh, `"orders"`, `"o"`) + ` WHERE ((o.client_ip IS NULL OR ` + colText{`"o"`}.ipExpired() + `)) AND ` + live(`"o"`) + ` RETURNING id`},
		// Unqualified, a column of DO UPDATE is ambiguous between the
		// target and EXCLUDED: left for the server to say so (42702),
		// inside `= ANY (subquery)`'s tested value too.
		{"on conflict leaves an unqualified column", `INSERT INTO orders (id) VALUES (1) ON CONFLICT (id) DO UPDATE SET status = note WHERE client_ip IS NULL OR client_ip = ANY (SELECT ip FROM users)`,
			`INSERT INTO "public".orders (id) VALUES (1) ON CONFLICT (id) DO UPDATE SET status = note, ` + refresh +
				` WHERE (client_ip IS NULL OR client_ip = ANY (SELECT ip FROM users)) AND ` + rowLive},
		{"in a cte", `WITH u AS (UPDATE orders SET status = 'x' RETURNING id) SELECT * FROM u`,
			`WITH u AS (UPDATE "public".orders SET status = 'x', ` + refresh + ` WHERE ` + rowLive + ` RETURNING id) SELECT * FROM u`},
	} {
		checkRewrite(t, rw, s, c)
	}
	// Beside the row's stamp: the value's expiry comes first in the column
	// list and in the values alike.
	for _, c := range []rwCase{
		{"insert", `INSERT INTO orders (id, client_ip) VALUES (1, '10.0.0.1')`,
			`INSERT INTO "public".orders (id, client_ip, "client_ip_expires_at", "expires_at") VALUES (1, '10.0.0.1', ` + cstamp + `, ` + rstamp + `)`},
		{"insert without a column list", `INSERT INTO orders VALUES (1, 'new', NULL), (2, 'new', '10.0.0.1')`,
			`INSERT INTO "public".orders ("id", "status", "client_ip", "client_ip_expires_at", "expires_at") VALUES (1, 'new', NULL, NULL, ` + rstamp +
				`), (2, 'new', '10.0.0.1', ` + cstamp + `, ` + rstamp + `)`},
		{"insert of a query wrapped", `INSERT INTO orders (id, client_ip) VALUES (1, '10.0.0.1') LIMIT 1`,
			`INSERT INTO "public".orders (id, client_ip, "client_ip_expires_at", "expires_at") SELECT *, ` + rstamp + ` FROM (SELECT *, ` + cstamp +
				` FROM (VALUES (1, '10.0.0.1') LIMIT 1) AS _ttl_src) AS _ttl_src`},
	} {
		checkRewrite(t, rwRow, s, c)
	}
	for _, c := range []rejCase{
		{"insert of a star without a column list", `INSERT INTO orders SELECT * FROM orders_2026`, "", []string{"INSERT without a column list"}},
		{"insert of more values than columns", `INSERT INTO orders VALUES (1, 2, 3, 4, 5, 6, 7, 8)`, "", []string{"INSERT without a column list"}},
		{"on conflict set reading another level unqualified", `INSERT INTO orders AS o (id) VALUES (1) ON CONFLICT (id) DO UPDATE SET status = (SELECT name FROM users WHERE ip = client_ip)`, "", []string{"client_ip"}},
		{"merge", `MERGE INTO orders o USING staging s ON o.id = s.id WHEN MATCHED THEN UPDATE SET client_ip = s.ip`, "", []string{"client_ip"}},
		{"update from", `UPDATE orders SET client_ip = u.ip FROM users u WHERE u.id = orders.id`, "", []string{"client_ip"}},
		{"returning of update from", `UPDATE orders SET status = u.name FROM users u WHERE u.id = orders.id RETURNING client_ip`, "", []string{"client_ip"}},
	} {
		c.code = sqlstate.FeatureNotSupported
		checkReject(t, rw, s, c)
	}
	checkReject(t, rw, nil, rejCase{"without the catalog", `INSERT INTO orders VALUES (1, 'new', '10.0.0.1')`,
		sqlstate.FeatureNotSupported, []string{"public.orders", "INSERT without a column list"}})
}
