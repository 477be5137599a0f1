package tokenizer

import (
	"hash/maphash"
	"strings"
	"sync"
)

// model is a byte-level BPE vocabulary with one of two merge rules:
//
//   - Hugging Face: a pair of adjacent symbols may merge when the pair is in
//     the merges list; the pair with the lowest list index goes first.
//   - tiktoken: a pair may merge when the bytes of the two together form a
//     token; the token with the lowest rank goes first.
//
// Both break ties by the leftmost position, as both reference
// implementations do, so one merge loop serves both.
//
// Symbols are kept as byte offsets into the piece rather than as strings:
// byte-level BPE maps every byte to exactly one symbol, so the raw bytes are
// the cheapest faithful representation, and tiktoken's rule needs them.
type model struct {
	vocab  map[string]int32  // raw token bytes → id (tokens made of bytes only)
	byteID [256]int32        // id of the one-byte token for each byte
	merges map[uint64]uint64 // pairKey(left, right) → rank<<32 | merged id
	// bytePairs is merges for two one-byte symbols, as a table: those are
	// most of the lookups in a long piece. noMerge where there is none.
	bytePairs []uint64
	tiktoken  bool
	// ignoreMerges makes a piece that is itself a token one id, before any
	// merging (HF's ignore_merges, and tiktoken's own fast path).
	ignoreMerges bool

	cache pieceCache
}

// smallPiece is the symbol count up to which a plain scan for the best pair
// beats a heap: most English and code pieces are a few bytes long.
const smallPiece = 24

const noMerge = ^uint64(0)

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// symbol is one token of a piece being merged. A symbol's index in the
// slice is the byte offset where it starts: a symbol only ever grows to the
// right, by absorbing its neighbour.
type symbol struct {
	id         int32
	prev, next int32 // indices of the neighbours; -1 at the ends
	end        int32 // byte offset after the symbol; -1 once absorbed
	// The merge of this symbol with its right neighbour, if any: the heap
	// holds (rank, index) only, and an entry whose rank is no longer the
	// symbol's pairRank is stale.
	pairRank, pairID int32
}

const noPair = -1

// pairRank says whether the symbols at l and r may merge, and into what.
func (m *model) pairRank(piece string, syms []symbol, l, r int32) (rank, id int32, ok bool) {
	if m.tiktoken {
		id, ok = m.vocab[piece[l:syms[r].end]]
		return id, id, ok
	}
	if syms[l].end-l == 1 && syms[r].end-r == 1 {
		// Most lookups in a long piece are of two single bytes.
		v := m.bytePairs[int(piece[l])<<8|int(piece[r])]
		return int32(v >> 32), int32(uint32(v)), v != noMerge
	}
	v, ok := m.merges[pairKey(syms[l].id, syms[r].id)]
	return int32(v >> 32), int32(uint32(v)), ok
}

// setPair records the merge of symbol i with its right neighbour, if one
// may happen, and reports it.
func (m *model) setPair(piece string, syms []symbol, i int32) bool {
	s := &syms[i]
	s.pairRank = noPair
	if s.next < 0 {
		return false
	}
	rank, id, ok := m.pairRank(piece, syms, i, s.next)
	if ok {
		s.pairRank, s.pairID = rank, id
	}
	return ok
}

// bpeScratch holds the buffers of one encode call, reused through a pool so
// that encoding allocates nothing in the steady state.
type bpeScratch struct {
	syms []symbol
	heap []uint64
}

var scratchPool = sync.Pool{New: func() any { return new(bpeScratch) }}

