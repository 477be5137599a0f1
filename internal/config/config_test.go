package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"

	"github.com/tollgate-dev/tollgate/internal/alert"
)

func noEnv(string) (string, bool) { return "", false }

func TestBadConfigs(t *testing.T) {
	// Each bad file and the exact error it must give: the YAML path of the
	// offending key or value, and what is wrong with it.
	cases := map[string]string{
		"unknown_top.bad.yml":             "lisen: unknown key (line 2)",
		"unknown_nested.bad.yml":          "upstreams[0].timeouts.idel: unknown key (line 6)",
		"bad_engine.bad.yml":              `upstreams[0].engine: must be one of vllm, sglang, tgi, llamacpp, ollama, openai, anthropic; got "triton"`,
		"bad_url.bad.yml":                 `upstreams[0].url: must be an absolute http(s) URL such as http://127.0.0.1:8000/v1; got "127.0.0.1:8000"`,
		"missing_env.bad.yml":             "upstreams[0].api_key: environment variable TOLLGATE_TEST_UNSET_KEY is not set (line 5)",
		"two_upstreams_no_models.bad.yml": "upstreams[0].models: must list the models it serves when there are several upstreams",
		"dup_upstream.bad.yml":            `upstreams[1].name: duplicate upstream name "a"`,
		"bad_duration.bad.yml":            "yaml: line 2: cannot unmarshal !!str `soon` into time.Duration",
		"bad_sampling.bad.yml":            "sampling.normal: must be between 0 and 1; got 1.5",
		"key_without_user.bad.yml":        "auth.keys[0].user_id: must not be empty",
		"key_both.bad.yml":                "auth.keys[0]: give key or key_sha256, not both",
		"bad_hash.bad.yml":                "auth.keys[0].key_sha256: must be 64 hex characters",
		"bad_listen.bad.yml":              `listen: must be host:port; got "localhost"`,
		"bad_retry.bad.yml":               "retry.attempts: must be at least 1 (1 disables retries)\nretry.on_status[0]: must be an HTTP error status (400–599); got 200",
		"list_not_map.bad.yml":            "upstreams: expected a list (line 2)",
		"bad_yaml.bad.yml":                "yaml: yaml: line 1: did not find expected ',' or ']'",
		"unknown_in_map.bad.yml":          "tokenizers.Qwen/Qwen3-8B.tokenizr: unknown key (line 3)",
		"bad_price.bad.yml":               "prices[0].output: must not be negative",
		"quota_unknown_key.bad.yml":       `quotas.keys.ghost: no auth key named "ghost"`,
		"quota_typo.bad.yml":              "quotas.users.alice.daily_token: unknown key (line 3)",
		"quota_redis.bad.yml":             "quotas.redis.timeout: must be positive (default 50ms); got -5ms\nquotas.redis.on_error.daily_cost: must be open or closed; got \"shut\"",
		"long_lane_over_max.bad.yml":      "upstreams[0].long_max_concurrency: must be less than max_concurrency (4), or long requests could take every slot; got 4",
		"long_lane_no_threshold.bad.yml":  "upstreams[0].long_max_concurrency: needs long_input_tokens, the input size above which a request is long",
		"long_lane_negative.bad.yml":      "upstreams[0].long_input_tokens: must not be negative (0: no long-input lane)",
		"tokenizer_wait_negative.bad.yml": "tokenizer_wait: must not be negative (0: never wait); got -1s",
		"priority_unknown_key.bad.yml":    `admission.priorities.keys.ghost: no auth key named "ghost"`,
		"priority_typo.bad.yml":           "admission.priorities.biz_line: unknown key (line 3)",
		"alert_bad_signal.bad.yml":        `alerts.rules[0].signal: unknown signal "ttft_p98"; one of ` + signalNames(),
		"alert_typo.bad.yml":              "alerts.rules[0].treshold: unknown key (line 5)",
		"alert_baseline_typo.bad.yml":     "alerts.rules[0].baseline.critcal: unknown key (line 5)",
		"alert_runaway_factor.bad.yml":    "alerts.runaway.warning: 0.5: a factor above 1 (10 = ten times the usual rate)",
		"alert_young_min.bad.yml":         "alerts.young_min: 1m30s: want whole minutes",
		"notifier_no_url.bad.yml":         "notifiers[0].url: required for type dingtalk",
		"bad_durability.bad.yml":          `store.durability: must be queue, memory or off; got "none"`,
		"bad_backend.bad.yml":             `store.backend: must be sqlite or clickhouse; got "postgres"`,
		"limits_bad.bad.yml": "limits.body_timeout: must be positive and at most 60s (default 30s); got 2m0s" +
			"\nlimits.max_conns_per_ip: must not be negative (0: no bound); got -1" +
			"\nlimits.max_buffered_bytes: must be at least twice limits.max_response_bytes, 134217728 (an answer of unknown length grows its buffer by doubling, and both buffers are held while it is copied); got 1048576",
		"passthrough_bad.bad.yml": `passthrough.deny[0]: must be a path prefix under /v1/ such as /v1/organization/; got "organization/"` +
			"\npassthrough.deny[1]: must be a plain path prefix (no .., spaces, ?, #, % or *); got \"/v1/../admin\"" +
			"\npassthrough.upstreams./v1/audio/: no upstream named \"whisper\"" +
			"\npassthrough.upstreams.audio: must be a path prefix under /v1/ such as /v1/organization/; got \"audio\"" +
			"\npassthrough.max_upload_bytes: must be positive (default 536870912, 512 MiB); got 0",
		"budget_bad.bad.yml": `budgets[0].subject: no auth.keys[].team is "plaform"` +
			"\nbudgets[1].window: must be between 1h and 366 days for a rolling budget; got 0s",
		"body_timeout_zero.bad.yml": "limits.body_timeout: must be positive and at most 60s (default 30s); got 0s",
		"clickhouse_no_url.bad.yml": "store.clickhouse.url: required when store.backend is clickhouse",
		"clickhouse_bad.bad.yml": `store.clickhouse.url: must be the HTTP interface's URL such as http://127.0.0.1:8123; got "tcp://10.0.0.9:9000/[redacted]"` +
			"\nstore.clickhouse.database: must be letters, digits and _, not starting with a digit; got \"9db\"" +
			"\nstore.clickhouse.timeout: must be positive (default 30s); got -1s",
	}
	files, _ := filepath.Glob("testdata/*.bad.yml")
	if len(files) != len(cases) {
		t.Errorf("%d bad files in testdata, %d cases in the table: keep them in step", len(files), len(cases))
	}
	for name, want := range cases {
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", name))
			if err != nil {
				t.Fatal(err)
			}
			_, err = Parse(b, noEnv)
			if err == nil {
				t.Fatalf("Parse accepted %s; want error %q", name, want)
			}
			if err.Error() != want {
				t.Errorf("error:\n got %q\nwant %q", err.Error(), want)
			}
		})
	}
}

