package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/tollgate-dev/tollgate/internal/gateway"
	"github.com/tollgate-dev/tollgate/internal/tokenizer"
)

// runTokens counts tokens exactly as the model's own tokenizer does: text,
// or (with --chat) an OpenAI request body rendered with the chat template.
func runTokens(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "count" {
		fmt.Fprintln(stderr, "Usage: tollgate tokens count (--model M | --tokenizer PATH) [--chat] [--json] [--jsonl] < input")
		return errUsage
	}
	fs := newFlagSet("tokens count", "tokens count (--model M | --tokenizer PATH) [--chat] [--json] [--jsonl] < input", stderr)
	model := fs.String("model", "", "model name (its family's built-in tokenizer) or a built-in: "+strings.Join(tokenizer.BuiltinNames(), ", "))
	path := fs.String("tokenizer", "", "a tokenizer.json (plain or .xz) `file` instead of --model")
	chat := fs.Bool("chat", false, "input is an OpenAI chat request body: count the prompt the engine sees (chat template applied)")
	asJSON := fs.Bool("json", false, `print {"count": N, "ids": [...]}`)
	jsonl := fs.Bool("jsonl", false, "one input per line (a JSON string, or with --chat a request body); one JSON result per line")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	ct, err := openCounter(*model, *path)
	if err != nil {
		return err
	}
	count := func(in []byte) (result, error) {
		text := string(in)
		if *chat {
			p, err := ct.ChatPrompt(in)
			if err != nil {
				return result{}, err
			}
			text = p
		}
		ids := ct.Tokenizer().Encode(text)
		return result{Count: len(ids), IDs: ids}, nil
	}
	enc := json.NewEncoder(stdout)
	if !*jsonl {
		in, err := io.ReadAll(stdin)
		if err != nil {
			return err
		}
		r, err := count(in)
		if err != nil {
			return err
		}
		if *asJSON {
			return enc.Encode(r)
		}
		fmt.Fprintln(stdout, r.Count)
		return nil
	}
	sc := bufio.NewScanner(stdin)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		in := line
		if !*chat {
			var s string
			if err := json.Unmarshal(line, &s); err != nil {
				return fmt.Errorf("line %d: want a JSON string: %w", n, err)
			}
			in = []byte(s)
		}
		r, err := count(in)
		if err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return sc.Err()
}

type result struct {
	Count int   `json:"count"`
	IDs   []int `json:"ids"`
}

func openCounter(model, path string) (*tokenizer.Counter, error) {
	switch {
	case path != "":
		return tokenizer.Open(tokenizer.Spec{Tokenizer: path})
	case model == "":
		return nil, fmt.Errorf("give --model or --tokenizer")
	}
	for _, b := range tokenizer.BuiltinNames() {
		if model == b {
			return tokenizer.Open(tokenizer.Spec{Tokenizer: b})
		}
	}
	spec, ok := gateway.SpecFor(model, nil)
	if !ok {
		return nil, fmt.Errorf("no built-in tokenizer for model %q: pass --tokenizer PATH (its tokenizer.json)", model)
	}
	return tokenizer.Open(spec)
}
