package window

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tollgate-dev/tollgate/internal/label"
	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)

// req is a finished request: arrived at, took e2e, first token after ttft.
func req(model string, at time.Time, ttft, e2e time.Duration, in, out int64) *record.Record {
	r := &record.Record{
		RequestID: fmt.Sprint(at.UnixNano()), Model: model, BizLine: "b", Upstream: "u", TemplateID: "t", Stream: true,
		Arrival: at, Status: 200, UpstreamStatus: 200, FinishReason: "stop",
		Usage: record.Usage{InputTokens: in, OutputTokens: out, Source: record.SourceEngine},
		Cost:  record.Cost{Nanos: in + 2*out, Currency: "USD"},
	}
	r.Marks.AuthDone = time.Millisecond
	r.Marks.Admitted = 3 * time.Millisecond
	r.Marks.UpstreamSent = 4 * time.Millisecond
	r.Marks.FirstUpstreamToken = ttft
	r.Marks.FirstClientToken = ttft
	r.Marks.LastToken = e2e
	r.Marks.End = e2e
	r.Finish()
	return r
}

// TestQuantileAccuracy: a window's P50/P95/P99 are within the stated
// relative error of the exact quantiles of the same values, also after
// merging minutes and an encode/decode round trip.
func TestQuantileAccuracy(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	a := New(Config{}, nil, nil, nil)
	var ttfts []float64
	for i := range 5000 {
		// Log-normal-ish TTFTs around 300 ms with a long tail.
		ttft := time.Duration(math.Exp(rng.NormFloat64()*0.8) * float64(300*time.Millisecond))
		at := t0.Add(time.Duration(i) * 700 * time.Millisecond)
		a.Add(req("m", at, ttft, ttft+time.Second, 100, 20))
		ttfts = append(ttfts, ttft.Seconds())
	}
	g := a.Window(t0, t0.Add(2*time.Hour), nil, nil, AllQuantity)[""]
	if g == nil || g.Stats.Requests != 5000 {
		t.Fatalf("window = %+v, want 5000 requests", g)
	}
	b, err := g.Stats.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var back Stats
	if err := back.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	slices.Sort(ttfts)
	for _, p := range []float64{0.5, 0.95, 0.99} {
		exact := ttfts[int(p*float64(len(ttfts)-1))]
		for name, s := range map[string]*Stats{"merged": &g.Stats, "decoded": &back} {
			got, n := s.Quantile(TTFT, p)
			if n != 5000 || math.Abs(got-exact)/exact > RelativeAccuracy+1e-9 {
				t.Errorf("%s P%v = %v over %d, exact %v: beyond %v relative error", name, p*100, got, n, exact, RelativeAccuracy)
			}
		}
	}
	if back.Requests != 5000 || back.Input != 500000 || back.CostNanos["USD"] != 5000*140 {
		t.Errorf("decoded counters = %+v", back)
	}
}

// TestWindowSelectsAndGroups: minutes outside the window and series not
// selected are left out; groups are by the labels asked for.
func TestWindowSelectsAndGroups(t *testing.T) {
	a := New(Config{}, nil, nil, nil)
	for i := range 10 {
		at := t0.Add(time.Duration(i) * time.Minute)
		a.Add(req("m1", at, 100*time.Millisecond, time.Second, 10, 1))
		a.Add(req("m2", at, 900*time.Millisecond, time.Second, 10, 1))
	}
	w := a.Window(t0.Add(2*time.Minute), t0.Add(5*time.Minute), nil, []string{"model"}, TTFT)
	if len(w) != 2 || w["model=m1"].Stats.Requests != 3 || w["model=m2"].Stats.Requests != 3 || w["model=m1"].Key.Model != "m1" {
		t.Fatalf("groups = %v", w)
	}
	if v, _ := w["model=m2"].Stats.Quantile(TTFT, 0.5); math.Abs(v-0.9) > 0.01 {
		t.Errorf("m2 P50 TTFT = %v, want ≈ 0.9", v)
	}
	only := a.Window(t0, t0.Add(time.Hour), Selector{"model": "m1"}, nil, NoQuantity)
	if only[""].Stats.Requests != 10 {
		t.Errorf("selected m1: %d requests, want 10", only[""].Stats.Requests)
	}
}

