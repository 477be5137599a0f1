package sim

import (
	"container/list"
	"encoding/binary"
	"hash/fnv"
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
