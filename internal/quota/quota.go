// Package quota enforces quotas and rate limits at admission.
//
// It sits in the gateway right after authentication and before a request
// is queued for an upstream: Limiter.Admit checks the request against every
// scope it belongs to (API key, user, biz_line) and, if every limit allows
// it, reserves its estimated tokens and cost in all of them at once. The
// gateway answers a refusal itself (429, OpenAI-style error, Retry-After and
// x-ratelimit-* headers from the Decision) and never reaches the engine.
// When the request ends, however it ends, the gateway calls Ticket.Commit
// with the usage it recorded (or Cancel if the request never reached an
// engine), replacing the reservation with what was really used.
//
// The contract has two implementations: Local (in-process, the embedded
// default) and internal/quota/redisquota for many replicas, which renders
// its decisions with this package's code (shared.go) so that both decide
// alike. An error from Admit means the limiter could not decide and the
// caller admits the request (fail open); the Redis limiter answers its own
// outages by its per-limit on_error policy instead of an error.
//
// How Redis fits, one round trip each way: per scope a daily hash
// (used, reserved; keyed by scope and day, expiring a day after the day
// ends) and a bucket hash (level, at). Admit is one Lua script over all of
// the request's scope keys that refills, checks and, only if all pass,
// reserves, returning the counters: the all-or-nothing rule is the
// script's atomicity. Commit is a second script applying the deltas; the
// seed is an HSETNX of a mark on the day key. In Redis Cluster a script's
// keys must share a slot, so every quota key carries one hash tag (one
// shard holds all quota state), which quota traffic can afford.
package quota

import (
	"context"
	"net/http"
	"strconv"
	"time"
)

// Limiter decides admission.
type Limiter interface {
	// Admit checks r against every scope it belongs to and, if allowed,
	// reserves r's estimated usage in all of them atomically: either every
	// scope is charged or none is. The Ticket is non-nil exactly when the
	// decision is Allowed, and exactly one of its Commit or Cancel must be
	// called. An error means no decision could be made (the usage seed
	// failed); Decision and Ticket are then zero and nil.
	Admit(ctx context.Context, r Request) (Decision, Ticket, error)
}

// Ticket is an admitted request's reservation. Only the first call of
// Commit or Cancel has an effect, so a deferred Cancel after a Commit is safe.
type Ticket interface {
	// Commit replaces the reservation with the actual usage, which may be
	// above or below it (estimates are estimates).
	Commit(actualTokens, actualCostNanos int64)
	// Cancel releases the reservation, request slot included: for a request
	// that never reached an engine it is as if it had never been admitted.
	Cancel()
}

// Kind is the kind of subject a scope limits.
type Kind uint8

const (
	KindKey Kind = iota
	KindUser
	KindBizLine
	numKinds
)