// TestPersistAndReload: closed minutes go to the store and come back
// after a restart; a request finishing in a minute already persisted
// counts in the next open one, never lost and never twice.
func TestPersistAndReload(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "w.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a := New(Config{}, st, nil, nil)
	for i := range 30 {
		a.Add(req("m", t0.Add(time.Duration(i)*time.Minute), 200*time.Millisecond, time.Second, 50, 5))
	}
	now := t0.Add(32 * time.Minute)
	a.Flush(ctx, now) // minutes up to 30 closed and persisted
	late := req("m", t0.Add(5*time.Minute), 200*time.Millisecond, time.Second, 50, 5)
	a.Add(late) // its minute is persisted: it counts in the first open one
	a.Flush(ctx, now.Add(5*time.Minute))

	b := New(Config{}, st, nil, nil)
	if err := b.Load(ctx, now.Add(5*time.Minute)); err != nil {
		t.Fatal(err)
	}
	w := b.Window(t0, t0.Add(time.Hour), nil, nil, AllQuantity)[""]
	if w == nil || w.Stats.Requests != 31 || w.Stats.Input != 31*50 {
		t.Fatalf("reloaded window = %+v, want 31 requests", w)
	}
	// Reloaded minutes are not written again.
	b.Flush(ctx, now.Add(10*time.Minute))
	rows, err := st.WindowMinutes(ctx, t0, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, r := range rows {
		var s Stats
		if err := s.UnmarshalBinary(r.Data); err != nil {
			t.Fatal(err)
		}
		n += s.Requests
	}
	if n != 31 {
		t.Errorf("store holds %d requests, want 31", n)
	}
	// Hour reads a closed hour back from the store.
	h, err := b.Hour(ctx, t0, nil, []string{"model"}, NoQuantity)
	if err != nil || h["model=m"].Stats.Requests != 31 {
		t.Errorf("Hour = %v, %v; want 31 requests", h, err)
	}
}

func TestCorruptEncodingIsAnError(t *testing.T) {
	var s Stats
	for _, b := range [][]byte{nil, {9}, {1, 2}, {1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7, 200}} {
		if err := s.UnmarshalBinary(b); err == nil {
			t.Errorf("UnmarshalBinary(%v) accepted", b)
		}
	}
}

// FuzzStatsUnmarshal: any bytes decode to an error or to Stats that
// encode and decode again to the same thing; never a panic, and never a
// sketch larger than its input allows (the library's own decoder could be
// made to allocate gigabytes by a few bytes).
// TestMergeBinary: merging encodings straight into a Stats equals
// decoding them and merging, for every quantity or some; the sketches not
// asked for are left out.
func TestMergeBinary(t *testing.T) {
	parts := make([][]byte, 5)
	var want Stats
	for p := range parts {
		var s Stats
		for i := range 40 {
			s.Add(req([]string{"m", "n"}[p%2], t0.Add(time.Duration(p*40+i)*time.Second), time.Duration(1+(p*7+i)%90)*10*time.Millisecond, time.Duration(1+i%5)*time.Second, int64(100*i), 7))
		}
		parts[p], _ = s.MarshalBinary()
		want.Merge(&s)
	}
	var all, some Stats
	for _, b := range parts {
		if err := all.MergeBinary(b); err != nil {
			t.Fatal(err)
		}
		if err := some.MergeBinary(b, E2E, TTFT); err != nil {
			t.Fatal(err)
		}
	}
	if all.Requests != want.Requests || some.Requests != want.Requests || all.Input != want.Input || some.CostNanos["USD"] != want.CostNanos["USD"] {
		t.Errorf("sums: all %+v, some %+v, want %+v", all, some, want)
	}
	for q := range numQuantities {
		for _, p := range []float64{0.5, 0.95, 0.99} {
			w, wn := want.Quantile(q, p)
			g, gn := all.Quantile(q, p)
			same := func(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) }
			if !same(w, g) || wn != gn {
				t.Errorf("%s p%v: merged %v over %d, decoded %v over %d", q, p*100, g, gn, w, wn)
			}
			g, gn = some.Quantile(q, p)
			if q == E2E || q == TTFT {
				if !same(w, g) || wn != gn {
					t.Errorf("%s p%v (asked): merged %v over %d, decoded %v over %d", q, p*100, g, gn, w, wn)
				}
			} else if gn != 0 {
				t.Errorf("%s (not asked): %d values merged, want none", q, gn)
			}
		}
	}
	before := all.Requests
	if err := all.MergeBinary(parts[0][:len(parts[0])-3]); err == nil || all.Requests != before {
		t.Errorf("a truncated encoding: %v, requests %d → %d; want an error and no change", err, before, all.Requests)
	}
}

