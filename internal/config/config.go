// Package config is tollgate's single YAML configuration: defaults first,
// strict decoding (an unknown key is an error naming its path), ${ENV}
// expansion for secrets, and Validate naming the YAML path of every bad
// value. Everything else is wired from the Config that main builds here.
package config

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/alert"
	"github.com/tollgate-dev/tollgate/internal/budget"
	"github.com/tollgate-dev/tollgate/internal/capture"
	"github.com/tollgate-dev/tollgate/internal/cost"
	"github.com/tollgate-dev/tollgate/internal/label"
	"github.com/tollgate-dev/tollgate/internal/notify"
	"github.com/tollgate-dev/tollgate/internal/quota"
	"github.com/tollgate-dev/tollgate/internal/tokenizer"
)

// Engine kinds tollgate knows how to read signals from.
var EngineKinds = []string{"vllm", "sglang", "tgi", "llamacpp", "ollama", "openai", "anthropic"}

// Config is the whole configuration.
type Config struct {
	Listen string `yaml:"listen"`
	// ListenTLS serves the listener (proxy, API and dashboard) over TLS
	// from PEM files; plain HTTP when unset.
	ListenTLS     ListenTLS                 `yaml:"listen_tls"`
	ShutdownGrace time.Duration             `yaml:"shutdown_grace"`
	Log           Log                       `yaml:"log"`
	Store         Store                     `yaml:"store"`
	Upstreams     []Upstream                `yaml:"upstreams"`
	Retry         Retry                     `yaml:"retry"`
	Auth          Auth                      `yaml:"auth"`
	Headers       Headers                   `yaml:"headers"`
	Limits        Limits                    `yaml:"limits"`
	Sampling      Sampling                  `yaml:"sampling"`
	Metrics       Metrics                   `yaml:"metrics"`
	API           API                       `yaml:"api"`
	Tokenizers    map[string]tokenizer.Spec `yaml:"tokenizers"`
	// TokenizerWait bounds how long a finishing request whose engine
	// reported no usage waits for its model's tokenizer still loading
	// (the first requests after start); past it the input is recorded
	// unknown. Only the response's last bytes wait. 0: never wait.
	TokenizerWait time.Duration `yaml:"tokenizer_wait"`
	// Prices and GPU-hour prices rate every request (see internal/cost).
	Prices   []cost.Price   `yaml:"prices"`
	GPUHours []cost.GPUHour `yaml:"gpu_hours"`
	// Quotas are checked at admission (see internal/quota).
	Quotas quota.Config `yaml:"quotas"`
	// Budgets are monthly, daily and rolling budgets of tokens and cost
	// for users, keys, business lines and teams, with alert thresholds
	// and optional enforcement (see internal/budget).
	Budgets []budget.Config `yaml:"budgets"`
	// ResponseCache answers exact repeats without the engine; off by default.
	ResponseCache ResponseCache `yaml:"response_cache"`
	// OTLP is the trace receiver engines send their own spans to (vLLM:
	// --otlp-traces-endpoint http://HOST:4318/v1/traces, or grpc://HOST:4317).
	OTLP OTLP `yaml:"otlp"`
	// EngineMetrics scrapes each upstream's own /metrics (vllm:*, sglang:*,
	// llamacpp:*, tgi_*) into time series; 0 turns it off.
	EngineMetrics EngineMetrics `yaml:"engine_metrics"`
	// TraceExport sends one OTLP span per request (GenAI conventions, a
	// child per latency segment) to a tracing backend; off when empty.
	TraceExport TraceExport `yaml:"trace_export"`
	// Admission orders the requests waiting for an upstream slot by
	// priority (see admission.go).
	Admission Admission `yaml:"admission"`
	// Alerts are rules over sliding windows of finished requests (see
	// internal/alert); the seeds' built-in rules run unless turned off.
	Alerts alert.Config `yaml:"alerts"`
	// Notifiers deliver alerts by severity: webhook, Slack, DingTalk,
	// Feishu/Lark, WeCom, or the log (see internal/notify).
	Notifiers notify.Config `yaml:"notifiers"`
	// Capture keeps the redacted prompt and response of slow or failed
	// requests in a table of their own (see internal/capture); off by
	// default, and a retention is required to turn it on.
	Capture capture.Config `yaml:"capture"`
	// Replicas coordinate alerting across tollgate processes through
	// Redis: one evaluates, each notification is sent once (replicas.go).
	Replicas Replicas `yaml:"replicas"`
	// Passthrough relays and records every other request under /v1/
	// (passthrough.go).
	Passthrough Passthrough `yaml:"passthrough"`
}

