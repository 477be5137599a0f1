package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/ardanlabs/jinja"
)

// Template is a model's chat template, rendered as transformers'
// apply_chat_template renders it: trim_blocks and lstrip_blocks on, tojson
// without ASCII escaping and in the client's key order, special tokens as
// variables. Compile once; Render is safe for concurrent use.
//
// Known differences from Jinja2, all in values passed through tojson: a
// float is written as Go's shortest form ("1" for 1.0, "1e+06" for 1e6,
// where Python writes "1.0" and "1000000.0"), and U+2028/U+2029 are escaped.
// Both are rare in tool schemas and arguments; text never goes through tojson
// in the shipped templates.
type Template struct {
	tmpl *jinja.Template
	// vars are the special tokens transformers passes to every render.
	vars map[string]jinja.Value
}

// NewTemplate compiles a chat template. bosToken and eosToken are what the
// template sees as bos_token and eos_token; an empty one is left undefined,
// as transformers leaves a special token the tokenizer does not have.
func NewTemplate(src, bosToken, eosToken string) (*Template, error) {
	tmpl, err := jinja.Compile(src)
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	vars := map[string]jinja.Value{}
	if bosToken != "" {
		vars["bos_token"] = jinja.NewString(bosToken)
	}
	if eosToken != "" {
		vars["eos_token"] = jinja.NewString(eosToken)
	}
	return &Template{tmpl: tmpl, vars: vars}, nil
}

// Chat is what a template renders: the JSON of each message and tool as the
// client wrote it, so that key order survives into tojson.
type Chat struct {
	Messages []json.RawMessage
	// Tools nil renders as tools=None; transformers does the same when the
	// request has none.
	Tools               []json.RawMessage
	AddGenerationPrompt bool
	// Kwargs are extra template variables, as in vLLM's
	// chat_template_kwargs (enable_thinking, …).
	Kwargs map[string]json.RawMessage
}

// Render returns the prompt text the model sees.
func (t *Template) Render(c Chat) (string, error) {
	msgs, err := jsonList(c.Messages)
	if err != nil {
		return "", fmt.Errorf("messages: %w", err)
	}
	tools := jinja.None()
	if c.Tools != nil {
		if tools, err = jsonList(c.Tools); err != nil {
			return "", fmt.Errorf("tools: %w", err)
		}
	}
	return t.render(msgs, tools, c.AddGenerationPrompt, c.Kwargs)
}

func (t *Template) render(msgs, tools jinja.Value, addGenerationPrompt bool, kwargs map[string]json.RawMessage) (out string, err error) {
	// The template engine is third-party code run on client input; a panic
	// there must fail one count, not the gateway.
	defer func() {
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("render chat template: panic: %v", r)
		}
	}()
	data := make(map[string]jinja.Value, len(t.vars)+len(kwargs)+4)
	for k, v := range kwargs {
		val, err := jsonValue(v)
		if err != nil {
			return "", fmt.Errorf("chat template kwarg %q: %w", k, err)
		}
		data[k] = val
	}
	for k, v := range t.vars {
		data[k] = v
	}
	data["messages"] = msgs
	data["tools"] = tools
	data["documents"] = jinja.None()
	data["add_generation_prompt"] = jinja.NewBool(addGenerationPrompt)
	out, err = t.tmpl.RenderValues(data)
	if err != nil {
		return "", fmt.Errorf("render chat template: %w", err)
	}
	return out, nil
}

func jsonList(items []json.RawMessage) (jinja.Value, error) {
	vals := make([]jinja.Value, len(items))
	for i, raw := range items {
		v, err := jsonValue(raw)
		if err != nil {
			return jinja.Value{}, fmt.Errorf("item %d: %w", i, err)
		}
		vals[i] = v
	}
	return jinja.NewList(vals), nil
}

