package tests

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ttlproxy/ttlproxy/ttl"
)

// colPredRules: t has two expiring columns, c (text) with its own expiry
// column and d (integer) derived from created_at.
func colPredRules() []ttl.Rule {
	return []ttl.Rule{{Table: "t", Columns: []ttl.ColumnRule{
		{Column: "c", ExpiresAtColumn: "c_exp"},
		{Column: "d", BaseColumn: "created_at", ExpireAfter: time.Hour},
	}}}
}

// colPredAtoms are predicates over c and d ({c}, {d}): strict atoms, IS
// [NOT] NULL, non-strict atoms and atoms under IS TRUE or a boolean
// comparison.
var colPredAtoms = []string{
	`{c} = 'v1'`, `{c} <> 'v1'`, `'v1' = {c}`, `{c} IN ('v1', 'v2')`, `{c} NOT IN ('v1')`,
	`{c} = ANY (ARRAY['v1', 'v5'])`, `{c} = ALL (ARRAY[]::text[])`, `{c} <> ALL (ARRAY['v1'])`,
	`{c} LIKE 'v%'`, `{c} NOT LIKE 'v1%'`, `{c} ILIKE 'V%'`, `{c} SIMILAR TO 'v_'`, `{c} ~ '^v[12]'`,
	`{c} BETWEEN 'v0' AND 'v2'`, `{c} NOT BETWEEN 'v0' AND 'v2'`, `'v3' BETWEEN {c} AND 'v9'`,
	`'v1' IN ({c}, 'x')`, `{c} IS NULL`, `{c} IS NOT NULL`, `({c}) ISNULL`, `{c} IS DISTINCT FROM 'v1'`,
	`{c} IS NOT DISTINCT FROM 'v1'`, `coalesce({c}, 'z') = 'z'`, `lower({c}) = 'v1'`, `upper({c}) COLLATE "C" = 'V1'`,
	`{c} = {c}`, `({c}) = 'v1'`, `nullif({c}, 'v1') IS NULL`,
	`{d} > 4`, `{d} + 1 = 6`, `{d}::text = '5'`, `{c} || {d}::text = 'v15'`, `{d} = (SELECT 5)`, `{d} IN (SELECT 5)`, `{d} < ANY (SELECT 6)`, `{d} <> ALL (SELECT 6 WHERE false)`,
	`({c} = 'v1') IS NOT TRUE`, `({c} = 'v1') IS UNKNOWN`, `({c} = 'v1') = false`, `({c} IS NULL) = true`,
	`{c} IS NULL AND {d} IS NOT NULL`, `{c} = 'v1' OR {d} = 5`, `NOT ({c} = 'v1' AND {d} IS NULL)`,
	`CASE WHEN {c} = 'v1' THEN {d} > 4 ELSE {d} IS NULL END`, `CASE {c} WHEN 'v1' THEN true WHEN 'v2' THEN NULL END`,
}

// colPredForms put an atom in filter and value positions.
var colPredForms = []string{
	`SELECT id FROM t WHERE %s ORDER BY id`,
	`SELECT id FROM t WHERE NOT (%s) ORDER BY id`,
	`SELECT id FROM t WHERE id %% 3 = 0 OR %s ORDER BY id`,
	`SELECT id FROM t WHERE id > 0 AND (%s) ORDER BY id`,
	`SELECT id FROM t WHERE CASE WHEN %s THEN true ELSE false END ORDER BY id`,
	`SELECT id, (%s) AS v FROM t ORDER BY id`,
	`SELECT id, CASE WHEN %s THEN 1 ELSE 0 END AS k FROM t ORDER BY id`,
	`SELECT count(*) FILTER (WHERE %s), count(*) FILTER (WHERE NOT (%[1]s)) FROM t`,
	`SELECT count(id) FROM t HAVING count(*) FILTER (WHERE %s) >= 0`,
}

