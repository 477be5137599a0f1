package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The agent APIs (/v1/responses, /v1/messages) answer with one assistant
// turn made of typed parts — reasoning, text, a tool call — rather than
// one string. This file holds what they share: the prompt builder, the
// plan of a turn's tokens (its script) and the streaming loop of a single
// sequence. Each token of the script is one scheduler token, so reasoning
// and tool arguments take decode time and count as output like text.

// ToolCallHeader makes the model call a tool, or none: its value is the
// name of one of the request's function tools, or "none". Without it the
// model calls a tool as the package doc describes.
const ToolCallHeader = "X-Sim-Tool-Call"

// ReasoningTokensHeader pins how many output tokens a reasoning turn
// spends reasoning.
const ReasoningTokensHeader = "X-Sim-Reasoning-Tokens"

// finishStopSequence is a turn cut by one of its stop sequences; the
// engine counts it as a "stop".
const finishStopSequence = "stop_sequence"

type pieceKind uint8

const (
	pieceReasoning pieceKind = iota
	pieceText
	pieceArgs   // tool call arguments (JSON text)
	pieceHidden // counted, never shown: end-of-sequence or stop-sequence token
)

// piece is one output token of a turn.
type piece struct {
	kind pieceKind
	text string
}

// turnSpec is what a request asks of its turn; plan turns it into a
// script once the model's wanted length is known.
type turnSpec struct {
	reasoning bool
	share     float64 // of the answer spent reasoning, when not pinned
	pinned    int     // reasoning tokens from ReasoningTokensHeader, 0: none
	budget    int     // at most this many reasoning tokens, 0: no limit
	tool      string  // the function to call, "": answer with text
	argKey    string  // the argument the call fills
	stops     []string
	maxTokens *int
	eos       bool
}

// turn is a planned agent turn: its script and why it ends.
type turn struct {
	script []piece
	reason string // finishStop, finishLength or finishStopSequence
	stop   string // the stop sequence that ended it
}

// maxTurnTokens bounds a turn, as a model's output is bounded: the
// script is planned in memory, and a pinned length of 10^8 tokens (a
// stream that goes on "forever") must not allocate that many.
const maxTurnTokens = 1 << 20

// plan lays out want tokens: reasoning first, then the answer (text, or
// the tool call's arguments), then the end-of-sequence token with
// Config.EOS. A stop sequence found in a text token ends the turn there,
// that token hidden; a script longer than max tokens is cut with
// "length". A turn that ends exactly at the limit ends normally, as on a
// real engine where the last token allowed is its end-of-sequence token.
func (sp turnSpec) plan(want int, words *rand.Rand) turn {
	word := func() string { return vocab[words.IntN(len(vocab))] }
	var t turn
	// Nothing past the cut is planned.
	limit := maxTurnTokens
	if sp.maxTokens != nil {
		limit = min(limit, *sp.maxTokens+1)
	}
	add := func(kind pieceKind, text string) bool {
		if len(t.script) >= limit {
			return false
		}
		t.script = append(t.script, piece{kind, text})
		return true
	}
	body := want
	if sp.eos {
		body = max(0, want-1)
	}
	// With Config.EOS a one-token turn is its end-of-sequence token alone:
	// an empty answer, as in chat.
	empty := sp.eos && want <= 1 && !sp.reasoning
	if sp.reasoning {
		r := sp.pinned
		if r == 0 {
			r = max(1, int(float64(body)*sp.share))
		}
		if sp.budget > 0 {
			r = min(r, sp.budget)
		}
		for i := 0; i < r && add(pieceReasoning, word()); i++ {
		}
		body = max(0, body-r)
	}
	t.reason = finishStop
	switch {
	case sp.tool != "":
		add(pieceArgs, "{"+string(marshal(sp.argKey))+`:"`)
		for i := 0; i < max(1, body-2) && add(pieceArgs, word()); i++ {
		}
		add(pieceArgs, `"}`)
	case !empty:
	text:
		for range max(1, body) {
			w := word()
			for _, s := range sp.stops {
				if s != "" && strings.Contains(w, s) {
					if add(pieceHidden, w) {
						t.reason, t.stop = finishStopSequence, s
					}
					break text
				}
			}
			if !add(pieceText, w) {
				break
			}
		}
	}
	if sp.eos && t.reason == finishStop {
		add(pieceHidden, "")
	}
	if sp.maxTokens != nil && len(t.script) > *sp.maxTokens {
		t.script = t.script[:*sp.maxTokens]
		t.reason, t.stop = finishLength, ""
	}
	return t
}

