package loadgen

import (
	"math"
	"slices"
	"sort"
	"time"
)

// Percentile is the p-th percentile (0–100) of sorted values, interpolated
// linearly between the two nearest ranks — numpy's default, which vLLM's
// benchmark uses — so the figures of a run are exact, not sketched.
// It is NaN for no values.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	pos := p / 100 * float64(n-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, n-1)
	return sorted[lo] + (sorted[hi]-sorted[lo])*(pos-float64(lo))
}

// Dist summarises one latency, in milliseconds.
type Dist struct {
	N      int     `json:"n"`
	Mean   float64 `json:"mean_ms"`
	Std    float64 `json:"std_ms"`
	Median float64 `json:"median_ms"`
	P90    float64 `json:"p90_ms"`
	P95    float64 `json:"p95_ms"`
	P99    float64 `json:"p99_ms"`
	Min    float64 `json:"min_ms"`
	Max    float64 `json:"max_ms"`
}

// NewDist summarises values given in milliseconds (population std, as
// numpy's). Empty input gives zeros, as vLLM prints.
func NewDist(ms []float64) Dist {
	if len(ms) == 0 {
		return Dist{}
	}
	s := slices.Clone(ms)
	sort.Float64s(s)
	var sum float64
	for _, v := range s {
		sum += v
	}
	mean := sum / float64(len(s))
	var sq float64
	for _, v := range s {
		sq += (v - mean) * (v - mean)
	}
	return Dist{
		N: len(s), Mean: mean, Std: math.Sqrt(sq / float64(len(s))),
		Median: Percentile(s, 50), P90: Percentile(s, 90), P95: Percentile(s, 95), P99: Percentile(s, 99),
		Min: s[0], Max: s[len(s)-1],
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Summary is a run summed up. Its JSON keeps the flat names of vLLM's
// benchmark_serving result file where they exist (completed,
// total_input_tokens, request_throughput, mean_ttft_ms, p99_itl_ms, …), so
// tools that read those files read these; the distributions are also
// given whole.
type Summary struct {
	Endpoint       string  `json:"endpoint,omitempty"`
	Mode           string  `json:"mode"` // "open" or "closed"
	RequestRate    float64 `json:"request_rate,omitempty"`
	Arrival        string  `json:"arrival,omitempty"`
	MaxConcurrency int     `json:"max_concurrency,omitempty"`

	Duration          float64        `json:"duration"` // seconds
	Completed         int            `json:"completed"`
	Failed            int            `json:"failed"`
	Errors            map[string]int `json:"errors,omitempty"`
	TotalInputTokens  int            `json:"total_input_tokens"`
	TotalOutputTokens int            `json:"total_output_tokens"`
	// OutputTokensFrom says how output tokens were counted: "usage" (the
	// server's usage object), "chunks" (content chunks, no usage reported),
	// or "mixed".
	OutputTokensFrom  string  `json:"output_tokens_from"`
	RequestThroughput float64 `json:"request_throughput"`
	OutputThroughput  float64 `json:"output_throughput"`
	TotalThroughput   float64 `json:"total_token_throughput"`

	MeanTTFT   float64 `json:"mean_ttft_ms"`
	MedianTTFT float64 `json:"median_ttft_ms"`
	StdTTFT    float64 `json:"std_ttft_ms"`
	P99TTFT    float64 `json:"p99_ttft_ms"`
	MeanTPOT   float64 `json:"mean_tpot_ms"`
	MedianTPOT float64 `json:"median_tpot_ms"`
	StdTPOT    float64 `json:"std_tpot_ms"`
	P99TPOT    float64 `json:"p99_tpot_ms"`
	MeanITL    float64 `json:"mean_itl_ms"`
	MedianITL  float64 `json:"median_itl_ms"`
	StdITL     float64 `json:"std_itl_ms"`
	P99ITL     float64 `json:"p99_itl_ms"`
	MeanE2EL   float64 `json:"mean_e2el_ms"`
	MedianE2EL float64 `json:"median_e2el_ms"`
	StdE2EL    float64 `json:"std_e2el_ms"`
	P99E2EL    float64 `json:"p99_e2el_ms"`

	TTFT Dist `json:"ttft"`
	TPOT Dist `json:"tpot"`
	ITL  Dist `json:"itl"`
	E2EL Dist `json:"e2el"`
	// SendLag is actual send − intended send (open loop): how far the
	// client itself fell behind the schedule. Latencies include it.
	SendLag Dist `json:"send_lag"`

	Requests []RequestRow `json:"requests,omitempty"`
}

// RequestRow is one request in a detailed result.
type RequestRow struct {
	Index        int       `json:"index"`
	RequestID    string    `json:"request_id,omitempty"`
	OK           bool      `json:"ok"`
	Status       int       `json:"status,omitempty"`
	Error        string    `json:"error,omitempty"`
	ErrorKind    string    `json:"error_kind,omitempty"`
	Intended     time.Time `json:"intended"`
	SendLagMS    float64   `json:"send_lag_ms"`
	TTFTMS       *float64  `json:"ttft_ms"`
	TPOTMS       *float64  `json:"tpot_ms"`
	E2ELMS       float64   `json:"e2el_ms"`
	StreamEndMS  float64   `json:"stream_end_ms"`
	ITLMS        []float64 `json:"itl_ms,omitempty"`
	InputTokens  int       `json:"input_tokens"`
	OutputTokens int       `json:"output_tokens"`
	OutputFrom   string    `json:"output_tokens_from"`
	Chunks       int       `json:"content_chunks"`
	FinishReason string    `json:"finish_reason,omitempty"`
}

// Summarize sums a run up. Like vLLM, latencies and tokens are over the
// successful requests; TPOT over those with more than one output token;
// ITL pools every gap of every successful request. detailed adds one row
// per request.
func Summarize(run *Run, endpoint string, detailed bool) *Summary {
	s := &Summary{Endpoint: endpoint, Mode: "closed", MaxConcurrency: run.Load.Concurrency, Errors: map[string]int{}}
	if run.Load.Rate > 0 {
		s.Mode, s.RequestRate, s.Arrival = "open", run.Load.Rate, run.Load.Arrival
		if s.Arrival == "" {
			s.Arrival = ArrivalPoisson
		}
	}
	s.Duration = run.End.Sub(run.Start).Seconds()
	var ttft, tpot, itl, e2el, lag []float64
	sources := map[string]bool{}
	for i := range run.Results {
		r := &run.Results[i]
		if !r.Sent.IsZero() {
			lag = append(lag, ms(r.Sent.Sub(r.Intended)))
		}
		if detailed {
			s.Requests = append(s.Requests, row(r))
		}
		if !r.OK() {
			s.Failed++
			s.Errors[r.ErrKind]++
			continue
		}
		s.Completed++
		s.TotalInputTokens += r.InputTokens
		s.TotalOutputTokens += r.OutputTokens
		sources[r.OutputFrom] = true
		ttft = append(ttft, ms(r.TTFT))
		e2el = append(e2el, ms(r.E2E))
		if r.HasTPOT {
			tpot = append(tpot, ms(r.TPOT))
		}
		for _, g := range r.ITL {
			itl = append(itl, ms(g))
		}
	}
	if len(s.Errors) == 0 {
		s.Errors = nil
	}
	switch {
	case len(sources) > 1:
		s.OutputTokensFrom = "mixed"
	case sources[FromChunks]:
		s.OutputTokensFrom = FromChunks
	default:
		s.OutputTokensFrom = FromUsage
	}
	if s.Duration > 0 {
		s.RequestThroughput = float64(s.Completed) / s.Duration
		s.OutputThroughput = float64(s.TotalOutputTokens) / s.Duration
		s.TotalThroughput = float64(s.TotalInputTokens+s.TotalOutputTokens) / s.Duration
	}
	s.TTFT, s.TPOT, s.ITL, s.E2EL, s.SendLag = NewDist(ttft), NewDist(tpot), NewDist(itl), NewDist(e2el), NewDist(lag)
	s.MeanTTFT, s.MedianTTFT, s.StdTTFT, s.P99TTFT = s.TTFT.Mean, s.TTFT.Median, s.TTFT.Std, s.TTFT.P99
	s.MeanTPOT, s.MedianTPOT, s.StdTPOT, s.P99TPOT = s.TPOT.Mean, s.TPOT.Median, s.TPOT.Std, s.TPOT.P99
	s.MeanITL, s.MedianITL, s.StdITL, s.P99ITL = s.ITL.Mean, s.ITL.Median, s.ITL.Std, s.ITL.P99
	s.MeanE2EL, s.MedianE2EL, s.StdE2EL, s.P99E2EL = s.E2EL.Mean, s.E2EL.Median, s.E2EL.Std, s.E2EL.P99
	return s
}

func row(r *Result) RequestRow {
	out := RequestRow{
		Index: r.Index, RequestID: r.RequestID, OK: r.OK(), Status: r.Status, ErrorKind: r.ErrKind,
		Intended: r.Intended, E2ELMS: ms(r.E2E), StreamEndMS: ms(r.StreamEnd),
		InputTokens: r.InputTokens, OutputTokens: r.OutputTokens, OutputFrom: r.OutputFrom,
		Chunks: r.ContentChunks, FinishReason: r.FinishReason,
	}
	if !r.Sent.IsZero() {
		out.SendLagMS = ms(r.Sent.Sub(r.Intended))
	}
	if r.Err != nil {
		out.Error = r.Err.Error()
	}
	if r.HasTTFT {
		v := ms(r.TTFT)
		out.TTFTMS = &v
	}
	if r.HasTPOT {
		v := ms(r.TPOT)
		out.TPOTMS = &v
	}
	for _, g := range r.ITL {
		out.ITLMS = append(out.ITLMS, ms(g))
	}
	return out
}
