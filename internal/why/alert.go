package why

import (
	"context"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/alert"
)

// FigureFor is the figure that explains an alert signal: a percentile of
// a segment before the first token is explained through TTFT, of decode
// through E2E; token percentiles through tokens per request.
func FigureFor(signal string) string {
	name, p, ok := strings.Cut(signal, "_p")
	if !ok || strings.HasSuffix(signal, "_per_request") {
		switch signal {
		case "tokens":
			return "tokens_per_minute"
		case "max_input_tokens":
			return "input_tokens_per_request"
		}
		return signal
	}
	switch name {
	case "ttft", "tpot", "e2e":
		return signal
	case "gateway_queue", "engine_queue", "prefill":
		return "ttft_p" + p
	case "decode":
		return "e2e_p" + p
	case "input_tokens":
		return "input_tokens_per_request"
	case "output_tokens":
		return "output_tokens_per_request"
	}
	return signal
}

// Explainer is the alert engine's ExplainFunc over the ledger: an alert's
// window against its baseline (the hour before the window for a
// threshold rule), in its group.
func Explainer(l Ledger, timeout time.Duration) alert.ExplainFunc {
	return func(ctx context.Context, a alert.Alert) string {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		q := Query{From: a.From, To: a.To, BaselineFrom: a.BaselineFrom, BaselineTo: a.BaselineTo, Figure: FigureFor(a.Signal), Where: map[string]string{}}
		if q.BaselineFrom.IsZero() {
			q.BaselineTo, q.BaselineFrom = a.From, a.From.Add(-time.Hour)
		}
		for k, v := range a.Labels {
			switch k {
			case "model", "biz_line", "template", "upstream":
				q.Where[k] = v
			}
		}
		rep, err := Ask(ctx, l, q)
		if err != nil || len(rep.Messages) == 0 || rep.Messages[0].Code == "why.too_few" {
			return ""
		}
		return rep.Text()
	}
}
