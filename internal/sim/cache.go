package sim

import (
	"container/list"
	"encoding/binary"
	"hash/fnv"
	"time"
)

// prefixCache is the KV block pool with automatic prefix caching. Full
// prompt blocks are identified by a hash chained over all earlier blocks, so
// a block only matches when the whole prefix before it matches too. Blocks
// referenced by running sequences cannot be evicted; unreferenced ones stay
// cached on an LRU list until their space is needed.
//
// It is not safe for concurrent use; the engine's mutex guards it.
type prefixCache struct {
	capacity   int
	blocks     map[uint64]*kvBlock
	free       list.List // unreferenced blocks, most recently freed at the front
	referenced int
	private    int // blocks held by running sequences that are not in the cache
}

type kvBlock struct {
	hash uint64
	refs int
	elem *list.Element // in free, when refs == 0
}

func newPrefixCache(capacity int) *prefixCache {
	return &prefixCache{capacity: capacity, blocks: make(map[uint64]*kvBlock)}
}

// blockHashes returns the chained hashes of the full blocks of prompt. The
// model name seeds the chain so that two models never share blocks.
func blockHashes(model string, prompt []uint32, blockTokens int) []uint64 {
	h := fnv.New64a()
	h.Write([]byte(model))
	prev := h.Sum64()
	hashes := make([]uint64, 0, len(prompt)/blockTokens)
	var buf [8]byte
	for start := 0; start+blockTokens <= len(prompt); start += blockTokens {
		h.Reset()
		binary.LittleEndian.PutUint64(buf[:], prev)
		h.Write(buf[:])
		for _, id := range prompt[start : start+blockTokens] {
			binary.LittleEndian.PutUint32(buf[:4], id)
			h.Write(buf[:4])
		}
		prev = h.Sum64()
		hashes = append(hashes, prev)
	}
	return hashes
}

// acquire references the blocks of a prompt with the given full-block hashes
// and returns how many leading blocks were already cached (at most
// lookupBlocks) and the blocks now held. Blocks that do not fit are left
// out of the cache and must be counted as private by the caller.
func (c *prefixCache) acquire(hashes []uint64, lookupBlocks int) (hits int, held []*kvBlock) {
	for hits < lookupBlocks && hits < len(hashes) && c.blocks[hashes[hits]] != nil {
		hits++
	}
	held = make([]*kvBlock, 0, len(hashes))
	for _, h := range hashes {
		b := c.blocks[h]
		if b == nil {
			if !c.makeRoom() {
				continue
			}
			b = &kvBlock{hash: h}
			c.blocks[h] = b
		}
		c.ref(b)
		held = append(held, b)
	}
	return hits, held
}

func (c *prefixCache) ref(b *kvBlock) {
	if b.refs == 0 {
		if b.elem != nil {
			c.free.Remove(b.elem)
			b.elem = nil
		}
		c.referenced++
	}
	b.refs++
}

// makeRoom frees one slot for a new block, evicting the least recently
// freed blocks while the pool is full. It reports false when every block is in
// use by a running sequence.
func (c *prefixCache) makeRoom() bool {
	for len(c.blocks)+c.private >= c.capacity {
		back := c.free.Back()
		if back == nil {
			return false
		}
		b := c.free.Remove(back).(*kvBlock)
		delete(c.blocks, b.hash)
	}
	return true
}

// release drops a finished sequence's references. Blocks go to the free
// list tail-first, so a prompt's last blocks are evicted before its first
// ones and shared prefixes survive longest, as in vLLM.
func (c *prefixCache) release(held []*kvBlock) {
	for i := len(held) - 1; i >= 0; i-- {
		b := held[i]
		b.refs--
		if b.refs == 0 {
			c.referenced--
			b.elem = c.free.PushFront(b)
		}
	}
}

// usage is the fraction of the pool held by running sequences.
func (c *prefixCache) usage() float64 {
	return min(1, float64(c.referenced+c.private)/float64(c.capacity))
}