// engineReason is the finish reason the engine reports for a turn.
func (t turn) engineReason() string {
	if t.reason == finishLength {
		return finishLength
	}
	return finishStop
}

// count returns how many of the turn's pieces are of one kind.
func (t turn) count(kind pieceKind) int {
	n := 0
	for _, p := range t.script {
		if p.kind == kind {
			n++
		}
	}
	return n
}

// reasoningTokens reads ReasoningTokensHeader: 0 when absent.
func reasoningTokens(r *http.Request, enabled bool) (int, error) {
	v := r.Header.Get(ReasoningTokensHeader)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, errorf(http.StatusBadRequest, "%s: must be a positive integer, got %q", ReasoningTokensHeader, v)
	}
	if !enabled {
		return 0, errorf(http.StatusBadRequest, "%s: the request does not enable reasoning", ReasoningTokensHeader)
	}
	return n, nil
}

// functionTool is a tool the simulated model can call.
type functionTool struct {
	name   string
	schema json.RawMessage // JSON Schema of its arguments
}

// chooseTool decides which tool the turn calls, "" for none. forced is
// the tool the request's tool_choice demands ("*" for any, "-" for none,
// "" for the model's choice);
// auto says whether the model may call one of its own accord, which it
// does, with the first tool, when the last input is a user's question
// rather than a tool's result — so an agent loop calls a tool, gets its
// result, then answers. ToolCallHeader overrides all of it.
func chooseTool(r *http.Request, tools []functionTool, forced string, auto bool) (string, error) {
	if v := r.Header.Get(ToolCallHeader); v != "" {
		if v == "none" {
			return "", nil
		}
		for _, t := range tools {
			if t.name == v {
				return v, nil
			}
		}
		return "", errorf(http.StatusBadRequest, "%s: the request has no function tool named %q", ToolCallHeader, v)
	}
	switch {
	case len(tools) == 0, forced == "-":
		return "", nil
	case forced == "*":
		return tools[0].name, nil
	case forced != "":
		return forced, nil
	case auto:
		return tools[0].name, nil
	}
	return "", nil
}