func FuzzStatsUnmarshal(f *testing.F) {
	var s Stats
	for i := range 50 {
		s.Add(req("m", t0.Add(time.Duration(i)*time.Second), time.Duration(i+1)*10*time.Millisecond, 2*time.Second, int64(100*i), 7))
	}
	b, _ := s.MarshalBinary()
	f.Add(b)
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		var s Stats
		var m Stats
		m.Requests = 1
		if err := s.UnmarshalBinary(data); err != nil {
			if err := m.MergeBinary(data); err == nil || m.Requests != 1 {
				t.Fatalf("MergeBinary of what UnmarshalBinary refuses: %v, requests %d (want an error and no change)", err, m.Requests)
			}
			return
		}
		if err := m.MergeBinary(data); err != nil || m.Requests != s.Requests+1 {
			t.Fatalf("MergeBinary of what UnmarshalBinary reads: %v, requests %d, want %d", err, m.Requests, s.Requests+1)
		}
		for q := range numQuantities {
			v1, n1 := s.Quantile(q, 0.5)
			v2, n2 := m.Quantile(q, 0.5)
			if n1 != n2 || (v1 != v2 && !(math.IsNaN(v1) && math.IsNaN(v2))) {
				t.Fatalf("%s: P50 %v over %d decoded, %v over %d merged", q, v1, n1, v2, n2)
			}
		}
		b, err := s.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var back Stats
		if err := back.UnmarshalBinary(b); err != nil {
			t.Fatalf("re-encoded stats do not decode: %v", err)
		}
		for q := range numQuantities {
			v1, n1 := s.Quantile(q, 0.9)
			v2, n2 := back.Quantile(q, 0.9)
			if n1 != n2 || (v1 != v2 && !(math.IsNaN(v1) && math.IsNaN(v2))) {
				t.Fatalf("%s: P90 %v over %d, after a round trip %v over %d", q, v1, n1, v2, n2)
			}
		}
	})
}

// TestLabelsBoundedKeepFailingBizLines: with bounded labels, a business
// line whose requests all fail upstream keeps its own key (error-rate
// rules by business line must see it; TestThreeReplicas caught its loss),
// while values invented on requests the gateway refused itself, and
// values past the bound, fold into "other".
func TestLabelsBoundedKeepFailingBizLines(t *testing.T) {
	a := New(Config{Labels: label.New(nil, label.Config{MaxModels: 4, MaxBizLines: 2, MaxTemplates: 2})}, nil, nil, nil)
	failing := req("m", t0, 100*time.Millisecond, time.Second, 10, 1)
	failing.BizLine, failing.Status, failing.ErrorType = "errs", 500, record.ErrUpstreamStatus
	refused := req("m", t0, 0, time.Millisecond, 0, 0)
	refused.BizLine, refused.Status, refused.Marks.UpstreamSent = "invented", 400, 0
	a.Add(failing)
	a.Add(refused)
	for i := range 5 {
		r := req("m", t0, 100*time.Millisecond, time.Second, 10, 1)
		r.BizLine = fmt.Sprint("biz-", i)
		a.Add(r)
	}
	w := a.Window(t0, t0.Add(time.Hour), nil, []string{"biz_line"}, NoQuantity)
	if g := w["biz_line=errs"]; g == nil || g.Stats.Requests != 1 {
		t.Fatalf("the failing business line lost its key: %v", w)
	}
	if w["biz_line=invented"] != nil || w["biz_line=other"] == nil {
		t.Fatalf("refused or past-the-bound values not folded: %v", w)
	}
}
