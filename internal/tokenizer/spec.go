package tokenizer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// Spec says how one model's tokens are counted. It is the per-model block
// of the configuration:
//
//	tokenizer: qwen3                      # a built-in name, or a path to tokenizer.json[.xz]
//	chat_template: /models/x/tokenizer_config.json   # optional, see Template
type Spec struct {
	// Tokenizer is a built-in name (see BuiltinNames) or the path of a
	// Hugging Face tokenizer.json, plain or .xz.
	Tokenizer string `yaml:"tokenizer" json:"tokenizer"`
	// Template is where the chat template comes from:
	//   - empty: the built-in's own template, or the tokenizer_config.json
	//     beside a tokenizer file, or none when neither exists;
	//   - "none": no template (only output text is counted);
	//   - a built-in name;
	//   - the path of a tokenizer_config.json, or of a Jinja file.
	Template string `yaml:"chat_template" json:"chat_template"`
}

// TemplateNone is the Spec.Template value for "no chat template".
const TemplateNone = "none"

// Validate checks what can be checked without loading anything.
func (s Spec) Validate() error {
	if s.Tokenizer == "" {
		return errors.New("tokenizer: required (a built-in name or a tokenizer.json path)")
	}
	if _, ok := builtins[s.Tokenizer]; !ok && !looksLikePath(s.Tokenizer) {
		return fmt.Errorf("tokenizer: %q is neither a built-in (%s) nor a path", s.Tokenizer, strings.Join(BuiltinNames(), ", "))
	}
	if t := s.Template; t != "" && t != TemplateNone {
		if _, ok := builtins[t]; !ok && !looksLikePath(t) {
			return fmt.Errorf("chat_template: %q is neither %q, a built-in nor a path", t, TemplateNone)
		}
	}
	return nil
}

func looksLikePath(s string) bool { return strings.ContainsAny(s, `/\.`) }

// Open loads the tokenizer and template a Spec names.
func Open(s Spec) (*Counter, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	var tok Tokenizer
	var err error
	if _, ok := builtins[s.Tokenizer]; ok {
		tok, err = Builtin(s.Tokenizer)
	} else {
		tok, err = Load(s.Tokenizer)
	}
	if err != nil {
		return nil, err
	}
	tmpl, err := openTemplate(s)
	if err != nil {
		return nil, err
	}
	return NewCounter(tok, tmpl), nil
}

func openTemplate(s Spec) (*Template, error) {
	switch t := s.Template; {
	case t == TemplateNone:
		return nil, nil
	case t != "":
		if b, ok := builtins[t]; ok && b.dir != "" {
			return BuiltinTemplate(t)
		} else if ok {
			return nil, fmt.Errorf("chat_template: built-in %s has no chat template", t)
		}
		return LoadTemplate(t)
	}
	if b, ok := builtins[s.Tokenizer]; ok {
		if b.dir == "" {
			return nil, nil
		}
		return BuiltinTemplate(s.Tokenizer)
	}
	beside := filepath.Join(filepath.Dir(s.Tokenizer), "tokenizer_config.json")
	if _, err := os.Stat(beside); err != nil {
		return nil, nil
	}
	return LoadTemplate(beside)
}

// Registry holds the counters of the served models, each loaded on first
// use: loading a vocabulary takes about a second and tens of MB, which a
// model that is configured but never requested should not cost.
type Registry struct {
	specs   map[string]Spec
	mu      sync.Mutex
	loading map[string]*lazyCounter
}

type lazyCounter struct {
	once sync.Once
	c    *Counter
	err  error
}

// NewRegistry checks every spec and returns a registry keyed by model name.
func NewRegistry(specs map[string]Spec) (*Registry, error) {
	names := make([]string, 0, len(specs))
	for n := range specs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := specs[n].Validate(); err != nil {
			return nil, fmt.Errorf("model %q: %w", n, err)
		}
	}
	return &Registry{specs: specs, loading: map[string]*lazyCounter{}}, nil
}

// Counter returns the counter of a model, loading it on first use. ok is
// false for a model with no spec; err reports a spec that failed to load
// (and keeps reporting it: a broken file does not heal by retrying).
func (r *Registry) Counter(model string) (c *Counter, ok bool, err error) {
	spec, ok := r.specs[model]
	if !ok {
		return nil, false, nil
	}
	r.mu.Lock()
	l := r.loading[model]
	if l == nil {
		l = &lazyCounter{}
		r.loading[model] = l
	}
	r.mu.Unlock()
	l.once.Do(func() {
		l.c, l.err = Open(spec)
		if l.err != nil {
			l.err = fmt.Errorf("model %q: %w", model, l.err)
		}
	})
	return l.c, true, l.err
}

// Load loads every configured model now, so that a bad file is reported at
// startup and the first request of each model does not wait for it.
func (r *Registry) Load() error {
	names := make([]string, 0, len(r.specs))
	for n := range r.specs {
		names = append(names, n)
	}
	sort.Strings(names)
	var errs []error
	for _, n := range names {
		if _, _, err := r.Counter(n); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
