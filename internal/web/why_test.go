package web

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
	"github.com/tollgate-dev/tollgate/internal/why"
)

// TestWhy: /api/v1/why explains the last 15 minutes against the hour
// before from the ledger: a template whose input grew ten times is named,
// as rate; bad parameters are refused naming them.
func TestWhy(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "w.db"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var recs []*record.Record
	for i := range 300 {
		at := now.Add(-75 * time.Minute).Add(time.Duration(i) * 15 * time.Second)
		tmpl := []string{"chat-a", "chat-b"}[i%2]
		in := int64(300)
		if tmpl == "chat-a" && at.After(now.Add(-15*time.Minute)) {
			in = 3000
		}
		r := &record.Record{RequestID: fmt.Sprintf("w-%03d", i), Model: "m", TemplateID: tmpl, Arrival: at, Status: 200, Endpoint: "chat",
			Usage: record.Usage{InputTokens: in, OutputTokens: 50, Source: record.SourceEngine}}
		r.Marks.End = time.Second
		r.Finish()
		recs = append(recs, r)
	}
	if err := st.Insert(ctx, store.Batch{Records: recs}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(NewAPI(Options{Store: st, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }}))
	defer srv.Close()

	code, b := get(t, srv.URL+"/api/v1/why?since=15m&against=1h&figure=input_tokens_per_request", "")
	if code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	var rep why.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if e := rep.Explained; e == nil || e.Dim != why.DimTemplate || e.Value != "chat-a" || e.Main() != "rate" {
		t.Errorf("explained by %+v, want template chat-a (rate)", rep.Explained)
	}
	if rep.Requests != 60 || rep.RequestsBefore != 240 {
		t.Errorf("requests %d now, %d before; want 60 and 240", rep.Requests, rep.RequestsBefore)
	}
	for _, tc := range []struct{ query, code string }{
		{"since=15s", "bad_since"}, {"against=forever", "bad_against"}, {"figure=ttft_p42", "bad_figure"},
	} {
		code, b := get(t, srv.URL+"/api/v1/why?"+tc.query, "")
		if code != 400 || !strings.Contains(string(b), tc.code) {
			t.Errorf("%s: %d %s, want 400 %s", tc.query, code, b, tc.code)
		}
	}
}