func (k Kind) String() string {
	switch k {
	case KindKey:
		return "key"
	case KindUser:
		return "user"
	case KindBizLine:
		return "biz_line"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Scope is one subject whose usage is counted: user alice, biz_line search.
type Scope struct {
	Kind Kind
	Name string // key id, user id or biz_line
}

// String is the scope's label in events and decisions, "user:alice".
func (s Scope) String() string { return s.Kind.String() + ":" + s.Name }

// Subject is who a request is billed to. An empty field is no scope.
type Subject struct {
	KeyID, UserID, BizLine string
}

// Request is what Admit needs to know about a request.
type Request struct {
	Subject
	// EstInputTokens counts the prompt (tokenizer estimate);
	// EstOutputTokens is max_tokens, or the gateway's default when the
	// client sets none. Their sum is the reservation against token limits.
	EstInputTokens, EstOutputTokens int64
	// EstCostNanos is the estimate's price; 0 when unknown, in which case
	// daily cost is enforced on committed cost only.
	EstCostNanos int64
}

// SeedFunc loads a scope's usage already recorded for the quota day that
// starts at day (midnight in Config.Timezone), so that a restart does not
// hand every subject a fresh quota. It is called at the first use of a
// scope with a daily limit each day; an error fails that Admit (and the
// next one tries again).
type SeedFunc func(ctx context.Context, s Scope, day time.Time) (tokens, costNanos int64, err error)

// Limit names, as in YAML.
const (
	LimitDailyTokens       = "daily_tokens"
	LimitDailyCost         = "daily_cost"
	LimitRequestsPerMinute = "requests_per_minute"
	LimitTokensPerMinute   = "tokens_per_minute"
	LimitMaxInputTokens    = "max_input_tokens"
)

// Event kinds.
const (
	EventWarning  = "warning"   // a daily quota's usage crossed WarnAt; once per scope × limit × day
	EventExceeded = "exceeded"  // a limit refused a request or committed usage went over it; once per scope × limit × day
	EventMaxInput = "max_input" // one request's input was above max_input_tokens; every time
)

// Event is something worth storing and alerting on.
type Event struct {
	At    time.Time
	Scope string // "user:alice"
	Limit string // "daily_tokens"
	Used  int64  // usage including in-flight reservations; for max_input the request's input tokens
	Quota int64
	Share float64 // Used / Quota
	Kind  string
}

// Decision is the outcome of Admit.
type Decision struct {
	Allowed bool
	// The rest describes a refusal, except Rate and Warnings.
	Status  int    // 429, or 400 for a request above max_input_tokens (retrying cannot help)
	Type    string // OpenAI error type: requests, tokens, insufficient_quota, invalid_request_error
	Code    string // OpenAI error code: rate_limit_exceeded, insufficient_quota, max_input_tokens_exceeded
	Scope   string // "user:alice"
	Limit   string // "daily_tokens"
	Message string // OpenAI-style, plain text
	// RetryAfter is how long until the refusing limit admits the request
	// again (the longest wait when several refuse); zero when waiting cannot
	// help because the request is larger than the limit itself.
	RetryAfter time.Duration
	// Headers are the refusal's response headers: Retry-After and
	// retry-after-ms (when RetryAfter > 0) and x-ratelimit-*. Nil when allowed.
	Headers http.Header
	// Rate feeds x-ratelimit-* headers; Rate.Write adds them to a response
	// that was allowed, if the gateway wants them there too.
	Rate Rate
	// Warnings are the events this Admit raised (also given to onEvent):
	// for the request's record and log, not to be stored a second time.
	Warnings []Event
}

// Rate is the per-minute state behind OpenAI's x-ratelimit-* headers. Of
// the request's scopes, each window shows the one with the least left (the
// refusing one on a refusal). A zero Limit means no scope has that limit.
type Rate struct {
	Requests, Tokens Window
}

// Window is one per-minute limit's state.
type Window struct {
	Limit, Remaining int64
	Reset            time.Duration // until the bucket is full again, as OpenAI defines it
}

// Write sets x-ratelimit-{limit,remaining,reset}-{requests,tokens} on h
// in OpenAI's formats: integers, and resets as Go durations ("1s", "6m0s",
// "644ms"), which is what OpenAI sends.
func (r Rate) Write(h http.Header) {
	// Keys are written in canonical form directly: h.Set would canonicalise
	// each of the six names again on every response.
	if w := r.Requests; w.Limit > 0 {
		h["X-Ratelimit-Limit-Requests"] = []string{strconv.FormatInt(w.Limit, 10)}
		h["X-Ratelimit-Remaining-Requests"] = []string{strconv.FormatInt(max(w.Remaining, 0), 10)}
		h["X-Ratelimit-Reset-Requests"] = []string{FormatReset(w.Reset)}
	}
	if w := r.Tokens; w.Limit > 0 {
		h["X-Ratelimit-Limit-Tokens"] = []string{strconv.FormatInt(w.Limit, 10)}
		h["X-Ratelimit-Remaining-Tokens"] = []string{strconv.FormatInt(max(w.Remaining, 0), 10)}
		h["X-Ratelimit-Reset-Tokens"] = []string{FormatReset(w.Reset)}
	}
}

// FormatReset renders a wait the way OpenAI does in headers and messages
// ("644ms", "9.816s", "6m0s"): rounded up, so that a client never retries
// early, to the millisecond under a minute and to the second above.
func FormatReset(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Minute:
		return ceilTo(d, time.Millisecond).String()
	}
	return ceilTo(d, time.Second).String()
}

func ceilTo(d, unit time.Duration) time.Duration {
	if r := d % unit; r != 0 {
		d += unit - r
	}
	return d
}

// headers builds a refusal's headers. Retry-After is whole seconds (HTTP
// allows nothing finer) rounded up; retry-after-ms, which OpenAI's SDKs
// prefer when present, keeps the precision.
func (d *Decision) headers() http.Header {
	h := make(http.Header, 8)
	if d.RetryAfter > 0 {
		h["Retry-After"] = []string{strconv.FormatInt(int64(ceilTo(d.RetryAfter, time.Second)/time.Second), 10)}
		h["Retry-After-Ms"] = []string{strconv.FormatInt(int64(ceilTo(d.RetryAfter, time.Millisecond)/time.Millisecond), 10)}
	}
	d.Rate.Write(h)
	return h
}
