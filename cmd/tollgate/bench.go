package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/loadgen"
)

const benchSynopsis = `bench [--base-url URL] [--model M] [--rate R | --concurrency C] [--num-prompts N | --duration D]
                [--prompts FILE.jsonl | --input-len N --output-len N --prefix-ratio F] [--format table|json]`

// runBench is `tollgate bench`: a load generator for any OpenAI-compatible
// endpoint, an engine directly or tollgate in front of one (issue 8).
// Flags only; the engine is internal/loadgen.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench", benchSynopsis, stderr)
	baseURL := fs.String("base-url", gatewayURL, "OpenAI-compatible base `URL` (tollgate's default listen address)")
	model := fs.String("model", "", "model `name`; default: the first one the endpoint lists at /models (replaces the prompt file's)")
	apiKey := fs.String("api-key", "", "bearer `key` (default $OPENAI_API_KEY)")
	headers := &stringList{}
	fs.Var(headers, "header", "extra request header `'Name: value'` (repeatable), e.g. '"+config.Default().Headers.BizLine+": bench' (tollgate's business-line header)")
	// Load.
	rate := fs.Float64("rate", 0, "open loop: requests per `second`; 0 runs a closed loop at --concurrency")
	arrival := fs.String("arrival", loadgen.ArrivalPoisson, "open-loop arrival `process`: poisson or constant")
	concurrency := fs.Int("concurrency", 0, "closed loop: requests in flight (default 1); with --rate: a cap on them")
	numPrompts := fs.Int("num-prompts", 0, "requests to send (default 100 unless --duration is set)")
	duration := fs.Duration("duration", 0, "stop sending after this `long` (and wait for the last answers)")
	seed := fs.Uint64("seed", 1, "seed of the arrival process and the synthetic prompts")
	warmup := fs.Int("warmup", 1, "requests sent (and not measured) before the run, to open connections and check the endpoint; failures are reported, not fatal")
	timeout := fs.Duration("timeout", 10*time.Minute, "per-request `timeout`")
	// Workload.
	prompts := fs.String("prompts", "", "JSONL `file` of OpenAI request bodies (chat \"messages\" or completions \"prompt\"), used in order")
	endpoint := fs.String("endpoint", "chat", "synthetic requests' `API`: chat or completions")
	inputLen := fs.Int("input-len", 256, "synthetic prompt `tokens` (about: one common word each)")
	outputLen := fs.Int("output-len", 128, "synthetic max_tokens")
	rangeRatio := fs.Float64("range-ratio", 0, "synthetic lengths are drawn from [len·(1−r), len·(1+r)]")
	prefixRatio := fs.Float64("prefix-ratio", 0, "share of the prompt that is the same for every request (a shared prefix)")
	ignoreEOS := fs.Bool("ignore-eos", false, "ask for exactly max_tokens (vLLM's ignore_eos; the simulator honours it)")
	// Output.
	format := fs.String("format", "table", "result `format` on stdout: table or json")
	detailed := fs.Bool("detailed", false, "add one row per request to the JSON (request id, TTFT, TPOT, ITL…)")
	output := fs.String("output", "", "also write the JSON result to this `file`")
	progress := fs.String("progress", "auto", "progress bar on stderr: auto (when it is a terminal), always, never")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if err := checkBenchFlags(set, *format, *progress, *endpoint, *baseURL); err != nil {
		return err
	}

	load := loadgen.Load{Rate: *rate, Arrival: *arrival, Concurrency: *concurrency, Requests: *numPrompts, Duration: *duration, Seed: *seed}
	if load.Rate == 0 && load.Concurrency == 0 && !set["concurrency"] {
		load.Concurrency = 1
	}
	if load.Requests == 0 && load.Duration == 0 && !set["num-prompts"] {
		load.Requests = 100
	}
	if err := load.Validate(); err != nil {
		return err
	}

	header := http.Header{}
	for _, h := range *headers {
		k, v, ok := strings.Cut(h, ":")
		if !ok || strings.TrimSpace(k) == "" {
			return fmt.Errorf("--header: want 'Name: value', got %q", h)
		}
		header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	key := *apiKey
	if key == "" {
		key = os.Getenv("OPENAI_API_KEY")
	}
	if key != "" {
		header.Set("Authorization", "Bearer "+key)
	}
	conns := max(load.Concurrency, 1)
	if load.Rate > 0 && load.Concurrency == 0 {
		conns = max(int(load.Rate*4), 16) // open loop, uncapped: a guess at what will be in flight
	}
	client := loadgen.NewClient(*baseURL, header, conns, *timeout)
	defer client.CloseIdle()

	var w loadgen.Workload
	if *prompts != "" {
		f, err := os.Open(*prompts)
		if err != nil {
			return fmt.Errorf("--prompts: %w", err)
		}
		w, err = loadgen.ReadPrompts(f, *prompts, *model)
		f.Close()
		if err != nil {
			return fmt.Errorf("--prompts: %w", err)
		}
	} else {
		m := *model
		if m == "" {
			var err error
			if m, err = firstModel(ctx, client); err != nil {
				return fmt.Errorf("--model not given and %w", err)
			}
		}
		var err error
		w, err = loadgen.NewSynthetic(loadgen.Synthetic{Model: m, Chat: *endpoint == "chat", InputLen: *inputLen, OutputLen: *outputLen,
			RangeRatio: *rangeRatio, PrefixRatio: *prefixRatio, IgnoreEOS: *ignoreEOS, Seed: *seed})
		if err != nil {
			return err
		}
	}

	if *warmup < 0 {
		return fmt.Errorf("--warmup: must not be negative, got %d", *warmup)
	}
	if wr := loadgen.Warmup(ctx, w, client.Send, *warmup, conns); wr.Failed > 0 {
		fmt.Fprintf(stderr, "tollgate bench: warm-up: %d of %d requests failed, each tried %d times (first: %v)%s; the run goes on\n",
			wr.Failed, wr.Requests, loadgen.WarmupAttempts, wr.FirstErr, authHint(errText(wr.FirstErr)))
	} else if wr.Retried > 0 {
		fmt.Fprintf(stderr, "tollgate bench: warm-up: %d of %d requests failed once and answered when tried again\n", wr.Retried, wr.Requests)
	}

	var report loadgen.Progress
	var bar *loadgen.Bar
	if *progress == "always" || (*progress == "auto" && isTerminal(stderr)) {
		bar = loadgen.NewBar(stderr, load.Requests, load.Duration)
		report = bar.Update
	}
	run, err := loadgen.Drive(ctx, load, w, client.Send, report)
	if bar != nil {
		bar.Finish()
	}
	if err != nil {
		return err
	}
	s := loadgen.Summarize(run, *baseURL, *detailed)
	if *output != "" {
		f, err := os.Create(*output)
		if err != nil {
			return fmt.Errorf("--output: %w", err)
		}
		err = loadgen.WriteJSON(f, s)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("--output: %w", err)
		}
	}
	if *format == "json" {
		err = loadgen.WriteJSON(stdout, s)
	} else {
		err = loadgen.WriteTable(stdout, s)
	}
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return fmt.Errorf("bench interrupted after %d requests: %w", len(run.Results), ctx.Err())
	}
	if s.Completed == 0 && s.Failed > 0 {
		return fmt.Errorf("all %d requests failed (first: %v)%s", s.Failed, run.Results[0].Err, authHint(errText(run.Results[0].Err)))
	}
	return nil
}