// Anthropic-style explicit prompt caching. The block cache above decides
// what prefill costs, as vLLM's automatic prefix caching does; what a
// /v1/messages answer reports as cache_creation_input_tokens and
// cache_read_input_tokens follows Anthropic's rules instead, which the
// block cache cannot express: only prefixes ending at a cache_control
// breakpoint are written, at token (not block) granularity, for a TTL,
// and only from minCacheTokens on.
const (
	// minCacheTokens is the shortest prefix Anthropic caches (Claude
	// Sonnet and Opus); a shorter breakpoint is silently not cached.
	minCacheTokens = 1024
	// cacheLookback is how many content blocks before a breakpoint are
	// checked for an earlier write.
	cacheLookback = 20
	// promptCacheEntries bounds the cache; the entries nearest to expiry
	// go first.
	promptCacheEntries = 4096
)

// promptCache holds the prefixes written by earlier requests, by the
// chained hash of their tokens. Guarded by the engine's mutex.
type promptCache struct {
	entries map[uint64]cacheEntry
}

type cacheEntry struct {
	expires time.Time
	ttl     time.Duration
}

// cacheReq is the prompt caching of one request: the content block
// boundaries of its prompt, some of them breakpoints, and what the
// scheduler found.
type cacheReq struct {
	bounds []cacheBound // by position
	// Set by lookup when the sequence is scheduled, before its first
	// token; read by the handler after it.
	read, write5m, write1h int
}

// cacheBound is the end of one content block in the prompt.
type cacheBound struct {
	pos  int           // tokens before it
	hash uint64        // of those tokens, chained like blockHashes
	ttl  time.Duration // > 0: a cache_control breakpoint
}

func newPromptCache() *promptCache { return &promptCache{entries: make(map[uint64]cacheEntry)} }

// lookup finds the longest cached prefix of r within the lookback of one
// of its breakpoints, refreshes it, and sets what the request reads and
// writes: every breakpoint beyond the hit (and long enough) is written,
// each paying for the tokens since the previous one at its own TTL.
func (c *promptCache) lookup(r *cacheReq, now time.Time) {
	r.read, r.write5m, r.write1h = 0, 0, 0
	hit := -1
	for i, b := range r.bounds {
		if b.ttl == 0 {
			continue
		}
		for j := i; j >= 0 && j >= i-cacheLookback && r.bounds[j].pos > r.read; j-- {
			if e, ok := c.entries[r.bounds[j].hash]; ok && now.Before(e.expires) {
				r.read, hit = r.bounds[j].pos, j
				break
			}
		}
	}
	if hit >= 0 {
		e := c.entries[r.bounds[hit].hash]
		e.expires = now.Add(e.ttl)
		c.entries[r.bounds[hit].hash] = e
	}
	prev := r.read
	for _, b := range r.writes() {
		if b.ttl >= time.Hour {
			r.write1h += b.pos - prev
		} else {
			r.write5m += b.pos - prev
		}
		prev = b.pos
	}
}

// writes returns the breakpoints the request writes.
func (r *cacheReq) writes() []cacheBound {
	var out []cacheBound
	for _, b := range r.bounds {
		if b.ttl > 0 && b.pos > r.read && b.pos >= minCacheTokens {
			out = append(out, b)
		}
	}
	return out
}

// store writes the request's breakpoints. It is called at the first
// token, as Anthropic makes a cache entry available once the response
// has begun: requests scheduled before that all miss.
func (c *promptCache) store(r *cacheReq, now time.Time) {
	for _, b := range r.writes() {
		c.entries[b.hash] = cacheEntry{expires: now.Add(b.ttl), ttl: b.ttl}
	}
	if len(c.entries) <= promptCacheEntries {
		return
	}
	for h, e := range c.entries {
		if !now.Before(e.expires) {
			delete(c.entries, h)
		}
	}
	for len(c.entries) > promptCacheEntries {
		var oldest uint64
		var at time.Time
		for h, e := range c.entries {
			if at.IsZero() || e.expires.Before(at) {
				oldest, at = h, e.expires
			}
		}
		delete(c.entries, oldest)
	}
}