// TraceExport configures the OTLP/HTTP span export.
type TraceExport struct {
	Endpoint    string            `yaml:"endpoint"` // e.g. http://jaeger:4318
	Headers     map[string]string `yaml:"headers"`
	SampleRatio float64           `yaml:"sample_ratio"`
}

// EngineMetrics configures the scrape of engines' /metrics.
type EngineMetrics struct {
	Interval time.Duration `yaml:"interval"`
}

// OTLP configures the trace receiver. An empty address turns a listener off.
type OTLP struct {
	HTTPListen string        `yaml:"http_listen"`
	GRPCListen string        `yaml:"grpc_listen"`
	JoinWindow time.Duration `yaml:"join_window"` // how long a span and its request wait for each other
}

// ResponseCache is the optional exact-match cache of non-streamed answers.
// It holds completion text in memory while enabled, so it is off unless
// asked for.
type ResponseCache struct {
	Enabled  bool          `yaml:"enabled"`
	TTL      time.Duration `yaml:"ttl"`
	MaxBytes int64         `yaml:"max_bytes"`
	// Scope "key" (default) answers a repeat only to the same API key;
	// "global" shares answers between keys.
	Scope string `yaml:"scope"`
}

// QueueDir is where the write-ahead queue lives.
func (c *Config) QueueDir() string {
	if c.Store.Queue.Dir != "" {
		return c.Store.Queue.Dir
	}
	return c.Store.SQLite.Path + ".queue"
}

// CostConfig is the price table's part of the configuration.
func (c *Config) CostConfig() cost.Config { return cost.Config{Prices: c.Prices, GPUHours: c.GPUHours} }

// LabelConfig is what bounds the metrics' and windows' dimensions: the
// configured models and business lines (keys', priorities', quotas'),
// and how many more each may learn.
func (c *Config) LabelConfig() label.Config {
	lc := label.Config{MaxModels: c.Metrics.MaxModels, MaxBizLines: c.Metrics.MaxBizLines, MaxTemplates: c.Metrics.MaxTemplates}
	for _, u := range c.Upstreams {
		lc.Models = append(lc.Models, u.Models...)
	}
	for _, k := range c.Auth.Keys {
		if k.BizLine != "" {
			lc.BizLines = append(lc.BizLines, k.BizLine)
		}
	}
	for b := range c.Quotas.BizLines {
		lc.BizLines = append(lc.BizLines, b)
	}
	for b := range c.Admission.Priorities.BizLines {
		lc.BizLines = append(lc.BizLines, b)
	}
	return lc
}

// keyNames are the configured keys' names; teams their teams.
func (c *Config) keyNames() map[string]bool {
	out := map[string]bool{}
	for _, k := range c.Auth.Keys {
		if k.Name != "" {
			out[k.Name] = true
		}
	}
	return out
}

func (c *Config) teams() map[string]bool {
	out := map[string]bool{}
	for _, k := range c.Auth.Keys {
		if k.Team != "" {
			out[k.Team] = true
		}
	}
	return out
}

// BudgetKeys resolves the budgets' key names and teams to key ids (the
// first 12 hex digits of the key's SHA-256, as the gateway identifies keys).
func (c *Config) BudgetKeys() (byName map[string]string, byTeam map[string][]string) {
	byName, byTeam = map[string]string{}, map[string][]string{}
	for _, k := range c.Auth.Keys {
		id := k.Hash()[:12]
		if k.Name != "" {
			byName[k.Name] = id
		}
		if k.Team != "" {
			byTeam[k.Team] = append(byTeam[k.Team], id)
		}
	}
	return byName, byTeam
}

// QuotaConfig returns the quotas with key names resolved to key ids and
// the store's time zone as the default day boundary.
func (c *Config) QuotaConfig() (quota.Config, error) {
	ids := map[string]string{}
	for _, k := range c.Auth.Keys {
		if k.Name != "" {
			ids[k.Name] = k.Hash()[:12]
		}
	}
	q := c.Quotas
	if q.Timezone == "" {
		q.Timezone = c.Store.Timezone
	}
	return q.ResolveKeys("quotas", ids)
}

// API protects the JSON API (/api/v1/) and, later, the dashboard. Proxy
// keys never open it. With no tokens it answers loopback clients only,
// and never with the captures (capture.enabled needs an admin token).
type API struct {
	Tokens []APIToken `yaml:"tokens"`
}

