package config

import (
	"fmt"
	"net/url"
	"time"
)

// Replicas makes several tollgate processes sharing one ClickHouse act as
// one for alerting (see internal/fleet and docs/operations.md, "Many
// replicas"): with a Redis URL, a leader lease in Redis picks the one
// replica that evaluates the rules, over every replica's windows read
// from the store, and each notification is sent once fleet-wide. Without
// one, this process is the only evaluator (a single replica).
type Replicas struct {
	Redis ReplicasRedis `yaml:"redis"`
	// Lease is how long the leader's lease lasts without renewal (default
	// 15s); it is renewed every third of that. A leader that dies is
	// replaced within about this long.
	Lease time.Duration `yaml:"lease"`
}

// ReplicasRedis is the Redis server the replicas coordinate through; it
// may be the one of quotas.redis.
type ReplicasRedis struct {
	// URL is redis://[user:password@]host:port[/db], rediss:// for TLS,
	// or unix:///path/to/socket. Empty: a single replica.
	URL string `yaml:"url"`
	// KeyPrefix starts every key (default "tollgate").
	KeyPrefix string `yaml:"key_prefix"`
}

// Enabled reports whether the replicas coordinate through Redis.
func (r Replicas) Enabled() bool { return r.Redis.URL != "" }

// LeaseOrDefault is Lease, or its default when unset.
func (r Replicas) LeaseOrDefault() time.Duration {
	if r.Lease == 0 {
		return 15 * time.Second
	}
	return r.Lease
}

// PrefixOrDefault is the key prefix, or its default when unset.
func (r Replicas) PrefixOrDefault() string {
	if r.Redis.KeyPrefix == "" {
		return "tollgate"
	}
	return r.Redis.KeyPrefix
}

// validate checks the section; backend is store.backend.
func (r Replicas) validate(backend string) []error {
	var errs []error
	bad := func(path, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
	}
	if r.Lease < 0 || (r.Lease > 0 && r.Lease < time.Second) {
		bad("replicas.lease", "must be at least 1s (default 15s); got %v", r.Lease)
	}
	if !r.Enabled() {
		return errs
	}
	if u, err := url.Parse(r.Redis.URL); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix") {
		bad("replicas.redis.url", "must be a redis://, rediss:// or unix:// URL such as redis://10.0.0.9:6379/0; got %q", redactURL(r.Redis.URL))
	}
	if backend != "clickhouse" {
		bad("replicas.redis.url", "needs store.backend clickhouse: replicas share their windows and reports through it (got store.backend %s)", backend)
	}
	return errs
}
