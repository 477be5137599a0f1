package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
)

func runRequests(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "show" {
		return runRequestsShow(ctx, args[1:], stdout, stderr)
	}
	fs := newFlagSet("requests", "requests [--db PATH | --config FILE] [--limit N] [--json] [--user U] [--biz B] [--model M] [--client-id ID] [--endpoint E] [--end-user U] [--errors] [--slow DURATION]\n       tollgate requests show [--db PATH | --config FILE] [--json] ID", stderr)
	lf := addLedgerFlags(fs, "SQLite ledger `path`")
	limit := fs.Int("limit", 20, "how many requests, newest first")
	asJSON := fs.Bool("json", false, "one JSON record per line instead of a table")
	var f store.Filter
	fs.StringVar(&f.UserID, "user", "", "only this user id")
	fs.StringVar(&f.BizLine, "biz", "", "only this business line")
	fs.StringVar(&f.Model, "model", "", "only this model")
	fs.StringVar(&f.TraceID, "trace", "", "only this trace id")
	fs.StringVar(&f.ClientRequestID, "client-id", "", "only requests that sent this X-Request-Id (tollgate's own id is the one `requests show` takes)")
	fs.StringVar(&f.TemplateID, "template", "", "only this prompt template id")
	fs.StringVar(&f.Endpoint, "endpoint", "", "only this API: chat, completions, embeddings, responses, messages, count_tokens")
	fs.StringVar(&f.EndUser, "end-user", "", "only requests whose body named this end user (user, safety_identifier, metadata.user_id)")
	fs.BoolVar(&f.ErrorsOnly, "errors", false, "only requests that ended with an error")
	fs.DurationVar(&f.MinE2E, "slow", 0, "only requests slower end to end than this `duration`, e.g. 2s")
	fs.StringVar(&f.Sort, "sort", "", "order by this `figure`, largest first, instead of newest first: ttft, e2e, input, output or cost")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "tollgate requests: unexpected argument %q (did you mean \"requests show %s\"?)\n", fs.Arg(0), fs.Arg(0))
		return errUsage
	}
	if *limit < 1 {
		fmt.Fprintln(stderr, "tollgate requests: --limit must be at least 1")
		return errUsage
	}
	f.Limit = *limit
	st, err := lf.open(ctx, nil, false)
	if err != nil {
		return err
	}
	defer st.Close()
	recs, err := st.Requests(ctx, f)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetEscapeHTML(false)
		for _, r := range recs {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	if len(recs) == 0 {
		// "Recorded yet" only when nothing filtered the rows out.
		var filters []string
		fs.Visit(func(fl *flag.Flag) {
			switch fl.Name {
			case "db", "config", "limit", "json":
			default:
				if b, ok := fl.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
					filters = append(filters, "--"+fl.Name)
				} else {
					filters = append(filters, "--"+fl.Name+" "+strconv.Quote(fl.Value.String()))
				}
			}
		})
		if len(filters) > 0 {
			fmt.Fprintf(stdout, "no requests match %s\n", strings.Join(filters, " "))
		} else {
			fmt.Fprintln(stdout, "no requests recorded yet")
		}
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tREQUEST ID\tMODEL\tUSER\tBIZ\tSTATUS\tIN\tCACHED\tOUT\tTTFT\tTPOT\tE2E\tFINISH")
	for _, r := range recs {
		in, cached := "-", "-" // unknown: nobody counted the input
		if r.Usage.InputKnown() {
			in, cached = strconv.FormatInt(r.Usage.InputTokens, 10), strconv.FormatInt(r.Usage.CachedInputTokens, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n",
			r.Arrival.Local().Format("15:04:05.000"), r.RequestID, short(r.Model, 28), short(r.UserID, 18), dash(r.BizLine),
			statusText(r), in, cached, r.Usage.OutputTokens,
			optMS(r.Derived.TTFT), optMS(r.Derived.TPOT), fmtMS(r.Derived.E2E), dash(r.FinishReason))
	}
	return tw.Flush()
}

func runRequestsShow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("requests show", "requests show [--db PATH | --config FILE] [--json] ID", stderr)
	lf := addLedgerFlags(fs, "SQLite ledger `path`")
	asJSON := fs.Bool("json", false, "print the JSON record(s)")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "tollgate requests show: give exactly one request id")
		return errUsage
	}
	recs, err := loadRequest(ctx, lf, fs.Arg(0))
	if err != nil {
		return err
	}
	for i, r := range recs {
		if *asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetEscapeHTML(false)
			enc.SetIndent("", "  ")
			if err := enc.Encode(r); err != nil {
				return err
			}
			continue
		}
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		printReport(stdout, r)
	}
	return nil
}

