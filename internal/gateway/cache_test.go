package gateway

import (
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/record"
)

func TestResponseCache(t *testing.T) {
	up := newTranscriptUpstream(t, "")
	up.ctype, up.rawBody = "application/json", nonStreamBody
	cfg := testConfig(up.URL())
	cfg.ResponseCache.Enabled = true
	cfg.Auth.Keys = []config.Key{{KeySHA256: config.HashKey("sk-a"), UserID: "a"}, {KeySHA256: config.HashKey("sk-b"), UserID: "b"}}
	tg := newTestGateway(t, cfg)
	send := func(key, body string) (string, *record.Record) {
		resp := post(t, tg.URL+"/v1/chat/completions", body, map[string]string{"Authorization": "Bearer " + key})
		b := readAll(t, resp)
		if string(b) != nonStreamBody {
			t.Fatalf("body %s", b)
		}
		return resp.Header.Get("X-Tollgate-Cache"), tg.next(t)
	}
	hdr, r1 := send("sk-a", chatReq)
	<-up.bodies
	<-up.headers
	if hdr != "" || r1.CacheHit || r1.Usage.Total() == 0 {
		t.Fatalf("first request: cache %q hit %v usage %+v", hdr, r1.CacheHit, r1.Usage)
	}
	hdr, r2 := send("sk-a", chatReq)
	if hdr != "hit" || !r2.CacheHit || r2.Usage.Total() != 0 || r2.Cost.Nanos != 0 || r2.Upstream != "cache" || r2.FinishReason != "stop" {
		t.Errorf("repeat: cache %q record %+v usage %+v", hdr, r2.CacheHit, r2.Usage)
	}
	// Another key does not get a's answer (scope: key), nor does a
	// different body.
	for _, c := range []struct{ key, body string }{{"sk-b", chatReq}, {"sk-a", streamReq[:len(streamReq)-len(`,"stream":true}`)] + `,"temperature":0}`}} {
		if hdr, r := send(c.key, c.body); hdr == "hit" || r.CacheHit {
			t.Errorf("%s %s answered from the cache", c.key, c.body)
		}
		<-up.bodies
		<-up.headers
	}
	select {
	case b := <-up.bodies:
		t.Errorf("cache hit reached the upstream: %s", b)
	default:
	}
}

func TestResponseCacheEviction(t *testing.T) {
	c := newResponseCache(time.Minute, 1<<20)
	now := time.Unix(0, 0)
	c.now = func() time.Time { return now }
	big := make([]byte, 100<<10) // 100 KiB; 10 fit in 1 MiB
	for i := range 12 {
		c.put(cacheKey("", "chat", []byte{byte(i)}), big, "application/json")
	}
	if _, ok := c.get(cacheKey("", "chat", []byte{0})); ok {
		t.Error("oldest entry kept past the byte limit")
	}
	if _, ok := c.get(cacheKey("", "chat", []byte{11})); !ok {
		t.Error("newest entry evicted")
	}
	if c.bytes > 1<<20 {
		t.Errorf("cache holds %d bytes, limit 1 MiB", c.bytes)
	}
	now = now.Add(2 * time.Minute)
	if _, ok := c.get(cacheKey("", "chat", []byte{11})); ok {
		t.Error("expired entry served")
	}
}