// TestExpiringColumnPredicates: every atom of colPredAtoms in every form
// of colPredForms, through the proxy, returns what the same statement
// with each expiring column wrapped in its value's expression (V) returns
// directly, on rows with live, expired, NULL and never-expiring values of
// both columns. Each statement runs twice, the second time with other
// literals, so that a shape hit of the rewrite cache is checked too. Both
// query protocols; UPDATE and DELETE filters alike.
func TestExpiringColumnPredicates(t *testing.T) {
	rules := colPredRules()
	s := newStack(t, stackOptions{rules: rules, setup: []string{
		`CREATE TABLE t (id int PRIMARY KEY, c text, c_exp timestamptz, d int, created_at timestamptz, expires_at timestamptz)`,
		// Every combination of: c 'vN' or NULL; c_exp future, past, NULL;
		// d 5, 7 or NULL; created_at now, two hours ago, NULL.
		`INSERT INTO t (id, c, c_exp, d, created_at)
		 SELECT row_number() OVER (), cv, ce, dv, ca
		   FROM unnest(ARRAY['v1', 'v2', 'v5', NULL]) cv,
		        unnest(ARRAY[now() + interval '1 day', now() - interval '1 second', NULL]) ce,
		        unnest(ARRAY[5, 7, NULL]) dv,
		        unnest(ARRAY[now(), now() - interval '2 hours', NULL]) ca`,
	}})
	r := &rules[0]
	vc := r.ExpiringColumn("c").ValueExpr(r, `"t"`, "text")
	vd := r.ExpiringColumn("d").ValueExpr(r, `"t"`, "integer")
	ctx := context.Background()
	direct := s.connect(s.direct)
	// A window function reads other rows than the one a condition tests.
	stmts := []string{
		`SELECT id, CASE WHEN {c} = 'v1' THEN first_value({c}) OVER (ORDER BY c_exp, c, id) END AS f FROM t ORDER BY id`,
		`SELECT id, CASE WHEN {c} = first_value({c}) OVER (ORDER BY c_exp, c, id) THEN 1 ELSE 0 END AS f FROM t ORDER BY id`,
		`SELECT id FROM t WHERE {c} = 'v1' AND id IN (SELECT 1) ORDER BY id`,
	}
	for _, atom := range colPredAtoms {
		for _, form := range colPredForms {
			stmts = append(stmts, fmt.Sprintf(form, atom))
		}
	}
	other := strings.NewReplacer("'v1'", "'v2'", "'v2'", "'v5'", "5", "7", "'V1'", "'V2'")
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		conn := s.connectMode(mode)
		checked := 0
		for _, tmpl := range stmts {
			for _, q := range []string{tmpl, other.Replace(tmpl)} {
				via := strings.NewReplacer("{c}", "c", "{d}", "d").Replace(q)
				ref := strings.NewReplacer("{c}", vc, "{d}", vd).Replace(q)
				got, err := queryStrings(ctx, conn, via)
				if err != nil {
					t.Errorf("mode %v: %s: %v", mode, via, err)
					continue
				}
				want, err := queryStrings(ctx, direct, ref)
				if err != nil {
					t.Fatalf("direct: %s: %v", ref, err)
				}
				if strings.Join(got, "|") != strings.Join(want, "|") {
					t.Errorf("mode %v: %s:\n proxy  %v\n direct %v", mode, via, got, want)
				}
				checked++
			}
		}
		if checked != 2*len(stmts) {
			t.Errorf("mode %v: %d statements checked, want %d", mode, checked, 2*len(stmts))
		}
	}

	// UPDATE and DELETE filter the same rows, each in a transaction rolled
	// back; the count of rows touched is compared.
	conn := s.connectMode(pgx.QueryExecModeSimpleProtocol)
	for _, atom := range colPredAtoms {
		for _, form := range []string{`UPDATE t SET id = id WHERE %s`, `DELETE FROM t WHERE NOT (%s)`, `UPDATE t SET created_at = created_at WHERE id > 0 AND (%s)`} {
			q := fmt.Sprintf(form, atom)
			via := strings.NewReplacer("{c}", "c", "{d}", "d").Replace(q)
			ref := strings.NewReplacer("{c}", vc, "{d}", vd).Replace(q)
			got, err := touched(ctx, conn, via)
			if err != nil {
				t.Errorf("%s: %v", via, err)
				continue
			}
			want, err := touched(ctx, direct, ref)
			if err != nil {
				t.Fatalf("direct: %s: %v", ref, err)
			}
			if got != want {
				t.Errorf("%s: %d rows through the proxy, %d directly", via, got, want)
			}
		}
	}
}

