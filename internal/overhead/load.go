package overhead

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The load driver: open-loop JSON at a fixed rate, closed-loop JSON at
// saturation, and closed-loop SSE streams at a fixed concurrency. Every
// request carries the arm's tag for the mock's counts.

// target is where one arm is reached.
type target struct {
	base string // http://host:port
	tag  string
}

func newClient(conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		DisableCompression:  true,
		MaxIdleConns:        conns + 16,
		MaxIdleConnsPerHost: conns + 16,
		IdleConnTimeout:     30 * time.Second,
	}, Timeout: 2 * time.Minute}
}

// body is a small chat request; the sequence number makes prompts differ
// in content but not in length.
func body(seq int, stream bool) []byte {
	b := make([]byte, 0, 256)
	b = append(b, `{"model":"bench-model","messages":[{"role":"system","content":"You are a terse assistant."},{"role":"user","content":"Say hello to request `...)
	b = fmt.Appendf(b, "%09d", seq%1_000_000_000)
	b = append(b, `."}],"max_tokens":64,"temperature":0`...)
	if stream {
		b = append(b, `,"stream":true,"stream_options":{"include_usage":true}`...)
	}
	return append(b, '}')
}

// post sends one non-streamed request and reads the whole answer.
func post(ctx context.Context, c *http.Client, t target, seq int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.base+"/v1/chat/completions", bytes.NewReader(body(seq, false)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(TagHeader, t.tag)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// latencies is the outcome of a JSON phase.
type latencies struct {
	sent, ok, errs int
	dropped        int // not sent: the in-flight cap was reached (the arm fell behind)
	firstErr       string
	lat            []time.Duration
	elapsed        time.Duration
}

func (l *latencies) fail(err error) {
	l.errs++
	if l.firstErr == "" {
		l.firstErr = err.Error()
	}
}

// maxInFlight bounds the open-loop driver: past it the arm is not keeping
// up, and further sends are counted as dropped rather than queued.
const maxInFlight = 2048

// fixedRate sends JSON requests at rate per second for d (open loop: the
// schedule does not wait for answers). Latency is from the send to the
// answer's last byte.
func fixedRate(ctx context.Context, t target, rate float64, d time.Duration, seq *atomic.Int64) *latencies {
	c := newClient(256)
	defer c.CloseIdleConnections()
	n := int(rate * d.Seconds())
	interval := time.Duration(float64(time.Second) / rate)
	res := &latencies{lat: make([]time.Duration, 0, n)}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxInFlight)
	start := time.Now()
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		// Pacing the schedule, not synchronising with anything.
		if w := time.Until(start.Add(time.Duration(i) * interval)); w > 0 {
			time.Sleep(w)
		}
		select {
		case sem <- struct{}{}:
		default:
			res.dropped++
			continue
		}
		s := int(seq.Add(1))
		res.sent++
		wg.Go(func() {
			defer func() { <-sem }()
			t0 := time.Now()
			err := post(ctx, c, t, s)
			lat := time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				res.fail(err)
				return
			}
			res.ok++
			res.lat = append(res.lat, lat)
		})
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	return res
}

// saturate runs workers closed loops of JSON requests for d.
func saturate(ctx context.Context, t target, workers int, d time.Duration, seq *atomic.Int64) *latencies {
	c := newClient(workers)
	defer c.CloseIdleConnections()
	res := &latencies{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for range workers {
		wg.Go(func() {
			var lat []time.Duration
			var ok, errs int
			var first error
			for time.Now().Before(deadline) && ctx.Err() == nil {
				t0 := time.Now()
				if err := post(ctx, c, t, int(seq.Add(1))); err != nil {
					errs++
					if first == nil {
						first = err
					}
					continue
				}
				ok++
				lat = append(lat, time.Since(t0))
			}
			mu.Lock()
			defer mu.Unlock()
			res.ok += ok
			res.sent += ok + errs
			res.lat = append(res.lat, lat...)
			res.errs += errs
			if first != nil && res.firstErr == "" {
				res.firstErr = first.Error()
			}
		})
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	return res
}

// streams is the outcome of an SSE phase.
type streams struct {
	started, ok, errs int
	framesLost        int // events the mock sent that did not arrive, over streams answered 200
	firstErr          string
	ttft, itl         []time.Duration
	elapsed           time.Duration
}

// streamPhase runs conc closed loops of streamed requests for d; a stream
// started before the deadline is read to its end.
func streamPhase(ctx context.Context, t target, conc int, d time.Duration, mo MockOptions, seq *atomic.Int64) *streams {
	c := newClient(conc)
	defer c.CloseIdleConnections()
	res := &streams{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for range conc {
		wg.Go(func() {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				o := readStream(ctx, c, t, int(seq.Add(1)), mo)
				mu.Lock()
				res.started++
				if o.err != nil {
					res.errs++
					if res.firstErr == "" {
						res.firstErr = o.err.Error()
					}
				} else {
					res.ok++
				}
				res.framesLost += o.lost
				if o.ttft > 0 {
					res.ttft = append(res.ttft, o.ttft)
				}
				res.itl = append(res.itl, o.itl...)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	return res
}

type streamOutcome struct {
	ttft time.Duration
	itl  []time.Duration
	lost int
	err  error
}

// readStream sends one streamed request and reads its events as they
// arrive: time to the first content frame, the gaps between content
// frames, and how many of the mock's events never came.
func readStream(ctx context.Context, c *http.Client, t target, seq int, mo MockOptions) (o streamOutcome) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.base+"/v1/chat/completions", bytes.NewReader(body(seq, true)))
	if err != nil {
		o.err = err
		return o
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(TagHeader, t.tag)
	t0 := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		o.err = err
		return o
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		o.err = fmt.Errorf("status %d", resp.StatusCode)
		return o
	}
	br := bufio.NewReaderSize(resp.Body, 16<<10)
	events := 0
	var last time.Time
	o.itl = make([]time.Duration, 0, mo.Frames)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 && bytes.HasPrefix(line, []byte("data:")) {
			now := time.Now()
			if events < mo.Frames {
				if events == 0 {
					o.ttft = now.Sub(t0)
				} else {
					o.itl = append(o.itl, now.Sub(last))
				}
				last = now
			}
			events++
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			o.err = fmt.Errorf("read stream after %d events: %w", events, err)
			break
		}
	}
	if want := mo.StreamEvents(); events < want {
		o.lost = want - events
	}
	return o
}

// pct is the nearest-rank percentile p (0–100) of ds, sorted in place.
func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	if !slices.IsSorted(ds) {
		slices.Sort(ds)
	}
	i := int(p/100*float64(len(ds))+0.999999) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
