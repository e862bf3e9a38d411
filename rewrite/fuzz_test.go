package rewrite

import (
	"errors"
	"testing"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// FuzzRewrite checks the rewriter's invariants on arbitrary text: no panic;
// rejections are *Error with a SQLSTATE; text that cannot name a TTL table
// comes back byte for byte (parsed only for the ttlproxy.ttl check); output
// parses when the input does; rewriting the output again still parses, keeps
// the statement count, and leaves its stamping alone.
func FuzzRewrite(f *testing.F) {
	for _, s := range []string{
		`SELECT * FROM sessions s JOIN users u ON u.id = s.owner`,
		`UPDATE sessions SET note = 'x' WHERE id = 1 RETURNING *`,
		`INSERT INTO sessions (id) VALUES (1) ON CONFLICT (id) DO UPDATE SET note = 'y'`,
		`MERGE INTO sessions s USING src ON CASE WHEN src.k THEN s.id = src.id END WHEN MATCHED THEN UPDATE SET note = 'x' WHEN NOT MATCHED THEN INSERT (id) VALUES (src.id)`,
		`MERGE INTO t USING (SELECT * FROM sessions) s ON t.id = s.id WHEN NOT MATCHED BY SOURCE AND t.x THEN DELETE`,
		`UPDATE t SET (a, b) = (SELECT owner, note FROM sessions WHERE id = t.id)`,
		`SET LOCAL ttlproxy.ttl = '10 minutes'; SELECT set_config('ttlproxy.ttl', '1 day', true)`,
		`SET search_path = app, public; SELECT * FROM sessions`,
		`PREPARE p(int) AS WITH c AS (SELECT * FROM sessions) SELECT * FROM c JOIN ONLY sessions s ON s.id = $1`,
	} {
		f.Add(s)
	}
	rw, err := New(testRules, Options{CacheSize: -1})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		res, err := rw.Rewrite(sql, nil)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || len(e.Code) != 5 {
				t.Fatalf("Rewrite(%q): %v is not an *Error with a SQLSTATE", sql, err)
			}
			return
		}
		if !res.Rewritten && res.SQL != sql {
			t.Fatalf("Rewrite(%q): unchanged result differs: %q", sql, res.SQL)
		}
		// Only the ttlproxy.ttl check may parse such text, and it changes
		// nothing.
		if rw.quick.find(sql) < 0 && (res.SQL != sql || (res.Parsed && !mentionsTTLSetting(sql))) {
			t.Fatalf("Rewrite(%q): text without a TTL table name was touched", sql)
		}
		in, perr := pg.Parse(sql)
		if perr != nil || !res.Rewritten {
			return
		}
		out, err := pg.Parse(res.SQL)
		if err != nil {
			t.Fatalf("Rewrite(%q) = %q does not parse: %v", sql, res.SQL, err)
		}
		if len(out.Stmts) != len(in.Stmts) {
			t.Fatalf("Rewrite(%q) = %q: %d statements, want %d", sql, res.SQL, len(out.Stmts), len(in.Stmts))
		}
		again, err := rw.Rewrite(res.SQL, nil)
		if err != nil {
			var e *Error
			if errors.As(err, &e) && (e.Code == "54000" || e.Code == "54001") {
				return // the filters' parentheses may cross a limit
			}
			t.Fatalf("rewriting %q again: %v", res.SQL, err)
		}
		if _, err := pg.Parse(again.SQL); err != nil {
			t.Fatalf("second rewrite %q does not parse: %v", again.SQL, err)
		}
		if n := countStamps(again.SQL) - countStamps(res.SQL); n > 0 && countStamps(res.SQL) > 0 {
			// A stamped statement names its stamp columns, so a second pass
			// adds no new stamps.
			t.Fatalf("second rewrite stamped again:\n%s\n%s", res.SQL, again.SQL)
		}
	})
}

func countStamps(sql string) int {
	n := 0
	for i := 0; ; {
		k := indexFold(sql[i:], "pg_catalog.now() OPERATOR(pg_catalog.+) interval")
		if k < 0 {
			return n
		}
		n++
		i += k + 1
	}
}

// FuzzColumnRewrite checks the reads and writes of expiring columns
// (colread.go, colwrite.go) on arbitrary text over a table with two: no
// panic; rejections are *Error with a SQLSTATE; output parses into as
// many statements; rewriting the output again is accepted (the proxy's own
// expressions and conditions are recognised) and parses.
func FuzzColumnRewrite(f *testing.F) {
	for _, s := range []string{
		`SELECT id, note::text, CASE WHEN client_ip << '10.0.0.0/8' THEN 1 END FROM orders o WHERE note = $1 OR NOT (o.note IS NULL)`,
		`SELECT count(note) FILTER (WHERE client_ip IS NOT NULL) FROM orders HAVING max(note) > 'a'`,
		`UPDATE orders SET client_ip = NULL, status = note WHERE (note) IN ('a', 'b') AND id BETWEEN 1 AND 2`,
		`INSERT INTO orders (id, client_ip) VALUES (1, '10.0.0.1'), (2, NULL) RETURNING id`,
		`INSERT INTO orders VALUES (1, 'new', '10.0.0.1')`,
		`DELETE FROM orders WHERE coalesce(note, '') = '' OR lower(note) LIKE 'x%'`,
		`SELECT id FROM orders WHERE id IN (SELECT user_id FROM orders WHERE client_ip = ANY($1))`,
	} {
		f.Add(s)
	}
	rw, err := New(columnRules(), Options{CacheSize: -1})
	if err != nil {
		f.Fatal(err)
	}
	st := NewState(Session{Catalog: columnCatalog()})
	f.Fuzz(func(t *testing.T, sql string) {
		res, err := rw.Rewrite(sql, st)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || len(e.Code) != 5 {
				t.Fatalf("Rewrite(%q): %v is not an *Error with a SQLSTATE", sql, err)
			}
			return
		}
		in, perr := pg.Parse(sql)
		if perr != nil || !res.Rewritten {
			return
		}
		out, err := pg.Parse(res.SQL)
		if err != nil || len(out.Stmts) != len(in.Stmts) {
			t.Fatalf("Rewrite(%q) = %q: %v, %d statements", sql, res.SQL, err, len(out.GetStmts()))
		}
		again, err := rw.Rewrite(res.SQL, st)
		if err != nil {
			var e *Error
			if errors.As(err, &e) && (e.Code == "54000" || e.Code == "54001") {
				return
			}
			t.Fatalf("rewriting %q again: %v", res.SQL, err)
		}
		if _, err := pg.Parse(again.SQL); err != nil {
			t.Fatalf("second rewrite %q does not parse: %v", again.SQL, err)
		}
	})
}
