package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tollgate-dev/tollgate/internal/capture"
	"github.com/tollgate-dev/tollgate/internal/store"
)

// CaptureStore is a backend with the captures table (every Backend).
type CaptureStore interface {
	store.Backend
}

// RunCaptures runs the conformance tests of store.Captures. open must
// return a new, empty store each time.
func RunCaptures(t *testing.T, open func(t *testing.T) CaptureStore) {
	runEach(t, open, []namedTest[CaptureStore]{
		{"RoundTrip", testCaptureRoundTrip},
		{"Idempotent", testCaptureIdempotent},
		{"Filter", testCaptureFilter},
		{"NotFound", testCaptureNotFound},
		{"PruneCaptures", testPruneCaptures},
		{"PruneHonoursRetention", testPruneRetention},
	})
}

// Capture i is taken a minute after Base + i minutes; even ones are slow,
// odd ones failed. Bodies hold bytes that are not valid UTF-8, a NUL and
// Chinese text, so the round trip is exact for any bytes.
func Capture(i int) *capture.Capture {
	reason := "slow"
	if i%2 == 1 {
		reason = "failed"
	}
	c := &capture.Capture{
		RequestID:         fmt.Sprintf("cap-%04d", i),
		At:                Base.Add(time.Duration(i) * time.Minute).UTC(),
		Reason:            reason,
		Request:           fmt.Appendf(nil, `{"messages":[{"role":"user","content":"问题 %d [REDACTED:email]"}]}`, i),
		Response:          append(fmt.Appendf(nil, "答案 %d ", i), 0x00, 0xff, 0xfe),
		RequestTruncated:  i%3 == 0,
		ResponseTruncated: i%5 == 0,
	}
	c.RequestBytes, c.ResponseBytes = len(c.Request), len(c.Response) // as the store reads it back
	return c
}

func addCaptures(t *testing.T, s store.Captures, cs ...*capture.Capture) {
	t.Helper()
	if err := s.AddCaptures(t.Context(), cs); err != nil {
		t.Fatalf("AddCaptures(%d): %v", len(cs), err)
	}
}

func captureIDs(cs []*capture.Capture) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.RequestID
	}
	return out
}

func listCaptures(t *testing.T, s store.Captures, f store.CaptureFilter) []*capture.Capture {
	t.Helper()
	got, err := s.Captures(t.Context(), f)
	if err != nil {
		t.Fatalf("Captures(%+v): %v", f, err)
	}
	return got
}

