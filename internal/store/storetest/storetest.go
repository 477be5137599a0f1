// Package storetest is the one conformance suite every store.Store backend
// passes (SQLite always, ClickHouse when a server is available). The store
// is the end of the request flow, and everything downstream — reports,
// billing, the dashboard — trusts what it reads back, so the contract in
// store.go is checked here once rather than re-tested per backend.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
)

// Run runs the suite. open must return a new, empty Store each time it is
// called; Run closes it when the subtest ends.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	runEach(t, open, []namedTest[store.Store]{
		{"RoundTrip", testRoundTrip},
		{"RequestsHasNoTimeline", testRequestsHasNoTimeline},
		{"Idempotent", testIdempotent},
		{"Filter", testFilter},
		{"NewestFirstAndLimit", testNewestFirstAndLimit},
		{"RequestAttempts", testRequestAttempts},
		{"NotFound", testNotFound},
		{"EmptyInsert", testEmptyInsert},
		{"CancelledInsert", testCancelledInsert},
		{"ConcurrentInsert", testConcurrentInsert},
		{"LargeBatch", testLargeBatch},
	})
}

type namedTest[S store.Store] struct {
	name string
	fn   func(t *testing.T, s S)
}

// runEach runs each test as a subtest on a new store, closed at its end.
func runEach[S store.Store](t *testing.T, open func(t *testing.T) S, tests []namedTest[S]) {
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			tt.fn(t, s)
		})
	}
}

func insert(t *testing.T, s store.Store, recs ...*record.Record) {
	t.Helper()
	if err := s.Insert(t.Context(), store.Batch{Records: recs}); err != nil {
		t.Fatalf("Insert(%d records): %v", len(recs), err)
	}
}

func all(t *testing.T, s store.Store) []*record.Record {
	t.Helper()
	got, err := s.Requests(t.Context(), store.Filter{Limit: 1 << 30})
	if err != nil {
		t.Fatalf("Requests: %v", err)
	}
	return got
}

func ids(recs []*record.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.RequestID
	}
	return out
}

func finished(r *record.Record) *record.Record {
	r.Finish()
	return r
}

func testRoundTrip(t *testing.T, s store.Store) {
	zero, zeroF := int64(0), 0.0
	tests := []struct {
		name string
		rec  *record.Record
		want *record.Record // what Request returns; nil means rec itself
	}{
		{name: "sampled", rec: Record(1)},
		{name: "failed attempt", rec: Record(2)},
		{name: "not sampled", rec: func() *record.Record {
			r := Record(3)
			r.Sampled = false
			return r
		}(), want: func() *record.Record {
			r := Record(3)
			r.Sampled = false
			return Unsampled(r)
		}()},
		{name: "minimal", rec: Minimal("minimal", Base)},
		{name: "every field distinct", rec: Filled()},
		{name: "zero pointers stay set", rec: func() *record.Record {
			r := Record(4)
			r.RequestID, r.LogicalRequestID = "zero-pointers", "zero-pointers"
			r.MaxTokens, r.Temperature, r.TopP = &zero, &zeroF, &zeroF
			return r
		}()},
		{name: "sampled without timeline", rec: func() *record.Record {
			r := Record(5)
			r.Timeline = nil
			return r
		}()},
		{name: "non-streaming", rec: func() *record.Record {
			r := Record(6)
			r.Stream, r.IncludeUsage, r.Timeline = false, false, nil
			r.Marks.FirstUpstreamToken, r.Marks.FirstClientToken, r.Marks.LastToken = 0, 0, 0
			return finished(r)
		}()},
		{name: "awkward text", rec: func() *record.Record {
			r := Record(7)
			r.RequestID, r.LogicalRequestID = `quote'd "id"`, `quote'd "id"`
			r.ErrorMessage = "line one\nline two\t; DROP TABLE requests; --"
			r.Tags = map[string]string{"": "empty key", "k": "", "中文": "标签"}
			return r
		}()},
	}
	for _, tt := range tests {
		insert(t, s, tt.rec)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := tt.want
			if want == nil {
				want = tt.rec
			}
			got, err := s.Request(t.Context(), tt.rec.RequestID)
			if err != nil {
				t.Fatalf("Request(%q): %v", tt.rec.RequestID, err)
			}
			if diff := cmp.Diff([]*record.Record{want}, got); diff != "" {
				t.Errorf("Request(%q) mismatch (-want +got):\n%s", tt.rec.RequestID, diff)
			}
		})
	}
}