// argKey is the argument a simulated call fills: the schema's first
// required property, else its first property by name, else "input".
func argKey(tools []functionTool, name string) string {
	for _, t := range tools {
		if t.name != name {
			continue
		}
		var s struct {
			Required   []string                   `json:"required"`
			Properties map[string]json.RawMessage `json:"properties"`
		}
		if json.Unmarshal(t.schema, &s) != nil {
			break
		}
		if len(s.Required) > 0 {
			return s.Required[0]
		}
		keys := make([]string, 0, len(s.Properties))
		for k := range s.Properties {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if len(keys) > 0 {
			return keys[0]
		}
	}
	return "input"
}

// promptBuilder lays out a prompt like chatTokens — tools, system, then
// the conversation — and records where each content block ends, which
// explicit prompt caching needs.
type promptBuilder struct {
	model  string
	ids    []uint32
	bounds []cacheBound
}

func (p *promptBuilder) open(role string) {
	p.ids = append(p.ids, tokIMStart, tokenID(role), tokNewline)
}

// block appends one content block; ttl > 0 marks a cache breakpoint.
func (p *promptBuilder) block(text string, ttl time.Duration) {
	p.ids = tokenize(p.ids, text)
	p.bounds = append(p.bounds, cacheBound{pos: len(p.ids), ttl: ttl})
}

func (p *promptBuilder) close() { p.ids = append(p.ids, tokIMEnd) }

// message appends a whole message of one text block.
func (p *promptBuilder) message(role, text string) {
	p.open(role)
	p.block(text, 0)
	p.close()
}

// finish ends the prompt with the assistant's turn and hashes the block
// boundaries; cache is nil when the prompt has no breakpoint.
func (p *promptBuilder) finish() (prompt []uint32, cache *cacheReq) {
	prompt = append(p.ids, tokIMStart, tokAssistant, tokNewline)
	breakpoint := false
	for _, b := range p.bounds {
		breakpoint = breakpoint || b.ttl > 0
	}
	if !breakpoint {
		return prompt, nil
	}
	h := fnv.New64a()
	h.Write([]byte(p.model))
	var buf [4]byte
	at := 0
	bounds := append([]cacheBound(nil), p.bounds...)
	for i := range bounds {
		for ; at < bounds[i].pos; at++ {
			id := prompt[at]
			buf[0], buf[1], buf[2], buf[3] = byte(id), byte(id>>8), byte(id>>16), byte(id>>24)
			h.Write(buf[:])
		}
		bounds[i].hash = h.Sum64()
	}
	return prompt, &cacheReq{bounds: bounds}
}

// compactJSON is raw JSON without insignificant white space, so that a
// schema counts the same tokens however its sender formatted it.
func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

// itemID is a deterministic id for a part of the response id, so that
// ids cost no random draws.
func itemID(prefix, id, part string) string {
	h := fnv.New64a()
	h.Write([]byte(id))
	h.Write([]byte{0})
	h.Write([]byte(part))
	return fmt.Sprintf("%s%016x", prefix, h.Sum64())
}

// tokenWriter is what an agent API does with the tokens of its turn.
type tokenWriter interface {
	// begin writes the stream's opening events; the headers are out.
	begin() error
	// token writes the i-th token of the script and reports whether the
	// client saw it (hidden tokens send nothing).
	token(i int) (shown bool, err error)
	// end writes the closing events once the sequence has finished.
	end() error
	// fail reports an engine failure inside the open stream.
	fail(err error)
}

// follow streams the single sequence of q through tw as the scheduler
// produces its tokens. early starts the stream (headers and opening
// events) at once, as the Responses API does; otherwise nothing is sent
// before the first token, as with vLLM's chat stream. Faults fire after
// the number of tokens the client has seen.
func (q *gen) follow(ctx context.Context, w http.ResponseWriter, early bool, tw tokenWriter) error {
	rc := http.NewResponseController(w)
	s := q.seqs[0]
	started := false
	start := func() error {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		started = true
		if err := tw.begin(); err != nil {
			return err
		}
		return rc.Flush()
	}
	if early && start() != nil {
		return nil
	}
	written, sent := 0, 0
	for {
		finished := isClosed(s.done)
		n := int(s.generated.Load())
		for written < n || finished {
			if !started {
				if finished && s.err != nil {
					return errorf(http.StatusServiceUnavailable, "%v", s.err)
				}
				if finished && s.stats.FinishReason == finishAbort {
					return nil // the client left
				}
				if start() != nil {
					return nil
				}
			}
			if err := q.fault(ctx, w, rc, sent); err != nil {
				return nil
			}
			if written < n {
				shown, err := tw.token(written)
				if err != nil {
					return nil
				}
				if shown {
					sent++
				}
				written++
				continue
			}
			switch {
			case s.err != nil:
				tw.fail(s.err)
				return nil
			case s.stats.FinishReason == finishAbort:
				return nil
			}
			tw.end() //nolint:errcheck // the client left; nothing to do
			return nil
		}
		select {
		case <-q.notify:
		case <-ctx.Done():
			return nil
		}
	}
}

// sse writes one named server-sent event, as the Responses and Messages
// APIs send them, and flushes it.
func (q *gen) sse(w http.ResponseWriter, name string, v any) error {
	q.buf = append(q.buf[:0], "event: "...)
	q.buf = append(q.buf, name...)
	q.buf = append(q.buf, "\ndata: "...)
	q.buf = append(q.buf, marshal(v)...)
	q.buf = append(q.buf, "\n\n"...)
	if _, err := w.Write(q.buf); err != nil {
		return err
	}
	return http.NewResponseController(w).Flush()
}
