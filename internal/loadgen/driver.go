package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Arrival processes of the open loop.
const (
	ArrivalPoisson  = "poisson"  // exponential gaps of mean 1/rate
	ArrivalConstant = "constant" // gaps of exactly 1/rate
)

// Load is how requests are sent.
//
// Open loop (Rate > 0): request i is due at the i-th instant of the arrival
// process, whatever happened to the earlier ones; its latencies count from
// that instant. Concurrency, when set, caps requests in flight (vLLM's
// --max-concurrency): a due request waiting for a slot is still measured
// from when it was due.
//
// Closed loop (Rate == 0): Concurrency senders each send their next
// request as soon as their previous one has ended.
type Load struct {
	Rate        float64 // requests per second; 0 = closed loop
	Arrival     string  // ArrivalPoisson (default) or ArrivalConstant
	Concurrency int
	Requests    int           // stop after this many (0: no limit)
	Duration    time.Duration // stop sending after this long (0: no limit)
	Seed        uint64        // arrival draws
}

// Validate names the flag that is wrong.
func (l Load) Validate() error {
	switch {
	case l.Rate < 0 || math.IsNaN(l.Rate) || math.IsInf(l.Rate, 0):
		return fmt.Errorf("--rate: must be a positive number of requests per second, got %g", l.Rate)
	case l.Arrival != "" && l.Arrival != ArrivalPoisson && l.Arrival != ArrivalConstant:
		return fmt.Errorf("--arrival: must be %s or %s, got %q", ArrivalPoisson, ArrivalConstant, l.Arrival)
	case l.Concurrency < 0:
		return fmt.Errorf("--concurrency: must not be negative, got %d", l.Concurrency)
	case l.Rate == 0 && l.Concurrency == 0:
		return errors.New("--concurrency: a closed loop (no --rate) needs at least 1")
	case l.Requests < 0:
		return fmt.Errorf("--num-prompts: must not be negative, got %d", l.Requests)
	case l.Duration < 0:
		return fmt.Errorf("--duration: must not be negative, got %s", l.Duration)
	case l.Requests == 0 && l.Duration == 0:
		return errors.New("--num-prompts or --duration: one of them must bound the run")
	}
	return nil
}

// Result is one request's outcome and figures.
type Result struct {
	Index    int
	Intended time.Time // start of its latencies
	Response
	Measurement
}

// OK reports whether the request succeeded.
func (r *Result) OK() bool { return r.Err == nil }

// Run is a finished run: every request sent, in index order.
type Run struct {
	Load       Load
	Start, End time.Time // first intended send; last response ended
	Results    []Result
}

// Progress is told of each finished request; it must not block.
type Progress func(done, failed int)

// Drive runs the load: it sends w's requests with send until the load's
// bound, waits for those in flight, and returns them all. Cancelling ctx
// stops sending and cancels requests in flight (they count as failed).
func Drive(ctx context.Context, l Load, w Workload, send SendFunc, progress Progress) (*Run, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	c := &collector{progress: progress}
	run := &Run{Load: l, Start: time.Now()}
	one := func(i int, intended time.Time) {
		req := w.Request(i)
		resp := send(ctx, req)
		res := Result{Index: i, Intended: intended, Response: resp}
		res.Measurement = Measure(intended, resp.Events)
		if res.Err == nil && !res.HasTTFT {
			res.Err, res.ErrKind = errors.New("no content in the stream"), "no_content"
		}
		c.add(res)
	}
	if l.Rate > 0 {
		openLoop(ctx, l, run.Start, one)
	} else {
		closedLoop(ctx, l, run.Start, one)
	}
	run.End = time.Now()
	run.Results = c.sorted()
	return run, nil
}