func (a API) hasAdmin() bool {
	for _, t := range a.Tokens {
		if t.Role == "admin" {
			return true
		}
	}
	return false
}

// APIToken is one bearer token for the API, given as the token (typically
// from ${ENV}) or its SHA-256; only the hash is kept after loading.
type APIToken struct {
	Name        string `yaml:"name"`
	Token       string `yaml:"token"`
	TokenSHA256 string `yaml:"token_sha256"`
	Role        string `yaml:"role"` // admin | read
}

// Hash is the SHA-256 of the token, however it was given, as lower-case
// hex (a digest pasted in upper case still matches).
func (t APIToken) Hash() string {
	if t.TokenSHA256 != "" {
		return strings.ToLower(t.TokenSHA256)
	}
	return HashKey(t.Token)
}

// Log configures the process log.
type Log struct {
	Level  string `yaml:"level"`  // debug | info | warn | error
	Format string `yaml:"format"` // text | json
}

// Store configures where records go.
type Store struct {
	// Backend is where the ledger lives: "sqlite" (default), an embedded
	// file, or "clickhouse", shared by several replicas. The write-ahead
	// queue stays local either way.
	Backend       string        `yaml:"backend"`
	SQLite        SQLite        `yaml:"sqlite"`
	ClickHouse    ClickHouse    `yaml:"clickhouse"`
	QueueSize     int           `yaml:"queue_size"`
	BatchSize     int           `yaml:"batch_size"`
	FlushInterval time.Duration `yaml:"flush_interval"`
	// Timezone is the calendar of day and month reports and daily quotas,
	// an IANA name such as Asia/Shanghai.
	Timezone  string    `yaml:"timezone"`
	Retention Retention `yaml:"retention"`
	// Durability: "queue" (default) writes each Record to a local
	// write-ahead queue, group-committed, before the response's last bytes,
	// then ships it to the store; "memory" batches in memory only (faster,
	// but records still queued are lost if the process is killed); "off"
	// writes no Records at all — no ledger, no rollups, no costs kept —
	// and exists only to measure the proxy without its accounting
	// (tollgate bench overhead, arm B0).
	Durability string `yaml:"durability"`
	Queue      Queue  `yaml:"queue"`
}

// Queue is the local write-ahead queue in front of the store. It is also
// where records wait while the store is down.
type Queue struct {
	Dir           string        `yaml:"dir"`       // default: the SQLite path + ".queue"
	MaxBytes      int64         `yaml:"max_bytes"` // unshipped data cap; beyond it records are dropped and counted
	CommitTimeout time.Duration `yaml:"commit_timeout"`
}

// Retention says how long each kind of data is kept; 0 keeps it forever.
type Retention struct {
	Details time.Duration `yaml:"details"` // sampled token timelines
	Ledger  time.Duration `yaml:"ledger"`  // one row per request
	Minute  time.Duration `yaml:"minute"`  // per-minute rollups (dashboard)
	Hour    time.Duration `yaml:"hour"`    // per-hour rollups
	Day     time.Duration `yaml:"day"`     // per-day rollups (billing reports)
	Events  time.Duration `yaml:"events"`
}

// SQLite is the embedded store.
type SQLite struct {
	Path string `yaml:"path"`
}

// ClickHouse is the shared store, used when Store.Backend is
// "clickhouse". Its ClickHouse defaults for batch_size (1000) and
// flush_interval (1s) apply when the file sets neither: ClickHouse wants
// few, large inserts.
type ClickHouse struct {
	// URL is the server's HTTP interface, e.g. http://127.0.0.1:8123;
	// user and password, if any, go in its userinfo. serve starts when
	// the server does not answer and connects to it later; the commands
	// that read the ledger fail.
	URL string `yaml:"url"`
	// Database holds the tables; created if missing. Default "tollgate".
	Database string `yaml:"database"`
	// Timeout bounds each call to the server. Default 30s.
	Timeout time.Duration `yaml:"timeout"`
}

// SQLiteBatchSize is the default batch on SQLite. A batch is one
// transaction: its rollup rows are summed in memory and each page it
// dirties is written once, so larger batches cost less per Record
// (BenchmarkInsert: 512 → 4096 rows, ≈ −30 % CPU). The shipper sends what
// has waited store.flush_interval, so batches fill only under load; a
// full one holds the writer for a few hundred milliseconds.
const SQLiteBatchSize = 4096

