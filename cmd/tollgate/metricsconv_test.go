package main

import (
	"bufio"
	"errors"
	"io"
	"math"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/cost"
	"github.com/tollgate-dev/tollgate/internal/sim"
)

// scrapeAs fetches /metrics with accept and returns the body and its
// Content-Type.
func scrapeAs(t *testing.T, addr, accept string) ([]byte, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
	req.Header.Set("Accept", accept)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b, resp.Header.Get("Content-Type")
}

// omExemplar is an OpenMetrics exemplar: "# {labels} value [timestamp]"
// after a sample.
var omExemplar = regexp.MustCompile(` # \{([^}]*)\} \S+( \S+)?$`)

// parseOpenMetrics parses an OpenMetrics exposition with expfmt's text
// parser, which reads OpenMetrics 1.0 but not its exemplars: those are
// taken off each line first and returned by metric name (with their
// labels' text).
func parseOpenMetrics(t *testing.T, b []byte) (map[string]*dto.MetricFamily, map[string][]string) {
	t.Helper()
	var plain strings.Builder
	exemplars := map[string][]string{}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	sawEOF := false
	for sc.Scan() {
		line := sc.Text()
		if line == "# EOF" {
			sawEOF = true
			continue
		}
		if !ours(line) {
			continue
		}
		if m := omExemplar.FindStringSubmatchIndex(line); m != nil && !strings.HasPrefix(line, "#") {
			name := line[:strings.IndexAny(line, "{ ")]
			exemplars[name] = append(exemplars[name], line[m[2]:m[3]])
			line = line[:m[0]]
		}
		plain.WriteString(line + "\n")
	}
	if !sawEOF {
		t.Fatal("the OpenMetrics exposition does not end with # EOF")
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(plain.String()))
	if err != nil {
		t.Fatalf("parse the OpenMetrics scrape: %v", err)
	}
	return mfs, exemplars
}

// ours says whether an exposition line is of the families under test
// (the GenAI ones and the cost counter): the process and Go collectors'
// OpenMetrics counters are not text-format families expfmt can read.
func ours(line string) bool {
	f := strings.Fields(line)
	name := line
	if strings.HasPrefix(line, "#") && len(f) >= 3 {
		name = f[2]
	}
	return strings.HasPrefix(name, "gen_ai_") || strings.HasPrefix(name, "tollgate_cost")
}

// labelsOf is a metric's labels as a map.
func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, lp := range m.GetLabel() {
		out[lp.GetName()] = lp.GetValue()
	}
	return out
}

