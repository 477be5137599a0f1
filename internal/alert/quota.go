package alert

import (
	"fmt"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/quota"
)

// Quota events (internal/quota) are not computed by any rule: the limiter
// reports them as they happen, and the caller raises them with
// Engine.Raise(ctx, a, e.At, until) where a, until = FromQuota(e, loc).

// QuotaSummary is the one line describing a quota event, as the event
// history and the alert both say it: "user:bob: daily_tokens at 81% (…)".
func QuotaSummary(e quota.Event) string {
	return fmt.Sprintf("%s: %s at %.0f%% (%d of %d)", e.Scope, e.Limit, e.Share*100, e.Used, e.Quota)
}

// FromQuota is the alert a quota event raises, and when it resolves by
// itself. Rule "quota": 80 % of a daily quota used warns, a limit reached
// (requests refused with 429) is critical; a single request above the
// input limit is "large_request_refused", critical. A daily limit's alert
// lasts until the quota day ends in loc (the quotas' time zone; nil is
// UTC), anything else an hour.
func FromQuota(e quota.Event, loc *time.Location) (a Alert, until time.Time) {
	msg := QuotaSummary(e)
	a = Alert{Rule: "quota", Severity: Critical, Labels: map[string]string{"scope": e.Scope, "limit": e.Limit},
		Value: float64(e.Used), Threshold: float64(e.Quota), Unit: e.Limit, Summary: msg}
	switch e.Kind {
	case quota.EventWarning:
		a.Severity, a.Summary = Warning, msg+": the quota is nearly used up"
	case quota.EventMaxInput:
		a.Rule, a.Summary = "large_request_refused", msg+": a single request above the input limit"
	default:
		a.Summary = msg + ": requests are being refused (429)"
	}
	if loc == nil {
		loc = time.UTC
	}
	until = e.At.Add(time.Hour)
	if strings.HasPrefix(e.Limit, "daily") {
		d := e.At.In(loc)
		until = time.Date(d.Year(), d.Month(), d.Day()+1, 0, 0, 0, 0, loc)
	}
	return a, until
}
