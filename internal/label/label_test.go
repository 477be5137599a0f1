package label

import (
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestSetBounded(t *testing.T) {
	folded := prometheus.NewCounter(prometheus.CounterOpts{Name: "f"})
	s := NewSet([]string{"configured"}, 2, folded)
	if got := s.Value("configured", false); got != "configured" {
		t.Errorf("configured value = %q", got)
	}
	// Failed requests never teach a name: a client inventing names cannot
	// grow the set.
	if got := s.Value("invented", false); got != Other {
		t.Errorf("unknown value without learning = %q, want other", got)
	}
	if s.Value("a", true) != "a" || s.Value("b", true) != "b" {
		t.Error("learned names not kept")
	}
	if got := s.Value("c", true); got != Other {
		t.Errorf("beyond the limit: %q, want other", got)
	}
	if s.Value("a", false) != "a" {
		t.Error("a learned name folds on a later failure")
	}
	if got := s.Value("\xe4\xb8", true); got != Other {
		t.Errorf("invalid UTF-8 = %q, want other", got)
	}
	if got := testutil.ToFloat64(folded); got != 3 {
		t.Errorf("folded = %v, want 3", got)
	}
}

// TestBoundsAfterManyValues: 5,000 invented business lines end as the
// bound plus "other", and every fold is counted.
func TestBoundsAfterManyValues(t *testing.T) {
	reg := prometheus.NewRegistry()
	b := New(reg, Config{BizLines: []string{"search"}, MaxBizLines: 64})
	seen := map[string]bool{}
	for i := range 5000 {
		seen[b.BizLine.Value("biz-"+strconv.Itoa(i), true)] = true
	}
	seen[b.BizLine.Value("search", false)] = true
	if len(seen) != 66 {
		t.Fatalf("%d distinct values, want 64 learned + search + other", len(seen))
	}
	if got := testutil.ToFloat64(b.BizLine.folded); got != 5000-64 {
		t.Fatalf("folded = %v, want %d", got, 5000-64)
	}
}

// TestAgainDoesNotCount: a second consumer of the same Record gets the
// same value without counting the fold again.
func TestAgainDoesNotCount(t *testing.T) {
	folded := prometheus.NewCounter(prometheus.CounterOpts{Name: "f"})
	s := NewSet(nil, 1, folded)
	s.Value("a", true)
	if s.Value("b", true) != Other || s.Again("b", true) != Other || s.Again("a", true) != "a" {
		t.Fatal("Again disagrees with Value")
	}
	if got := testutil.ToFloat64(folded); got != 1 {
		t.Fatalf("folded = %v, want 1", got)
	}
}

func TestLearnModel(t *testing.T) {
	for _, tc := range []struct {
		sent   bool
		status int
		want   bool
	}{{true, 200, true}, {true, 500, true}, {true, 0, true}, {true, 404, false}, {true, 400, false}, {false, 0, false}} {
		if got := LearnModel(tc.sent, tc.status); got != tc.want {
			t.Errorf("LearnModel(%v, %d) = %v", tc.sent, tc.status, got)
		}
	}
}
