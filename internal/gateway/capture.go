package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/internal/capture"
	"github.com/tollgate-dev/tollgate/internal/record"
)

// The opt-in capture (capture.enabled): while it is on, each exchange
// keeps what the request path already has — the client's body, a
// non-streamed answer — and a bounded copy of a stream's text; when an
// attempt finishes and qualifies (capture.Config.Reason), the raw parts
// go to a bounded queue, and a worker redacts them and writes them to
// the store. A full queue drops the capture and counts it: the response
// never waits on redaction or storage. When capture is off, exchanges
// carry a nil *captureBuf and nothing is kept.

const (
	// captureQueue bounds captures waiting for the worker; each holds at
	// most two raw parts of RawLimit bytes (about 0.5 MiB at the default
	// max_bytes), so the queue holds at most ~32 MiB.
	captureQueue = 64
	// captureBatch is the most captures written in one call.
	captureBatch = 32
	// captureTimeout bounds one write to the store.
	captureTimeout = 10 * time.Second
)

// captureBuf is what one exchange keeps for a possible capture.
type captureBuf struct {
	limit int
	resp  []byte       // a non-streamed answer, as read (the request path holds it anyway)
	text  *capture.Raw // a stream's text, its deltas assembled
	str   string       // a decoded string with escapes
}

// reset starts a new attempt.
func (b *captureBuf) reset() {
	b.resp = nil
	if b.text != nil {
		b.text.Reset()
	}
}

// chunk keeps the generated text of one stream event, up to the limit.
// It runs on every content event while capture is on, so it does not
// decode the event: it looks for the string values of the keys that
// carry generated text (in the order the event has them) and appends
// them, unescaped. Such a key followed by a string can only be a key: in
// a JSON string its quotes would be escaped. Only a string with escapes
// is decoded by encoding/json.
func (b *captureBuf) chunk(data []byte) {
	if b.text == nil {
		b.text = capture.NewRaw(b.limit)
	}
	for i := 0; i < len(data) && !b.text.Full(); {
		j, k := nextTextKey(data[i:])
		if j < 0 {
			return
		}
		start := i + j + k // the opening quote of the value
		end := stringEnd(data, start)
		if end < 0 {
			return
		}
		lit := data[start : end+1]
		if bytes.IndexByte(lit, '\\') < 0 {
			b.text.Add(lit[1 : len(lit)-1])
		} else if json.Unmarshal(lit, &b.str) == nil {
			b.text.Add([]byte(b.str))
		}
		i = end + 1
	}
}

// textKeys are the keys whose string values are generated text in a
// chat or completions chunk.
var textKeys = [][]byte{[]byte(`"content":"`), []byte(`"reasoning_content":"`), []byte(`"reasoning":"`),
	[]byte(`"text":"`), []byte(`"arguments":"`), []byte(`"name":"`)}

// nextTextKey returns where the first text key in d starts and the
// length of the key up to the value's opening quote, or -1.
func nextTextKey(d []byte) (int, int) {
	best, n := -1, 0
	for _, k := range textKeys {
		if j := bytes.Index(d, k); j >= 0 && (best < 0 || j < best) {
			best, n = j, len(k)-1
		}
	}
	return best, n
}

// stringEnd returns the index of the quote closing the JSON string that
// opens at d[start], or -1.
func stringEnd(d []byte, start int) int {
	for i := start + 1; i < len(d); i++ {
		switch d[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return -1
}

// pendingCapture is a qualifying attempt waiting for redaction.
type pendingCapture struct {
	id, reason string
	at         time.Time
	req, resp  capture.Part
	secrets    []string // the attempt's credentials, never stored even if an engine echoes them
}

// capturer owns the queue and the worker.
type capturer struct {
	cfg     capture.Config
	red     *capture.Redactor
	sink    func(context.Context, []*capture.Capture) error
	log     *slog.Logger
	queue   chan pendingCapture
	done    chan struct{}
	written *prometheus.CounterVec // by reason
	dropped *prometheus.CounterVec // by cause
	// offered counts the qualifying captures offered (queued or
	// dropped). A request's capture is offered after its Record is handed
	// on, so a test that saw the Record waits for this.
	offered atomic.Int64
}

func newCapturer(cfg capture.Config, sink func(context.Context, []*capture.Capture) error, reg prometheus.Registerer, log *slog.Logger) (*capturer, error) {
	if sink == nil {
		return nil, fmt.Errorf("gateway: capture is enabled but Options.Capture (where captures are written) is nil")
	}
	red, err := capture.NewRedactor(cfg.Redact)
	if err != nil {
		return nil, fmt.Errorf("gateway: capture.%w", err)
	}
	c := &capturer{cfg: cfg, red: red, sink: sink, log: log, queue: make(chan pendingCapture, captureQueue), done: make(chan struct{}),
		written: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_captures_total",
			Help: "Captures of slow or failed requests written to the captures table, by reason."}, []string{"reason"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tollgate_captures_dropped_total",
			Help: "Qualifying requests not captured: queue_full (the capture queue was full), store_error (the write failed)."}, []string{"cause"}),
	}
	for _, r := range []string{"failed", "slow"} {
		c.written.WithLabelValues(r)
	}
	for _, r := range []string{"queue_full", "store_error"} {
		c.dropped.WithLabelValues(r)
	}
	if reg != nil {
		for _, m := range []prometheus.Collector{c.written, c.dropped} {
			if err := reg.Register(m); err != nil {
				return nil, fmt.Errorf("gateway: register capture metrics: %w", err)
			}
		}
	}
	return c, nil
}