// jsonValue converts JSON to a template value keeping object key order,
// which jinja.FromGoValue (via map[string]any) would sort.
func jsonValue(raw []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return jinja.Value{}, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return jinja.Value{}, errors.New("trailing data after JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return jinja.Value{}, err
	}
	switch tok := tok.(type) {
	case nil:
		return jinja.None(), nil
	case bool:
		return jinja.NewBool(tok), nil
	case string:
		return jinja.NewString(tok), nil
	case json.Number:
		// Python keeps ints and floats apart, and so must tojson.
		if !strings.ContainsAny(string(tok), ".eE") {
			if n, err := tok.Int64(); err == nil {
				return jinja.NewInt(n), nil
			}
		}
		f, err := tok.Float64()
		if err != nil {
			return jinja.Value{}, err
		}
		return jinja.NewFloat(f), nil
	case json.Delim:
		if tok == '[' {
			var items []jinja.Value
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return jinja.Value{}, err
				}
				items = append(items, v)
			}
			_, err := dec.Token()
			return jinja.NewList(items), err
		}
		obj := jinja.NewDict()
		d := obj.AsDict()
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return jinja.Value{}, err
			}
			v, err := decodeValue(dec)
			if err != nil {
				return jinja.Value{}, err
			}
			d.Set(k.(string), v) // a repeated key keeps its first place and its last value, as in Python
		}
		_, err := dec.Token()
		return obj, err
	}
	return jinja.Value{}, fmt.Errorf("unexpected JSON token %v", tok)
}

// tokenizerConfig is the part of a tokenizer_config.json a template needs.
type tokenizerConfig struct {
	ChatTemplate json.RawMessage `json:"chat_template"`
	BosToken     json.RawMessage `json:"bos_token"`
	EosToken     json.RawMessage `json:"eos_token"`
}

// ParseTokenizerConfig builds the template of a tokenizer_config.json: its
// chat_template (the "default" one when it holds several) with its
// bos_token and eos_token.
func ParseTokenizerConfig(raw []byte) (*Template, error) {
	var cfg tokenizerConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("tokenizer_config.json: %w", err)
	}
	src, err := chatTemplateSource(cfg.ChatTemplate)
	if err != nil {
		return nil, err
	}
	bos, err := specialToken(cfg.BosToken)
	if err != nil {
		return nil, fmt.Errorf("tokenizer_config.json: bos_token: %w", err)
	}
	eos, err := specialToken(cfg.EosToken)
	if err != nil {
		return nil, fmt.Errorf("tokenizer_config.json: eos_token: %w", err)
	}
	return NewTemplate(src, bos, eos)
}

func chatTemplateSource(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", errors.New("tokenizer_config.json: no chat_template")
	}
	var src string
	if err := json.Unmarshal(raw, &src); err == nil {
		return src, nil
	}
	var named []struct{ Name, Template string }
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", errors.New("tokenizer_config.json: chat_template is neither a string nor a list of named templates")
	}
	for _, n := range named {
		if n.Name == "default" {
			return n.Template, nil
		}
	}
	return "", errors.New(`tokenizer_config.json: chat_template has no "default" entry`)
}

// specialToken reads a token written either as a string or as an
// AddedToken object with a content field.
func specialToken(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var obj struct{ Content string }
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", err
	}
	return obj.Content, nil
}

// LoadTemplate reads a chat template from a tokenizer_config.json, or from a
// plain Jinja file (.jinja, .j2) which then has no bos/eos tokens.
func LoadTemplate(path string) (*Template, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load chat template: %w", err)
	}
	var t *Template
	if strings.HasSuffix(path, ".json") {
		t, err = ParseTokenizerConfig(raw)
	} else {
		t, err = NewTemplate(string(raw), "", "")
	}
	if err != nil {
		return nil, fmt.Errorf("load chat template %q: %w", path, err)
	}
	return t, nil
}

// BuiltinTemplate returns the chat template shipped with a built-in
// tokenizer. OpenAI's encodings have none: OpenAI does not publish its chat
// format.
func BuiltinTemplate(name string) (*Template, error) {
	b, ok := builtins[name]
	if !ok {
		return nil, fmt.Errorf("unknown built-in tokenizer %q (have %s)", name, strings.Join(BuiltinNames(), ", "))
	}
	if b.dir == "" {
		return nil, fmt.Errorf("built-in tokenizer %s has no chat template", name)
	}
	raw, err := data.ReadFile(b.dir + "/tokenizer_config.json")
	if err != nil {
		return nil, err
	}
	t, err := ParseTokenizerConfig(raw)
	if err != nil {
		return nil, fmt.Errorf("built-in template %s: %w", name, err)
	}
	return t, nil
}