// ClickHouse's batching defaults: one insert a second per replica (what
// ClickHouse asks of a writer), of whatever the second brought, up to
// 50,000 rows. A replica ships a full batch at once, so at higher rates
// it sends more often, each insert still large: ClickHouse's cost per
// row falls as batches grow (docs/benchmarks.md, "ClickHouse ingest").
const (
	ClickHouseBatchSize     = 50000
	ClickHouseFlushInterval = time.Second
)

// Upstream is one inference engine.
type Upstream struct {
	Name     string   `yaml:"name"`
	URL      string   `yaml:"url"`    // base URL including /v1
	Engine   string   `yaml:"engine"` // one of EngineKinds
	APIKey   string   `yaml:"api_key"`
	Models   []string `yaml:"models"` // served models; empty: every model (single upstream only)
	Timeouts Timeouts `yaml:"timeouts"`
	// MaxConcurrency bounds requests in flight to this upstream (0: no
	// bound); others wait in the gateway queue, highest priority first
	// (admission.priorities) and FIFO within a priority, up to
	// QueueTimeout (default 30s), then get 503 with Retry-After. The wait
	// is part of the gateway_queue segment.
	MaxConcurrency int           `yaml:"max_concurrency"`
	QueueTimeout   time.Duration `yaml:"queue_timeout"`
	// LongInputTokens turns on the long-input lane: a request whose
	// estimated input tokens (the admission estimate: the model's
	// tokenizer, else prompt bytes / 4) exceed it is "long", and at most
	// LongMaxConcurrency long requests are in flight to this upstream.
	// Long requests still count against MaxConcurrency, which must be
	// larger, so max_concurrency − long_max_concurrency slots are always
	// left to short requests. A long request that waited QueueTimeout
	// while its lane was full gets 429. 0 (default): no lane.
	LongInputTokens    int64 `yaml:"long_input_tokens"`
	LongMaxConcurrency int   `yaml:"long_max_concurrency"`
}

// Timeouts bound each phase of an upstream exchange. Zero disables one.
type Timeouts struct {
	Connect    time.Duration `yaml:"connect"`     // TCP (and TLS) connect
	FirstToken time.Duration `yaml:"first_token"` // request sent → first byte of the response body
	Idle       time.Duration `yaml:"idle"`        // between two chunks of a stream
	Total      time.Duration `yaml:"total"`       // the whole exchange
}

// Retry says when a failed attempt may be retried on another upstream.
type Retry struct {
	// Attempts is the most attempts per request, first included; 1 disables retries.
	Attempts int `yaml:"attempts"`
	// OnStatus are upstream statuses, answered before any byte reached the
	// client, that may be retried elsewhere. Connect failures always may.
	OnStatus []int `yaml:"on_status"`
}

// Auth maps proxy API keys to identities. With no keys the gateway is open.
type Auth struct {
	Keys []Key `yaml:"keys"`
}

// Key is one proxy API key. Give the key itself (typically from ${ENV}) or
// its SHA-256; only the hash is kept after loading.
type Key struct {
	Name      string `yaml:"name"`
	Key       string `yaml:"key"`
	KeySHA256 string `yaml:"key_sha256"`
	UserID    string `yaml:"user_id"`
	BizLine   string `yaml:"biz_line"`
	Team      string `yaml:"team"`
}

// Headers name the request headers that carry attribution.
type Headers struct {
	BizLine   string `yaml:"biz_line"`
	Session   string `yaml:"session"`
	Template  string `yaml:"template"`
	Tags      string `yaml:"tags"` // "k=v,k2=v2"
	RequestID string `yaml:"request_id"`
}

// Limits protect the gateway from its clients, and its memory from the
// answers it holds.
type Limits struct {
	MaxRequestBytes  int64 `yaml:"max_request_bytes"`
	MaxResponseBytes int64 `yaml:"max_response_bytes"` // non-streamed bodies buffered for usage
	// BodyTimeout is how long a client has, from the request's arrival,
	// to send its whole body (default 30s, at most MaxBodyTimeout); past
	// it the request gets 408 and the connection is closed. The response
	// is not bound by it: a stream may last as long as its upstream
	// timeouts allow.
	BodyTimeout time.Duration `yaml:"body_timeout"`
	// MaxConnsPerIP bounds the open connections from one TCP peer (default
	// 1024; 0: no bound); the listener closes the ones beyond it at once.
	// Behind a proxy or load balancer every client shares the proxy's
	// address: set it above the proxy's connections to tollgate, or 0.
	MaxConnsPerIP int `yaml:"max_conns_per_ip"`
	// MaxBufferedBytes bounds the non-streamed answers held in memory at
	// once, all requests together (default 256 MiB, at least twice
	// MaxResponseBytes); an answer that finds it spent gets 503.
	MaxBufferedBytes int64 `yaml:"max_buffered_bytes"`
}

