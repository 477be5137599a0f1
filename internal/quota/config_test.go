package quota

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
)

func TestValidateNamesYAMLPaths(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"warn_at", users(map[string]Limits{"alice": {WarnAt: 1.5}}),
			"quotas.users.alice.warn_at: must be between 0 and 1; got 1.5"},
		{"negative", Config{BizLines: map[string]Limits{"search": {DailyTokens: -1, TokensPerMinute: -5}}},
			"quotas.biz_lines.search.daily_tokens: must not be negative; got -1\nquotas.biz_lines.search.tokens_per_minute: must not be negative; got -5"},
		{"cost", Config{Keys: map[string]Limits{"ci": {DailyCost: "12,50"}}},
			`quotas.keys.ci.daily_cost: must be a decimal amount such as "50.00"; got "12,50"`},
		{"cost_places", users(map[string]Limits{"bob": {DailyCost: "0.0000000001"}}),
			`quotas.users.bob.daily_cost: at most 9 decimal places; got "0.0000000001"`},
		{"policy", users(map[string]Limits{"alice": {MaxInputTokens: 8000, OverMaxInput: "block"}}),
			`quotas.users.alice.over_max_input: must be reject or alert; got "block"`},
		{"policy_alone", users(map[string]Limits{"alice": {OverMaxInput: "alert"}}),
			"quotas.users.alice.over_max_input: has no effect without max_input_tokens"},
		{"rate_cap", users(map[string]Limits{"alice": {RequestsPerMinute: 20_000_000_000}}),
			"quotas.users.alice.requests_per_minute: must be at most 10000000000"},
		{"timezone", Config{Timezone: "Mars/Olympus"}, `quotas.timezone: unknown time zone "Mars/Olympus"`},
		{"default", Config{Default: Defaults{BizLine: Limits{WarnAt: -0.1}}},
			"quotas.default.biz_line.warn_at: must be between 0 and 1; got -0.1"},
		{"empty_name", users(map[string]Limits{" ": {}}), "quotas.users: a name must not be empty"},
		{"sorted", users(map[string]Limits{"zed": {WarnAt: 2}, "amy": {WarnAt: 3}}),
			"quotas.users.amy.warn_at: must be between 0 and 1; got 3\nquotas.users.zed.warn_at: must be between 0 and 1; got 2"},
		{"redis_url_missing", Config{Redis: Redis{Timeout: time.Second}},
			"quotas.redis.url: required when other quotas.redis settings are given (without it the counters stay in process)"},
		{"redis_scheme", Config{Redis: Redis{URL: "http://u:secret@cache:6379"}},
			`quotas.redis.url: must start with redis://, rediss:// or unix://; got "http://u:xxxxx@cache:6379"`},
		{"redis_unparsable", Config{Redis: Redis{URL: "redis://:S3cr%t!@redis.internal:6379/0"}},
			`quotas.redis.url: not a URL (invalid URL escape "%t!")`},
		{"redis_host", Config{Redis: Redis{URL: "redis:///0"}},
			`quotas.redis.url: needs a host, as in redis://127.0.0.1:6379/0; got "redis:///0"`},
		{"redis_timeout", Config{Redis: Redis{URL: "redis://cache:6379", Timeout: -time.Millisecond, Backoff: -time.Second}},
			"quotas.redis.timeout: must be positive (default 50ms); got -1ms\nquotas.redis.backoff: must be positive (default 1s); got -1s"},
		{"redis_on_error", Config{Redis: Redis{URL: "redis://cache:6379", OnError: map[string]string{"daily_cost": "shut", "max_input_tokens": "open"}}},
			`quotas.redis.on_error.daily_cost: must be open or closed; got "shut"` + "\n" +
				"quotas.redis.on_error.max_input_tokens: unknown limit: must be daily_tokens, daily_cost, requests_per_minute or tokens_per_minute"},
		{"redis_prefix", Config{Redis: Redis{URL: "redis://cache:6379", KeyPrefix: "a{b}"}},
			`quotas.redis.key_prefix: must not contain braces or spaces; got "a{b}"`},
		{"redis_rate_cap", Config{Redis: Redis{URL: "redis://cache:6379"}, Users: map[string]Limits{"alice": {TokensPerMinute: MaxRedisRate + 1}},
			Default: Defaults{Key: Limits{RequestsPerMinute: MaxRedisRate + 1}}},
			"quotas.users.alice.tokens_per_minute: must be at most 50000000 with quotas.redis\nquotas.default.key.requests_per_minute: must be at most 50000000 with quotas.redis"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate("quotas")
			if err == nil || err.Error() != tc.want {
				t.Errorf("error:\n got %v\nwant %s", err, tc.want)
			}
			if _, err := NewLocal(tc.cfg, nil, nil, nil); err == nil {
				t.Error("NewLocal accepted a config Validate rejects")
			}
		})
	}
	good := Config{Timezone: "Asia/Shanghai", Users: map[string]Limits{"alice": {DailyCost: "50", WarnAt: 1, MaxInputTokens: 8000, OverMaxInput: "alert"}}}
	if err := good.Validate("quotas"); err != nil {
		t.Errorf("good config: %v", err)
	}
	good.Redis = Redis{URL: "rediss://user:pw@cache:6380/2", KeyPrefix: "tg-prod", Timeout: 20 * time.Millisecond,
		OnError: map[string]string{"daily_cost": "closed", "requests_per_minute": "open"}}
	if err := good.Validate("quotas"); err != nil {
		t.Errorf("good config with redis: %v", err)
	}
	if !good.Redis.FailClosed("daily_cost") || good.Redis.FailClosed("daily_tokens") || good.Redis.BackoffOrDefault() != time.Second ||
		good.Redis.TimeoutOrDefault() != 20*time.Millisecond || (&Redis{}).PrefixOrDefault() != "tollgate" {
		t.Errorf("redis policy and defaults: %+v", good.Redis)
	}
}

