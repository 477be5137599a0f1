package quota

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Limits are the quotas and rate limits of one subject. Zero means
// unlimited, so an empty Limits puts no bound on anything.
type Limits struct {
	// DailyTokens bounds input+output tokens per calendar day (Config.Timezone).
	DailyTokens int64 `yaml:"daily_tokens"`
	// DailyCost bounds cost per calendar day, as an exact decimal amount of
	// the price table's currency ("50.00"). It is a string so that YAML never
	// rounds money through a float; ParseCost turns it into nanos. A plain
	// YAML number (daily_cost: 50.00) decodes here as its literal text.
	DailyCost string `yaml:"daily_cost"`
	// RequestsPerMinute and TokensPerMinute are token buckets that hold one
	// minute's allowance and refill continuously (see bucket.go for why).
	RequestsPerMinute int64 `yaml:"requests_per_minute"`
	TokensPerMinute   int64 `yaml:"tokens_per_minute"`
	// MaxInputTokens bounds the input of a single request (seed 000 §5.3:
	// "a single request above 8000 tokens" is someone pasting a whole file).
	MaxInputTokens int64 `yaml:"max_input_tokens"`
	// OverMaxInput is "reject" (default) or "alert": admit and raise a
	// max_input event.
	OverMaxInput string `yaml:"over_max_input"`
	// WarnAt is the share of a daily quota at which a warning event is
	// raised, once a day; 0 means the default 0.8.
	WarnAt float64 `yaml:"warn_at"`
}

// Defaults are the limits of subjects that Config does not list by name.
type Defaults struct {
	Key     Limits `yaml:"key"`
	User    Limits `yaml:"user"`
	BizLine Limits `yaml:"biz_line"`
}

// Config is the quotas section of tollgate's configuration.
//
// A request is checked against every scope it belongs to: its API key, its
// user and its biz_line. Each scope takes the limits listed for its name,
// or else the Default for its kind.
type Config struct {
	// Timezone is the IANA zone whose midnight starts a new quota day
	// ("Asia/Shanghai"); default UTC.
	Timezone string `yaml:"timezone"`
	// Keys is keyed by the API key's name (auth.keys[].name) in YAML, since
	// that is what an operator writes; ResolveKeys re-keys it by key id
	// (what the gateway and the ledger know) before NewLocal.
	Keys     map[string]Limits `yaml:"keys"`
	Users    map[string]Limits `yaml:"users"`
	BizLines map[string]Limits `yaml:"biz_lines"`
	Default  Defaults          `yaml:"default"`
	// Redis keeps the counters in a Redis server that every replica
	// shares (internal/quota/redisquota). Without a URL they live in this
	// process (Local), which is right for a single replica.
	Redis Redis `yaml:"redis"`
}

// Redis configures the shared counters.
type Redis struct {
	// URL is redis://[user:password@]host:port[/db], rediss:// for TLS,
	// or unix:///path/to/socket. Empty: counters in process.
	URL string `yaml:"url"`
	// KeyPrefix starts every key ("tollgate"), so that several tollgate
	// fleets or other applications can share one server.
	KeyPrefix string `yaml:"key_prefix"`
	// Timeout bounds each call to Redis on the request path (default
	// 50ms); a call that takes longer counts as Redis unavailable.
	Timeout time.Duration `yaml:"timeout"`
	// Backoff is how long Redis is not asked again after three failed
	// calls in a row (default 1s): meanwhile requests get the OnError
	// policy at once instead of each waiting for Timeout.
	Backoff time.Duration `yaml:"backoff"`
	// OnError is, per limit (daily_tokens, daily_cost,
	// requests_per_minute, tokens_per_minute), what happens to a request
	// that limit applies to while Redis is unavailable: "open" admits it
	// uncounted (the default), "closed" refuses it with 503.
	OnError map[string]string `yaml:"on_error"`
}

// Fail policies of Redis.OnError.
const (
	FailOpen   = "open"
	FailClosed = "closed"
)

// Redis defaults.
const (
	DefaultRedisTimeout = 50 * time.Millisecond
	DefaultRedisBackoff = time.Second
	DefaultRedisPrefix  = "tollgate"
	// MaxRedisRate bounds requests_per_minute and tokens_per_minute with
	// Redis: its scripts compute in doubles, exact for bucket levels in
	// unit·µs only up to this rate (2^53 > 3 × 50M × 60M).
	MaxRedisRate = 50_000_000
)

// FailClosed reports whether limit fails closed while Redis is unavailable.
func (r *Redis) FailClosed(limit string) bool { return r.OnError[limit] == FailClosed }

// TimeoutOrDefault and BackoffOrDefault apply the defaults.
func (r *Redis) TimeoutOrDefault() time.Duration { return cmp.Or(r.Timeout, DefaultRedisTimeout) }

// BackoffOrDefault is Backoff, or its default when unset.
func (r *Redis) BackoffOrDefault() time.Duration { return cmp.Or(r.Backoff, DefaultRedisBackoff) }

