package config

import (
	"log/slog"
	"maps"
	"net/url"
	"slices"
)

const redacted = "[redacted]"

// loggedConfig is a Config without LogValue, so that the redacted copy is
// printed as it is rather than resolved again.
type loggedConfig Config

// LogValue makes a Config safe to log with slog, whole or by pointer: the
// secrets the file may hold in plain text — upstream API keys, trace-export
// and webhook headers, notifier secrets and robot URLs (their token is in
// the query), a Redis URL's password — are blanked in a copy. Proxy keys
// and API tokens are hashes by then (see Parse). fmt's %v does not call
// this; only slog does.
func (c Config) LogValue() slog.Value {
	r := c
	r.Upstreams = slices.Clone(c.Upstreams)
	for i := range r.Upstreams {
		if r.Upstreams[i].APIKey != "" {
			r.Upstreams[i].APIKey = redacted
		}
	}
	r.TraceExport.Headers = redactValues(c.TraceExport.Headers)
	r.Notifiers = slices.Clone(c.Notifiers)
	for i := range r.Notifiers {
		t := &r.Notifiers[i]
		t.URL = redactURL(t.URL)
		if t.Secret != "" {
			t.Secret = redacted
		}
		t.Headers = redactValues(t.Headers)
	}
	r.Quotas.Redis.URL = redactURL(c.Quotas.Redis.URL)
	r.Replicas.Redis.URL = redactURL(c.Replicas.Redis.URL)
	r.Store.ClickHouse.URL = redactURL(c.Store.ClickHouse.URL)
	return slog.AnyValue(loggedConfig(r))
}

// redactURL keeps the scheme and host of a URL and drops its user info,
// path and query, where tokens live.
func redactURL(s string) string {
	if s == "" {
		return ""
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return redacted
	}
	return u.Scheme + "://" + u.Host + "/" + redacted
}

func redactValues(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	r := maps.Clone(m)
	for k := range r {
		r[k] = redacted
	}
	return r
}