// appendPiece appends the ids of one pre-tokenized piece.
func (m *model) appendPiece(dst []int32, piece string) []int32 {
	if len(piece) == 0 {
		return dst
	}
	if len(piece) == 1 {
		return append(dst, m.byteID[piece[0]])
	}
	if m.ignoreMerges {
		if id, ok := m.vocab[piece]; ok {
			return append(dst, id)
		}
	}
	cacheable := len(piece) >= minCachedPiece && len(piece) <= maxCachedPiece
	if cacheable {
		if ids, ok := m.cache.get(piece); ok {
			return append(dst, ids...)
		}
	}
	n := len(dst)
	dst = m.merge(dst, piece)
	if cacheable {
		m.cache.put(piece, dst[n:])
	}
	return dst
}

func (m *model) merge(dst []int32, piece string) []int32 {
	return m.mergeWith(dst, piece, len(piece) > smallPiece)
}

// mergeWith merges with the heap or by scanning; tests run both.
func (m *model) mergeWith(dst []int32, piece string, useHeap bool) []int32 {
	sc := scratchPool.Get().(*bpeScratch)
	syms := sc.syms[:0]
	if cap(syms) < len(piece) {
		syms = make([]symbol, 0, len(piece))
	}
	for i := 0; i < len(piece); i++ {
		syms = append(syms, symbol{id: m.byteID[piece[i]], prev: int32(i - 1), next: int32(i + 1), end: int32(i + 1)})
	}
	syms[len(syms)-1].next = -1
	h := sc.heap[:0]
	if useHeap {
		if cap(h) < len(piece) {
			h = make([]uint64, 0, len(piece))
		}
		h = m.mergeHeap(piece, syms, h)
	} else {
		m.mergeScan(piece, syms)
	}
	for i := int32(0); i >= 0; i = syms[i].next {
		dst = append(dst, syms[i].id)
	}
	// A buffer grown by one huge piece is left to the collector rather than
	// kept alive in the pool.
	if cap(syms) <= 1<<14 {
		sc.syms, sc.heap = syms, h
		scratchPool.Put(sc)
	}
	return dst
}

// mergeScan finds the best pair by scanning: quadratic, but with no heap
// upkeep, so faster for short pieces. It must pick exactly what mergeHeap
// picks: the lowest rank, the leftmost on a tie.
func (m *model) mergeScan(piece string, syms []symbol) {
	for i := int32(0); i >= 0; i = syms[i].next {
		m.setPair(piece, syms, i)
	}
	for {
		best := int32(-1)
		for i := int32(0); i >= 0; i = syms[i].next {
			if r := syms[i].pairRank; r != noPair && (best < 0 || r < syms[best].pairRank) {
				best = i
			}
		}
		if best < 0 {
			return
		}
		m.absorb(piece, syms, best)
	}
}

// absorb merges symbol i with its right neighbour and updates the pairs
// that changed: its own and its left neighbour's.
func (m *model) absorb(piece string, syms []symbol, i int32) (left, self bool) {
	l := &syms[i]
	r := &syms[l.next]
	l.id = l.pairID
	l.end = r.end
	l.next = r.next
	if r.next >= 0 {
		syms[r.next].prev = i
	}
	r.end = -1
	r.pairRank = noPair
	if l.prev >= 0 {
		left = m.setPair(piece, syms, l.prev)
	}
	return left, m.setPair(piece, syms, i)
}

// mergeHeap is the O(n log n) merge loop: a min-heap of (rank, index) over
// every mergeable adjacent pair. Entries made stale by an earlier merge are
// recognised when popped and dropped. The heap is 4-ary: on long pieces it
// outgrows the caches, and a shallower heap touches fewer lines.
func (m *model) mergeHeap(piece string, syms []symbol, h []uint64) []uint64 {
	for i := int32(0); i >= 0; i = syms[i].next {
		if m.setPair(piece, syms, i) {
			h = append(h, uint64(syms[i].pairRank)<<32|uint64(i))
		}
	}
	for i := (len(h) - 2) / 4; len(h) > 1 && i >= 0; i-- {
		siftDown(h, i)
	}
	for len(h) > 0 {
		top := h[0]
		last := len(h) - 1
		h[0] = h[last]
		h = h[:last]
		if last > 0 {
			siftDown(h, 0)
		}
		i := int32(uint32(top))
		if syms[i].pairRank != int32(top>>32) {
			continue // stale: the pair changed since this entry was pushed
		}
		left, self := m.absorb(piece, syms, i)
		if left {
			h = heapPush(h, uint64(syms[syms[i].prev].pairRank)<<32|uint64(syms[i].prev))
		}
		if self {
			h = heapPush(h, uint64(syms[i].pairRank)<<32|uint64(i))
		}
	}
	return h
}