// PrefixOrDefault is KeyPrefix, or its default when unset.
func (r *Redis) PrefixOrDefault() string { return cmp.Or(r.KeyPrefix, DefaultRedisPrefix) }

// validate checks the section; path is where it sits ("quotas.redis").
func (r *Redis) validate(path string, c *Config) []error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", path, key, fmt.Sprintf(format, args...)))
	}
	if r.URL == "" {
		if r.KeyPrefix != "" || r.Timeout != 0 || r.Backoff != 0 || len(r.OnError) > 0 {
			bad("url", "required when other quotas.redis settings are given (without it the counters stay in process)")
		}
		return errs
	}
	if u, err := url.Parse(r.URL); err != nil {
		// url.Error quotes the whole URL, password included: only its cause.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		bad("url", "not a URL (%v)", err)
	} else {
		switch u.Scheme {
		case "redis", "rediss":
			if u.Host == "" {
				bad("url", "needs a host, as in redis://127.0.0.1:6379/0; got %q", redact(u))
			}
		case "unix":
			if u.Path == "" {
				bad("url", "needs a socket path, as in unix:///run/redis.sock; got %q", redact(u))
			}
		default:
			bad("url", "must start with redis://, rediss:// or unix://; got %q", redact(u))
		}
	}
	if r.Timeout < 0 {
		bad("timeout", "must be positive (default %s); got %s", DefaultRedisTimeout, r.Timeout)
	}
	if r.Backoff < 0 {
		bad("backoff", "must be positive (default %s); got %s", DefaultRedisBackoff, r.Backoff)
	}
	if strings.ContainsAny(r.KeyPrefix, "{} \t\n") {
		bad("key_prefix", "must not contain braces or spaces; got %q", r.KeyPrefix)
	}
	for _, limit := range slices.Sorted(maps.Keys(r.OnError)) {
		switch limit {
		case LimitDailyTokens, LimitDailyCost, LimitRequestsPerMinute, LimitTokensPerMinute:
		default:
			bad("on_error."+limit, "unknown limit: must be daily_tokens, daily_cost, requests_per_minute or tokens_per_minute")
			continue
		}
		if v := r.OnError[limit]; v != FailOpen && v != FailClosed {
			bad("on_error."+limit, "must be open or closed; got %q", v)
		}
	}
	// Per-minute limits above MaxRedisRate would lose exactness in the
	// scripts' arithmetic.
	parent := strings.TrimSuffix(path, ".redis")
	check := func(p string, l Limits) {
		if l.RequestsPerMinute > MaxRedisRate {
			errs = append(errs, fmt.Errorf("%s.requests_per_minute: must be at most %d with quotas.redis", p, MaxRedisRate))
		}
		if l.TokensPerMinute > MaxRedisRate {
			errs = append(errs, fmt.Errorf("%s.tokens_per_minute: must be at most %d with quotas.redis", p, MaxRedisRate))
		}
	}
	for _, m := range []struct {
		key string
		m   map[string]Limits
	}{{"keys", c.Keys}, {"users", c.Users}, {"biz_lines", c.BizLines}} {
		for _, name := range slices.Sorted(maps.Keys(m.m)) {
			check(parent+"."+m.key+"."+name, m.m[name])
		}
	}
	check(parent+".default.key", c.Default.Key)
	check(parent+".default.user", c.Default.User)
	check(parent+".default.biz_line", c.Default.BizLine)
	return errs
}

// redact hides a URL's password in messages.
func redact(u *url.URL) string { return u.Redacted() }

// Over-max-input policies.
const (
	OverMaxReject = "reject"
	OverMaxAlert  = "alert"
)

// DefaultWarnAt is the share of a daily quota that raises a warning.
const DefaultWarnAt = 0.8

// maxRate bounds the per-minute limits so that the bucket arithmetic (in
// unit·µs, see bucket.go) cannot overflow int64. Ten billion a minute is
// far above any single engine or provider tier.
const maxRate = 10_000_000_000