// openLoop starts request i at its due time, in its own goroutine; with a
// concurrency cap, a due request first waits for a slot, but its intended
// time stays the due time.
func openLoop(ctx context.Context, l Load, start time.Time, one func(int, time.Time)) {
	rng := rand.New(rand.NewPCG(l.Seed, 0x6c6f6164))
	var slots chan struct{}
	if l.Concurrency > 0 {
		slots = make(chan struct{}, l.Concurrency)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	due := start
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for i := 0; l.Requests == 0 || i < l.Requests; i++ {
		if l.Duration > 0 && due.Sub(start) >= l.Duration {
			return
		}
		if d := time.Until(due); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return
			}
		}
		if slots != nil {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
		}
		intended := due
		wg.Go(func() {
			one(i, intended)
			if slots != nil {
				<-slots
			}
		})
		gap := 1 / l.Rate
		if l.Arrival != ArrivalConstant {
			gap = rng.ExpFloat64() / l.Rate
		}
		due = due.Add(time.Duration(gap * float64(time.Second)))
	}
}

// closedLoop runs Concurrency senders, each sending its next request when
// the previous one has ended.
func closedLoop(ctx context.Context, l Load, start time.Time, one func(int, time.Time)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range l.Concurrency {
		wg.Go(func() {
			for ctx.Err() == nil {
				// The clock before the index: a sender that stops for the
				// duration takes no index, so indices have no gaps.
				if l.Duration > 0 && time.Since(start) >= l.Duration {
					return
				}
				i := int(next.Add(1) - 1)
				if l.Requests > 0 && i >= l.Requests {
					return
				}
				one(i, time.Now())
			}
		})
	}
	wg.Wait()
}

// collector gathers results from the senders.
type collector struct {
	mu       sync.Mutex
	results  []Result
	failed   int
	progress Progress
}

func (c *collector) add(r Result) {
	c.mu.Lock()
	c.results = append(c.results, r)
	if !r.OK() {
		c.failed++
	}
	done, failed := len(c.results), c.failed
	c.mu.Unlock()
	if c.progress != nil {
		c.progress(done, failed)
	}
}

func (c *collector) sorted() []Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := slices.Clone(c.results)
	slices.SortFunc(out, func(a, b Result) int { return a.Index - b.Index })
	return out
}

// WarmupReport is what the warm-up saw.
type WarmupReport struct {
	Requests int // warm-up requests sent (each tried up to WarmupAttempts times)
	Retried  int // requests that failed at least once
	Failed   int // requests that failed on every attempt
	// FirstErr is the last error of the lowest-numbered request that
	// failed on every attempt.
	FirstErr error
}

// WarmupAttempts is how often a warm-up request is tried before it counts
// as failed: an endpoint that is still starting, or a fault injected in
// one request, gets another chance.
const WarmupAttempts = 3

// Warmup sends the workload's first n requests, conns at a time, and
// measures nothing: connections get dialled and the server's first-request
// paths run before the clock starts (vLLM's benchmark also sends a test
// prompt first). A failed request is tried again, after a short pause,
// up to WarmupAttempts times. Failures do not stop the run — one faulty
// answer must not cost the whole benchmark — but are reported, so the
// caller can say that the endpoint failed before the run (a wrong URL,
// model or key fails every measured request too, and says so there).
func Warmup(ctx context.Context, w Workload, send SendFunc, n, conns int) WarmupReport {
	rep := WarmupReport{Requests: max(n, 0)}
	if n <= 0 {
		return rep
	}
	errs := make([]error, n)
	var retried atomic.Int64
	slots := make(chan struct{}, max(conns, 1))
	var wg sync.WaitGroup
	for i := range n {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			for attempt := 1; ; attempt++ {
				resp := send(ctx, w.Request(i))
				if resp.Err == nil && !Measure(resp.Sent, resp.Events).HasTTFT {
					resp.Err = errors.New("no content in the stream")
				}
				if resp.Err == nil {
					errs[i] = nil
					return
				}
				errs[i] = fmt.Errorf("warm-up request %d: %w", i, resp.Err)
				if attempt == WarmupAttempts || ctx.Err() != nil {
					return
				}
				if attempt == 1 {
					retried.Add(1)
				}
				t := time.NewTimer(time.Duration(attempt) * 200 * time.Millisecond)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			}
		})
	}
	wg.Wait()
	rep.Retried = int(retried.Load())
	for _, err := range errs {
		if err != nil {
			if rep.Failed == 0 {
				rep.FirstErr = err
			}
			rep.Failed++
		}
	}
	return rep
}
