package loadgen

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strings"
)

// Endpoint paths under the base URL.
const (
	PathChat        = "/chat/completions"
	PathCompletions = "/completions"
)

// Request is one request of a workload, ready to send.
type Request struct {
	Index int
	Path  string // PathChat or PathCompletions
	Body  []byte
}

// Workload makes the i-th request of a run. It must be safe for concurrent
// use and give the same request for the same i.
type Workload interface {
	Request(i int) *Request
}

// streamFields are set on every body: a streamed answer with its usage.
var streamOptions = json.RawMessage(`{"include_usage":true}`)

// promptFile is a workload read from JSONL: one OpenAI request body per
// line, used in order and cycled.
type promptFile struct {
	reqs []*Request
}

// ReadPrompts reads a JSONL prompt file: each non-blank line a chat
// ("messages") or completions ("prompt") request body. Every body is made a
// stream with include_usage; model, when not empty, replaces the line's.
// Errors name the line.
func ReadPrompts(r io.Reader, name, model string) (Workload, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	var pf promptFile
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var body map[string]json.RawMessage
		if err := json.Unmarshal(b, &body); err != nil {
			return nil, fmt.Errorf("%s:%d: not a JSON object: %w", name, line, err)
		}
		path := ""
		switch {
		case body["messages"] != nil:
			path = PathChat
		case body["prompt"] != nil:
			path = PathCompletions
		default:
			return nil, fmt.Errorf("%s:%d: neither \"messages\" (chat) nor \"prompt\" (completions)", name, line)
		}
		if model != "" {
			m, _ := json.Marshal(model)
			body["model"] = m
		} else if body["model"] == nil {
			return nil, fmt.Errorf("%s:%d: no \"model\" (set one per line or pass --model)", name, line)
		}
		body["stream"] = json.RawMessage("true")
		body["stream_options"] = streamOptions
		out, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, line, err)
		}
		pf.reqs = append(pf.reqs, &Request{Path: path, Body: out})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if len(pf.reqs) == 0 {
		return nil, fmt.Errorf("%s: no requests", name)
	}
	return &pf, nil
}

func (p *promptFile) Request(i int) *Request {
	r := *p.reqs[i%len(p.reqs)]
	r.Index = i
	return &r
}

// Synthetic describes generated requests of given lengths, like vLLM's
// random dataset: lengths are drawn uniformly from
// [len·(1−RangeRatio), len·(1+RangeRatio)], and the first
// PrefixRatio·InputLen tokens of every prompt are the same text, so an
// engine's prefix cache can reuse them.
type Synthetic struct {
	Model       string
	Chat        bool // chat completions; else completions
	InputLen    int  // prompt tokens (of the text; a chat template adds a few)
	OutputLen   int  // max_tokens
	RangeRatio  float64
	PrefixRatio float64
	// IgnoreEOS asks the engine to generate exactly max_tokens (a vLLM
	// extension, also honoured by the simulator); without it an engine may
	// stop early.
	IgnoreEOS bool
	Seed      uint64
}

// Validate names the flag that is wrong.
func (s Synthetic) Validate() error {
	switch {
	case s.Model == "":
		return errors.New("--model: required for synthetic requests")
	case s.InputLen < 1:
		return fmt.Errorf("--input-len: must be at least 1, got %d", s.InputLen)
	case s.OutputLen < 1:
		return fmt.Errorf("--output-len: must be at least 1, got %d", s.OutputLen)
	case s.RangeRatio < 0 || s.RangeRatio >= 1 || math.IsNaN(s.RangeRatio):
		return fmt.Errorf("--range-ratio: must be in [0, 1), got %g", s.RangeRatio)
	case s.PrefixRatio < 0 || s.PrefixRatio > 1 || math.IsNaN(s.PrefixRatio):
		return fmt.Errorf("--prefix-ratio: must be in [0, 1], got %g", s.PrefixRatio)
	}
	return nil
}

// words are common English words of at most four letters, each one token
// with its leading space in real BPE vocabularies and in the simulator's
// tokenizer, so a prompt of n words is about n tokens everywhere.
var words = strings.Fields(`the of and to in is was for on are as with his they at be this
from have or by one had not but what all were when we can an your if do will each how up out
them then she many some so her two like him see time no make than been its who now my made
over did down only way find use may long get come day most part into has more look good new
set own also well back much just line name very must tell big men old ask went read need land
home last kind hand high`)

type synthetic struct {
	Synthetic
	prefix    string
	prefixLen int
}

// NewSynthetic returns the workload s describes.
func NewSynthetic(s Synthetic) (Workload, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	w := &synthetic{Synthetic: s, prefixLen: int(math.Round(s.PrefixRatio * float64(s.InputLen)))}
	rng := rand.New(rand.NewPCG(s.Seed, math.MaxUint64))
	w.prefix = text(rng, w.prefixLen)
	return w, nil
}

func text(rng *rand.Rand, n int) string {
	var b strings.Builder
	for range n {
		b.WriteByte(' ')
		b.WriteString(words[rng.IntN(len(words))])
	}
	return b.String()
}

// draw picks a length in [n·(1−r), n·(1+r)], at least 1.
func draw(rng *rand.Rand, n int, r float64) int {
	lo, hi := int(math.Floor(float64(n)*(1-r))), int(math.Ceil(float64(n)*(1+r)))
	v := lo
	if hi > lo {
		v = lo + rng.IntN(hi-lo+1)
	}
	return max(v, 1)
}

func (w *synthetic) Request(i int) *Request {
	// Each request has its own stream of draws, so the workload does not
	// depend on the order in which concurrent senders ask for requests.
	rng := rand.New(rand.NewPCG(w.Seed, uint64(i)))
	in := draw(rng, w.InputLen, w.RangeRatio)
	out := draw(rng, w.OutputLen, w.RangeRatio)
	prompt := w.prefix + text(rng, max(in-w.prefixLen, 1))
	body := map[string]any{
		"model":          w.Model,
		"max_tokens":     out,
		"stream":         true,
		"stream_options": streamOptions,
	}
	if w.IgnoreEOS {
		body["ignore_eos"] = true
	}
	path := PathCompletions
	if w.Chat {
		path = PathChat
		body["messages"] = []map[string]string{{"role": "user", "content": strings.TrimPrefix(prompt, " ")}}
	} else {
		body["prompt"] = strings.TrimPrefix(prompt, " ")
	}
	b, _ := json.Marshal(body) // plain values: cannot fail
	return &Request{Index: i, Path: path, Body: b}
}
