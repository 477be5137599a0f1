package config

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tollgate-dev/tollgate/internal/budget"
)

// Load reads and validates a config file on top of the defaults.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	cfg, err := Parse(b, os.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// Parse decodes YAML over Default(), expanding ${VAR} and ${VAR:-default}
// in values with lookup, rejecting unknown keys, then validates.
func Parse(b []byte, lookup func(string) (string, bool)) (*Config, error) {
	cfg := Default()
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return cfg, cfg.Validate() // empty file: defaults
		}
		return nil, fmt.Errorf("yaml: %w", err)
	}
	if len(doc.Content) == 0 {
		return cfg, cfg.Validate()
	}
	root := doc.Content[0]
	if err := checkKeys(root, reflect.TypeOf(*cfg), ""); err != nil {
		return nil, err
	}
	if err := expandEnv(root, "", lookup); err != nil {
		return nil, err
	}
	// A list given in the file replaces the default list rather than merging
	// into it element by element (yaml.v3 would keep default fields).
	if n := mapValue(root, "upstreams"); n != nil {
		cfg.Upstreams = nil
	}
	if n := mapValue(root, "retry"); n != nil && mapValue(n, "on_status") != nil {
		cfg.Retry.OnStatus = nil
	}
	if err := root.Decode(cfg); err != nil {
		return nil, fmt.Errorf("yaml: %w", cleanYAMLError(err))
	}
	clickHouseBatching(cfg, mapValue(root, "store"))
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// From here on only the hash of a proxy key or API token exists in memory.
	for i, k := range cfg.Auth.Keys {
		if k.Key != "" {
			cfg.Auth.Keys[i].KeySHA256, cfg.Auth.Keys[i].Key = k.Hash(), ""
		}
	}
	for i, t := range cfg.API.Tokens {
		if t.Token != "" {
			cfg.API.Tokens[i].TokenSHA256, cfg.API.Tokens[i].Token = t.Hash(), ""
		}
	}
	return cfg, nil
}

func mapValue(n *yaml.Node, key string) *yaml.Node {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// checkKeys walks the YAML tree beside the Go type and reports the first
// key that the type does not have, with its full path and line.
func checkKeys(n *yaml.Node, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	// A type that decodes itself (a decimal, a time) knows its own shape.
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		if t.PkgPath() == "time" { // time.Duration is int64, time.Time a struct: scalars in YAML
			return nil
		}
		if n.Kind != yaml.MappingNode {
			if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
				return nil
			}
			return fmt.Errorf("%s: expected a mapping (line %d)", orRoot(path), n.Line)
		}
		keys := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			ft := keys.rest
			if f, ok := keys.fields[k.Value]; ok {
				ft = f.Type
			}
			if ft == nil {
				return fmt.Errorf("%s: unknown key (line %d)", join(path, k.Value), k.Line)
			}
			if err := checkKeys(v, ft, join(path, k.Value)); err != nil {
				return err
			}
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
				return nil
			}
			return fmt.Errorf("%s: expected a list (line %d)", orRoot(path), n.Line)
		}
		for i, c := range n.Content {
			if err := checkKeys(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
				return nil
			}
			return fmt.Errorf("%s: expected a mapping (line %d)", orRoot(path), n.Line)
		}
		// Map values are checked too: a typo inside quotas.users.alice
		// must not silently leave alice unlimited.
		for i := 0; i+1 < len(n.Content); i += 2 {
			if err := checkKeys(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value)); err != nil {
				return err
			}
		}
	}
	return nil
}

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

// structKeys are the keys a struct takes in YAML.
type structKeys struct {
	fields map[string]reflect.StructField
	// rest is the value type of the struct's ",inline" map, which takes
	// every other key; nil without one.
	rest reflect.Type
}

