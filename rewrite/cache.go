package rewrite

import (
	"encoding/binary"
	"hash/maphash"
	"strings"
	"sync"
)

// maxCachedStatementBytes keeps huge statements (bulk INSERTs) out of the
// cache, which is bounded by entries, not bytes.
const maxCachedStatementBytes = 64 << 10

const cacheShards = 16

// cache is a bounded concurrent map from a key (keyShape, keyExact or
// keySettings, the session fingerprint, then the shape or the text) to a
// cached value: sharded, each shard evicting with the clock algorithm.
type cache struct {
	seed   maphash.Seed
	shards [cacheShards]shard
}

type shard struct {
	mu      sync.Mutex
	index   map[string]int
	entries []cacheEntry
	hand    int
	limit   int
}

type cacheEntry struct {
	key string
	val *cached
	ref bool
}

func newCache(size int) *cache {
	c := &cache{seed: maphash.MakeSeed()}
	per := (size + cacheShards - 1) / cacheShards
	for i := range c.shards {
		c.shards[i].index = make(map[string]int)
		c.shards[i].limit = per
	}
	return c
}

func (c *cache) shard(key []byte) *shard {
	return &c.shards[maphash.Bytes(c.seed, key)%cacheShards]
}

// get returns the value stored for key, or nil. The value is shared: never
// modify it.
func (c *cache) get(key []byte) *cached {
	sh := c.shard(key)
	sh.mu.Lock()
	i, ok := sh.index[string(key)]
	if !ok {
		sh.mu.Unlock()
		return nil
	}
	e := &sh.entries[i]
	e.ref = true
	v := e.val
	sh.mu.Unlock()
	return v
}

// put stores v for key unless key is already present.
func (c *cache) put(key []byte, v *cached) { c.store(key, v, false) }

// replace stores v for key, in place of any value it had.
func (c *cache) replace(key []byte, v *cached) { c.store(key, v, true) }

func (c *cache) store(key []byte, v *cached, overwrite bool) {
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if i, ok := sh.index[string(key)]; ok {
		if overwrite {
			sh.entries[i].val = v
		}
		return
	}
	k := string(key)
	e := cacheEntry{key: k, val: v}
	if len(sh.entries) < sh.limit {
		sh.index[k] = len(sh.entries)
		sh.entries = append(sh.entries, e)
		return
	}
	for {
		v := &sh.entries[sh.hand]
		if v.ref {
			v.ref = false
			sh.hand = (sh.hand + 1) % len(sh.entries)
			continue
		}
		delete(sh.index, v.key)
		*v = e
		sh.index[k] = sh.hand
		sh.hand = (sh.hand + 1) % len(sh.entries)
		return
	}
}

// keySettings prefixes the key of a settings-only check (settingsOnly),
// whose outcome depends on the text alone.
const keySettings = 'c'

// appendKeyHeader appends a cache key's prefix and session fingerprint.
func appendKeyHeader(dst []byte, prefix byte, fp uint64) []byte {
	dst = append(dst, prefix)
	return binary.AppendUvarint(dst, fp)
}

// maxFingerprints bounds the fingerprint registry. Past it the registry
// starts over with new numbers; entries under the old ones are evicted as
// they go unused.
const maxFingerprints = 4096

// fingerprints numbers the distinct session facts (appendFacts) a Rewriter
// has seen, so that a cache key carries a number instead of the facts.
type fingerprints struct {
	mu   sync.Mutex
	ids  map[string]uint64
	next uint64
}

// sessionMemo remembers a Session's fingerprint. It records the Session it
// was computed for, so a copied Session (whose facts may then be changed)
// computes its own.
type sessionMemo struct {
	self *Session
	rw   *Rewriter
	id   uint64
}

