package config

import (
	"slices"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/quota"
)

// TestNeedsRestart: the keys a reload applies are never reported; the
// others, and the sub-keys of reloadable sections read at start, are.
func TestNeedsRestart(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(*Config)
		want   []string
	}{
		{"nothing", func(*Config) {}, nil},
		{"reloadable", func(c *Config) {
			c.Auth.Keys = append(c.Auth.Keys, Key{Name: "k", Key: "sk-1", UserID: "u"})
			c.Upstreams = append(c.Upstreams, Upstream{Name: "b", URL: "http://b/v1", Engine: "vllm"})
			c.Quotas.Users = map[string]quota.Limits{"u": {DailyTokens: 1}}
			c.Alerts.Repeat = time.Hour
		}, nil},
		{"listen and store", func(c *Config) { c.Listen = ":9"; c.Store.SQLite.Path = "/x.db" }, []string{"listen", "store"}},
		{"quota redis and alert interval", func(c *Config) {
			c.Quotas.Redis.URL = "redis://r:6379"
			c.Alerts.Interval = time.Minute
		}, []string{"quotas.redis", "alerts.interval"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			next := Default()
			c.change(next)
			if got := NeedsRestart(Default(), next); !slices.Equal(got, c.want) {
				t.Errorf("NeedsRestart = %q, want %q", got, c.want)
			}
		})
	}
}