// buf is a new exchange's buffer.
func (c *capturer) buf() *captureBuf { return &captureBuf{limit: c.cfg.RawLimit()} }

// offer queues a finished attempt that qualifies; it never blocks.
// secrets are the attempt's credentials (the upstream's key, the
// client's): an engine's error text can echo them, and redaction rules
// would not know them.
func (c *capturer) offer(rec *record.Record, clientBody []byte, b *captureBuf, secrets []string) {
	defer b.reset()
	reason := c.cfg.Reason(rec)
	if reason == "" {
		return
	}
	limit := c.cfg.RawLimit()
	p := pendingCapture{id: rec.RequestID, reason: reason, at: rec.Arrival, req: capture.Clip(clientBody, limit), secrets: secrets}
	switch {
	case len(b.resp) > 0:
		p.resp = capture.Clip(b.resp, limit)
	case b.text != nil:
		p.resp = b.text.Part()
		p.resp.Bytes = slices.Clone(p.resp.Bytes) // the buffer is reused by the next attempt
	}
	select {
	case c.queue <- p:
	default:
		c.dropped.WithLabelValues("queue_full").Inc()
	}
	c.offered.Add(1)
}

// run redacts and writes captures until stop is closed, then writes what
// is still queued and closes done.
func (c *capturer) run(stop <-chan struct{}) {
	defer close(c.done)
	batch := make([]*capture.Capture, 0, captureBatch)
	for {
		select {
		case <-stop:
			for {
				select {
				case p := <-c.queue:
					batch = append(batch, c.keep(p))
					if len(batch) == captureBatch {
						batch = c.write(batch)
					}
				default:
					c.write(batch)
					return
				}
			}
		case p := <-c.queue:
			batch = append(batch, c.keep(p))
		more:
			for len(batch) < captureBatch {
				select {
				case p := <-c.queue:
					batch = append(batch, c.keep(p))
				default:
					break more
				}
			}
			batch = c.write(batch)
		}
	}
}

func (c *capturer) keep(p pendingCapture) *capture.Capture {
	return c.cfg.Keep(c.red, p.id, p.at, p.reason, hideSecrets(p.req, p.secrets), hideSecrets(p.resp, p.secrets))
}

// hideSecrets replaces each credential in a kept part, in a copy: the
// part may share its bytes with the request path (a cached answer).
func hideSecrets(p capture.Part, secrets []string) capture.Part {
	for _, s := range secrets {
		if len(s) >= 8 && bytes.Contains(p.Bytes, []byte(s)) {
			p.Bytes = bytes.ReplaceAll(p.Bytes, []byte(s), []byte("[REDACTED:key]"))
		}
	}
	return p
}

// write stores a batch and returns a new one: the sink may keep what it
// was given.
func (c *capturer) write(batch []*capture.Capture) []*capture.Capture {
	if len(batch) == 0 {
		return batch
	}
	ctx, cancel := context.WithTimeout(context.Background(), captureTimeout)
	defer cancel()
	if err := c.sink(ctx, batch); err != nil {
		c.dropped.WithLabelValues("store_error").Add(float64(len(batch)))
		c.log.Warn("could not store captures", "count", len(batch), "err", err)
	} else {
		for _, cp := range batch {
			c.written.WithLabelValues(cp.Reason).Inc()
		}
	}
	return make([]*capture.Capture, 0, captureBatch)
}
