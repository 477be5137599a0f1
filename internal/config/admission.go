package config

import (
	"fmt"
	"strings"
)

// Admission orders requests that wait for an upstream slot (an upstream
// at max_concurrency, or its long-input lane at long_max_concurrency):
// the highest priority is served first, and requests of one priority in
// arrival order. A request's priority is the highest of those that apply
// to it — its API key's (by the key's name in auth.keys) and its business
// line's — and DefaultPriority when none does, so a key or line can be
// given a priority below the default too.
//
//	admission:
//	  default_priority: 0
//	  priorities:
//	    keys: {search-prod: 10}   # auth.keys[].name
//	    biz_lines: {search: 5}
//
// The business line is the key's own biz_line; the biz-line header counts
// only when no keys are configured (as for quotas), so a client cannot
// raise its priority by setting a header.
type Admission struct {
	DefaultPriority int        `yaml:"default_priority"`
	Priorities      Priorities `yaml:"priorities"`
}

// Priorities are the priorities of named keys and of business lines.
type Priorities struct {
	Keys     map[string]int `yaml:"keys"`      // auth key name → priority
	BizLines map[string]int `yaml:"biz_lines"` // business line → priority
}

// KeyPriorities returns the key priorities by key id (the first 12 hex
// digits of the key's SHA-256, as the gateway identifies keys). Names
// are checked by Validate.
func (c *Config) KeyPriorities() map[string]int {
	out := map[string]int{}
	for _, k := range c.Auth.Keys {
		if p, ok := c.Admission.Priorities.Keys[k.Name]; ok && k.Name != "" {
			out[k.Hash()[:12]] = p
		}
	}
	return out
}

func (a Admission) validate(path string, keys []Key) []error {
	var errs []error
	names := map[string]bool{}
	for _, k := range keys {
		if k.Name != "" {
			names[k.Name] = true
		}
	}
	for _, n := range sortedKeys(a.Priorities.Keys) {
		if !names[n] {
			errs = append(errs, fmt.Errorf("%s.priorities.keys.%s: no auth key named %q", path, n, n))
		}
	}
	for _, b := range sortedKeys(a.Priorities.BizLines) {
		if strings.TrimSpace(b) == "" {
			errs = append(errs, fmt.Errorf("%s.priorities.biz_lines: a business line name must not be empty", path))
		}
	}
	return errs
}

// validateLongLane checks the long-input lane of the upstream at path.
func (u Upstream) validateLongLane(path string) []error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", path, key, fmt.Sprintf(format, args...)))
	}
	switch {
	case u.LongInputTokens < 0:
		bad("long_input_tokens", "must not be negative (0: no long-input lane)")
	case u.LongMaxConcurrency < 0:
		bad("long_max_concurrency", "must not be negative")
	case u.LongInputTokens > 0 && u.LongMaxConcurrency == 0:
		bad("long_max_concurrency", "must be at least 1 when long_input_tokens is set")
	case u.LongInputTokens == 0 && u.LongMaxConcurrency > 0:
		bad("long_max_concurrency", "needs long_input_tokens, the input size above which a request is long")
	case u.MaxConcurrency > 0 && u.LongMaxConcurrency >= u.MaxConcurrency:
		bad("long_max_concurrency", "must be less than max_concurrency (%d), or long requests could take every slot; got %d",
			u.MaxConcurrency, u.LongMaxConcurrency)
	}
	return errs
}