// Validate checks the section and names the YAML path of every bad value,
// path being where the section sits ("quotas").
func (c *Config) Validate(path string) error {
	var errs []error
	if c.Timezone != "" {
		if _, err := time.LoadLocation(c.Timezone); err != nil {
			errs = append(errs, fmt.Errorf("%s.timezone: unknown time zone %q", path, c.Timezone))
		}
	}
	for _, m := range []struct {
		key string
		m   map[string]Limits
	}{{"keys", c.Keys}, {"users", c.Users}, {"biz_lines", c.BizLines}} {
		// Sorted so that the same bad file always gives the same message.
		for _, name := range slices.Sorted(maps.Keys(m.m)) {
			p := path + "." + m.key
			if strings.TrimSpace(name) == "" {
				errs = append(errs, fmt.Errorf("%s: a name must not be empty", p))
				continue
			}
			if err := m.m[name].Validate(p + "." + name); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, d := range []struct {
		key string
		l   Limits
	}{{"key", c.Default.Key}, {"user", c.Default.User}, {"biz_line", c.Default.BizLine}} {
		if err := d.l.Validate(path + ".default." + d.key); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, c.Redis.validate(path+".redis", c)...)
	return errors.Join(errs...)
}

// Validate checks one subject's limits; path names them ("quotas.users.alice").
func (l Limits) Validate(path string) error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", path, key, fmt.Sprintf(format, args...)))
	}
	for _, f := range []struct {
		key string
		v   int64
	}{{"daily_tokens", l.DailyTokens}, {"requests_per_minute", l.RequestsPerMinute},
		{"tokens_per_minute", l.TokensPerMinute}, {"max_input_tokens", l.MaxInputTokens}} {
		if f.v < 0 {
			bad(f.key, "must not be negative; got %d", f.v)
		}
	}
	if l.RequestsPerMinute > maxRate {
		bad("requests_per_minute", "must be at most %d", int64(maxRate))
	}
	if l.TokensPerMinute > maxRate {
		bad("tokens_per_minute", "must be at most %d", int64(maxRate))
	}
	if _, err := ParseCost(l.DailyCost); err != nil {
		bad("daily_cost", "%v", err)
	}
	switch l.OverMaxInput {
	case "", OverMaxReject, OverMaxAlert:
		if l.OverMaxInput != "" && l.MaxInputTokens == 0 {
			bad("over_max_input", "has no effect without max_input_tokens")
		}
	default:
		bad("over_max_input", "must be reject or alert; got %q", l.OverMaxInput)
	}
	if l.WarnAt < 0 || l.WarnAt > 1 || math.IsNaN(l.WarnAt) {
		bad("warn_at", "must be between 0 and 1; got %v", l.WarnAt)
	}
	return errors.Join(errs...)
}

// ResolveKeys returns a copy of c whose Keys are keyed by key id instead of
// key name. idByName maps each auth key's name to the id the gateway puts
// in Subject.KeyID. A name with no key is an error naming its YAML path,
// so a typo cannot silently leave a key unlimited.
func (c Config) ResolveKeys(path string, idByName map[string]string) (Config, error) {
	if len(c.Keys) == 0 {
		return c, nil
	}
	out := make(map[string]Limits, len(c.Keys))
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(c.Keys)) {
		id, ok := idByName[name]
		if !ok || id == "" {
			errs = append(errs, fmt.Errorf("%s.keys.%s: no auth key named %q", path, name, name))
			continue
		}
		out[id] = c.Keys[name]
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	c.Keys = out
	return c, nil
}

// ParseCost parses a non-negative decimal amount ("50", "50.00", "0.005")
// into nanos, exactly: money never passes through a float. Empty is zero.
func ParseCost(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	whole, frac, dot := strings.Cut(s, ".")
	if whole == "" || (dot && frac == "") || !digits(whole) || !digits(frac) {
		return 0, fmt.Errorf("must be a decimal amount such as \"50.00\"; got %q", s)
	}
	if len(frac) > 9 {
		return 0, fmt.Errorf("at most 9 decimal places; got %q", s)
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || w > math.MaxInt64/1_000_000_000-1 {
		return 0, fmt.Errorf("amount too large; got %q", s)
	}
	var f int64
	if frac != "" {
		f, _ = strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
	}
	return w*1e9 + f, nil
}

// FormatCost renders nanos as a decimal with at least two places ("49.98",
// "0.005"), the way the amounts appear in config and messages.
func FormatCost(n int64) string {
	neg := n < 0
	if neg {
		n = -n
	}
	s := strconv.FormatInt(n/1e9, 10) + "." + fmt.Sprintf("%09d", n%1e9)
	s = strings.TrimRight(s, "0")
	if i := strings.IndexByte(s, '.'); len(s)-i-1 < 2 {
		s += strings.Repeat("0", 2-(len(s)-i-1))
	}
	if neg {
		s = "-" + s
	}
	return s
}

func digits(s string) bool {
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// limits are Limits made ready for the hot path: money parsed, defaults
// applied.
type limits struct {
	dailyTokens, dailyCost int64
	rpm, tpm               int64
	maxInput               int64
	alertOnly              bool
	warnAt                 float64
}

func compile(l Limits) (*limits, error) {
	cost, err := ParseCost(l.DailyCost)
	if err != nil {
		return nil, err
	}
	c := &limits{
		dailyTokens: l.DailyTokens, dailyCost: cost,
		rpm: l.RequestsPerMinute, tpm: l.TokensPerMinute,
		maxInput: l.MaxInputTokens, alertOnly: l.OverMaxInput == OverMaxAlert,
		warnAt: l.WarnAt,
	}
	if c.warnAt == 0 {
		c.warnAt = DefaultWarnAt
	}
	if c.dailyTokens == 0 && c.dailyCost == 0 && c.rpm == 0 && c.tpm == 0 && c.maxInput == 0 {
		return nil, nil // nothing to enforce: the scope is not tracked at all
	}
	return c, nil
}

func (l *limits) daily() bool { return l.dailyTokens > 0 || l.dailyCost > 0 }