func checkBenchFlags(set map[string]bool, format, progress, endpoint, baseURL string) error {
	switch {
	case format != "table" && format != "json":
		return fmt.Errorf("--format: must be table or json, got %q", format)
	case progress != "auto" && progress != "always" && progress != "never":
		return fmt.Errorf("--progress: must be auto, always or never, got %q", progress)
	case endpoint != "chat" && endpoint != "completions":
		return fmt.Errorf("--endpoint: must be chat or completions, got %q", endpoint)
	case set["prompts"] && (set["input-len"] || set["output-len"] || set["range-ratio"] || set["prefix-ratio"] || set["endpoint"] || set["ignore-eos"]):
		return errors.New("--prompts: the prompt file's bodies are sent as they are; drop the synthetic flags (--input-len, --output-len, --range-ratio, --prefix-ratio, --endpoint, --ignore-eos)")
	}
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--base-url: want http(s)://host[:port]/v1, got %q", baseURL)
	}
	return nil
}

// firstModel asks the endpoint which models it serves, as vLLM's benchmark
// does when no model is given.
func firstModel(ctx context.Context, c *loadgen.Client) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+"/models", nil)
	if err != nil {
		return "", err
	}
	for k, v := range c.Header {
		req.Header[k] = v
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return "", fmt.Errorf("could not list models: %w", err)
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("could not list models: GET %s/models answered %s%s", c.BaseURL, resp.Status, authHint(fmt.Sprintf("HTTP %d", resp.StatusCode)))
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || len(list.Data) == 0 || list.Data[0].ID == "" {
		return "", fmt.Errorf("GET %s/models listed no model", c.BaseURL)
	}
	return list.Data[0].ID, nil
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// errText is err's message, "" for nil.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
