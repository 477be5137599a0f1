package sim

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// gen is one chat or completion request in flight: its sequences in the
// engine and what the handler needs to turn their tokens into a response.
type gen struct {
	genRequest
	id      string
	created int64
	seqs    []*seq
	words   []*rand.Rand // per sequence: draws its output words
	notify  chan struct{}
	plan    faultPlan
	buf     []byte // scratch for SSE events
	// perRequestMetrics: add vLLM's per-request metrics object.
	perRequestMetrics bool
	noUsage           bool // Config.NoUsage
}

// generate is the request path shared by chat and completions: plan the
// request, queue its sequences, then write what the scheduler produces.
func (e *Engine) generate(w http.ResponseWriter, r *http.Request, arrival time.Time, g genRequest) error {
	hdr, err := e.headerFaults(r)
	if err != nil {
		return err
	}
	pinned := 0
	if v := r.Header.Get(OutputTokensHeader); v != "" {
		if pinned, err = strconv.Atoi(v); err != nil || pinned < 1 {
			return errorf(http.StatusBadRequest, "%s: must be a positive integer, got %q", OutputTokensHeader, v)
		}
	}
	// The request's context ends when this handler returns, however it
	// returns (even by the reset fault's panic), so the scheduler always
	// frees the sequences' slots.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()

	rng := e.requestRand()
	prefix := "cmpl-"
	if g.chat {
		prefix = "chatcmpl-"
	}
	q := &gen{
		genRequest: g,
		id:         prefix + requestID(r, rng),
		created:    arrival.Unix(),
		seqs:       make([]*seq, len(g.prompts)),
		words:      make([]*rand.Rand, len(g.prompts)),
		notify:     make(chan struct{}, 1),
		// As in vLLM, only a single sequence's timing is reported: with
		// several prompts no one sequence speaks for the request.
		perRequestMetrics: e.cfg.PerRequestMetrics && len(g.prompts) == 1,
		noUsage:           e.cfg.NoUsage,
	}
	total := 0
	for i, prompt := range g.prompts {
		// With a seed, as with a seeded engine, the answer (its length and
		// words) depends only on the engine (Config.Seed stands for its
		// weights), the model, the prompt and the seed.
		out := rng
		if g.seed != nil {
			out = seededRand(uint64(e.cfg.Seed), g.model, *g.seed, prompt)
		}
		target, reason := e.outputLength(out, pinned, g)
		id := q.id
		if len(g.prompts) > 1 {
			id = fmt.Sprintf("%s-%d", q.id, i) // vLLM's sub-request ids
		}
		q.seqs[i] = &seq{
			ctx: ctx, id: id, model: g.model, traceParent: r.Header.Get("traceparent"),
			stream: g.stream, prompt: prompt, target: target, reason: reason,
			arrival: arrival, notify: q.notify, done: make(chan struct{}),
		}
		q.words[i] = rand.New(rand.NewPCG(out.Uint64(), out.Uint64()))
		total += target
	}
	q.plan = e.drawFaults(rng, total)
	if hdr != nil {
		q.plan = *hdr
	}
	q.plan.clamp(total)
	if q.plan.status != 0 {
		return errorf(q.plan.status, "%s", faultMessage(q.plan.status))
	}
	if err := e.submit(q.seqs...); err != nil {
		return errorf(http.StatusServiceUnavailable, "%v", err)
	}
	if g.stream {
		return q.stream(ctx, w)
	}
	return q.whole(ctx, w)
}

// seededRand is the random source of a seeded request's answer.
func seededRand(engine uint64, model string, seed int64, prompt []uint32) *rand.Rand {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], engine)
	h.Write(b[:])
	h.Write([]byte(model))
	binary.LittleEndian.PutUint64(b[:], uint64(seed))
	h.Write(b[:])
	for _, id := range prompt {
		binary.LittleEndian.PutUint32(b[:4], id)
		h.Write(b[:4])
	}
	x := h.Sum64()
	return rand.New(rand.NewPCG(x, x^0x9e3779b97f4a7c15))
}

