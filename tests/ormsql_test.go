package tests

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// ORMs' SQL through the proxy: what Prisma, Knex, pgjdbc and the others
// send for every row, served with the TTL semantics.

// TestSchemaQualifiedColumns: references `"schema"."table"."column"` and
// `"schema"."table".*`, which Prisma writes for every column, read an
// expired value as NULL in SELECT, ORDER BY, WHERE and the RETURNING of
// INSERT, UPDATE and DELETE, with the names and types of a direct read;
// such a reference to another schema's table of the same name is not
// read as the TTL table's. Both query protocols.
func TestSchemaQualifiedColumns(t *testing.T) {
	s := scopeStack(t)
	direct := s.connect(s.direct)
	if _, err := direct.Exec(t.Context(), `CREATE SCHEMA other; CREATE TABLE other.orders (id int, client_ip text, note text);
		INSERT INTO other.orders VALUES (1, 'other', 'other note')`); err != nil {
		t.Fatal(err)
	}
	cases := []scopeCase{
		{`SELECT "public"."orders"."id", "public"."orders"."client_ip", "public"."orders"."note" FROM "public"."orders" WHERE ("public"."orders"."id" > 0 AND 1=1) ORDER BY "public"."orders"."id" ASC LIMIT 10 OFFSET 0`,
			`SELECT id, client_ip, note FROM ref ORDER BY id`},
		{`SELECT "public"."orders".* FROM "public"."orders" ORDER BY "public"."orders"."note" DESC NULLS LAST, 1`,
			`SELECT * FROM ref ORDER BY note DESC NULLS LAST, 1`},
		{`SELECT "public"."orders"."id" FROM "public"."orders" WHERE "public"."orders"."client_ip" = '10.0.0.2' OR "public"."orders"."note" IS NULL ORDER BY 1`,
			`SELECT id FROM ref WHERE client_ip = '10.0.0.2' OR note IS NULL ORDER BY 1`},
		{`SELECT count(*), max(public.orders.client_ip) FROM orders`, `SELECT count(*), max(client_ip) FROM ref`},
		{`INSERT INTO "public"."orders" ("id","client_ip","ip_expires_at","note","created_at") VALUES (9, '10.0.0.9', now() - interval '1 hour', 9.5, now()) RETURNING "public"."orders"."id", "public"."orders"."client_ip", "public"."orders"."note"`,
			`SELECT 9, NULL::varchar(20), 9.50::numeric(10,2)`},
		{`UPDATE "public"."orders" SET "created_at" = "public"."orders"."created_at" WHERE ("public"."orders"."id" IN (1, 2, 3, 5) AND 1=1) RETURNING "public"."orders"."id", "public"."orders"."client_ip", "public"."orders"."note"`,
			`SELECT id, client_ip, note FROM ref WHERE id IN (1, 2, 3, 5)`},
		{`DELETE FROM "public"."orders" WHERE "public"."orders"."id" IN (2, 4, 5) RETURNING "public"."orders".*`,
			`SELECT * FROM ref WHERE id IN (2, 4, 5)`},
		// Another schema's table of the same name is its own.
		{`SELECT other.orders.client_ip, other.orders.note FROM other.orders`, `SELECT 'other'::text, 'other note'::text`},
		{`SELECT o.id, other.orders.client_ip FROM public.orders o, other.orders ORDER BY 1`,
			`SELECT id, 'other'::text FROM ref ORDER BY 1`},
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		conn := s.connectMode(mode)
		for _, c := range cases {
			checkScope(t, mode, conn, direct, c)
		}
		// The attacker's: a qualified name the item's own name would not
		// reach, or that names another schema's table beside the TTL one.
		for _, q := range []string{
			`SELECT (SELECT public.orders.client_ip FROM other.orders LIMIT 1) FROM public.orders`,
			`SELECT public.orders.client_ip FROM public.orders, other.orders`,
			`SELECT other.orders.client_ip FROM public.orders, other.orders`,
		} {
			checkRefused(t, conn, q, "0A000")
		}
	}
}

// checkRefused runs q through conn and wants the proxy's refusal code.
func checkRefused(t *testing.T, conn *pgx.Conn, q, code string) {
	t.Helper()
	_, err := conn.Exec(t.Context(), q)
	if got := sqlstate(err); got != code || !strings.HasPrefix(errMessage(err), "ttlproxy") {
		t.Errorf("%s: SQLSTATE %q (%v), want the proxy's %s", q, got, err, code)
	}
}