func TestFullConfig(t *testing.T) {
	b, err := os.ReadFile("testdata/full.good.yml")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"OPENAI_API_KEY": "sk-upstream"}
	cfg, err := Parse(b, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Upstreams[1].APIKey; got != "sk-upstream" {
		t.Errorf("api_key = %q, want the expanded env value", got)
	}
	k := cfg.Auth.Keys[0]
	if k.Key != "" || k.KeySHA256 != HashKey("sk-search-default") {
		t.Errorf("proxy key kept as %+v; want only the sha256 of the ${VAR:-default} value", k)
	}
	if cfg.Headers.BizLine != "X-Biz" || cfg.Headers.Session != "X-Tollgate-Session" {
		t.Errorf("headers = %+v; want biz_line overridden and the rest defaulted", cfg.Headers)
	}
	if got, want := cfg.Upstreams[0].Timeouts, (Timeouts{2 * time.Second, 30 * time.Second, 10 * time.Second, 5 * time.Minute}); got != want {
		t.Errorf("timeouts = %+v, want %+v", got, want)
	}
	if diff := cmp.Diff([]int{500, 502, 503}, cfg.Retry.OnStatus); diff != "" {
		t.Errorf("on_status replaced, not merged (-want +got):\n%s", diff)
	}
	if len(cfg.Prices) != 2 || cfg.Prices[1].Input.String() != "0.15" || cfg.Quotas.Users["alice"].DailyCost != "50.00" || cfg.API.Tokens[0].Token != "" {
		t.Errorf("prices/quotas/api not decoded or token kept: %+v %+v %+v", cfg.Prices, cfg.Quotas, cfg.API)
	}
	if r := cfg.Quotas.Redis; r.URL != "redis://127.0.0.1:6379/0" || !r.FailClosed("daily_cost") || r.FailClosed("daily_tokens") || r.TimeoutOrDefault() != 50*time.Millisecond {
		t.Errorf("quotas.redis: %+v", r)
	}
	if q, err := cfg.QuotaConfig(); err != nil || q.Keys[HashKey("sk-search-default")[:12]].DailyTokens != 1000000 {
		t.Errorf("QuotaConfig: %v %+v", err, q.Keys)
	}
	if u := cfg.Upstreams[0]; u.MaxConcurrency != 16 || u.QueueTimeout != 20*time.Second || u.LongInputTokens != 8000 || u.LongMaxConcurrency != 4 {
		t.Errorf("upstream admission not decoded: %+v", u)
	}
	if a := cfg.Admission; a.DefaultPriority != 1 || a.Priorities.BizLines["batch"] != -5 {
		t.Errorf("admission not decoded: %+v", a)
	}
	if diff := cmp.Diff(map[string]int{HashKey("sk-search-default")[:12]: 10}, cfg.KeyPriorities()); diff != "" {
		t.Errorf("KeyPriorities by key id (-want +got):\n%s", diff)
	}
	if want := (Limits{MaxRequestBytes: 4 << 20, MaxResponseBytes: 64 << 20, BodyTimeout: 10 * time.Second, MaxConnsPerIP: 64, MaxBufferedBytes: 128 << 20}); cfg.Limits != want {
		t.Errorf("limits = %+v, want %+v (max_response_bytes defaulted)", cfg.Limits, want)
	}
	if cfg.Store.FlushInterval != 50*time.Millisecond || cfg.Log.Format != "json" {
		t.Errorf("store/log not decoded: %+v %+v", cfg.Store, cfg.Log)
	}
	if cfg.TokenizerWait != 2*time.Second {
		t.Errorf("tokenizer_wait = %s, want 2s", cfg.TokenizerWait)
	}
}

