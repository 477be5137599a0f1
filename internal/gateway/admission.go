package gateway

import (
	"net/http"
	"time"

	"github.com/tollgate-dev/tollgate/internal/quota"
	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/tokenizer"
)

// Admission checks a request against the quotas before it costs anything:
// its tokens are estimated (the model's tokenizer when loaded, else the
// prompt's size in bytes over four), reserved in every scope it belongs
// to, and the reservation is replaced by the real usage when it ends.

// admission is one logical request's quota reservation.
type admission struct {
	ticket quota.Ticket
	rate   *quota.Rate
}

// inputEstimate is the admission estimate of a request's input tokens:
// the model's tokenizer when loaded, else the prompt's bytes over four.
// Quotas reserve it and the long-input lane is chosen by it.
func inputEstimate(rec *record.Record, ct *tokenizer.Counter, body []byte) int64 {
	in := rec.PromptBytes / 4
	if ct != nil {
		if n, ok := promptTokens(ct, rec.Endpoint, body); ok {
			in = n
		}
	}
	return in
}

// estimate completes the admission estimate of a request with input
// estimate in: its output tokens and cost.
func (g *Gateway) estimate(rec *record.Record, in int64) (out, costNanos int64) {
	if rec.MaxTokens != nil && *rec.MaxTokens > 0 {
		out = *rec.MaxTokens
	}
	if t := g.priceTable(time.Now()); t != nil {
		if c, ok := t.Rate(record.Usage{InputTokens: in, OutputTokens: out}, rec.Model, "", rec.Arrival); ok {
			costNanos = c.Nanos
		}
	}
	return out, costNanos
}

// admit reserves the request's estimate (in: its input estimate). It
// returns nil, true when there are no quotas; false when the request was
// refused (and answered).
func (g *Gateway) admit(w http.ResponseWriter, r *http.Request, rec *record.Record, in int64, keyBiz string, since func() time.Duration) (*admission, bool) {
	if g.limiter == nil {
		return nil, true
	}
	out, c := g.estimate(rec, in)
	// A key's own business line is trusted for quotas; a header is not,
	// or a client could step around its line's quota by changing it. With
	// no keys configured there is nothing to trust, so the header counts.
	biz := g.trustedBiz(rec, keyBiz)
	d, ticket, err := g.limiter.Admit(r.Context(), quota.Request{
		Subject:        quota.Subject{KeyID: rec.KeyID, UserID: rec.UserID, BizLine: biz},
		EstInputTokens: in, EstOutputTokens: out, EstCostNanos: c,
	})
	if err != nil {
		// The limiter could not decide (its store is down): serve the
		// request and say so; quotas fail open by default.
		g.metrics.QuotaError()
		g.log.Warn("quota check failed; admitting the request", "err", err, "user", rec.UserID)
		return nil, true
	}
	if !d.Allowed {
		for k, v := range d.Headers {
			w.Header()[k] = v
		}
		g.reject(w, rec, &apiError{Kind: quotaKind(d), Status: d.Status, Type: d.Type, Code: d.Code, Message: d.Message}, since)
		return nil, false
	}
	return &admission{ticket: ticket, rate: &d.Rate}, true
}

// trustedBiz is the business line admission decisions may rely on: the
// key's own, or the header's when the gateway is open (no keys: nothing
// else to trust).
func (g *Gateway) trustedBiz(rec *record.Record, keyBiz string) string {
	if g.auth().open {
		return rec.BizLine
	}
	return keyBiz
}

// settle replaces the reservation with what the request really used,
// summed over its attempts; a request that never reached an engine
// releases it.
func (a *admission) settle(recs []*record.Record) {
	if a == nil || a.ticket == nil {
		return
	}
	var tokens, nanos int64
	reached := false
	for _, r := range recs {
		tokens += r.Usage.Total()
		nanos += r.Cost.Nanos
		reached = reached || r.UpstreamStatus != 0
	}
	if !reached && tokens == 0 {
		a.ticket.Cancel()
		return
	}
	a.ticket.Commit(tokens, nanos)
}

// rate fills the Record's cost from the price table in force at arrival:
// a request that arrived before a reload of the prices is rated with the
// table it arrived under, whenever it ends (reload.go).
func (g *Gateway) rate(rec *record.Record) {
	t := g.priceTable(rec.Arrival)
	if t == nil || rec.CacheHit {
		return
	}
	if c, ok := t.RateRecord(rec); ok {
		rec.Cost = record.Cost{Nanos: c.Nanos, Currency: c.Currency, PriceVersion: c.PriceVersion}
	}
}

// quotaKind is the Record's error type of a quota refusal: over
// max_input_tokens, or any other limit.
func quotaKind(d quota.Decision) string {
	if d.Code == "max_input_tokens_exceeded" {
		return record.ErrInputTooLong
	}
	return record.ErrRateLimited
}
