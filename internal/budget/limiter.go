package budget

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/tollgate-dev/tollgate/internal/quota"
)

// Limiter enforces the budgets with enforce: true in front of the quota
// limiter (Next, nil when no quota is configured): a request of a subject
// over such a budget is refused like a spent daily quota (429
// insufficient_quota), with Retry-After until the budget's period ends.
// It reads the Tracker's snapshot only, so admission never waits on the
// store.
type Limiter struct {
	Next    quota.Limiter
	Tracker *Tracker
	Now     func() time.Time
}

type nop struct{}

func (nop) Commit(int64, int64) {}
func (nop) Cancel()             {}

// Admit implements quota.Limiter.
func (l *Limiter) Admit(ctx context.Context, r quota.Request) (quota.Decision, quota.Ticket, error) {
	if st, over := l.Tracker.Blocked(r.Subject); over {
		now := time.Now()
		if l.Now != nil {
			now = l.Now()
		}
		d := quota.Decision{Status: http.StatusTooManyRequests, Type: "insufficient_quota", Code: "insufficient_quota",
			Scope: st.Scope + ":" + st.Subject, Limit: "budget_" + st.Period,
			Message: fmt.Sprintf("You exceeded the %s budget %q of %s %s (%.0f %% used).", st.Period, st.Name, st.Scope, st.Subject, st.Share*100),
			Headers: http.Header{}}
		if st.Period != PeriodRolling && st.To.After(now) {
			d.RetryAfter = st.To.Sub(now)
			d.Headers["Retry-After"] = []string{strconv.FormatInt(int64((d.RetryAfter+time.Second-1)/time.Second), 10)}
		}
		return d, nil, nil
	}
	if l.Next == nil {
		return quota.Decision{Allowed: true}, nop{}, nil
	}
	return l.Next.Admit(ctx, r)
}