// outputLength decides how many tokens a sequence generates and why it
// stops; the package doc gives the rules.
func (e *Engine) outputLength(rng *rand.Rand, pinned int, g genRequest) (int, string) {
	// Always draw, so that pinning the length leaves the words unchanged.
	drawn := int(math.Round(rng.ExpFloat64() * float64(e.cfg.OutputMean)))
	want := pinned
	if want == 0 {
		want = min(e.cfg.OutputMax, max(1, drawn))
	}
	want = max(want, g.minTokens)
	if g.ignoreEOS && g.maxTokens != nil {
		want = *g.maxTokens
	}
	if g.maxTokens != nil && want >= *g.maxTokens {
		return *g.maxTokens, finishLength
	}
	return want, finishStop
}

func (q *gen) word(i int) string { return vocab[q.words[i].IntN(len(vocab))] }

// stream writes the SSE response as tokens come out of the scheduler, one
// chunk per token. Like vLLM, nothing (not even headers) is sent before the
// first token, so a client's time to headers is the engine's TTFT.
func (q *gen) stream(ctx context.Context, w http.ResponseWriter) error {
	rc := http.NewResponseController(w)
	written := make([]int, len(q.seqs))
	ended := make([]bool, len(q.seqs))
	sent, open, started := 0, len(q.seqs), false
	for {
		for i, s := range q.seqs {
			if ended[i] {
				continue
			}
			finished := isClosed(s.done)
			n := int(s.generated.Load())
			for !ended[i] && (written[i] < n || finished) {
				if !started {
					if finished && s.err != nil {
						return errorf(http.StatusServiceUnavailable, "%v", s.err)
					}
					if finished && s.stats.FinishReason == finishAbort {
						return nil // the client left
					}
					if err := q.start(w, rc); err != nil {
						return nil
					}
					started = true
				}
				if err := q.fault(ctx, w, rc, sent); err != nil {
					return nil
				}
				if written[i] < n {
					if err := q.event(w, rc, q.tokenChunk(i, q.word(i))); err != nil {
						return nil
					}
					written[i]++
					sent++
					continue
				}
				ended[i] = true
				open--
				switch {
				case s.err != nil:
					// vLLM reports a failure inside an open stream as an
					// error event followed by the usual end.
					q.event(w, rc, newErrorBody(http.StatusServiceUnavailable, s.err.Error())) //nolint:errcheck
					q.raw(w, rc, "data: [DONE]\n\n")                                           //nolint:errcheck
					return nil
				case s.stats.FinishReason == finishAbort:
					return nil
				}
				if err := q.event(w, rc, q.finishChunk(i, s.stats.FinishReason)); err != nil {
					return nil
				}
			}
		}
		if open == 0 {
			break
		}
		select {
		case <-q.notify:
		case <-ctx.Done():
			return nil
		}
	}
	if q.includeUsage && !q.noUsage {
		u := q.usage()
		c := chunk{ID: q.id, Object: q.chunkObject(), Created: q.created, Model: q.model, Choices: []any{}, Usage: &u}
		if m := q.metrics(); m != nil {
			c.Metrics = (*chunkMetrics)(m)
		}
		if err := q.event(w, rc, c); err != nil {
			return nil
		}
	}
	q.raw(w, rc, "data: [DONE]\n\n") //nolint:errcheck
	return nil
}

func (q *gen) start(w http.ResponseWriter, rc *http.ResponseController) error {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	if !q.chat {
		return rc.Flush()
	}
	empty := ""
	return q.event(w, rc, q.chunk(chatChunkChoice{Delta: chatDelta{Role: "assistant", Content: &empty}}))
}

// fault injects the plan's stream faults due after sent content tokens.
// It returns an error when the client left during a stall.
func (q *gen) fault(ctx context.Context, w http.ResponseWriter, rc *http.ResponseController, sent int) error {
	p := &q.plan
	if sent == p.malformedAt {
		p.malformedAt = -1
		if err := q.raw(w, rc, "data: {\"id\": broken\n\n"); err != nil {
			return err
		}
	}
	if sent == p.stallAt {
		p.stallAt = -1
		if err := sleep(ctx, p.stallFor); err != nil {
			return err
		}
	}
	if sent == p.resetAt {
		// Aborting the handler makes net/http drop the connection without
		// ending the chunked body: the client sees an unexpected EOF.
		panic(http.ErrAbortHandler)
	}
	return nil
}

func (q *gen) chunkObject() string {
	if q.chat {
		return "chat.completion.chunk"
	}
	return "text_completion"
}