func testRequestsHasNoTimeline(t *testing.T, s store.Store) {
	sampled, unsampled := Record(1), Record(2)
	unsampled.Sampled = false
	insert(t, s, sampled, unsampled)
	want := []*record.Record{Unsampled(unsampled), Unsampled(sampled)}
	if diff := cmp.Diff(want, all(t, s)); diff != "" {
		t.Errorf("Requests mismatch (-want +got):\n%s", diff)
	}
}

func testIdempotent(t *testing.T, s store.Store) {
	first := Records(0, 5)
	insert(t, s, first...)
	// A replay of the same batch, e.g. after a commit whose answer was lost.
	insert(t, s, first...)
	// A batch mixing stored and new records, and the same record twice.
	insert(t, s, first[1], Record(5), first[3], Record(6), Record(6))
	// A different record under a stored id: the first write wins, as a
	// replay must never rewrite what was billed.
	changed := Record(2)
	changed.Status, changed.Usage.OutputTokens = 500, 99999
	insert(t, s, changed)
	// Nor may a sampled replay add details to an unsampled first write.
	plain := Record(7)
	plain.Sampled = false
	insert(t, s, plain)
	insert(t, s, Record(7))

	got := all(t, s)
	want := Records(0, 8)
	slices.Reverse(want)
	want[0].Sampled = false
	for _, r := range want {
		r.Timeline = nil
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("after replays (-want +got):\n%s", diff)
	}
	one, err := s.Request(t.Context(), plain.RequestID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]*record.Record{Unsampled(plain)}, one); diff != "" {
		t.Errorf("Request(%q) after a sampled replay (-want +got):\n%s", plain.RequestID, diff)
	}
}