// loadRequest reads every attempt of one request from an existing ledger.
func loadRequest(ctx context.Context, lf *ledgerFlags, id string) ([]*record.Record, error) {
	st, err := lf.open(ctx, nil, false)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	recs, err := st.Request(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		// Not tollgate's id: perhaps the client's own X-Request-Id, which
		// several requests may share.
		byClient, cerr := st.Requests(ctx, store.Filter{ClientRequestID: id, Limit: 2})
		switch {
		case cerr == nil && len(byClient) == 1:
			return st.Request(ctx, byClient[0].RequestID)
		case cerr == nil && len(byClient) > 1:
			return nil, fmt.Errorf("more than one request sent X-Request-Id %q; list them with `tollgate requests --client-id %s` and show one by its tollgate id", id, id)
		}
		where := lf.db
		if lf.config != "" {
			where = "the store of " + lf.config
		}
		return nil, fmt.Errorf("no request %q in %s", id, where)
	}
	return recs, err
}

// printReport renders one health report for a terminal.
func printReport(w io.Writer, r *record.Record) {
	d := r.Derived
	section := func(title string) { fmt.Fprintf(w, "\n%s\n", title) }
	kv := func(k string, v any) { fmt.Fprintf(w, "  %-22s %v\n", k, v) }

	fmt.Fprintf(w, "Request %s  (attempt %d of logical request %s)\n", r.RequestID, r.Attempt, r.LogicalRequestID)
	section("Identity")
	kv("user", r.UserID)
	kv("biz line", dash(r.BizLine))
	kv("team", dash(r.Team))
	kv("key id", dash(r.KeyID))
	kv("session", dash(r.SessionID))
	kv("template", dash(r.TemplateID))
	if r.EndUser != "" {
		kv("end user", r.EndUser)
	}
	if len(r.Tags) > 0 {
		kv("tags", r.Tags)
	}
	kv("trace id", r.TraceID)
	if r.ParentSpanID != "" {
		kv("caller's span", r.ParentSpanID)
	}
	if r.ClientRequestID != "" {
		kv("client request id", r.ClientRequestID)
	}
	kv("model", fmt.Sprintf("%s (served as %s)", r.Model, dash(r.ServedModel)))
	kv("upstream", fmt.Sprintf("%s (%s)", dash(r.Upstream), dash(r.Engine)))
	if r.ResponseID != "" {
		kv("response id", r.ResponseID)
	}

	section("Input")
	kv("endpoint", r.Endpoint)
	kv("stream", r.Stream)
	if r.MaxTokens != nil {
		kv("max_tokens", *r.MaxTokens)
	}
	if r.Temperature != nil {
		kv("temperature", *r.Temperature)
	}
	kv("prompt", fmt.Sprintf("%d bytes, %d messages, sha256 %s", r.PromptBytes, r.Messages, shortHash(r.PromptSHA256)))

	section("Usage")
	u := r.Usage
	if u.InputKnown() {
		kv("input tokens", fmt.Sprintf("%d (cached %d)", u.InputTokens, u.CachedInputTokens))
		if u.CacheWriteTokens > 0 {
			kv("cache writes", fmt.Sprintf("%d (1h %d)", u.CacheWriteTokens, u.CacheWrite1hTokens))
		}
	} else {
		kv("input tokens", "unknown (the engine reported none and no tokenizer counted the prompt)")
	}
	kv("output tokens", fmt.Sprintf("%d (reasoning %d)", u.OutputTokens, u.ReasoningTokens))
	if u.ToolCalls > 0 {
		kv("tool calls", u.ToolCalls)
	}
	if u.InputKnown() {
		kv("total", u.Total())
	} else {
		kv("total", fmt.Sprintf("unknown (%d output + the unknown input)", u.OutputTokens))
	}
	kv("counted by", u.Source)

	section("Timing")
	kv("arrival", r.Arrival.Local().Format(time.RFC3339Nano))
	kv("TTFT (user side)", optMS(d.TTFT))
	kv("TTFT (upstream)", optMS(d.UpstreamTTFT))
	kv("queue + scheduling", optMS(d.Queue))
	kv("TPOT", optMS(d.TPOT))
	if d.DecodeRate != nil {
		kv("decode rate", fmt.Sprintf("%.1f tokens/s", *d.DecodeRate))
	}
	kv("E2E", fmtMS(d.E2E))
	if d.FirstPacketMerge {
		kv("first packet merged", "yes: the first chunk carried several tokens")
	}
	if e := r.EngineTiming; e != nil {
		kv("engine timing", fmt.Sprintf("%s: queue %s, prefill %s, decode %s", e.Signal, fmtMS(e.Queue), fmtMS(e.Prefill), fmtMS(e.Decode)))
	} else if now := time.Now(); r.EngineTimingPending(now) {
		kv("engine timing", fmt.Sprintf("pending: the engine's own span is expected within %s (otlp.join_window); until then its queue and prefill are inferred",
			r.Arrival.Add(r.EngineTimingDue).Sub(now).Round(time.Second)))
	}
	marks := []struct {
		name string
		at   time.Duration
	}{
		{"auth done", r.Marks.AuthDone}, {"admitted", r.Marks.Admitted}, {"upstream sent", r.Marks.UpstreamSent},
		{"upstream headers", r.Marks.UpstreamHeaders}, {"first upstream token", r.Marks.FirstUpstreamToken},
		{"first client token", r.Marks.FirstClientToken}, {"last token", r.Marks.LastToken}, {"end", r.Marks.End},
	}
	fmt.Fprintln(w, "  marks (ms after arrival):")
	for _, m := range marks {
		if m.at > 0 {
			fmt.Fprintf(w, "    %-20s %10s  %s\n", m.name, fmtMS(m.at), bar(m.at, r.Marks.End))
		}
	}
	if len(r.Timeline) > 0 {
		var pts []string
		for _, p := range r.Timeline {
			pts = append(pts, fmt.Sprintf("#%d@%s", p.Index, fmtMS(p.Offset)))
		}
		kv("token timeline", strings.Join(pts, " "))
	}

	section("Result")
	kv("status", statusText(r))
	if r.ErrorMessage != "" {
		kv("error", r.ErrorMessage)
	}
	if r.NativeFinish != "" {
		kv("finish reason", fmt.Sprintf("%s (the API's own: %s)", dash(r.FinishReason), r.NativeFinish))
	} else {
		kv("finish reason", dash(r.FinishReason))
	}
	kv("response bytes", r.ResponseBytes)
	kv("content chunks", r.ContentChunks)
	kv("retries before", r.Retries)
	kv("detail sampled", r.Sampled)
}

func bar(at, end time.Duration) string {
	if end <= 0 {
		return ""
	}
	n := int(30 * at / end)
	return strings.Repeat("█", n) + strings.Repeat("·", 30-n)
}

func statusText(r *record.Record) string {
	s := strconv.Itoa(r.Status)
	if r.ErrorType != "" {
		s += " " + r.ErrorType
	}
	return s
}

func fmtMS(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case ms >= 10000:
		return fmt.Sprintf("%.1fs", ms/1000)
	case ms >= 100:
		return fmt.Sprintf("%.0fms", ms)
	default:
		return fmt.Sprintf("%.2fms", ms)
	}
}

func optMS(d *time.Duration) string {
	if d == nil {
		return "-"
	}
	return fmtMS(*d)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func short(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

func shortHash(s string) string {
	if len(s) > 16 {
		return s[:16] + "…"
	}
	return dash(s)
}