// MaxBodyTimeout is the longest limits.body_timeout: a client that needs
// longer to send a body of at most limits.max_request_bytes is too slow
// to be told apart from one holding connections open on purpose.
const MaxBodyTimeout = 60 * time.Second

// Sampling decides which records keep their detail (token timeline).
type Sampling struct {
	Normal float64       `yaml:"normal"` // share of normal requests, 0–1
	Slow   time.Duration `yaml:"slow"`   // E2E above this is "slow" and always kept
	// TokenizerCheck is the share of requests whose engine-reported
	// prompt_tokens are compared with tollgate's own count, 0–1.
	TokenizerCheck float64 `yaml:"tokenizer_check"`
}

// Metrics bounds label cardinality: past these counts of learned values,
// new ones fold into "other" (metrics and alerting windows; the ledger
// keeps the real values). Configured models and business lines always
// have their own value and do not count.
type Metrics struct {
	MaxModels    int `yaml:"max_models"`    // model names learned from traffic
	MaxBizLines  int `yaml:"max_biz_lines"` // business lines learned from the header
	MaxTemplates int `yaml:"max_templates"` // prompt template ids (alerting windows)
}

// Default returns the embedded defaults: the configuration `serve` runs on
// without a file. They assume a vLLM on its default port.
func Default() *Config {
	return &Config{
		Listen:        "127.0.0.1:8080",
		ShutdownGrace: 30 * time.Second,
		Log:           Log{Level: "info", Format: "text"},
		Store: Store{
			Backend:       "sqlite",
			SQLite:        SQLite{Path: "./tollgate.db"},
			ClickHouse:    ClickHouse{Database: "tollgate", Timeout: 30 * time.Second},
			QueueSize:     65536,
			BatchSize:     SQLiteBatchSize,
			FlushInterval: 200 * time.Millisecond,
			Timezone:      "UTC",
			Durability:    "queue",
			Queue:         Queue{MaxBytes: 10 << 30, CommitTimeout: time.Second},
			// Seed 001 §2.3: details 7–15 days; rollups kept long. The
			// ledger covers a monthly bill cycle for drill-down; billing
			// reports read the day rollups, kept forever.
			Retention: Retention{
				Details: 15 * 24 * time.Hour, Ledger: 35 * 24 * time.Hour, Minute: 35 * 24 * time.Hour,
				Hour: 400 * 24 * time.Hour, Day: 0, Events: 400 * 24 * time.Hour,
			},
		},
		Upstreams: []Upstream{{
			Name:   "default",
			URL:    "http://127.0.0.1:8000/v1",
			Engine: "vllm",
		}},
		Retry: Retry{Attempts: 2, OnStatus: []int{502, 503, 504}},
		Headers: Headers{
			BizLine:   "X-Tollgate-Biz",
			Session:   "X-Tollgate-Session",
			Template:  "X-Tollgate-Template",
			Tags:      "X-Tollgate-Tags",
			RequestID: "X-Request-Id",
		},
		Limits: Limits{MaxRequestBytes: 8 << 20, MaxResponseBytes: 64 << 20, BodyTimeout: 30 * time.Second,
			MaxConnsPerIP: 1024, MaxBufferedBytes: 256 << 20},
		Sampling:      Sampling{Normal: 0.10, Slow: 10 * time.Second, TokenizerCheck: 0.01},
		Metrics:       Metrics{MaxModels: 64, MaxBizLines: 64, MaxTemplates: 256},
		ResponseCache: ResponseCache{TTL: 10 * time.Minute, MaxBytes: 64 << 20, Scope: "key"},
		OTLP:          OTLP{HTTPListen: "127.0.0.1:4318", GRPCListen: "127.0.0.1:4317", JoinWindow: 2 * time.Minute},
		TokenizerWait: 5 * time.Second,
		EngineMetrics: EngineMetrics{Interval: 15 * time.Second},
		Passthrough:   DefaultPassthrough(),
	}
}

// DefaultTimeouts apply to an upstream that sets none.
var DefaultTimeouts = Timeouts{
	Connect:    5 * time.Second,
	FirstToken: 5 * time.Minute,
	Idle:       60 * time.Second,
	Total:      30 * time.Minute,
}

// HashKey returns the hex SHA-256 under which a proxy key is kept.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}