// Fingerprint returns a number for the facts of s that a rewrite depends on
// (appendFacts: search path, TTL override, an unreadable ttlproxy.ttl,
// bypass, the catalog facts): two Sessions get the same number only when
// every text rewrites alike under both, so a caller that keeps rewritten
// statements (prepared statements) rewrites them again when the number
// changes. Numbers are never reused within a Rewriter; equal facts may get
// a new number after the Rewriter has seen maxFingerprints distinct ones.
//
// The number is computed on the Session's first use and remembered in it: a
// Session and its Catalog must not be changed after the Session has been
// given to Rewrite or Fingerprint (build a new one, as the proxy does on
// every state change). A nil Session is the default one.
func (rw *Rewriter) Fingerprint(s *Session) uint64 {
	if s == nil {
		s = &defaultSession
	}
	return rw.fingerprint(s)
}

func (rw *Rewriter) fingerprint(s *Session) uint64 {
	if m, ok := s.memo.Load().(*sessionMemo); ok && m.self == s && m.rw == rw {
		return m.id
	}
	facts := string(rw.appendFacts(nil, s))
	f := &rw.fps
	f.mu.Lock()
	id, ok := f.ids[facts]
	if !ok {
		if f.ids == nil || len(f.ids) >= maxFingerprints {
			f.ids = make(map[string]uint64)
		}
		f.next++
		id = f.next
		f.ids[facts] = id
	}
	f.mu.Unlock()
	s.memo.Store(&sessionMemo{self: s, rw: rw, id: id})
	return id
}

// appendFacts encodes everything a rewrite depends on besides the rules and
// the text: the search path, the TTL override (and an unreadable one),
// bypass, the catalog facts the
// rewriter consults (which schemas hold each TTL table name, the column
// names of each TTL table, the children). Every part is length-prefixed, so
// two different sessions never encode alike.
func (rw *Rewriter) appendFacts(b []byte, s *Session) []byte {
	str := func(v string) {
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	if s.SearchPath == nil {
		b = append(b, 'D')
	} else {
		b = append(b, 'P')
		b = binary.AppendUvarint(b, uint64(len(s.SearchPath)))
		for _, p := range s.SearchPath {
			str(p)
		}
	}
	if s.TTL == nil {
		b = append(b, 'N')
	} else {
		b = append(b, 'T')
		b = binary.AppendVarint(b, int64(*s.TTL))
	}
	if s.TTLInvalid != "" {
		b = append(b, 'X')
		str(s.TTLInvalid)
	}
	if s.Bypass {
		b = append(b, 'B')
	}
	if cat := s.Catalog; cat == nil {
		b = append(b, 'N')
	} else {
		b = append(b, 'C')
		schemas := func(name string) {
			holders, ok := cat.Schemas[name]
			if !ok {
				b = append(b, 0)
				return
			}
			b = append(b, 1)
			b = binary.AppendUvarint(b, uint64(len(holders)))
			for _, h := range holders {
				str(h)
			}
		}
		columns := func(t *TableInfo) {
			if t == nil {
				b = append(b, 0)
				return
			}
			b = append(b, 1)
			b = binary.AppendUvarint(b, uint64(len(t.Columns)))
			for _, c := range t.Columns {
				str(c.Name)
			}
		}
		for _, name := range rw.names {
			schemas(name)
		}
		for i := range rw.rules {
			columns(cat.Tables[rw.rules[i].QualifiedName()])
		}
		if len(cat.Children) == 0 {
			b = append(b, 0)
		} else {
			b = append(b, 1)
			keys := rw.children.get(cat.Children).keys
			b = binary.AppendUvarint(b, uint64(len(keys)))
			for _, k := range keys {
				str(k)
				parent, ok := cat.Children[k]
				if !ok {
					b = append(b, 0)
					continue
				}
				b = append(b, 1)
				str(parent)
				columns(cat.Tables[k])
				// The schemas holding the child's name (either reading of a
				// dotted key).
				for _, name := range [2]string{k[strings.IndexByte(k, '.')+1:], k[strings.LastIndexByte(k, '.')+1:]} {
					schemas(name)
				}
			}
		}
	}
	return b
}
