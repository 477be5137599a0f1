package config

import (
	"strings"
	"testing"
	"time"
)

func TestReplicas(t *testing.T) {
	const base = "upstreams: [{name: sim, url: \"http://127.0.0.1:8000/v1\", engine: vllm}]\nstore: {queue: {dir: /tmp/q}}\n"
	const ch = "store: {backend: clickhouse, clickhouse: {url: \"http://127.0.0.1:8123\"}, queue: {dir: /tmp/q}}\nupstreams: [{name: sim, url: \"http://127.0.0.1:8000/v1\", engine: vllm}]\n"
	// The default: a single replica, no Redis.
	cfg, err := Parse([]byte(base), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if r := cfg.Replicas; r.Enabled() || r.LeaseOrDefault() != 15*time.Second || r.PrefixOrDefault() != "tollgate" {
		t.Errorf("defaults: %+v (enabled %v, lease %v, prefix %q)", r, r.Enabled(), r.LeaseOrDefault(), r.PrefixOrDefault())
	}
	cfg, err = Parse([]byte(ch+"replicas: {redis: {url: \"redis://:pw@10.0.0.9:6379/0\", key_prefix: fleet1}, lease: 5s}\n"), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if r := cfg.Replicas; !r.Enabled() || r.LeaseOrDefault() != 5*time.Second || r.PrefixOrDefault() != "fleet1" {
		t.Errorf("set: %+v", r)
	}

	bad := []struct{ yml, want string }{
		{ch + "replicas: {redis: {url: \"http://10.0.0.9:6379\"}}\n",
			`replicas.redis.url: must be a redis://, rediss:// or unix:// URL such as redis://10.0.0.9:6379/0; got "http://10.0.0.9:6379/[redacted]"`},
		{base + "replicas: {redis: {url: \"redis://10.0.0.9:6379/0\"}}\n",
			"replicas.redis.url: needs store.backend clickhouse: replicas share their windows and reports through it (got store.backend sqlite)"},
		{ch + "replicas: {lease: 100ms}\n", "replicas.lease: must be at least 1s (default 15s); got 100ms"},
		{ch + "replicas: {lease: -1s}\n", "replicas.lease: must be at least 1s (default 15s); got -1s"},
		{ch + "replicas: {redis: {uri: \"redis://x\"}}\n", "replicas.redis.uri: unknown key (line 3)"},
	}
	for _, c := range bad {
		_, err := Parse([]byte(c.yml), noEnv)
		if err == nil || err.Error() != c.want {
			t.Errorf("%s\n got: %v\nwant: %s", c.yml, err, c.want)
		}
	}
	// A password in the URL never reaches the log.
	cfg, _ = Parse([]byte(ch+"replicas: {redis: {url: \"redis://:SECRET-9@10.0.0.9:6379/0\"}}\n"), noEnv)
	if s := cfg.LogValue().String(); strings.Contains(s, "SECRET-9") {
		t.Errorf("logged config holds the Redis password: %s", s)
	}
}
