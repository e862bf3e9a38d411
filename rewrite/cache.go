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

// cache is a bounded concurrent map from (session facts, SQL) to a rewrite:
// sharded, each shard evicting with the clock algorithm.
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
	res Result
	err *Error
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

func (c *cache) get(key []byte) (Result, *Error, bool) {
	sh := c.shard(key)
	sh.mu.Lock()
	i, ok := sh.index[string(key)]
	if !ok {
		sh.mu.Unlock()
		return Result{}, nil, false
	}
	e := &sh.entries[i]
	e.ref = true
	res, err := e.res, e.err
	sh.mu.Unlock()
	if err != nil {
		cp := *err
		err = &cp
	}
	return res, err, true
}

func (c *cache) put(key []byte, res Result, err *Error) {
	sh := c.shard(key)
	k := string(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.index[k]; ok {
		return
	}
	e := cacheEntry{key: k, res: res, err: err}
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

var keyBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

func putKeyBuf(b []byte) {
	b = b[:0]
	keyBufs.Put(&b)
}

// cacheKey encodes everything a rewrite depends on besides the rules: the
// search path, the TTL override, the catalog facts the rewriter consults
// (which schemas hold each TTL table name, the column names of each TTL
// table) and the SQL text. Every part is length-prefixed, so two different
// inputs never encode alike; a hit is therefore never stale, whether the
// proxy mutates a Catalog or builds a new one per session.
func (rw *Rewriter) cacheKey(sql string, s *Session) []byte {
	b := (*keyBufs.Get().(*[]byte))[:0]
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
	str(sql)
	return b
}
