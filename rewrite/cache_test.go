package rewrite

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

func TestCacheHits(t *testing.T) {
	rw := newTestRewriter(t)
	const in = `SELECT * FROM sessions`
	first, err := rw.Rewrite(in, nil)
	if err != nil || first.CacheHit || !first.Parsed {
		t.Fatalf("first: %+v, %v", first, err)
	}
	second, err := rw.Rewrite(in, nil)
	if err != nil || !second.CacheHit || second.SQL != first.SQL || !second.Rewritten || !second.Parsed {
		t.Fatalf("second: %+v, %v", second, err)
	}
	// Passthrough without parsing is never cached.
	for i := 0; i < 2; i++ {
		if res, _ := rw.Rewrite(`SELECT 1`, nil); res.CacheHit || res.Parsed {
			t.Fatalf("fast path: %+v", res)
		}
	}
	// Rejections are cached too, and come back as equal errors.
	const bad = `DO $$ BEGIN PERFORM * FROM sessions; END $$`
	_, err1 := rw.Rewrite(bad, nil)
	res2, err2 := rw.Rewrite(bad, nil)
	var e1, e2 *Error
	if !errors.As(err1, &e1) || !errors.As(err2, &e2) || *e1 != *e2 || !res2.CacheHit {
		t.Fatalf("cached rejection: %v / %v (hit %v)", err1, err2, res2.CacheHit)
	}
}

// TestCacheKeyHoldsSessionFacts checks that a hit is never served across
// sessions whose facts change the rewrite.
func TestCacheKeyHoldsSessionFacts(t *testing.T) {
	rw := newTestRewriter(t)
	in := `INSERT INTO sessions VALUES (1, 2)`
	hour, minute := time.Hour, time.Minute
	cat := sessionsCatalog()
	results := map[string]string{}
	run := func(name string, s *State) {
		t.Helper()
		res, err := rw.Rewrite(in, s)
		out := res.SQL
		if err != nil {
			out = "error: " + err.Error()
		}
		if res.CacheHit {
			t.Errorf("%s: unexpected cache hit", name)
		}
		results[name] = out
		again, err := rw.Rewrite(in, s)
		if !again.CacheHit || (err == nil && again.SQL != res.SQL) {
			t.Errorf("%s: second call hit=%v %q", name, again.CacheHit, again.SQL)
		}
	}
	run("no catalog", nil)
	run("catalog", NewState(Session{Catalog: cat}))
	run("catalog, ttl override", NewState(Session{Catalog: cat, TTL: &minute}))
	run("catalog, other ttl override", NewState(Session{Catalog: cat, TTL: &hour}))
	run("catalog, path elsewhere", NewState(Session{Catalog: cat, SearchPath: []string{"other"}}))
	// A Catalog built from changed data: the key holds its content.
	changed := sessionsCatalogData()
	changed.Tables["public.sessions"].Columns = append([]Column{{Name: "pre"}}, changed.Tables["public.sessions"].Columns...)
	run("catalog changed", NewState(Session{Catalog: NewCatalog(changed)}))
	seen := map[string]string{}
	for name, out := range results {
		if other, dup := seen[out]; dup && name != "catalog, other ttl override" && other != "catalog, other ttl override" {
			t.Errorf("%s and %s rewrote alike: %s", name, other, out)
		}
		seen[out] = name
	}
	if results["catalog changed"] == results["catalog"] {
		t.Errorf("stale hit after the catalog changed")
	}
	// An equal Catalog built anew shares the entries.
	if res, _ := rw.Rewrite(in, NewState(Session{Catalog: NewCatalog(changed)})); !res.CacheHit {
		t.Errorf("an equal catalog missed the cache")
	}
}