// The section as tollgate's config file carries it; daily_cost unquoted
// must reach ParseCost as its literal text, not a rounded float.
func TestYAML(t *testing.T) {
	const src = `
timezone: Asia/Shanghai
keys:
  ci-bot: {requests_per_minute: 30}
users:
  alice:
    daily_tokens: 2000000
    daily_cost: 50.10
    tokens_per_minute: 90000
    max_input_tokens: 8000
    over_max_input: alert
    warn_at: 0.9
biz_lines:
  search: {daily_cost: "300"}
default:
  user: {daily_tokens: 100000}
`
	var cfg Config
	dec := yaml.NewDecoder(strings.NewReader(src))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		t.Fatal(err)
	}
	want := Config{
		Timezone: "Asia/Shanghai",
		Keys:     map[string]Limits{"ci-bot": {RequestsPerMinute: 30}},
		Users: map[string]Limits{"alice": {DailyTokens: 2_000_000, DailyCost: "50.10", TokensPerMinute: 90_000,
			MaxInputTokens: 8000, OverMaxInput: "alert", WarnAt: 0.9}},
		BizLines: map[string]Limits{"search": {DailyCost: "300"}},
		Default:  Defaults{User: Limits{DailyTokens: 100_000}},
	}
	if diff := cmp.Diff(want, cfg); diff != "" {
		t.Errorf("decoded (-want +got):\n%s", diff)
	}
	if err := cfg.Validate("quotas"); err != nil {
		t.Error(err)
	}
	if n, _ := ParseCost(cfg.Users["alice"].DailyCost); n != 50_100_000_000 {
		t.Errorf("daily_cost = %d nanos", n)
	}
}

func TestResolveKeys(t *testing.T) {
	cfg := Config{Keys: map[string]Limits{"ci-bot": {RequestsPerMinute: 30}, "ghost": {RequestsPerMinute: 1}}}
	_, err := cfg.ResolveKeys("quotas", map[string]string{"ci-bot": "3fa9c2d1e0b4"})
	if want := `quotas.keys.ghost: no auth key named "ghost"`; err == nil || err.Error() != want {
		t.Errorf("error %v; want %s", err, want)
	}
	delete(cfg.Keys, "ghost")
	got, err := cfg.ResolveKeys("quotas", map[string]string{"ci-bot": "3fa9c2d1e0b4"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]Limits{"3fa9c2d1e0b4": {RequestsPerMinute: 30}}, got.Keys); diff != "" {
		t.Errorf("keys (-want +got):\n%s", diff)
	}
	if _, ok := cfg.Keys["ci-bot"]; !ok {
		t.Error("ResolveKeys changed its receiver's map")
	}
}

func TestParseCost(t *testing.T) {
	for in, want := range map[string]int64{
		"": 0, "0": 0, "50": 50_000_000_000, "50.00": 50_000_000_000, "0.5": 500_000_000,
		"0.000000001": 1, " 12.34 ": 12_340_000_000, "9223372035.999999999": 9_223_372_035_999_999_999,
	} {
		if got, err := ParseCost(in); err != nil || got != want {
			t.Errorf("ParseCost(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"-1", "+1", "1e3", ".5", "5.", "1.2.3", "abc", "1,5", "9223372036", "99999999999999999999"} {
		if got, err := ParseCost(in); err == nil {
			t.Errorf("ParseCost(%q) = %d; want an error", in, got)
		}
	}
	for n, want := range map[int64]string{0: "0.00", 50_000_000_000: "50.00", 49_980_000_000: "49.98", 5_000_000: "0.005", 1: "0.000000001", -1_500_000_000: "-1.50"} {
		if got := FormatCost(n); got != want {
			t.Errorf("FormatCost(%d) = %q; want %q", n, got, want)
		}
	}
}

// Whatever parses must format back to the same amount.
func FuzzParseCost(f *testing.F) {
	for _, s := range []string{"50.00", "0.005", "9223372035.999999999", "1.", "-3", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseCost(s)
		if err != nil {
			return
		}
		if n < 0 {
			t.Fatalf("ParseCost(%q) = %d: negative", s, n)
		}
		back, err := ParseCost(FormatCost(n))
		if err != nil || back != n {
			t.Fatalf("ParseCost(%q) = %d, formatted %q, parsed back %d, %v", s, n, FormatCost(n), back, err)
		}
	})
}

// A quota day is a calendar day in the zone, 23 or 25 hours long across
// a daylight-saving change.
func TestCalendar(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	c := calendar{loc: ny}
	d := c.at(time.Date(2026, 3, 8, 12, 0, 0, 0, ny)) // spring forward
	if got := d.end.Sub(d.start); got != 23*time.Hour {
		t.Errorf("spring-forward day lasts %v", got)
	}
	if again := c.at(d.end.Add(-time.Nanosecond)); again != d {
		t.Error("last instant of the day not served from the cache")
	}
	next := c.at(d.end)
	if next.start != d.end || next.key <= d.key {
		t.Errorf("next day %v after %v", next.start, d.end)
	}
	// An older instant (a goroutine that read the clock earlier) gets its
	// own day without moving the cache back.
	if old := c.at(d.start); old.key != d.key || c.cur.Load() != next {
		t.Error("cache moved back")
	}
}