func testFilter(t *testing.T, s store.Store) {
	at := func(sec int) time.Time { return Base.Add(time.Duration(sec) * time.Second) }
	mk := func(id string, sec int, user, biz, model, trace, tpl string, status int, errType string, e2e time.Duration) *record.Record {
		r := Record(sec)
		r.RequestID, r.LogicalRequestID = id, id
		r.UserID, r.BizLine, r.Model, r.TraceID, r.TemplateID = user, biz, model, trace, tpl
		r.Status, r.ErrorType = status, errType
		r.Marks.LastToken, r.Marks.End = e2e-1, e2e
		// A client may send one X-Request-Id with several requests: each
		// is its own row, and the filter finds all of them.
		r.ClientRequestID = map[string]string{"r1": "dup", "r3": "dup", "r4": "own"}[id]
		r.Endpoint = map[string]string{"r1": "chat", "r2": "responses", "r3": "chat", "r4": "messages", "r5": "responses"}[id]
		r.EndUser = map[string]string{"r1": "cust-7", "r4": "cust-7", "r5": "cust-9"}[id]
		return finished(r)
	}
	insert(t, s,
		mk("r1", 1, "alice", "search", "m1", "t1", "tp1", 200, "", 100*time.Millisecond),
		mk("r2", 2, "bob", "chat", "m2", "t2", "tp2", 502, record.ErrUpstreamStatus, 2*time.Second),
		mk("r3", 3, "alice", "chat", "m1", "t3", "tp1", 499, record.ErrClientDisconnect, 5*time.Second),
		mk("r4", 4, "bob", "search", "m2", "t1", "tp2", 200, "", 50*time.Millisecond),
		mk("r5", 5, "carol", "search", "m1", "t5", "", 429, record.ErrRateLimited, time.Millisecond),
	)
	tests := []struct {
		name   string
		filter store.Filter
		want   []string
	}{
		{"zero filter", store.Filter{}, []string{"r5", "r4", "r3", "r2", "r1"}},
		{"user", store.Filter{UserID: "alice"}, []string{"r3", "r1"}},
		{"biz line", store.Filter{BizLine: "search"}, []string{"r5", "r4", "r1"}},
		{"model", store.Filter{Model: "m2"}, []string{"r4", "r2"}},
		{"trace", store.Filter{TraceID: "t1"}, []string{"r4", "r1"}},
		{"template", store.Filter{TemplateID: "tp1"}, []string{"r3", "r1"}},
		{"client request id", store.Filter{ClientRequestID: "dup"}, []string{"r3", "r1"}},
		{"endpoint", store.Filter{Endpoint: "responses"}, []string{"r5", "r2"}},
		{"end user", store.Filter{EndUser: "cust-7"}, []string{"r4", "r1"}},
		{"status", store.Filter{Status: 200}, []string{"r4", "r1"}},
		{"errors only", store.Filter{ErrorsOnly: true}, []string{"r5", "r3", "r2"}},
		{"min e2e is inclusive", store.Filter{MinE2E: 2 * time.Second}, []string{"r3", "r2"}},
		{"since is inclusive", store.Filter{Since: at(2)}, []string{"r5", "r4", "r3", "r2"}},
		{"until is exclusive", store.Filter{Until: at(2)}, []string{"r1"}},
		{"window", store.Filter{Since: at(2), Until: at(4)}, []string{"r3", "r2"}},
		{"since in another zone", store.Filter{Since: at(4).UTC()}, []string{"r5", "r4"}},
		{"limit", store.Filter{Limit: 2}, []string{"r5", "r4"}},
		{"combined", store.Filter{UserID: "alice", BizLine: "chat", ErrorsOnly: true}, []string{"r3"}},
		{"combined with limit", store.Filter{BizLine: "search", Model: "m1", Limit: 1}, []string{"r5"}},
		{"no match", store.Filter{UserID: "alice", Model: "m2"}, nil},
		{"unknown value", store.Filter{TraceID: "nope"}, nil},
		{"sorted by e2e", store.Filter{Sort: "e2e"}, []string{"r3", "r2", "r1", "r4", "r5"}},
		{"sorted, filtered, limited", store.Filter{Sort: "e2e", BizLine: "search", Limit: 2}, []string{"r1", "r4"}},
	}
	if _, err := s.Requests(t.Context(), store.Filter{Sort: "rowid"}); err == nil || !strings.Contains(err.Error(), "e2e") {
		t.Errorf("Requests with an unknown sort: %v; want an error naming the known ones", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.Requests(t.Context(), tt.filter)
			if err != nil {
				t.Fatalf("Requests(%+v): %v", tt.filter, err)
			}
			if diff := cmp.Diff(tt.want, ids(got), cmpEmpty); diff != "" {
				t.Errorf("Requests(%+v) ids (-want +got):\n%s", tt.filter, diff)
			}
		})
	}
}

// cmpEmpty treats a nil and an empty id list as equal: "no rows" either way.
var cmpEmpty = cmp.Comparer(func(a, b []string) bool { return slices.Equal(a, b) })

func testNewestFirstAndLimit(t *testing.T, s store.Store) {
	const n = 250
	recs := Records(0, n)
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
	insert(t, s, recs[:n/2]...)
	insert(t, s, recs[n/2:]...)

	newest := func(k int) []string {
		out := make([]string, k)
		for i := range out {
			out[i] = Record(n - 1 - i).RequestID
		}
		return out
	}
	tests := []struct {
		limit int
		want  []string
	}{
		{0, newest(100)}, // the default
		{-1, newest(100)},
		{1, newest(1)},
		{7, newest(7)},
		{n, newest(n)},
		{n + 1000, newest(n)},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("limit %d", tt.limit), func(t *testing.T) {
			got, err := s.Requests(t.Context(), store.Filter{Limit: tt.limit})
			if err != nil {
				t.Fatalf("Requests: %v", err)
			}
			if diff := cmp.Diff(tt.want, ids(got)); diff != "" {
				t.Errorf("ids (-want +got):\n%s", diff)
			}
		})
	}
}