func (q *gen) chunk(choice any) chunk {
	return chunk{ID: q.id, Object: q.chunkObject(), Created: q.created, Model: q.model, Choices: []any{choice}}
}

func (q *gen) tokenChunk(i int, text string) chunk {
	if q.chat {
		return q.chunk(chatChunkChoice{Index: i, Delta: chatDelta{Content: &text}})
	}
	return q.chunk(textChunkChoice{Index: i, Text: text})
}

func (q *gen) finishChunk(i int, reason string) chunk {
	if q.chat {
		return q.chunk(chatFinalChoice{Index: i, FinishReason: reason})
	}
	return q.chunk(textFinalChoice{Index: i, FinishReason: reason})
}

func (q *gen) event(w http.ResponseWriter, rc *http.ResponseController, v any) error {
	q.buf = append(q.buf[:0], "data: "...)
	q.buf = append(q.buf, marshal(v)...)
	q.buf = append(q.buf, "\n\n"...)
	if _, err := w.Write(q.buf); err != nil {
		return err
	}
	return rc.Flush()
}

func (q *gen) raw(w http.ResponseWriter, rc *http.ResponseController, s string) error {
	if _, err := w.Write([]byte(s)); err != nil {
		return err
	}
	return rc.Flush()
}

// wholeUsage is the usage object of a whole response: none with
// Config.NoUsage.
func (q *gen) wholeUsage() *usage {
	if q.noUsage {
		return nil
	}
	u := q.usage()
	return &u
}

// usage sums the sequences' stats; call it once all have finished.
func (q *gen) usage() usage {
	var u usage
	var cached int
	for _, s := range q.seqs {
		u.PromptTokens += s.stats.PromptTokens
		u.CompletionTokens += s.stats.OutputTokens
		cached += s.stats.CachedTokens
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	u.PromptTokensDetails = &promptDetails{CachedTokens: cached}
	return u
}

// metrics returns vLLM's per-request metrics object, or nil when it is not
// wanted; call it once all sequences have finished.
func (q *gen) metrics() *perRequestMetrics {
	if !q.perRequestMetrics {
		return nil
	}
	return newPerRequestMetrics(q.seqs[0].stats)
}

// whole writes a non-streamed response once every sequence has finished.
func (q *gen) whole(ctx context.Context, w http.ResponseWriter) error {
	for {
		generated, finished := 0, true
		for _, s := range q.seqs {
			generated += int(s.generated.Load())
			finished = finished && isClosed(s.done)
		}
		if q.plan.resetAt >= 0 && generated >= q.plan.resetAt {
			panic(http.ErrAbortHandler) // before any byte of the body
		}
		if finished {
			break
		}
		select {
		case <-q.notify:
		case <-ctx.Done():
			return nil
		}
	}
	for _, s := range q.seqs {
		if s.err != nil {
			return errorf(http.StatusServiceUnavailable, "%v", s.err)
		}
		if s.stats.FinishReason == finishAbort {
			return nil
		}
	}
	if q.plan.stallAt >= 0 {
		if err := sleep(ctx, q.plan.stallFor); err != nil {
			return nil
		}
	}
	if q.plan.malformedAt >= 0 {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id": broken`)) //nolint:errcheck
		return nil
	}
	texts := make([]string, len(q.seqs))
	for i, s := range q.seqs {
		var b strings.Builder
		for range s.stats.OutputTokens {
			b.WriteString(q.word(i))
		}
		texts[i] = b.String()
	}
	if q.chat {
		s := q.seqs[0]
		writeJSON(w, http.StatusOK, chatResponse{
			ID: q.id, Object: "chat.completion", Created: q.created, Model: q.model,
			Choices: []chatChoice{{
				Message:      chatMsgOut{Role: "assistant", Content: texts[0], ToolCalls: []struct{}{}},
				FinishReason: s.stats.FinishReason,
			}},
			Usage:   q.wholeUsage(),
			Metrics: q.metrics(),
		})
		return nil
	}
	resp := textResponse{
		ID: q.id, Object: "text_completion", Created: q.created, Model: q.model,
		Choices: make([]textChoice, len(q.seqs)), Usage: q.wholeUsage(), Metrics: q.metrics(),
	}
	for i, s := range q.seqs {
		resp.Choices[i] = textChoice{Index: i, Text: texts[i], FinishReason: s.stats.FinishReason}
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// sleep waits for d unless ctx ends first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
