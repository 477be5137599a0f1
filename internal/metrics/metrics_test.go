package metrics

import (
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/internal/record"
)

func TestModelLabelsBounded(t *testing.T) {
	s := newModelSet([]string{"configured"}, 2)
	if got := s.label("configured", false); got != "configured" {
		t.Errorf("configured model = %q", got)
	}
	// Failed requests never teach a name: a client inventing model names
	// cannot grow the label set.
	if got := s.label("invented", false); got != OtherModel {
		t.Errorf("unknown model on a failed request = %q, want other", got)
	}
	if s.label("a", true) != "a" || s.label("b", true) != "b" {
		t.Error("learned names not kept")
	}
	if got := s.label("c", true); got != OtherModel {
		t.Errorf("beyond the limit: %q, want other", got)
	}
	if s.label("a", false) != "a" {
		t.Error("a learned name folds on a later failure")
	}
}

func TestObserveNoUnboundedLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg, nil, 4)
	for i := range 100 {
		r := &record.Record{Model: "model-" + strconv.Itoa(i), UserID: "user-" + strconv.Itoa(i), Upstream: "u", Status: 200, Stream: true,
			Usage: record.Usage{InputTokens: 1, OutputTokens: 2, Source: record.SourceEngine}}
		r.Marks.FirstClientToken, r.Marks.LastToken, r.Marks.End = 1e6, 2e6, 3e6
		r.Finish()
		m.Observe(r)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		models := map[string]bool{}
		for _, mt := range mf.GetMetric() {
			for _, lp := range mt.GetLabel() {
				if strings.Contains(lp.GetValue(), "user-") {
					t.Errorf("%s has a user id in label %s", mf.GetName(), lp.GetName())
				}
				if lp.GetName() == "model" {
					models[lp.GetValue()] = true
				}
			}
		}
		if len(models) > 5 {
			t.Errorf("%s has %d model label values, want ≤ 4 learned + other", mf.GetName(), len(models))
		}
	}
	if n := testutil.CollectAndCount(m.ttft); n != 5 {
		t.Errorf("TTFT series = %d, want 5", n)
	}
}
