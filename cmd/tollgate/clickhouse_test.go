package main

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/sim"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/clickhouse"
	"github.com/tollgate-dev/tollgate/internal/store/clickhouse/chtest"
)

// TestServeClickHouse runs serve on store.backend clickhouse against a
// real server, the simulator behind it, sends requests with the OpenAI
// SDK (plain and streamed), stops serve the way SIGTERM does (cancel; it
// flushes), then reads ClickHouse through the store: one row per request,
// and token sums equal to the usage the simulator reported to the client.
func TestServeClickHouse(t *testing.T) {
	chURL := chtest.Server(t)
	db := chtest.Database()
	t.Cleanup(func() {
		if _, err := chtest.Exec(context.Background(), chURL, "DROP DATABASE IF EXISTS "+db); err != nil {
			t.Errorf("drop %s: %v", db, err)
		}
	})

	upstream := startSimServer(t, sim.Config{Seed: 7, DecodeBase: time.Millisecond})
	dir := t.TempDir()
	cfg, err := config.Parse([]byte(`
listen: 127.0.0.1:0
store:
  backend: clickhouse
  clickhouse: {url: "`+chURL+`", database: `+db+`, timeout: 10s}
  queue: {dir: "`+filepath.Join(dir, "queue")+`"}
upstreams:
  - {name: sim, url: "`+upstream+`", engine: vllm}
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Store.BatchSize != config.ClickHouseBatchSize || cfg.Store.FlushInterval != config.ClickHouseFlushInterval {
		t.Fatalf("batching %d / %v; want ClickHouse's defaults", cfg.Store.BatchSize, cfg.Store.FlushInterval)
	}
	cfg.Store.SQLite.Path = filepath.Join(dir, "unused.db") // nothing may be written there
	cfg.ShutdownGrace = 5 * time.Second

	addr, cancel, wait := startServe(t, cfg)
	defer cancel()

	const n = 30
	var wantIn, wantOut int64
	for i := range n {
		ctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
		c := openai.NewClient(option.WithBaseURL("http://"+addr+"/v1"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0),
			option.WithHeader(sim.OutputTokensHeader, strconv.Itoa(2+i%7)))
		params := openai.ChatCompletionNewParams{
			Model:    "Qwen/Qwen3-8B",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("request " + strconv.Itoa(i) + " of the ClickHouse end-to-end test")},
		}
		if i%3 == 0 { // streamed, with the usage chunk
			params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
			s := c.Chat.Completions.NewStreaming(ctx, params)
			var in, out int64
			for s.Next() {
				if u := s.Current().Usage; u.CompletionTokens > 0 {
					in, out = u.PromptTokens, u.CompletionTokens
				}
			}
			if err := s.Err(); err != nil {
				t.Fatalf("request %d (stream): %v", i, err)
			}
			if out == 0 {
				t.Fatalf("request %d (stream): no usage chunk", i)
			}
			wantIn, wantOut = wantIn+in, wantOut+out
		} else {
			resp, err := c.Chat.Completions.New(ctx, params)
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			wantIn, wantOut = wantIn+resp.Usage.PromptTokens, wantOut+resp.Usage.CompletionTokens
		}
		stop()
	}

	// SIGTERM's path: cancel, drain, flush the queue into ClickHouse.
	cancel()
	if err := wait(); err != nil {
		t.Fatalf("serve: %v", err)
	}

	if _, err := os.Stat(cfg.Store.SQLite.Path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("serve on ClickHouse touched the SQLite path %s: %v", cfg.Store.SQLite.Path, err)
	}
	st, err := clickhouse.Open(t.Context(), clickhouse.Config{HTTP: chURL, Database: db}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	recs, err := st.Requests(t.Context(), store.Filter{Limit: 10 * n})
	if err != nil {
		t.Fatal(err)
	}
	var gotIn, gotOut int64
	for _, r := range recs {
		if r.Status != 200 {
			t.Errorf("row %s: status %d, want 200", r.RequestID, r.Status)
		}
		gotIn, gotOut = gotIn+r.Usage.InputTokens, gotOut+r.Usage.OutputTokens
	}
	if len(recs) != n || gotIn != wantIn || gotOut != wantOut {
		t.Errorf("ClickHouse holds %d rows, %d input and %d output tokens; the client was told %d requests, %d and %d", len(recs), gotIn, gotOut, n, wantIn, wantOut)
	}
	// The analytics side reads the same rows.
	rows, err := st.Report(t.Context(), store.ReportQuery{From: time.Now().Add(-time.Hour), To: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatalf("Report: %v", err)
	}
	var tot store.Totals
	for _, r := range rows {
		tot.Requests, tot.Input, tot.Output = tot.Requests+r.Requests, tot.Input+r.Input, tot.Output+r.Output
	}
	if tot.Requests != n || tot.Input != wantIn || tot.Output != wantOut {
		t.Errorf("Report: %d requests, %d input, %d output tokens; want %d, %d, %d", tot.Requests, tot.Input, tot.Output, n, wantIn, wantOut)
	}
	t.Logf("%d requests, %d input + %d output tokens, all in ClickHouse database %s", n, wantIn, wantOut, db)
}