func heapPush(h []uint64, v uint64) []uint64 {
	h = append(h, v)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 4
		if h[p] <= v {
			break
		}
		h[i] = h[p]
		i = p
	}
	h[i] = v
	return h
}

func siftDown(h []uint64, i int) {
	v, n := h[i], len(h)
	for {
		c := 4*i + 1
		var lo uint64
		var at int
		if c+3 < n {
			// A tournament of the four children: independent compares the
			// compiler can turn into conditional moves.
			a, ai := h[c], c
			if h[c+1] < a {
				a, ai = h[c+1], c+1
			}
			b, bi := h[c+2], c+2
			if h[c+3] < b {
				b, bi = h[c+3], c+3
			}
			lo, at = a, ai
			if b < a {
				lo, at = b, bi
			}
		} else {
			if c >= n {
				break
			}
			lo, at = h[c], c
			for k := c + 1; k < n; k++ {
				if h[k] < lo {
					lo, at = h[k], k
				}
			}
		}
		if lo >= v {
			break
		}
		h[i] = lo
		i = at
	}
	h[i] = v
}

// The piece cache keeps pieces of middling length. Short pieces (most
// English words) merge faster than a cache lookup takes; long ones rarely
// repeat. In between are CJK runs and identifiers, which repeat across the
// turns of a conversation, since each request carries the whole history.
const (
	minCachedPiece = 2
	maxCachedPiece = 256
)

// pieceCache maps a piece to its ids. It is sharded to keep lock contention
// low under concurrent requests and bounded in bytes so that hostile input
// cannot grow it: a full shard is simply emptied, which costs some
// re-merging, never a wrong answer.
type pieceCache struct {
	seed   maphash.Seed
	once   sync.Once
	shards [64]cacheShard
}

type cacheShard struct {
	mu    sync.RWMutex
	m     map[string][]int32
	bytes int
}

// shardBytes bounds each shard: 64 shards make 4 MB per tokenizer.
const shardBytes = 64 << 10

func (c *pieceCache) shard(s string) *cacheShard {
	c.once.Do(func() { c.seed = maphash.MakeSeed() })
	return &c.shards[maphash.String(c.seed, s)%uint64(len(c.shards))]
}

func (c *pieceCache) get(s string) ([]int32, bool) {
	sh := c.shard(s)
	sh.mu.RLock()
	ids, ok := sh.m[s]
	sh.mu.RUnlock()
	return ids, ok
}

func (c *pieceCache) put(s string, ids []int32) {
	sh := c.shard(s)
	own := append([]int32(nil), ids...)
	s = strings.Clone(s)             // the piece points into the caller's whole text
	size := len(s) + 4*len(ids) + 64 // 64: map entry and slice headers
	sh.mu.Lock()
	if sh.m == nil || sh.bytes+size > shardBytes {
		sh.m = make(map[string][]int32, 64)
		sh.bytes = 0
	}
	sh.m[s] = own
	sh.bytes += size
	sh.mu.Unlock()
}

func (m *model) fillBytePairs() {
	m.bytePairs = make([]uint64, 1<<16)
	for a := range 256 {
		for b := range 256 {
			v, ok := m.merges[pairKey(m.byteID[a], m.byteID[b])]
			if !ok {
				v = noMerge
			}
			m.bytePairs[a<<8|b] = v
		}
	}
}
