package alert

import (
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/quota"
)

func TestFromQuota(t *testing.T) {
	shanghai := time.FixedZone("CST", 8*3600)
	at := time.Date(2026, 3, 9, 15, 30, 0, 0, time.UTC) // 23:30 in Shanghai
	for _, tc := range []struct {
		name    string
		e       quota.Event
		loc     *time.Location
		rule    string
		sev     Severity
		until   time.Time
		summary string
	}{
		{"daily warning", quota.Event{At: at, Scope: "user:bob", Limit: quota.LimitDailyTokens, Used: 81, Quota: 100, Share: 0.81, Kind: quota.EventWarning},
			nil, "quota", Warning, time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC), "user:bob: daily_tokens at 81% (81 of 100): the quota is nearly used up"},
		{"daily exceeded, quota day in the quotas' zone", quota.Event{At: at, Scope: "user:bob", Limit: quota.LimitDailyCost, Used: 101, Quota: 100, Share: 1.01, Kind: quota.EventExceeded},
			shanghai, "quota", Critical, time.Date(2026, 3, 10, 0, 0, 0, 0, shanghai), "user:bob: daily_cost at 101% (101 of 100): requests are being refused (429)"},
		{"rate limit lasts an hour", quota.Event{At: at, Scope: "key:k1", Limit: quota.LimitRequestsPerMinute, Used: 61, Quota: 60, Share: 61.0 / 60, Kind: quota.EventExceeded},
			nil, "quota", Critical, at.Add(time.Hour), "key:k1: requests_per_minute at 102% (61 of 60): requests are being refused (429)"},
		{"oversized request", quota.Event{At: at, Scope: "biz_line:batch", Limit: quota.LimitMaxInputTokens, Used: 9500, Quota: 8000, Share: 9500.0 / 8000, Kind: quota.EventMaxInput},
			nil, "large_request_refused", Critical, at.Add(time.Hour), "biz_line:batch: max_input_tokens at 119% (9500 of 8000): a single request above the input limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, until := FromQuota(tc.e, tc.loc)
			if a.Rule != tc.rule || a.Severity != tc.sev || a.Summary != tc.summary {
				t.Errorf("alert = %s %s %q, want %s %s %q", a.Rule, a.Severity, a.Summary, tc.rule, tc.sev, tc.summary)
			}
			if a.Labels["scope"] != tc.e.Scope || a.Labels["limit"] != tc.e.Limit || a.Value != float64(tc.e.Used) || a.Threshold != float64(tc.e.Quota) {
				t.Errorf("labels/values = %v %v/%v", a.Labels, a.Value, a.Threshold)
			}
			if !until.Equal(tc.until) {
				t.Errorf("until = %v, want %v", until, tc.until)
			}
		})
	}
}
