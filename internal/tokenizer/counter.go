package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/ardanlabs/jinja"
)

// ErrNonText is returned for a chat request with content the template
// cannot count (images, audio, files): the engine turns those into tokens
// by its own rules.
var ErrNonText = errors.New("message content is not text")

// ErrNoTemplate is returned by ChatPromptTokens of a Counter without a chat
// template (OpenAI's encodings: OpenAI does not publish its chat format).
var ErrNoTemplate = errors.New("no chat template")

// Counter counts tokens as one served model does. The gateway holds one per
// model; it is safe for concurrent use.
type Counter struct {
	tok  Tokenizer
	tmpl *Template
}

// NewCounter pairs a tokenizer with its chat template; tmpl may be nil,
// which leaves only TextTokens.
func NewCounter(tok Tokenizer, tmpl *Template) *Counter {
	return &Counter{tok: tok, tmpl: tmpl}
}

// Tokenizer returns the counter's tokenizer.
func (c *Counter) Tokenizer() Tokenizer { return c.tok }

// TextTokens counts text as the model's output: no template, no special
// tokens added (special tokens written in s count as one each).
func (c *Counter) TextTokens(s string) int { return c.tok.Count(s) }

// chatRequest is the part of an OpenAI chat completions body that reaches
// the template, with vLLM's extensions.
type chatRequest struct {
	Messages             []json.RawMessage          `json:"messages"`
	Tools                []json.RawMessage          `json:"tools"`
	ChatTemplateKwargs   map[string]json.RawMessage `json:"chat_template_kwargs"`
	AddGenerationPrompt  *bool                      `json:"add_generation_prompt"`
	ContinueFinalMessage bool                       `json:"continue_final_message"`
}

// ChatPromptTokens counts the prompt tokens of an OpenAI chat completions
// request body: the messages and tools rendered with the chat template,
// then encoded — the number the engine reports as prompt_tokens.
func (c *Counter) ChatPromptTokens(body []byte) (int, error) {
	text, err := c.ChatPrompt(body)
	if err != nil {
		return 0, err
	}
	return c.tok.Count(text), nil
}

// ChatPrompt returns the prompt text of a chat completions request body,
// prepared as vLLM prepares it for the template:
//
//   - content given as parts is the text of its text parts joined by "\n";
//     any other part is ErrNonText;
//   - null or missing content is "";
//   - tool call arguments given as a JSON string are parsed into an object
//     (key order kept), as templates since transformers 4.45 expect.
//
// vLLM's add_generation_prompt (default true) and chat_template_kwargs are
// honoured; continue_final_message is refused rather than approximated.
func (c *Counter) ChatPrompt(body []byte) (string, error) {
	if c.tmpl == nil {
		return "", ErrNoTemplate
	}
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return "", fmt.Errorf("chat request: %w", err)
	}
	if req.ContinueFinalMessage {
		return "", errors.New("chat request: continue_final_message is not supported")
	}
	if len(req.Messages) == 0 {
		return "", errors.New("chat request: no messages")
	}
	msgs := make([]jinja.Value, len(req.Messages))
	for i, raw := range req.Messages {
		m, err := jsonValue(raw)
		if err != nil {
			return "", fmt.Errorf("chat request: message %d: %w", i, err)
		}
		if err := prepareMessage(m); err != nil {
			return "", fmt.Errorf("chat request: message %d: %w", i, err)
		}
		msgs[i] = m
	}
	tools := jinja.None()
	if len(req.Tools) > 0 {
		var err error
		if tools, err = jsonList(req.Tools); err != nil {
			return "", fmt.Errorf("chat request: tools: %w", err)
		}
	}
	agp := req.AddGenerationPrompt == nil || *req.AddGenerationPrompt
	return c.tmpl.render(jinja.NewList(msgs), tools, agp, req.ChatTemplateKwargs)
}

func prepareMessage(m jinja.Value) error {
	if !m.IsDict() {
		return errors.New("not an object")
	}
	d := m.AsDict()
	// Engines reject a message without a role before any template runs.
	if role, _ := d.Get("role"); !role.IsString() {
		return errors.New("no role")
	}
	content, _ := d.Get("content")
	switch {
	case content.IsUndefined(), content.IsNone():
		d.Set("content", jinja.NewString(""))
	case content.IsList():
		var texts []string
		for _, p := range content.AsList().Items {
			if !p.IsDict() {
				return errors.New("content part is not an object")
			}
			typ, _ := p.AsDict().Get("type")
			text, _ := p.AsDict().Get("text")
			if !typ.IsString() || typ.AsString() != "text" || !text.IsString() {
				name := "(none)"
				if typ.IsString() {
					name = typ.AsString()
				}
				return fmt.Errorf("%w: part of type %q", ErrNonText, name)
			}
			texts = append(texts, text.AsString())
		}
		d.Set("content", jinja.NewString(strings.Join(texts, "\n")))
	}
	calls, _ := d.Get("tool_calls")
	if !calls.IsList() {
		return nil
	}
	for _, call := range calls.AsList().Items {
		if !call.IsDict() {
			continue
		}
		fn, _ := call.AsDict().Get("function")
		if !fn.IsDict() {
			continue
		}
		args, _ := fn.AsDict().Get("arguments")
		switch {
		case args.IsString() && args.AsString() != "":
			v, err := jsonValue([]byte(args.AsString()))
			if err != nil {
				return fmt.Errorf("tool call arguments: %w", err)
			}
			fn.AsDict().Set("arguments", v)
		case args.IsUndefined(), args.IsNone(), args.IsString():
			fn.AsDict().Set("arguments", jinja.NewDict())
		}
	}
	return nil
}
