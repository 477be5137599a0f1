package web

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/report"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
	"github.com/tollgate-dev/tollgate/internal/store/storetest"
)

// TestDiagnose: /api/v1/diagnose answers what report.Diagnose computes on
// the same store and period.
func TestDiagnose(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "d.db"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	recs := storetest.Records(0, 40)
	for i, r := range recs {
		r.Stream = true
		r.Usage.InputTokens = int64(100 + 400*i)
	}
	if err := st.Insert(ctx, store.Batch{Records: recs}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(NewAPI(Options{Store: st, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }}))
	defer srv.Close()

	from, to := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC), time.Date(2025, 3, 17, 0, 0, 0, 0, time.UTC)
	code, b := get(t, srv.URL+"/api/v1/diagnose?from=2025-03-01T00:00:00Z&to=2025-03-17T00:00:00Z", "")
	if code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	var got struct{ Results []any }
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	results, err := report.Diagnose(ctx, st, from, to, store.Filter{}, diagnoseLimit)
	if err != nil {
		t.Fatal(err)
	}
	var want []any
	for _, res := range results {
		var buf bytes.Buffer
		if err := report.Render(&buf, res, "json"); err != nil {
			t.Fatal(err)
		}
		var v any
		if err := json.Unmarshal(buf.Bytes(), &v); err != nil {
			t.Fatal(err)
		}
		want = append(want, v)
	}
	if !reflect.DeepEqual(got.Results, want) {
		t.Errorf("API diagnose differs from report.Diagnose:\nAPI  %v\nwant %v", got.Results, want)
	}
	byInput := want[0].(map[string]any)["rows"].([]any)
	if len(byInput) < 2 {
		t.Errorf("the test data fills %d input-length buckets, want several: %v", len(byInput), byInput)
	}
	for _, bad := range []string{"?from=yesterday", "?limit=0", "?limit=100001"} {
		if code, b := get(t, srv.URL+"/api/v1/diagnose"+bad, ""); code != 400 {
			t.Errorf("%s: %d %s", bad, code, b)
		}
	}
}