// queryStrings runs q and returns its rows, each as its values' text
// joined by commas.
func queryStrings(ctx context.Context, conn *pgx.Conn, q string) ([]string, error) {
	rows, err := conn.Query(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return nil, err
		}
		out = append(out, fmt.Sprint(vals...))
	}
	return out, rows.Err()
}

// touched runs q in a transaction rolled back and returns its row count.
func touched(ctx context.Context, conn *pgx.Conn, q string) (int64, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	tag, err := tx.Exec(ctx, q)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// TestExpiringColumnPredicatePlans: the predicates keep the plans §3 of
// docs/design/column-ttl.md promises on 20,000 rows with btree indexes on
// c and its expiry: an index scan on c for `c = …` and `c IN (…)`, and a
// BitmapOr of both indexes for `c IS NULL`.
func TestExpiringColumnPredicatePlans(t *testing.T) {
	rules := colPredRules()
	s := newStack(t, stackOptions{rules: rules, setup: []string{
		`CREATE TABLE t (id int PRIMARY KEY, c text, c_exp timestamptz, d int, created_at timestamptz, expires_at timestamptz)`,
		`INSERT INTO t (id, c, c_exp, created_at)
		 SELECT i, CASE WHEN i % 200 = 0 THEN NULL ELSE 'v' || i END,
		        CASE WHEN i % 100 = 1 THEN now() - interval '1 day' WHEN i % 10 = 2 THEN NULL ELSE now() + interval '1 day' END,
		        now()
		   FROM generate_series(1, 20000) i`,
		`CREATE INDEX t_c_idx ON t (c)`,
		`CREATE INDEX t_c_exp_idx ON t (c_exp)`,
		`ANALYZE t`,
	}})
	ctx := context.Background()
	conn := s.connectMode(pgx.QueryExecModeSimpleProtocol)
	for _, c := range []struct {
		pred string
		want []string // each plan must name all
	}{
		{`c = 'v5'`, []string{"Index", "t_c_idx"}},
		{`c IN ('v5', 'v6', 'v7')`, []string{"Index", "t_c_idx"}},
		{`c IS NULL`, []string{"BitmapOr", "t_c_idx", "t_c_exp_idx"}},
	} {
		q := `EXPLAIN SELECT id FROM t WHERE ` + c.pred
		lines, err := queryStrings(ctx, conn, q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		plan := strings.Join(lines, "\n")
		for _, w := range c.want {
			if !strings.Contains(plan, w) {
				t.Errorf("%s: plan does not name %q:\n%s", q, w, plan)
			}
		}
		if strings.Contains(plan, "Seq Scan") {
			t.Errorf("%s: sequential scan:\n%s", q, plan)
		}
		// The rows the plan finds are the live values only.
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM t WHERE `+c.pred).Scan(&n); err != nil {
			t.Fatalf("%s: %v", c.pred, err)
		}
		var want int
		if err := s.connect(s.direct).QueryRow(ctx, `SELECT count(*) FROM t WHERE `+
			strings.Replace(c.pred, "c", rules[0].ExpiringColumn("c").ValueExpr(&rules[0], `"t"`, "text"), 1)).Scan(&want); err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Errorf("%s: %d rows through the proxy, %d with V", c.pred, n, want)
		}
	}
}
