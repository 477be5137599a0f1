package loadgen

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fixed is a workload whose requests carry only their index.
type fixed struct{}

func (fixed) Request(i int) *Request { return &Request{Index: i, Path: PathChat} }

// gatedServer is a fake sender: request i is answered (one content chunk,
// then [DONE], stamped with the bubble's clock) once gate[i] is closed.
type gatedServer struct {
	gate []chan struct{}
	sent chan int // request i reached the server
}

func newGatedServer(n int) *gatedServer {
	g := &gatedServer{sent: make(chan int, n)}
	for range n {
		g.gate = append(g.gate, make(chan struct{}))
	}
	return g
}

func (g *gatedServer) send(ctx context.Context, r *Request) Response {
	resp := Response{Sent: time.Now(), Status: 200}
	g.sent <- r.Index
	select {
	case <-g.gate[r.Index]:
	case <-ctx.Done():
		return Response{Sent: resp.Sent, Err: ctx.Err(), ErrKind: "canceled"}
	}
	now := time.Now()
	resp.Events = []Event{{At: now, Kind: KindContent, Text: " a"}, {At: now, Kind: KindDone}}
	return resp
}

// TestOpenLoopMeasuresFromIntendedTime: at 10 requests/s with one slot, a
// server that holds the first request for 500 ms makes the next two wait
// for the slot; their TTFT counts from when they were due (100 and 200 ms),
// not from when they could be sent (500 ms). The bubble's fake clock makes
// the figures exact.
func TestOpenLoopMeasuresFromIntendedTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newGatedServer(3)
		close(srv.gate[1])
		close(srv.gate[2])
		done := make(chan *Run, 1)
		start := time.Now()
		go func() {
			run, err := Drive(t.Context(), Load{Rate: 10, Arrival: ArrivalConstant, Concurrency: 1, Requests: 3}, fixed{}, srv.send, nil)
			if err != nil {
				t.Error(err)
			}
			done <- run
		}()
		<-srv.sent // request 0 is at the server
		time.Sleep(500 * time.Millisecond)
		close(srv.gate[0])
		run := <-done
		want := []struct{ due, sent, ttft time.Duration }{
			{0, 0, 500 * time.Millisecond},
			{100 * time.Millisecond, 500 * time.Millisecond, 400 * time.Millisecond},
			{200 * time.Millisecond, 500 * time.Millisecond, 300 * time.Millisecond},
		}
		if len(run.Results) != len(want) {
			t.Fatalf("%d results, want %d", len(run.Results), len(want))
		}
		for i, w := range want {
			r := run.Results[i]
			if r.Index != i || !r.OK() {
				t.Fatalf("result %d: index %d, err %v", i, r.Index, r.Err)
			}
			if got := r.Intended.Sub(start); got != w.due {
				t.Errorf("request %d due at %v, want %v", i, got, w.due)
			}
			if got := r.Sent.Sub(start); got != w.sent {
				t.Errorf("request %d sent at %v, want %v", i, got, w.sent)
			}
			if r.TTFT != w.ttft {
				t.Errorf("request %d: TTFT %v, want %v (from its due time)", i, r.TTFT, w.ttft)
			}
		}
		s := Summarize(run, "", false)
		if s.SendLag.Max != 400 {
			t.Errorf("max send lag %v ms, want 400", s.SendLag.Max)
		}
	})
}

// TestOpenLoopDoesNotWaitForAnswers: without a concurrency cap, requests
// leave on schedule while the first is still unanswered.
func TestOpenLoopDoesNotWaitForAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newGatedServer(3)
		done := make(chan *Run, 1)
		start := time.Now()
		go func() {
			run, _ := Drive(t.Context(), Load{Rate: 10, Arrival: ArrivalConstant, Requests: 3}, fixed{}, srv.send, nil)
			done <- run
		}()
		for range 3 {
			<-srv.sent
		}
		// All three are at the server with none answered: at 200 ms.
		if got := time.Since(start); got != 200*time.Millisecond {
			t.Errorf("third request reached the server at %v, want 200ms", got)
		}
		time.Sleep(time.Second)
		for _, g := range srv.gate {
			close(g)
		}
		run := <-done
		for i, r := range run.Results {
			if r.Sent != r.Intended {
				t.Errorf("request %d sent %v after it was due", i, r.Sent.Sub(r.Intended))
			}
			if want := time.Second + 200*time.Millisecond - time.Duration(i)*100*time.Millisecond; r.TTFT != want {
				t.Errorf("request %d: TTFT %v, want %v", i, r.TTFT, want)
			}
		}
	})
}

// TestClosedLoop: each sender sends its next request when the previous
// ended, so intended and sent coincide and indices have no gaps.
func TestClosedLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := newGatedServer(5)
		done := make(chan *Run, 1)
		go func() {
			run, _ := Drive(t.Context(), Load{Concurrency: 2, Requests: 5}, fixed{}, srv.send, nil)
			done <- run
		}()
		inFlight := map[int]bool{}
		answeredAt := map[int]time.Time{}
		for answered := range 5 {
			synctest.Wait() // every sender is blocked: at the server or done
			for len(srv.sent) > 0 {
				inFlight[<-srv.sent] = true
			}
			if want := min(2, 5-answered); len(inFlight) != want {
				t.Fatalf("after %d answers, %d requests at the server, want %d", answered, len(inFlight), want)
			}
			lo := -1
			for i := range inFlight {
				if lo < 0 || i < lo {
					lo = i
				}
			}
			time.Sleep(50 * time.Millisecond)
			answeredAt[lo] = time.Now()
			close(srv.gate[lo])
			delete(inFlight, lo)
		}
		run := <-done
		for i, r := range run.Results {
			if r.Index != i || r.Sent != r.Intended || r.TTFT != answeredAt[i].Sub(r.Sent) {
				t.Errorf("result %d: index %d, sent−intended %v, TTFT %v, want %v", i, r.Index, r.Sent.Sub(r.Intended), r.TTFT, answeredAt[i].Sub(r.Sent))
			}
		}
	})
}

// TestDurationBound: a run bounded by time sends on schedule until then
// (0, 100, …, 900 ms at 10/s) and no more.
func TestDurationBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		send := func(ctx context.Context, r *Request) Response {
			now := time.Now()
			return Response{Sent: now, Status: 200, Events: []Event{{At: now, Kind: KindContent}, {At: now, Kind: KindDone}}}
		}
		run, err := Drive(t.Context(), Load{Rate: 10, Arrival: ArrivalConstant, Duration: time.Second}, fixed{}, send, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(run.Results) != 10 {
			t.Errorf("%d requests in 1s at 10/s, want 10", len(run.Results))
		}
	})
}

func TestLoadValidate(t *testing.T) {
	for _, tt := range []struct {
		l    Load
		want string
	}{
		{Load{Rate: -1, Requests: 1}, "--rate: must be a positive number of requests per second, got -1"},
		{Load{Rate: 1, Arrival: "burst", Requests: 1}, `--arrival: must be poisson or constant, got "burst"`},
		{Load{Requests: 1}, "--concurrency: a closed loop (no --rate) needs at least 1"},
		{Load{Concurrency: 1}, "--num-prompts or --duration: one of them must bound the run"},
		{Load{Concurrency: 1, Requests: -2}, "--num-prompts: must not be negative, got -2"},
	} {
		err := tt.l.Validate()
		if err == nil || err.Error() != tt.want {
			t.Errorf("%+v: error %v, want %q", tt.l, err, tt.want)
		}
	}
}