// TestMetricsConventionsAfterRatedTraffic scrapes the real serve after
// rated traffic through the simulator: the gen_ai_* metrics carry the
// GenAI conventions' labels beside tollgate's own, tollgate_cost_total
// adds up to the ledger's cost, and the latency histograms carry
// exemplars with the request and trace ids, in the OpenMetrics
// exposition (and the protobuf one, whose exemplars expfmt decodes).
func TestMetricsConventionsAfterRatedTraffic(t *testing.T) {
	up := startSimServer(t, sim.Config{DecodeBase: 1})
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.Store.SQLite.Path = filepath.Join(t.TempDir(), "m.db")
	cfg.Upstreams = []config.Upstream{{Name: "sim", URL: up, Engine: "vllm"}}
	in, out := cost.MustDecimal("1.50"), cost.MustDecimal("6.00")
	cfg.Prices = []cost.Price{{Model: reloadModel, Currency: "USD", Input: &in, Output: &out}}
	addr, cancel, wait := startServe(t, cfg)

	ids := map[string]bool{}
	for i := range 3 {
		id, whole, err := streamOnce(addr, 10+i, nil)
		if err != nil || !whole {
			t.Fatalf("stream %d: whole %v, err %v", i, whole, err)
		}
		ids[id] = true
	}

	// OpenMetrics: labels, cost and exemplars.
	body, ctype := scrapeAs(t, addr, "application/openmetrics-text; version=1.0.0; charset=utf-8")
	if !strings.HasPrefix(ctype, "application/openmetrics-text") {
		t.Fatalf("Content-Type %q: /metrics does not speak OpenMetrics", ctype)
	}
	mfs, exemplars := parseOpenMetrics(t, body)
	for _, name := range []string{"gen_ai_server_request_duration_seconds", "gen_ai_server_time_to_first_token_seconds",
		"gen_ai_server_time_per_output_token_seconds", "gen_ai_client_token_usage"} {
		mf := mfs[name]
		if mf == nil || len(mf.GetMetric()) == 0 {
			t.Errorf("%s: not in the scrape", name)
			continue
		}
		l := labelsOf(mf.GetMetric()[0])
		for k, want := range map[string]string{"gen_ai_operation_name": "chat", "gen_ai_provider_name": "vllm",
			"gen_ai_request_model": reloadModel, "gen_ai_response_model": reloadModel, "model": reloadModel, "upstream": "sim", "biz_line": "none"} {
			if l[k] != want {
				t.Errorf("%s: label %s = %q, want %q (labels %v)", name, k, l[k], want, l)
			}
		}
	}
	for _, name := range []string{"gen_ai_server_request_duration_seconds_bucket", "gen_ai_server_time_to_first_token_seconds_bucket"} {
		ex := exemplars[name]
		found := false
		for _, e := range ex {
			m := regexp.MustCompile(`request_id="([^"]+)"`).FindStringSubmatch(e)
			found = found || (m != nil && ids[m[1]] && regexp.MustCompile(`trace_id="[0-9a-f]{32}"`).MatchString(e))
		}
		if !found {
			t.Errorf("%s: no exemplar with a request id of the traffic and a trace id; exemplars: %q", name, ex)
		}
	}

	// The cost counter against the ledger (after shutdown, every row is in).
	var costUSD float64
	// OpenMetrics names the family tollgate_cost and its sample
	// tollgate_cost_total, which the text parser reads as a family of its own.
	for _, name := range []string{"tollgate_cost", "tollgate_cost_total"} {
		for _, m := range mfs[name].GetMetric() {
			l := labelsOf(m)
			if l["currency"] != "USD" || l["model"] != reloadModel || l["biz_line"] != "none" {
				t.Errorf("tollgate_cost_total labels %v", l)
			}
			costUSD += m.GetCounter().GetValue() + m.GetUntyped().GetValue()
		}
	}

	// Protobuf: the exemplars decoded by expfmt.
	pb, _ := scrapeAs(t, addr, string(expfmt.NewFormat(expfmt.TypeProtoDelim)))
	dec := expfmt.NewDecoder(strings.NewReader(string(pb)), expfmt.NewFormat(expfmt.TypeProtoDelim))
	withExemplar := 0
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if mf.GetName() != "gen_ai_server_request_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, b := range m.GetHistogram().GetBucket() {
				if e := b.GetExemplar(); e != nil {
					l := map[string]string{}
					for _, lp := range e.GetLabel() {
						l[lp.GetName()] = lp.GetValue()
					}
					if !ids[l["request_id"]] || len(l["trace_id"]) != 32 {
						t.Errorf("exemplar %v: not a request of the traffic", l)
					}
					withExemplar++
				}
			}
		}
	}
	if withExemplar == 0 {
		t.Error("no exemplar on the request duration histogram in the protobuf exposition")
	}

	cancel()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	var nanos int64
	for _, r := range allRequests(t, cfg.Store.SQLite.Path) {
		nanos += r.Cost.Nanos
	}
	if nanos == 0 {
		t.Fatal("the traffic was not rated")
	}
	if want := float64(nanos) / 1e9; math.Abs(costUSD-want) > 1e-9 {
		t.Errorf("tollgate_cost_total = %v USD, the ledger says %v", costUSD, want)
	}
}
