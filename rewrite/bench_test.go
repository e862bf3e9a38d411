package rewrite

import (
	"fmt"
	"testing"
)

const benchStatement = `SELECT s.id, s.note, u.name FROM sessions s JOIN users u ON u.id = s.owner
WHERE s.owner = $1 AND u.name LIKE $2 ORDER BY s.id DESC LIMIT 50 /* app=web,route=/sessions */`

func BenchmarkRewriteFastPath(b *testing.B) {
	rw := newTestRewriter(b)
	const sql = `SELECT u.id, u.name, o.total FROM users u JOIN orders o ON o.user_id = u.id
WHERE u.id = $1 AND o.created_at > now() - interval '7 day' ORDER BY o.created_at DESC LIMIT 50`
	b.ReportAllocs()
	b.SetBytes(int64(len(sql)))
	for b.Loop() {
		if res, err := rw.Rewrite(sql, nil); err != nil || res.Parsed {
			b.Fatal(res, err)
		}
	}
}

func BenchmarkRewriteCached(b *testing.B) {
	rw := newTestRewriter(b)
	s := NewState(Session{SearchPath: []string{"app", "public"}, Catalog: sessionsCatalog()})
	if _, err := rw.Rewrite(benchStatement, s); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if res, err := rw.Rewrite(benchStatement, s); err != nil || !res.CacheHit {
			b.Fatal(res, err)
		}
	}
}

func BenchmarkRewriteUncached(b *testing.B) {
	rw, err := New(testRules, Options{CacheSize: -1})
	if err != nil {
		b.Fatal(err)
	}
	s := NewState(Session{SearchPath: []string{"app", "public"}, Catalog: sessionsCatalog()})
	b.ReportAllocs()
	for b.Loop() {
		if res, err := rw.Rewrite(benchStatement, s); err != nil || !res.Rewritten {
			b.Fatal(res, err)
		}
	}
}

// BenchmarkRewriteUncachedDML measures an UPDATE with refresh, and an INSERT
// with stamping, without the cache.
func BenchmarkRewriteUncachedDML(b *testing.B) {
	rw, err := New(testRules, Options{CacheSize: -1})
	if err != nil {
		b.Fatal(err)
	}
	for _, sql := range []string{
		`UPDATE sessions SET note = $1 WHERE id = $2 RETURNING id`,
		`INSERT INTO sessions (id, owner, note) VALUES ($1, $2, $3) ON CONFLICT (id) DO UPDATE SET note = excluded.note`,
	} {
		b.Run(fmt.Sprintf("%.6s", sql), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if res, err := rw.Rewrite(sql, nil); err != nil || !res.Rewritten {
					b.Fatal(res, err)
				}
			}
		})
	}
}

// shapeBenchStatements are simple-protocol statements with their literals
// written in: pgbench's select-only script and a 3-table join with 6
// literals.
var shapeBenchStatements = []struct {
	name string
	sql  func(i int) string
}{
	{"pgbench_select", func(i int) string {
		return fmt.Sprintf("SELECT abalance FROM sessions WHERE aid = %d;", 1+i%100000)
	}},
	{"join3_6literals", func(i int) string {
		return fmt.Sprintf(`SELECT s.id, u.name, e.kind FROM sessions s JOIN users u ON u.id = s.owner JOIN events e ON e.sid = s.id
WHERE s.id = %d AND u.name = 'user%d' AND e.kind IN ('a', 'b') AND e.weight > %d.5 LIMIT %d`, i, i%977, i%13, 10+i%7)
	}},
}

// BenchmarkRewriteShapeHit measures a statement that differs from earlier
// ones only in its literals: served from the shape template, no parse.
func BenchmarkRewriteShapeHit(b *testing.B) {
	for _, bs := range shapeBenchStatements {
		b.Run(bs.name, func(b *testing.B) {
			rw := newTestRewriter(b)
			s := NewState(Session{Catalog: sessionsCatalog()})
			benchShapeHits(b, rw, s, bs.sql)
		})
	}
}

// BenchmarkRewriteShapeMiss measures the same statements without the
// cache: a parse, a walk and a splice each.
func BenchmarkRewriteShapeMiss(b *testing.B) {
	rw, err := New(testRules, Options{CacheSize: -1})
	if err != nil {
		b.Fatal(err)
	}
	for _, bs := range shapeBenchStatements {
		b.Run(bs.name, func(b *testing.B) {
			s := NewState(Session{Catalog: sessionsCatalog()})
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if res, err := rw.Rewrite(bs.sql(i), s); err != nil || !res.Rewritten {
					b.Fatal(res, err)
				}
				i++
			}
		})
	}
}

// BenchmarkRewriteShapeHitColumn is BenchmarkRewriteShapeHit for statements
// that name expiring columns (docs/design/column-ttl.md §8: a shape hit
// stays within 5 µs): a target list that reads V and a predicate that gets
// the live condition beside it.
func BenchmarkRewriteShapeHitColumn(b *testing.B) {
	for _, bs := range []struct {
		name string
		sql  func(i int) string
	}{
		{"target", func(i int) string { return fmt.Sprintf(`SELECT id, client_ip, note FROM orders WHERE id = %d`, i) }},
		{"predicate", func(i int) string {
			return fmt.Sprintf(`SELECT id, status FROM orders WHERE client_ip = '10.0.%d.%d' AND id > %d`, i%250, i%200, i)
		}},
		{"update", func(i int) string {
			return fmt.Sprintf(`UPDATE orders SET client_ip = '10.1.%d.1', status = 'x%d' WHERE id = %d`, i%250, i, i)
		}},
	} {
		b.Run(bs.name, func(b *testing.B) {
			rw, err := New(columnRules(), Options{})
			if err != nil {
				b.Fatal(err)
			}
			s := NewState(Session{Catalog: columnCatalog()})
			benchShapeHits(b, rw, s, bs.sql)
		})
	}
}

// benchShapeHits rewrites 1,024 statements sql(i), which differ only in
// literals, in turn: after the first two every rewrite is a shape hit.
func benchShapeHits(b *testing.B, rw *Rewriter, s *State, sql func(i int) string) {
	texts := make([]string, 1024)
	for i := range texts {
		texts[i] = sql(i)
	}
	for _, text := range texts[:2] {
		if _, err := rw.Rewrite(text, s); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		res, err := rw.Rewrite(texts[i%len(texts)], s)
		if err != nil || !res.CacheHit || !res.Rewritten {
			b.Fatal(res, err)
		}
		i++
	}
}