// yamlFields reads a struct's keys the way yaml.v3 does (getStructInfo),
// so that the check accepts exactly what the decoder fills: the name in
// the yaml tag, else the lower-cased field name; the keys of an ",inline"
// struct as the struct's own, at any depth (alert.Baseline's factors are
// its inline Levels); and with an ",inline" map, any other key.
func yamlFields(t reflect.Type) structKeys {
	keys := structKeys{fields: make(map[string]reflect.StructField, t.NumField())}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() && !f.Anonymous {
			continue
		}
		tag := f.Tag.Get("yaml")
		if tag == "" && !strings.Contains(string(f.Tag), ":") {
			tag = string(f.Tag) // yaml.v3 reads an untagged `name` the same
		}
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if slices.Contains(strings.Split(opts, ","), "inline") {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			switch ft.Kind() {
			case reflect.Struct:
				for k, sf := range yamlFields(ft).fields {
					keys.fields[k] = sf
				}
			case reflect.Map:
				keys.rest = ft.Elem()
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		keys.fields[name] = f
	}
	return keys
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`)

// expandEnv replaces ${VAR} in scalar values (never keys). An unset
// variable without a default is an error naming the field, so a missing
// secret is found at start-up rather than as a 401 from the upstream.
func expandEnv(n *yaml.Node, path string, lookup func(string) (string, bool)) error {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if err := expandEnv(n.Content[i+1], join(path, n.Content[i].Value), lookup); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if err := expandEnv(c, fmt.Sprintf("%s[%d]", path, i), lookup); err != nil {
				return err
			}
		}
	case yaml.ScalarNode:
		if !strings.Contains(n.Value, "${") {
			return nil
		}
		var missing string
		n.Value = envRef.ReplaceAllStringFunc(n.Value, func(ref string) string {
			m := envRef.FindStringSubmatch(ref)
			if v, ok := lookup(m[1]); ok && v != "" {
				return v
			}
			if m[2] != "" {
				return m[3]
			}
			if missing == "" {
				missing = m[1]
			}
			return ""
		})
		if missing != "" {
			return fmt.Errorf("%s: environment variable %s is not set (line %d)", path, missing, n.Line)
		}
		// An expanded value is a plain string: "${PORT}" must not turn into
		// an int tag, nor a secret into a bool.
		if n.Tag == "" || n.Tag == "!!str" || n.Style != 0 {
			n.Tag = "!!str"
		}
	}
	return nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func orRoot(path string) string {
	if path == "" {
		return "(top level)"
	}
	return path
}

// yaml.v3 type errors say "cannot unmarshal !!str `abc` into int"; keep
// them but drop the Go type jargon prefix.
func cleanYAMLError(err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		return errors.New(strings.Join(te.Errors, "; "))
	}
	return err
}

// Validate checks values and names the YAML path of the first bad one.
func (c *Config) Validate() error {
	var errs []error
	bad := func(path, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
	}
	if _, _, err := splitHostPort(c.Listen); err != nil {
		bad("listen", "%v", err)
	}
	if c.ListenTLS.Enabled() {
		if _, err := c.ListenTLS.Load("listen_tls"); err != nil {
			errs = append(errs, err)
		}
	}
	if c.ShutdownGrace < 0 {
		bad("shutdown_grace", "must not be negative")
	}
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, c.Log.Level) {
		bad("log.level", "must be one of debug, info, warn, error; got %q", c.Log.Level)
	}
	if !slices.Contains([]string{"text", "json"}, c.Log.Format) {
		bad("log.format", "must be text or json; got %q", c.Log.Format)
	}
	switch c.Store.Backend {
	case "sqlite":
		if c.Store.SQLite.Path == "" {
			bad("store.sqlite.path", "must not be empty")
		}
	case "clickhouse":
		ch := c.Store.ClickHouse
		if ch.URL == "" {
			bad("store.clickhouse.url", "required when store.backend is clickhouse")
		} else if u, err := url.Parse(ch.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("store.clickhouse.url", "must be the HTTP interface's URL such as http://127.0.0.1:8123; got %q", redactURL(ch.URL))
		}
		if !clickHouseDB.MatchString(ch.Database) {
			bad("store.clickhouse.database", "must be letters, digits and _, not starting with a digit; got %q", ch.Database)
		}
		if ch.Timeout <= 0 {
			bad("store.clickhouse.timeout", "must be positive (default 30s); got %v", ch.Timeout)
		}
		if c.Store.Queue.Dir == "" && c.Store.SQLite.Path == "" {
			bad("store.queue.dir", "required when store.backend is clickhouse and store.sqlite.path is empty")
		}
	default:
		bad("store.backend", "must be sqlite or clickhouse; got %q", c.Store.Backend)
	}
	if d := c.Store.Durability; d != "queue" && d != "memory" && d != "off" {
		bad("store.durability", "must be queue, memory or off; got %q", d)
	}
	if c.Store.Queue.MaxBytes < 1<<20 {
		bad("store.queue.max_bytes", "must be at least 1048576 (1 MiB)")
	}
	if c.Store.Queue.CommitTimeout <= 0 {
		bad("store.queue.commit_timeout", "must be positive")
	}
	if c.Store.QueueSize < 1 {
		bad("store.queue_size", "must be at least 1")
	}
	if c.Store.BatchSize < 1 {
		bad("store.batch_size", "must be at least 1")
	}
	if c.Store.FlushInterval <= 0 {
		bad("store.flush_interval", "must be positive")
	}
	if len(c.Upstreams) == 0 {
		bad("upstreams", "at least one upstream is needed")
	}
	names := map[string]bool{}
	for i, u := range c.Upstreams {
		p := fmt.Sprintf("upstreams[%d]", i)
		if u.Name == "" {
			bad(p+".name", "must not be empty")
		} else if names[u.Name] {
			bad(p+".name", "duplicate upstream name %q", u.Name)
		}
		names[u.Name] = true
		if pu, err := url.Parse(u.URL); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			bad(p+".url", "must be an absolute http(s) URL such as http://127.0.0.1:8000/v1; got %q", u.URL)
		}
		if !slices.Contains(EngineKinds, u.Engine) {
			bad(p+".engine", "must be one of %s; got %q", strings.Join(EngineKinds, ", "), u.Engine)
		}
		if len(u.Models) == 0 && len(c.Upstreams) > 1 {
			bad(p+".models", "must list the models it serves when there are several upstreams")
		}
		for j, m := range u.Models {
			if strings.TrimSpace(m) == "" {
				bad(fmt.Sprintf("%s.models[%d]", p, j), "must not be empty")
			}
		}
		if u.MaxConcurrency < 0 {
			bad(p+".max_concurrency", "must not be negative (0: no bound)")
		}
		if u.QueueTimeout < 0 {
			bad(p+".queue_timeout", "must not be negative")
		}
		errs = append(errs, u.validateLongLane(p)...)
		t := u.Timeouts
		for _, d := range []struct {
			k string
			v int64
		}{{"connect", int64(t.Connect)}, {"first_token", int64(t.FirstToken)}, {"idle", int64(t.Idle)}, {"total", int64(t.Total)}} {
			if d.v < 0 {
				bad(p+".timeouts."+d.k, "must not be negative")
			}
		}
	}
	if c.Retry.Attempts < 1 {
		bad("retry.attempts", "must be at least 1 (1 disables retries)")
	}
	for i, s := range c.Retry.OnStatus {
		if s < 400 || s > 599 {
			bad(fmt.Sprintf("retry.on_status[%d]", i), "must be an HTTP error status (400–599); got %d", s)
		}
	}
	hashes := map[string]bool{}
	for i, k := range c.Auth.Keys {
		p := fmt.Sprintf("auth.keys[%d]", i)
		switch {
		case k.Key == "" && k.KeySHA256 == "":
			bad(p, "needs key or key_sha256")
		case k.Key != "" && k.KeySHA256 != "":
			bad(p, "give key or key_sha256, not both")
		case k.KeySHA256 != "":
			if b, err := hex.DecodeString(k.KeySHA256); err != nil || len(b) != 32 {
				bad(p+".key_sha256", "must be 64 hex characters")
			}
		}
		if k.UserID == "" {
			bad(p+".user_id", "must not be empty")
		}
		h := k.Hash()
		if hashes[h] {
			bad(p, "duplicate key")
		}
		hashes[h] = true
	}
	for _, h := range []struct{ k, v string }{
		{"headers.biz_line", c.Headers.BizLine}, {"headers.session", c.Headers.Session},
		{"headers.template", c.Headers.Template}, {"headers.tags", c.Headers.Tags}, {"headers.request_id", c.Headers.RequestID},
	} {
		if h.v == "" || strings.ContainsAny(h.v, " :\t\r\n") {
			bad(h.k, "must be a header name; got %q", h.v)
		}
	}
	if c.Limits.MaxRequestBytes < 1 {
		bad("limits.max_request_bytes", "must be at least 1")
	}
	if c.Limits.MaxResponseBytes < 1 {
		bad("limits.max_response_bytes", "must be at least 1")
	}
	if d := c.Limits.BodyTimeout; d <= 0 || d > MaxBodyTimeout {
		bad("limits.body_timeout", "must be positive and at most %gs (default 30s); got %v", MaxBodyTimeout.Seconds(), d)
	}
	if c.Limits.MaxConnsPerIP < 0 {
		bad("limits.max_conns_per_ip", "must not be negative (0: no bound); got %d", c.Limits.MaxConnsPerIP)
	}
	if l := c.Limits; l.MaxBufferedBytes/2 < l.MaxResponseBytes {
		bad("limits.max_buffered_bytes", "must be at least twice limits.max_response_bytes, %d (an answer of unknown length grows its buffer by doubling, and both buffers are held while it is copied); got %d",
			2*l.MaxResponseBytes, l.MaxBufferedBytes)
	}
	if c.Sampling.Normal < 0 || c.Sampling.Normal > 1 {
		bad("sampling.normal", "must be between 0 and 1; got %v", c.Sampling.Normal)
	}
	if c.Sampling.TokenizerCheck < 0 || c.Sampling.TokenizerCheck > 1 {
		bad("sampling.tokenizer_check", "must be between 0 and 1; got %v", c.Sampling.TokenizerCheck)
	}
	if c.Sampling.Slow < 0 {
		bad("sampling.slow", "must not be negative")
	}
	if c.Metrics.MaxModels < 0 {
		bad("metrics.max_models", "must not be negative")
	}
	if c.Metrics.MaxBizLines < 0 {
		bad("metrics.max_biz_lines", "must not be negative")
	}
	if c.Metrics.MaxTemplates < 0 {
		bad("metrics.max_templates", "must not be negative")
	}
	if _, err := time.LoadLocation(c.Store.Timezone); err != nil || c.Store.Timezone == "" || c.Store.Timezone == "Local" {
		bad("store.timezone", "must be an IANA time zone such as UTC or Asia/Shanghai; got %q", c.Store.Timezone)
	}
	ret := c.Store.Retention
	for _, r := range []struct {
		k string
		v time.Duration
	}{{"details", ret.Details}, {"ledger", ret.Ledger}, {"minute", ret.Minute}, {"hour", ret.Hour}, {"day", ret.Day}, {"events", ret.Events}} {
		if r.v < 0 {
			bad("store.retention."+r.k, "must not be negative (0 keeps forever)")
		}
	}
	if ret.Ledger > 0 && ret.Details > ret.Ledger {
		bad("store.retention.details", "cannot outlive the ledger rows they belong to (store.retention.ledger is %v)", ret.Ledger)
	}
	for i, t := range c.API.Tokens {
		p := fmt.Sprintf("api.tokens[%d]", i)
		switch {
		case t.Token == "" && t.TokenSHA256 == "":
			bad(p, "needs token or token_sha256")
		case t.Token != "" && t.TokenSHA256 != "":
			bad(p, "give token or token_sha256, not both")
		case t.TokenSHA256 != "":
			if b, err := hex.DecodeString(t.TokenSHA256); err != nil || len(b) != 32 {
				bad(p+".token_sha256", "must be 64 hex characters")
			}
		}
		if t.Role != "admin" && t.Role != "read" {
			bad(p+".role", "must be admin or read; got %q", t.Role)
		}
	}
	for _, l := range []struct{ k, v string }{{"otlp.http_listen", c.OTLP.HTTPListen}, {"otlp.grpc_listen", c.OTLP.GRPCListen}} {
		if l.v != "" {
			if _, _, err := splitHostPort(l.v); err != nil {
				bad(l.k, "%v", err)
			}
		}
	}
	if te := c.TraceExport; te.Endpoint != "" {
		if u, err := url.Parse(te.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("trace_export.endpoint", "must be an http(s) URL such as http://127.0.0.1:4318; got %q", te.Endpoint)
		}
		if te.SampleRatio < 0 || te.SampleRatio > 1 {
			bad("trace_export.sample_ratio", "must be between 0 and 1; got %v", te.SampleRatio)
		}
	}
	if c.EngineMetrics.Interval < 0 {
		bad("engine_metrics.interval", "must not be negative (0 turns scraping off)")
	}
	if c.OTLP.JoinWindow <= 0 {
		bad("otlp.join_window", "must be positive")
	}
	if rc := c.ResponseCache; rc.Enabled {
		if rc.TTL <= 0 {
			bad("response_cache.ttl", "must be positive")
		}
		if rc.MaxBytes < 1<<20 {
			bad("response_cache.max_bytes", "must be at least 1048576 (1 MiB)")
		}
	}
	if s := c.ResponseCache.Scope; s != "key" && s != "global" {
		bad("response_cache.scope", "must be key or global; got %q", s)
	}
	if err := c.CostConfig().Validate(""); err != nil {
		errs = append(errs, err)
	}
	if err := c.Quotas.Validate("quotas"); err != nil {
		errs = append(errs, err)
	} else if _, err := c.QuotaConfig(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Alerts.Validate("alerts"); err != nil {
		errs = append(errs, err)
	}
	if err := budget.Validate("budgets", c.Budgets, c.keyNames(), c.teams()); err != nil {
		errs = append(errs, err)
	}
	if err := c.Notifiers.Validate("notifiers"); err != nil {
		errs = append(errs, err)
	}
	if err := c.Capture.Validate("capture"); err != nil {
		errs = append(errs, err)
	}
	if c.Capture.Enabled && !c.API.hasAdmin() {
		bad("capture.enabled", "needs an api.tokens entry with role admin: captured text is read with an admin token only, never by an anonymous loopback client")
	}
	errs = append(errs, c.Replicas.validate(c.Store.Backend)...)
	errs = append(errs, c.Passthrough.validate(c.Upstreams)...)
	errs = append(errs, c.Admission.validate("admission", c.Auth.Keys)...)
	for _, m := range sortedKeys(c.Tokenizers) {
		if err := c.Tokenizers[m].Validate(); err != nil {
			bad("tokenizers."+m, "%v", err)
		}
	}
	if c.TokenizerWait < 0 {
		bad("tokenizer_wait", "must not be negative (0: never wait); got %s", c.TokenizerWait)
	}
	return errors.Join(errs...)
}

// Hash is the SHA-256 of the key, however it was given.
func (k Key) Hash() string {
	if k.KeySHA256 != "" {
		return strings.ToLower(k.KeySHA256)
	}
	return HashKey(k.Key)
}

// TimeoutsOrDefault fills unset timeouts from DefaultTimeouts.
func (u Upstream) TimeoutsOrDefault() Timeouts {
	t := u.Timeouts
	if t.Connect == 0 {
		t.Connect = DefaultTimeouts.Connect
	}
	if t.FirstToken == 0 {
		t.FirstToken = DefaultTimeouts.FirstToken
	}
	if t.Idle == 0 {
		t.Idle = DefaultTimeouts.Idle
	}
	if t.Total == 0 {
		t.Total = DefaultTimeouts.Total
	}
	return t
}

func splitHostPort(addr string) (string, int, error) {
	i := strings.LastIndex(addr, ":")
	if i < 0 {
		return "", 0, fmt.Errorf("must be host:port; got %q", addr)
	}
	p, err := strconv.Atoi(addr[i+1:])
	if err != nil || p < 0 || p > 65535 {
		return "", 0, fmt.Errorf("port must be 0–65535; got %q", addr)
	}
	return addr[:i], p, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Location is the report time zone (validated).
func (c *Config) Location() *time.Location {
	loc, err := time.LoadLocation(c.Store.Timezone)
	if err != nil {
		return time.UTC
	}
	return loc
}

// clickHouseDB is what the ClickHouse store accepts as a database name.
var clickHouseDB = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// clickHouseBatching gives a ClickHouse backend its batching defaults
// (ClickHouseBatchSize rows, ClickHouseFlushInterval) where the store
// section of the file does not set batch_size or flush_interval itself.
func clickHouseBatching(c *Config, storeNode *yaml.Node) {
	if c.Store.Backend != "clickhouse" {
		return
	}
	if storeNode == nil || mapValue(storeNode, "batch_size") == nil {
		c.Store.BatchSize = ClickHouseBatchSize
	}
	if storeNode == nil || mapValue(storeNode, "flush_interval") == nil {
		c.Store.FlushInterval = ClickHouseFlushInterval
	}
}
