package overhead

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/tollgate-dev/tollgate/internal/config"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func mockServer(t *testing.T, o MockOptions) (*Mock, *httptest.Server) {
	t.Helper()
	m := NewMock(o)
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	return m, srv
}

// Streams through the bare proxy arrive whole, and the mock's counts agree
// with what the driver read.
func TestStreamsThroughBareProxy(t *testing.T) {
	mo := MockOptions{Frames: 5, TTFT: time.Millisecond, ITL: time.Millisecond}
	m, up := mockServer(t, mo)
	h, err := BareProxy(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httptest.NewServer(h)
	t.Cleanup(proxy.Close)

	var seq atomic.Int64
	st := streamPhase(context.Background(), target{base: proxy.URL, tag: "A/1"}, 4, 100*time.Millisecond, mo, &seq)
	if st.ok == 0 || st.errs != 0 || st.framesLost != 0 {
		t.Fatalf("streams: ok %d, errors %d (%s), frames lost %d; want some, 0, 0", st.ok, st.errs, st.firstErr, st.framesLost)
	}
	if len(st.ttft) != st.ok || len(st.itl) != st.ok*(mo.Frames-1) {
		t.Errorf("%d TTFT and %d ITL samples for %d streams of %d frames", len(st.ttft), len(st.itl), st.ok, mo.Frames)
	}
	sent := m.Sent("A/1")
	want := Sent{Requests: int64(st.ok), Streams: int64(st.ok), Frames: int64(st.ok * mo.StreamEvents()),
		CompletionTokens: int64(st.ok * mo.Frames), PromptTokens: sent.PromptTokens}
	if diff := cmp.Diff(want, sent); diff != "" {
		t.Errorf("mock counts (-want +got):\n%s", diff)
	}
	if sent.PromptTokens <= 0 {
		t.Errorf("prompt tokens %d, want > 0", sent.PromptTokens)
	}
}

// A stream cut short is counted as frames lost, not as a clean stream.
func TestFramesLostCounted(t *testing.T) {
	mo := MockOptions{Frames: 8}
	cut := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for range 3 {
			_, _ = io.WriteString(w, frameContent)
		}
	}))
	t.Cleanup(cut.Close)
	c := newClient(1)
	defer c.CloseIdleConnections()
	o := readStream(context.Background(), c, target{base: cut.URL}, 1, mo)
	if o.err != nil || o.lost != mo.StreamEvents()-3 {
		t.Errorf("lost %d (err %v), want %d", o.lost, o.err, mo.StreamEvents()-3)
	}
}

// JSON at a fixed rate and at saturation: every request answered, and
// the mock counted exactly those.
func TestJSONPhases(t *testing.T) {
	m, up := mockServer(t, MockOptions{Frames: 2})
	var seq atomic.Int64
	l := fixedRate(context.Background(), target{base: up.URL, tag: "D/1"}, 200, 100*time.Millisecond, &seq)
	if l.sent != 20 || l.ok != 20 || l.errs+l.dropped != 0 || len(l.lat) != 20 {
		t.Fatalf("fixed rate: sent %d ok %d errors %d (%s) dropped %d; want 20 sent and answered", l.sent, l.ok, l.errs, l.firstErr, l.dropped)
	}
	s := saturate(context.Background(), target{base: up.URL, tag: "D/2"}, 3, 50*time.Millisecond, &seq)
	if s.ok == 0 || s.errs != 0 || s.sent != s.ok {
		t.Fatalf("saturation: sent %d ok %d errors %d (%s)", s.sent, s.ok, s.errs, s.firstErr)
	}
	if got := m.Sent("D/1"); got.Requests != 20 || got.CompletionTokens != 20*jsonCompletionTokens {
		t.Errorf("mock counted %+v under D/1, want 20 requests of %d tokens", got, jsonCompletionTokens)
	}
	if got := m.Sent("D/2").Requests; got != int64(s.ok) {
		t.Errorf("mock counted %d under D/2, want %d", got, s.ok)
	}
}

func TestMockUsageMatchesBody(t *testing.T) {
	got := jsonBody(12)
	if !strings.Contains(got, `"usage":{"prompt_tokens":12,"completion_tokens":32,"total_tokens":44}`) {
		t.Errorf("usage not filled in: %s", got)
	}
}

