package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	dto "github.com/prometheus/client_model/go"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/cost"
	"github.com/tollgate-dev/tollgate/internal/gateway"
	"github.com/tollgate-dev/tollgate/internal/sim"
)

// syncBuffer is a log sink several goroutines write to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

const reloadModel = "Qwen/Qwen3-8B"

func reloadYAML(db, upstream, output string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
store: {sqlite: {path: %s}}
upstreams:
  - {name: sim, url: %q, engine: vllm}
prices:
  - {model: %q, currency: USD, input: 1.00, output: %s}
`, db, upstream, reloadModel, output)
}

// priceVersion is the version the price table of yml gives the model.
func priceVersion(t *testing.T, yml string) string {
	t.Helper()
	cfg, err := config.Parse([]byte(yml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	tab, err := cost.NewTable(cfg.CostConfig())
	if err != nil {
		t.Fatal(err)
	}
	_, v, ok := tab.Lookup(reloadModel, "sim", time.Now())
	if !ok {
		t.Fatal("no price for the model")
	}
	return v
}

// streamOnce sends one streamed request and reads it to its end; it returns
// tollgate's request id and whether the stream ended whole ([DONE]).
// headers, when not nil, is closed once the response headers arrived
// (the request has arrived at the gateway by then).
func streamOnce(addr string, tokens int, headers chan<- struct{}) (id string, whole bool, err error) {
	body := `{"model":"` + reloadModel + `","messages":[{"role":"user","content":"hi"}],"stream":true}`
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set(sim.OutputTokensHeader, strconv.Itoa(tokens))
	resp, err := http.DefaultClient.Do(req)
	if headers != nil {
		close(headers)
	}
	if err != nil {
		return "", false, err
	}
	defer resp.Body.Close()
	id = resp.Header.Get(gateway.TollgateRequestIDHeader)
	rest, err := io.ReadAll(bufio.NewReader(resp.Body))
	return id, resp.StatusCode == 200 && strings.Contains(string(rest), "[DONE]"), err
}

// counterValue reads one series of a counter from a real scrape; 0 when
// it is not there yet.
func counterValue(t *testing.T, addr, name, labelName, labelValue string) float64 {
	t.Helper()
	return scrapeSeries(t, addr, name, labelName, labelValue).GetCounter().GetValue()
}

// scrapeSeries is the series of metric name with the label given, from a
// real scrape of /metrics; nil when there is none.
func scrapeSeries(t *testing.T, addr, name, labelName, labelValue string) *dto.Metric {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mfs[name].GetMetric() {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == labelName && lp.GetValue() == labelValue {
				return m
			}
		}
	}
	return nil
}

// TestReloadPricesUnderStreamingLoad is issue 22's reload test, through
// the real serve with the simulator and a SQLite ledger: prices are
// reloaded (POST /api/v1/admin/reload) while streams run. No stream is
// cut, no Record is lost, every request that arrived before the reload
// is rated with the old price version — those still streaming at the
// reload included — and every one after it with the new. Then a SIGHUP
// with an invalid file keeps the running prices, logs the field and
// counts an error.
func TestReloadPricesUnderStreamingLoad(t *testing.T) {
	up := startSimServer(t, sim.Config{DecodeBase: 2 * time.Millisecond, DecodePerSeq: time.Microsecond})
	dir := t.TempDir()
	db := filepath.Join(dir, "r.db")
	cfgPath := filepath.Join(dir, "tollgate.yml")
	v1YAML, v2YAML := reloadYAML(db, up, "2.00"), reloadYAML(db, up, "4.00")
	v1, v2 := priceVersion(t, v1YAML), priceVersion(t, v2YAML)
	if v1 == v2 {
		t.Fatal("the two price tables give one version")
	}
	if err := os.WriteFile(cfgPath, []byte(v1YAML), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(cfgPath, "", "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	hup := make(chan os.Signal, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- serveWith(ctx, cfg, slog.New(slog.NewTextHandler(logs, nil)), started, serveOptions{
			hup:  hup,
			load: func() (*config.Config, error) { return loadConfig(cfgPath, "", "", "", "") },
		})
	}()
	var addr string
	select {
	case addr = <-started:
	case err := <-done:
		t.Fatalf("serve: %v", err)
	}

	type result struct {
		id    string
		whole bool
		err   error
	}
	var (
		mu      sync.Mutex
		before  []result // arrived before the reload started
		after   []result // sent after the reload returned
		wg      sync.WaitGroup
		phase   = make(chan struct{}) // closed when the reload has returned
		stopped = make(chan struct{})
		afterN  = make(chan struct{}, 4096) // one per request in after
	)
	// Long streams in flight across the reload: their headers are in
	// before it starts, their last token comes after it.
	const long = 4
	longHeaders := make([]chan struct{}, long)
	for i := range long {
		longHeaders[i] = make(chan struct{})
		wg.Go(func() {
			id, whole, err := streamOnce(addr, 300, longHeaders[i])
			mu.Lock()
			before = append(before, result{id, whole, err})
			mu.Unlock()
		})
	}
	for _, h := range longHeaders {
		<-h
	}
	// Short streams around it, all the time.
	for range 3 {
		wg.Go(func() {
			for {
				select {
				case <-stopped:
					return
				default:
				}
				afterReload := false
				select {
				case <-phase:
					afterReload = true
				default:
				}
				id, whole, err := streamOnce(addr, 20, nil)
				if afterReload {
					mu.Lock()
					after = append(after, result{id, whole, err})
					mu.Unlock()
					afterN <- struct{}{}
				}
			}
		})
	}

	// The reload, by the admin API, while all of that runs.
	if err := os.WriteFile(cfgPath, []byte(v2YAML), 0o644); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post("http://"+addr+"/api/v1/admin/reload", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	rb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(rb), `"reloaded"`) {
		t.Fatalf("reload answered %d: %s", resp.StatusCode, rb)
	}
	close(phase)
	// Enough requests after it to see the new version.
	timeout := time.After(30 * time.Second)
	for range 6 {
		select {
		case <-afterN:
		case <-timeout:
			t.Fatal("fewer than 6 requests after the reload in 30 s")
		}
	}

	// An invalid file by SIGHUP: the running prices stay, the error is
	// logged with its field and counted.
	if err := os.WriteFile(cfgPath, []byte(reloadYAML(db, up, "-1")), 0o644); err != nil {
		t.Fatal(err)
	}
	hup <- syscall.SIGHUP
	for deadline := time.Now().Add(30 * time.Second); counterValue(t, addr, "tollgate_config_reload_total", "result", "error") < 1; {
		if time.Now().After(deadline) {
			t.Fatal("the invalid reload was never counted")
		}
		time.Sleep(10 * time.Millisecond) // polling a scrape, with a deadline
	}
	if ok := counterValue(t, addr, "tollgate_config_reload_total", "result", "ok"); ok != 1 {
		t.Errorf("reloads ok = %v, want 1", ok)
	}
	if l := logs.String(); !strings.Contains(l, "prices[0].output") || !strings.Contains(l, "running configuration is kept") {
		t.Errorf("the failed reload's log does not name the field:\n%s", l)
	}
	kept, whole, err := streamOnce(addr, 5, nil)
	if err != nil || !whole {
		t.Fatalf("request after the invalid reload: whole %v, err %v", whole, err)
	}

	close(stopped)
	wg.Wait()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	recs := allRequests(t, db)
	byID := map[string]string{}
	for _, r := range recs {
		if r.Status != 200 || r.ErrorType != "" {
			t.Errorf("request %s: status %d, error %q: a stream was cut", r.RequestID, r.Status, r.ErrorType)
		}
		byID[r.RequestID] = r.Cost.PriceVersion
	}
	check := func(what string, rs []result, want string) {
		for _, r := range rs {
			if r.err != nil || !r.whole {
				t.Errorf("%s request %s: whole %v, err %v", what, r.id, r.whole, r.err)
				continue
			}
			got, ok := byID[r.id]
			switch {
			case !ok:
				t.Errorf("%s request %s: no ledger row", what, r.id)
			case got != want:
				t.Errorf("%s request %s rated with %q, want %q", what, r.id, got, want)
			}
		}
	}
	if len(before) != long || len(after) < 6 {
		t.Fatalf("requests: %d before the reload, %d after", len(before), len(after))
	}
	check("before the reload", before, v1)
	check("after the reload", after, v2)
	check("after the invalid reload", []result{{id: kept, whole: true}}, v2)
}
