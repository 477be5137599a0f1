package metrics

import (
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/internal/label"
	"github.com/tollgate-dev/tollgate/internal/record"
)

func TestObserveNoUnboundedLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg, label.New(reg, label.Config{MaxModels: 4, MaxBizLines: 3}))
	for i := range 100 {
		r := &record.Record{Model: "model-" + strconv.Itoa(i), UserID: "user-" + strconv.Itoa(i), Upstream: "u", Status: 200, Stream: true,
			BizLine: "biz-" + strconv.Itoa(i), FinishReason: "reason-" + strconv.Itoa(i),
			Usage: record.Usage{InputTokens: 1, OutputTokens: 2, Source: record.SourceEngine}}
		r.Marks.UpstreamSent, r.Marks.FirstClientToken, r.Marks.LastToken, r.Marks.End = 1e5, 1e6, 2e6, 3e6
		r.Finish()
		m.Observe(r)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		values := map[string]map[string]bool{}
		for _, mt := range mf.GetMetric() {
			for _, lp := range mt.GetLabel() {
				if strings.Contains(lp.GetValue(), "user-") {
					t.Errorf("%s has a user id in label %s", mf.GetName(), lp.GetName())
				}
				if values[lp.GetName()] == nil {
					values[lp.GetName()] = map[string]bool{}
				}
				values[lp.GetName()][lp.GetValue()] = true
			}
		}
		for name, bound := range map[string]int{"model": 5, "gen_ai_request_model": 5, "gen_ai_response_model": 5, "biz_line": 4, "finish_reason": 1} {
			if n := len(values[name]); n > bound {
				t.Errorf("%s has %d %s label values, want ≤ %d", mf.GetName(), n, name, bound)
			}
		}
	}
	if n := testutil.CollectAndCount(m.ttft); n != 5 {
		t.Errorf("TTFT series = %d, want 5", n)
	}
}

// TestObserveInvalidUTF8 is the panic behind issue 16's lost rows: a
// label value that is not UTF-8 made client_golang panic inside Observe.
// Bounded sets never turn such a value into a label.
func TestObserveInvalidUTF8(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg, label.New(reg, label.Config{MaxModels: 4, MaxBizLines: 4}))
	r := &record.Record{Model: "m\xe4", BizLine: "\xe4\xb8", FinishReason: "\xff", Upstream: "u", Status: 200}
	r.Finish()
	m.Observe(r) // panicked before
	if n := testutil.CollectAndCount(m.requests); n != 1 {
		t.Fatalf("requests series = %d, want 1", n)
	}
}

// TestUnknownInputNotObserved: a request whose input nobody counted
// (source chunks) adds no 0-token observation to the input histogram;
// its output is observed.
func TestUnknownInputNotObserved(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg, label.New(reg, label.Config{MaxModels: 4, MaxBizLines: 4}))
	r := &record.Record{Model: "m", Upstream: "u", Status: 200, Usage: record.Usage{OutputTokens: 7, Source: record.SourceChunks}}
	r.Finish()
	m.Observe(r)
	count := func(kind string) uint64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "gen_ai_client_token_usage" {
				continue
			}
			for _, mt := range mf.GetMetric() {
				for _, lp := range mt.GetLabel() {
					if lp.GetName() == "gen_ai_token_type" && lp.GetValue() == kind {
						return mt.GetHistogram().GetSampleCount()
					}
				}
			}
		}
		return 0
	}
	if in, out := count("input"), count("output"); in != 0 || out != 1 {
		t.Errorf("observations: input %d, output %d; want 0 and 1", in, out)
	}
}
