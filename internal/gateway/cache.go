package gateway

import (
	"container/list"
	"crypto/sha256"
	"sync"
	"time"
)

// responseCache answers exact repeats of a non-streamed request without
// the engine (seed 001 §6: "对重复请求做缓存"). It is off by default: it
// keeps completion text, in memory only, for its TTL. Entries are keyed by
// a SHA-256 of the scope (the API key, unless configured global), the
// endpoint and the request body's exact bytes; streamed requests are
// neither answered from it nor stored.
type responseCache struct {
	mu       sync.Mutex
	ttl      time.Duration
	maxBytes int64
	bytes    int64
	lru      *list.List // front = most recent
	byKey    map[[32]byte]*list.Element
	now      func() time.Time
}

type cacheEntry struct {
	key     [32]byte
	body    []byte
	ctype   string
	expires time.Time
}

func newResponseCache(ttl time.Duration, maxBytes int64) *responseCache {
	return &responseCache{ttl: ttl, maxBytes: maxBytes, lru: list.New(), byKey: map[[32]byte]*list.Element{}, now: time.Now}
}

func cacheKey(scope, endpoint string, body []byte) [32]byte {
	h := sha256.New()
	h.Write([]byte(scope))
	h.Write([]byte{0})
	h.Write([]byte(endpoint))
	h.Write([]byte{0})
	h.Write(body)
	var k [32]byte
	h.Sum(k[:0])
	return k
}

func (c *responseCache) get(k [32]byte) (*cacheEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[k]
	if !ok {
		return nil, false
	}
	e := el.Value.(*cacheEntry)
	if c.now().After(e.expires) {
		c.remove(el)
		return nil, false
	}
	c.lru.MoveToFront(el)
	return e, true
}

func (c *responseCache) put(k [32]byte, body []byte, ctype string) {
	size := int64(len(body))
	if size > c.maxBytes/8 { // one answer never crowds out the rest
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[k]; ok {
		c.remove(el)
	}
	e := &cacheEntry{key: k, body: append([]byte(nil), body...), ctype: ctype, expires: c.now().Add(c.ttl)}
	c.byKey[k] = c.lru.PushFront(e)
	c.bytes += size
	for c.bytes > c.maxBytes {
		c.remove(c.lru.Back())
	}
}

func (c *responseCache) remove(el *list.Element) {
	e := c.lru.Remove(el).(*cacheEntry)
	delete(c.byKey, e.key)
	c.bytes -= int64(len(e.body))
}