func testRequestAttempts(t *testing.T, s store.Store) {
	attempt := func(i, n int, sampled bool) *record.Record {
		r := Record(i)
		r.LogicalRequestID = "logical-1"
		r.RequestID = fmt.Sprintf("logical-1.%d", n)
		r.Attempt, r.Retries, r.Sampled = n, n-1, sampled
		if n < 3 {
			r.Status, r.UpstreamStatus, r.ErrorType = 502, 502, record.ErrUpstreamStatus
		}
		return finished(r)
	}
	a1, a2, a3 := attempt(10, 1, false), attempt(11, 2, false), attempt(12, 3, true)
	other := Record(20)
	// Two records without a logical id must not be taken for attempts of
	// one request.
	lone1, lone2 := Minimal("lone-1", Base), Minimal("lone-2", Base.Add(time.Second))
	// Stored out of order, and in separate batches, as retries are.
	insert(t, s, a3, other, lone2)
	insert(t, s, a1, lone1)
	insert(t, s, a2)

	attempts := []*record.Record{Unsampled(a1), Unsampled(a2), a3}
	tests := []struct {
		id   string
		want []*record.Record
	}{
		{"logical-1", attempts},
		{"logical-1.1", attempts},
		{"logical-1.2", attempts},
		{"logical-1.3", attempts},
		{other.RequestID, []*record.Record{other}},
		{"lone-1", []*record.Record{lone1}},
		{"lone-2", []*record.Record{lone2}},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			got, err := s.Request(t.Context(), tt.id)
			if err != nil {
				t.Fatalf("Request(%q): %v", tt.id, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Request(%q) (-want +got):\n%s", tt.id, diff)
			}
		})
	}
}

func testNotFound(t *testing.T, s store.Store) {
	insert(t, s, Record(1), Minimal("no-logical-id", Base))
	for _, id := range []string{"", "nope", "req-000002", "REQ-000001"} {
		got, err := s.Request(t.Context(), id)
		if !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Request(%q) = %d records, %v; want ErrNotFound", id, len(got), err)
		}
	}
}

func testEmptyInsert(t *testing.T, s store.Store) {
	for _, recs := range [][]*record.Record{nil, {}} {
		if err := s.Insert(t.Context(), store.Batch{Records: recs}); err != nil {
			t.Errorf("Insert(%v) = %v, want nil", recs, err)
		}
	}
	if got := all(t, s); len(got) != 0 {
		t.Errorf("store has %d records after empty inserts", len(got))
	}
}

func testCancelledInsert(t *testing.T, s store.Store) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.Insert(ctx, store.Batch{Records: Records(0, 3)}); !errors.Is(err, context.Canceled) {
		t.Errorf("Insert with a cancelled context = %v, want context.Canceled", err)
	}
	if got := all(t, s); len(got) != 0 {
		t.Errorf("a cancelled Insert stored %v", ids(got))
	}
}

func testConcurrentInsert(t *testing.T, s store.Store) {
	const (
		workers = 8
		batches = 10
		size    = 25
	)
	shared := Records(1_000_000, size) // every worker also replays these
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for b := range batches {
				recs := Records((w*batches+b)*size, size)
				if b == batches/2 {
					recs = append(recs, shared...)
				}
				if err := s.Insert(t.Context(), store.Batch{Records: recs}); err != nil {
					t.Errorf("worker %d batch %d: %v", w, b, err)
					return
				}
			}
		})
	}
	wg.Wait()

	got := all(t, s)
	if want := workers*batches*size + size; len(got) != want {
		t.Fatalf("stored %d records, want %d", len(got), want)
	}
	seen := make(map[string]bool, len(got))
	for _, r := range got {
		if seen[r.RequestID] {
			t.Errorf("%s stored twice", r.RequestID)
		}
		seen[r.RequestID] = true
	}
}

func testLargeBatch(t *testing.T, s store.Store) {
	const n = 10_000
	recs := Records(0, n)
	insert(t, s, recs...)
	got := all(t, s)
	want := make([]*record.Record, n)
	for i, r := range recs {
		want[n-1-i] = Unsampled(r)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("10k batch mismatch (-want +got):\n%s", diff)
	}
	// Details were written too, not only the ledger.
	for _, i := range []int{0, n / 2, n - 1} {
		one, err := s.Request(t.Context(), recs[i].RequestID)
		if err != nil {
			t.Fatalf("Request(%q): %v", recs[i].RequestID, err)
		}
		if diff := cmp.Diff([]*record.Record{recs[i]}, one); diff != "" {
			t.Errorf("Request(%q) (-want +got):\n%s", recs[i].RequestID, diff)
		}
	}
}
