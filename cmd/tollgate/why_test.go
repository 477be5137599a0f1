package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
)

// TestWhyAndEventsCommands: `tollgate why` names the template whose
// system prompt grew in the last 15 minutes, with the change; `tollgate
// events --kind prompt` lists the stored prompt events.
func TestWhyAndEventsCommands(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "why.db")
	st, err := sqlite.Open(ctx, db, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	var recs []*record.Record
	for i := range 600 {
		at := now.Add(-75 * time.Minute).Add(time.Duration(i) * 7500 * time.Millisecond)
		tmpl := []string{"chat-a", "chat-b"}[i%2]
		sys, fp := int64(200), "aa"
		if tmpl == "chat-a" && at.After(now.Add(-15*time.Minute)) {
			sys, fp = 3000, "bb"
		}
		r := &record.Record{RequestID: fmt.Sprintf("w-%03d", i), Model: "m", TemplateID: tmpl, UserID: "search-bot", KeyID: "k1", Arrival: at,
			Status: 200, Endpoint: "chat", SystemSHA256: strings.Repeat(fp, 32), SystemTokens: sys,
			Usage: record.Usage{InputTokens: sys + 50, OutputTokens: 50, Source: record.SourceEngine}}
		r.Marks.End = time.Second
		r.Finish()
		recs = append(recs, r)
	}
	if err := st.Insert(ctx, store.Batch{Records: recs}); err != nil {
		t.Fatal(err)
	}
	if err := st.AddEvents(ctx, []store.Event{{At: now.Add(-14 * time.Minute), Kind: "prompt", Subject: "template chat-a", Message: "system prompt changed"}}); err != nil {
		t.Fatal(err)
	}
	st.Close()

	out, stderr, err := runCmd(t, "why", "--db", db, "--since", "15m", "--against", "1h")
	if err != nil {
		t.Fatalf("why: %v\n%s", err, stderr)
	}
	for _, want := range []string{"input_tokens_per_request went from", "template chat-a explains", "system prompt changed at", "(200 → 3,000 tokens, fingerprint aaaa… → bbbb…), sent by key search-bot"} {
		if !strings.Contains(out, want) {
			t.Errorf("why output lacks %q:\n%s", want, out)
		}
	}
	if _, stderr, err := runCmd(t, "why", "--db", db, "--figure", "ttft_p42"); err == nil || !strings.Contains(stderr, `--figure "ttft_p42"`) {
		t.Errorf("a bad figure: err %v, stderr %q", err, stderr)
	}
	out, _, err = runCmd(t, "events", "--db", db, "--kind", "prompt")
	if err != nil || !strings.Contains(out, "template chat-a") || !strings.Contains(out, "system prompt changed") {
		t.Errorf("events: %v\n%s", err, out)
	}
}
