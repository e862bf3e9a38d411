package rewrite

import (
	"encoding/binary"
	"hash/maphash"
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