func testCaptureRoundTrip(t *testing.T, s CaptureStore) {
	var cs []*capture.Capture
	for i := range 6 {
		cs = append(cs, Capture(i))
	}
	empty := &capture.Capture{RequestID: "empty", At: Base.Add(-time.Hour).UTC(), Reason: "failed"}
	addCaptures(t, s, append(cs, empty)...)
	for _, want := range cs {
		got, err := s.Capture(t.Context(), want.RequestID)
		if err != nil {
			t.Fatalf("Capture(%s): %v", want.RequestID, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Capture(%s) (-want +got):\n%s", want.RequestID, diff)
		}
	}
	got, err := s.Capture(t.Context(), "empty")
	if err != nil || len(got.Request) != 0 || len(got.Response) != 0 || got.Reason != "failed" {
		t.Errorf("capture without bodies: %+v, %v", got, err)
	}
	// Newest first, without bodies but with their lengths in bytes.
	list := listCaptures(t, s, store.CaptureFilter{})
	want := []string{"cap-0005", "cap-0004", "cap-0003", "cap-0002", "cap-0001", "cap-0000", "empty"}
	if diff := cmp.Diff(want, captureIDs(list)); diff != "" {
		t.Errorf("Captures order (-want +got):\n%s", diff)
	}
	if len(list) > 0 {
		want := *cs[5]
		want.Request, want.Response = nil, nil
		if diff := cmp.Diff(&want, list[0]); diff != "" {
			t.Errorf("listed capture (-want +got):\n%s", diff)
		}
	}
}

func testCaptureIdempotent(t *testing.T, s CaptureStore) {
	first := Capture(1)
	again := Capture(1)
	again.Response = []byte("a later write")
	addCaptures(t, s, first)
	addCaptures(t, s, again, Capture(2))
	addCaptures(t, s, Capture(3), Capture(3))
	list := listCaptures(t, s, store.CaptureFilter{})
	if diff := cmp.Diff([]string{"cap-0003", "cap-0002", "cap-0001"}, captureIDs(list)); diff != "" {
		t.Fatalf("after replays (-want +got):\n%s", diff)
	}
	got, err := s.Capture(t.Context(), "cap-0001")
	if err != nil || string(got.Response) != string(first.Response) {
		t.Errorf("the first write must win: %+v, %v", got, err)
	}
	if err := s.AddCaptures(t.Context(), nil); err != nil {
		t.Errorf("AddCaptures(nil): %v", err)
	}
}

func testCaptureFilter(t *testing.T, s CaptureStore) {
	var cs []*capture.Capture
	for i := range 10 {
		cs = append(cs, Capture(i))
	}
	addCaptures(t, s, cs...)
	for _, tc := range []struct {
		name string
		f    store.CaptureFilter
		want []string
	}{
		{"since", store.CaptureFilter{Since: Base.Add(8 * time.Minute)}, []string{"cap-0009", "cap-0008"}},
		{"until", store.CaptureFilter{Until: Base.Add(2 * time.Minute)}, []string{"cap-0001", "cap-0000"}},
		{"range", store.CaptureFilter{Since: Base.Add(3 * time.Minute), Until: Base.Add(5 * time.Minute)}, []string{"cap-0004", "cap-0003"}},
		{"failed", store.CaptureFilter{Reason: "failed", Limit: 3}, []string{"cap-0009", "cap-0007", "cap-0005"}},
		{"slow", store.CaptureFilter{Reason: "slow", Since: Base.Add(5 * time.Minute)}, []string{"cap-0008", "cap-0006"}},
		{"limit", store.CaptureFilter{Limit: 2}, []string{"cap-0009", "cap-0008"}},
	} {
		if diff := cmp.Diff(tc.want, captureIDs(listCaptures(t, s, tc.f))); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

func testCaptureNotFound(t *testing.T, s CaptureStore) {
	addCaptures(t, s, Capture(1))
	for _, id := range []string{"cap-0002", "", "cap-0001'"} {
		if _, err := s.Capture(t.Context(), id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Capture(%q): %v, want ErrNotFound", id, err)
		}
	}
}

func testPruneCaptures(t *testing.T, s CaptureStore) {
	var cs []*capture.Capture
	for i := range 10 {
		cs = append(cs, Capture(i))
	}
	addCaptures(t, s, cs...)
	n, err := s.PruneCaptures(t.Context(), Base.Add(4*time.Minute))
	if err != nil || n != 4 {
		t.Fatalf("PruneCaptures: %d, %v; want 4", n, err)
	}
	if got := captureIDs(listCaptures(t, s, store.CaptureFilter{Until: Base.Add(5 * time.Minute)})); !cmp.Equal(got, []string{"cap-0004"}) {
		t.Errorf("left before the cut's next minute: %v, want [cap-0004]", got)
	}
	if _, err := s.Capture(t.Context(), "cap-0003"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a pruned capture is still read: %v", err)
	}
	if n, err := s.PruneCaptures(t.Context(), Base.Add(4*time.Minute)); err != nil || n != 0 {
		t.Errorf("second PruneCaptures: %d, %v; want 0", n, err)
	}
}

// testPruneRetention: Prune deletes captures older than
// Retention.Captures, and keeps them when it is zero, whatever the other
// retentions say — a capture never outlives its own retention, and the
// ledger's does not decide it.
func testPruneRetention(t *testing.T, s CaptureStore) {
	var cs []*capture.Capture
	for i := range 6 {
		cs = append(cs, Capture(i))
	}
	addCaptures(t, s, cs...)
	now := Base.Add(10 * time.Minute)
	if _, err := s.Prune(t.Context(), now, store.Retention{Ledger: time.Minute, Events: time.Minute}); err != nil {
		t.Fatalf("Prune without Captures: %v", err)
	}
	if got := listCaptures(t, s, store.CaptureFilter{}); len(got) != 6 {
		t.Fatalf("Prune without a captures retention deleted captures: %d left", len(got))
	}
	// Kept 7 minutes: captures at Base+3m and later stay.
	if _, err := s.Prune(t.Context(), now, store.Retention{Captures: 7 * time.Minute}); err != nil {
		t.Fatalf("Prune: %v", err)
	}
	if diff := cmp.Diff([]string{"cap-0005", "cap-0004", "cap-0003"}, captureIDs(listCaptures(t, s, store.CaptureFilter{}))); diff != "" {
		t.Errorf("after Prune (-want +got):\n%s", diff)
	}
}