func TestBareProxyBadUpstream(t *testing.T) {
	_, err := BareProxy("127.0.0.1:8000")
	if err == nil || !strings.HasPrefix(err.Error(), "upstream: ") {
		t.Errorf("err = %v, want one naming upstream", err)
	}
}

func TestPct(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	for p, want := range map[float64]time.Duration{50: 5, 99: 10, 10: 1, 100: 10} {
		if got := pct(ds, p); got != want {
			t.Errorf("p%g = %d, want %d", p, got, want)
		}
	}
	if pct(nil, 50) != 0 {
		t.Error("p50 of nothing should be 0")
	}
}

func TestStat(t *testing.T) {
	if diff := cmp.Diff(Stat{Median: 2.5, Min: 1, Max: 4, N: 4}, stat([]float64{4, 1, 3, 2})); diff != "" {
		t.Error(diff)
	}
	if got := stat([]float64{3, 1, 2}).Median; got != 2 {
		t.Errorf("median %g, want 2", got)
	}
}

func TestProcReadings(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc: Linux only")
	}
	if _, err := cpuTime(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	rss, hwm, err := memory(os.Getpid())
	if err != nil || rss <= 0 || hwm < rss {
		t.Errorf("rss %d hwm %d err %v", rss, hwm, err)
	}
}

func TestOptionsNameTheFlag(t *testing.T) {
	o := Options{Exe: "x", Rounds: 0, Phase: time.Second, Rates: []float64{-1}, Workers: 1, Mock: MockOptions{Frames: 1}}
	err := o.validate()
	for _, want := range []string{"--rounds", "--rates", "--frames"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
}

func TestClickHouseURLChecked(t *testing.T) {
	o := Options{Exe: "x", Rounds: 1, Phase: time.Second, Rates: []float64{1}, Workers: 1, Mock: MockOptions{Frames: 2},
		ClickHouse: "ch.internal:8123"}
	err := o.validate()
	if err == nil || !strings.Contains(err.Error(), "--clickhouse") {
		t.Errorf("error %v does not name --clickhouse", err)
	}
	o.ClickHouse = "http://user:secret@ch.internal:8123"
	if err := o.validate(); err != nil {
		t.Errorf("a good URL refused: %v", err)
	}
	if got := settingsOf(o).ClickHouse; strings.Contains(got, "secret") {
		t.Errorf("the report's settings show the password: %s", got)
	}
	if got := o.arms(); strings.Join(got, " ") != "D A B B0 BC" {
		t.Errorf("arms %v, want BC added", got)
	}
}

// Each arm's generated configuration is one the config loader accepts,
// with the store it names.
func TestServeConfigsLoad(t *testing.T) {
	for _, tc := range []struct {
		name    string
		st      storeSection
		backend string
		dur     string
	}{
		{"B", storeSection{sqlite: "/tmp/B.db", accounting: true}, "sqlite", "queue"},
		{"B0", storeSection{sqlite: "/tmp/B0.db"}, "sqlite", "off"},
		{"BC", storeSection{sqlite: "/tmp/BC.db", accounting: true, clickhouse: "http://127.0.0.1:8123", database: "tollgate_overhead_1_1"}, "clickhouse", "queue"},
	} {
		cfg, err := config.Parse([]byte(serveConfig("127.0.0.1:1", "http://127.0.0.1:2/v1", tc.st)), func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if cfg.Store.Backend != tc.backend && !(tc.backend == "sqlite" && cfg.Store.Backend == "") || cfg.Store.Durability != tc.dur {
			t.Errorf("%s: backend %q durability %q; want %s, %s", tc.name, cfg.Store.Backend, cfg.Store.Durability, tc.backend, tc.dur)
		}
		if tc.name == "BC" && (cfg.Store.ClickHouse.URL != tc.st.clickhouse || cfg.Store.ClickHouse.Database != tc.st.database || cfg.QueueDir() != "/tmp/BC.db.queue") {
			t.Errorf("BC: clickhouse %+v, queue %s", cfg.Store.ClickHouse, cfg.QueueDir())
		}
	}
}