// TestStateImmutable: changing what NewCatalog and NewState were given, or
// what Data and Session return, changes neither the snapshot nor its
// fingerprint.
func TestStateImmutable(t *testing.T) {
	rw := newTestRewriter(t)
	in := `INSERT INTO sessions VALUES (1, 2)`
	d := sessionsCatalogData()
	cat := NewCatalog(d)
	minute := time.Minute
	sess := Session{Catalog: cat, SearchPath: []string{"public"}, TTL: &minute}
	st := NewState(sess)
	fp := st.Fingerprint()
	want, err := rw.Rewrite(in, st)
	if err != nil {
		t.Fatal(err)
	}
	d.Tables["public.sessions"].Columns = nil
	d.Schemas["sessions"] = []string{"other"}
	cd := cat.Data()
	cd.Tables["public.sessions"].Columns[0].Name = "changed"
	sess.SearchPath[0] = "other"
	minute = time.Hour
	got := st.Session()
	got.SearchPath[0] = "other"
	if st.Fingerprint() != fp || NewState(Session{Catalog: NewCatalog(sessionsCatalogData()), SearchPath: []string{"public"}, TTL: new(time.Duration)}).Fingerprint() == fp {
		t.Errorf("fingerprint changed or collided")
	}
	if again := NewState(Session{Catalog: NewCatalog(sessionsCatalogData()), SearchPath: []string{"public"}, TTL: ptr(time.Minute)}); again.Fingerprint() != fp {
		t.Errorf("equal facts got fingerprint %d, want %d", again.Fingerprint(), fp)
	}
	rw2 := newTestRewriter(t) // no cache hit: the State itself must be unchanged
	if res, err := rw2.Rewrite(in, st); err != nil || res.SQL != want.SQL {
		t.Errorf("after changing the inputs: %q, %v; want %q", res.SQL, err, want.SQL)
	}
}

func ptr[T any](v T) *T { return &v }

func TestCacheBounded(t *testing.T) {
	rw, err := New(testRules, Options{CacheSize: 32})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 1000; i++ {
		if _, err := rw.Rewrite(fmt.Sprintf(`SELECT %d FROM sessions`, i), nil); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for i := range rw.cache.shards {
		sh := &rw.cache.shards[i]
		if len(sh.index) != len(sh.entries) || len(sh.entries) > sh.limit {
			t.Fatalf("shard %d: %d indexed, %d entries, limit %d", i, len(sh.index), len(sh.entries), sh.limit)
		}
		n += len(sh.entries)
	}
	if n > 32+cacheShards {
		t.Fatalf("%d entries cached, want about 32", n)
	}
	// A recently used entry survives a sweep of new ones better than not at all.
	hot := `SELECT 'hot' FROM sessions`
	_, _ = rw.Rewrite(hot, nil)
	hits := 0
	for i := 0; i < 200; i++ {
		if res, _ := rw.Rewrite(hot, nil); res.CacheHit {
			hits++
		}
		_, _ = rw.Rewrite(fmt.Sprintf(`SELECT %d FROM sessions`, 5000+i), nil)
	}
	if hits < 150 {
		t.Errorf("hot entry hit %d of 200 times", hits)
	}
}

func TestCacheDisabled(t *testing.T) {
	rw, err := New(testRules, Options{CacheSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if res, err := rw.Rewrite(`SELECT * FROM sessions`, nil); err != nil || res.CacheHit {
			t.Fatalf("%+v %v", res, err)
		}
	}
}

func TestRewriteConcurrent(t *testing.T) {
	rw, err := New(testRules, Options{CacheSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]string{}
	for i := 0; i < 50; i++ {
		res, err := rw.Rewrite(fmt.Sprintf(`SELECT %d FROM sessions s`, i), nil)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = res.SQL
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for k := 0; k < 300; k++ {
				i := (k*7 + g) % 50
				res, err := rw.Rewrite(fmt.Sprintf(`SELECT %d FROM sessions s`, i), nil)
				if err != nil || res.SQL != want[i] {
					t.Errorf("goroutine %d: %q, %v", g, res.SQL, err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
}
