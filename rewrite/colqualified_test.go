package rewrite

import (
	"testing"

	"github.com/ttlproxy/ttlproxy/internal/sqlstate"
)

// TestExpiringColumnSchemaQualified: a reference `schema.table.c` (as
// Prisma writes every column) and `schema.table.*` resolve to the FROM item
// without an alias that is that table, as PostgreSQL resolves them, in every
// clause and in RETURNING; one that reaches another table, or that the
// item's name alone would not reach, stays refused.
func TestExpiringColumnSchemaQualified(t *testing.T) {
	rw := newColumnRewriter(t)
	s := NewState(Session{Catalog: columnCatalog()})
	o := colText{`"orders"`}
	P := `"public"."orders"`
	from := `FROM ` + join(P, `"orders"`, 0)
	cases := []rwCase{
		{"select", `SELECT "public"."orders"."id", "public"."orders"."client_ip" FROM "public"."orders" WHERE ("public"."orders"."note" = $1 AND 1=1) ORDER BY "public"."orders"."note" ASC LIMIT $2 OFFSET $3`,
			`SELECT "public"."orders"."id", ` + o.ipV() + ` AS "client_ip" ` + from + ` WHERE (` + o.noteLive() + ` AND "public"."orders"."note" = $1 AND 1=1) ORDER BY ` + o.noteV() + ` ASC LIMIT $2 OFFSET $3`},
		{"unqualified table", `SELECT public.orders.note FROM orders WHERE public.orders.client_ip IS NULL`,
			`SELECT ` + o.noteV() + ` AS "note" FROM ` + join(`"public".orders`, `"orders"`, 0) + ` WHERE (public.orders.client_ip IS NULL OR ` + o.ipExpired() + `)`},
		{"star", `SELECT "public"."orders".* FROM "public"."orders"`, `SELECT ` + starCols(`"orders"`) + ` ` + from},
		{"outer reference", `SELECT id FROM "public"."orders" WHERE EXISTS (SELECT 1 FROM users u WHERE u.ip = "public"."orders"."client_ip")`,
			`SELECT id ` + from + ` WHERE EXISTS (SELECT 1 FROM users u WHERE ` + o.ipLive() + ` AND u.ip = "public"."orders"."client_ip")`},
		{"insert returning", `INSERT INTO "public"."orders" ("id","status") VALUES ($1,$2) RETURNING "public"."orders"."id", "public"."orders"."note"`,
			`INSERT INTO "public"."orders" ("id","status") VALUES ($1,$2) RETURNING "public"."orders"."id", ` + o.noteV() + ` AS "note"`},
		{"update returning", `UPDATE "public"."orders" SET "status" = $1 WHERE ("public"."orders"."id" = $2 AND 1=1) RETURNING "public"."orders"."id", "public"."orders"."client_ip"`,
			`UPDATE "public"."orders" SET "status" = $1 WHERE (("public"."orders"."id" = $2 AND 1=1)) AND ` + live(`"orders"`) + ` RETURNING "public"."orders"."id", ` + o.ipV() + ` AS "client_ip"`},
		{"delete returning", `DELETE FROM "public"."orders" WHERE "public"."orders"."note" = $1 RETURNING "public"."orders"."note"`,
			`DELETE FROM "public"."orders" WHERE (` + o.noteLive() + ` AND "public"."orders"."note" = $1) AND ` + live(`"orders"`) + ` RETURNING ` + o.noteV() + ` AS "note"`},
		{"another schema's table", `SELECT other.orders.client_ip FROM other.orders`, ``},
	}
	for _, c := range cases {
		checkRewrite(t, rw, s, c)
		checkStable(t, rw, s, c)
	}
	for _, c := range []rejCase{
		// The name alone would reach another table nearer.
		{"hidden by an item of the same name", `SELECT (SELECT public.orders.client_ip FROM other.orders LIMIT 1) FROM public.orders`, "", []string{"client_ip"}},
		{"two items of the name", `SELECT public.orders.client_ip FROM public.orders, other.orders`, "", []string{"client_ip"}},
		{"another schema's table beside it", `SELECT other.orders.client_ip FROM public.orders, other.orders`, "", []string{"client_ip"}},
		// An alias hides the table's name: PostgreSQL refuses it too.
		{"aliased", `SELECT public.orders.client_ip FROM public.orders o`, "", []string{"client_ip"}},
		{"star of an aliased table", `SELECT public.orders.* FROM public.orders o`, "", []string{"client_ip"}},
		{"four names", `SELECT db.public.orders.client_ip FROM public.orders`, "", []string{"client_ip"}},
	} {
		c.code = sqlstate.FeatureNotSupported
		checkReject(t, rw, s, c)
	}
}