// TestBaselineFactors: a baseline rule's factors live in an inline
// struct (alert.Baseline's Levels); set in the file, they are the rule's
// levels in the engine, not the defaults.
func TestBaselineFactors(t *testing.T) {
	cfg, err := Parse([]byte(`alerts:
  defaults: false
  rules:
    - name: slow
      signal: ttft_p99
      baseline: {previous: 30m, warning: 2, critical: 4}
    - name: cache_drop
      signal: requests
      below: true
      baseline: {same_hour_days: 7, warning: 0.5, critical: 0.2}
    - name: defaulted
      signal: e2e_p95
      baseline: {previous: 1h}
`), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	var got []alert.Baseline
	for _, r := range alert.NewEngine(cfg.Alerts, nil, alert.Options{}).Rules() {
		got = append(got, *r.Baseline)
	}
	want := []alert.Baseline{
		{Previous: 30 * time.Minute, Levels: alert.Levels{Warning: 2, Critical: 4}},
		{SameHourDays: 7, Levels: alert.Levels{Warning: 0.5, Critical: 0.2}},
		{Previous: time.Hour, Levels: alert.Levels{Warning: 1.5, Critical: 3}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the engine's baselines (-want +got):\n%s", diff)
	}
}

// TestKeysAsYAMLDecodes holds checkKeys to the decoder it guards: on
// every struct shape yaml.v3 decodes (tags, untagged fields, ",inline"
// structs by value, by pointer and nested, an ",inline" map), a document
// passes the check exactly when yaml.v3's strict decoding (KnownFields)
// takes it.
func TestKeysAsYAMLDecodes(t *testing.T) {
	type Deep struct {
		D int `yaml:"d"`
	}
	type Levels struct {
		W    int `yaml:"w"`
		Deep `yaml:",inline"`
	}
	type Ptr struct {
		P int `yaml:"p"`
	}
	type leaf struct {
		X int `yaml:"x"`
	}
	type shape struct {
		Name     string `yaml:"name"`
		Untagged int
		Skipped  int `yaml:"-"`
		Levels   `yaml:",inline"`
		*Ptr     `yaml:",inline"`
	}
	type open struct {
		Name string          `yaml:"name"`
		Rest map[string]leaf `yaml:",inline"`
	}
	for _, c := range []struct {
		typ reflect.Type
		doc string
	}{
		{reflect.TypeFor[shape](), `{name: a, w: 1, d: 2, p: 3, untagged: 4}`},
		{reflect.TypeFor[shape](), `{w: 1, e: 2}`},
		{reflect.TypeFor[shape](), `{Untagged: 4}`},
		{reflect.TypeFor[shape](), `{skipped: 1}`},
		{reflect.TypeFor[shape](), `{levels: {w: 1}}`},
		{reflect.TypeFor[shape](), `{deep: {d: 1}}`},
		{reflect.TypeFor[shape](), `{ptr: {p: 1}}`},
		{reflect.TypeFor[open](), `{name: a, b: {x: 1}, c: {x: 2}}`},
		{reflect.TypeFor[open](), `{name: a, b: {y: 1}}`},
		{reflect.TypeFor[open](), `{rest: {b: {x: 1}}}`},
	} {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(c.doc), &n); err != nil {
			t.Fatal(err)
		}
		checkErr := checkKeys(n.Content[0], c.typ, "")
		dec := yaml.NewDecoder(strings.NewReader(c.doc))
		dec.KnownFields(true)
		decErr := dec.Decode(reflect.New(c.typ).Interface())
		if (checkErr == nil) != (decErr == nil) {
			t.Errorf("%s %s: checkKeys says %v, yaml.v3 says %v", c.typ.Name(), c.doc, checkErr, decErr)
		}
	}
}

func TestDurabilityOff(t *testing.T) {
	c, err := Parse([]byte("store:\n  durability: off\n"), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if c.Store.Durability != "off" {
		t.Errorf("store.durability = %q, want off", c.Store.Durability)
	}
}

func TestEmptyFileIsDefaults(t *testing.T) {
	for _, in := range []string{"", "# nothing\n", "{}\n"} {
		cfg, err := Parse([]byte(in), noEnv)
		if err != nil {
			t.Fatalf("Parse(%q): %v", in, err)
		}
		if diff := cmp.Diff(Default(), cfg); diff != "" {
			t.Errorf("Parse(%q) differs from defaults:\n%s", in, diff)
		}
	}
}

func TestUpstreamListReplacesDefault(t *testing.T) {
	cfg, err := Parse([]byte("upstreams:\n  - {name: x, url: 'http://127.0.0.1:9/v1', engine: tgi}\n"), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Upstreams) != 1 || cfg.Upstreams[0].Name != "x" || cfg.Upstreams[0].Engine != "tgi" {
		t.Errorf("upstreams = %+v", cfg.Upstreams)
	}
}

func TestEnvValueStaysString(t *testing.T) {
	// A secret that looks like a number or a bool must stay the same string.
	cfg, err := Parse([]byte("upstreams:\n  - {name: x, url: 'http://127.0.0.1:9/v1', engine: openai, api_key: '${K}'}\n"),
		func(string) (string, bool) { return "0123", true })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Upstreams[0].APIKey != "0123" {
		t.Errorf("api_key = %q, want 0123", cfg.Upstreams[0].APIKey)
	}
	if _, err := Parse([]byte("listen: ${ADDR}\n"), func(string) (string, bool) { return "127.0.0.1:1", true }); err != nil {
		t.Errorf("expanded listen: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.yml")
	for _, p := range files {
		b, _ := os.ReadFile(p)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg, err := Parse(b, noEnv)
		if err == nil && cfg == nil {
			t.Fatal("nil config without error")
		}
		if err != nil && strings.TrimSpace(err.Error()) == "" {
			t.Fatal("empty error message")
		}
	})
}

func signalNames() string {
	var names []string
	for _, s := range alert.Signals {
		names = append(names, s.Name)
	}
	return strings.Join(names, ", ")
}
