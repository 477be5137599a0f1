// Package prometheus_test checks the Prometheus rules in this directory:
// promtool validates them and runs their unit tests (when promtool is
// installed; scripts/test.sh installs it), and every metric they use must
// be one that docs/metrics.md defines, so renaming a metric cannot leave
// the rules silently matching nothing.
package prometheus_test

import (
	"bufio"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const (
	rulesFile = "tollgate-rules.yml"
	testFile  = "tollgate-rules.test.yml"
	metricsMD = "../../docs/metrics.md"
)

func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed; scripts/test.sh installs Debian's prometheus package")
	}
	return p
}

func runPromtool(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
}

func TestPromtoolCheckRules(t *testing.T) {
	runPromtool(t, "check", "rules", rulesFile)
}

func TestPromtoolTestRules(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the promtool unit tests replay two days of samples (about a minute)")
	}
	runPromtool(t, "test", "rules", testFile)
}

// ruleFile is the part of a Prometheus rule file these tests read.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Record      string            `yaml:"record"`
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func loadRules(t *testing.T) []rule {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	var rules []rule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	if len(rules) == 0 {
		t.Fatalf("%s: no rules", rulesFile)
	}
	return rules
}

// documentedMetrics reads the metric table of docs/metrics.md: the
// backquoted names in its first column, with the type in the second.
// A name ending in * (tollgate_wal_*) stands for a family.
func documentedMetrics(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(metricsMD)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	name := regexp.MustCompile("`([a-z_:][a-z0-9_:]*\\*?)`")
	docs := map[string]string{}
	inSection := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			inSection = line == "## Prometheus metrics"
			continue
		}
		if !inSection || !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 3 {
			continue
		}
		typ := strings.TrimSpace(cells[2])
		for _, m := range name.FindAllStringSubmatch(cells[1], -1) {
			docs[m[1]] = typ
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(docs) < 10 {
		t.Fatalf("%s: found only %d metrics in the \"## Prometheus metrics\" table; has its layout changed?", metricsMD, len(docs))
	}
	return docs
}

var (
	stringLit  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	matchers   = regexp.MustCompile(`\{[^}]*\}`)
	grouping   = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	identifier = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	// level:metric:operation, as recorded series are named here.
	recordedName = regexp.MustCompile(`\b[a-z_]+:[a-z0-9_]+:[a-z0-9_]+\b`)
)

// exprNames returns the metric names an expression selects: tollgate's
// own (tollgate_*, gen_ai_*) and recorded ones (level:metric:operation).
// Label names and values are not names: strings, {…} matchers and
// by/on/… (…) label lists are removed first.
func exprNames(expr string) (metrics, recorded []string) {
	s := stringLit.ReplaceAllString(expr, `""`)
	s = matchers.ReplaceAllString(s, " ")
	s = grouping.ReplaceAllString(s, " ")
	for _, id := range identifier.FindAllString(s, -1) {
		switch {
		case strings.Contains(id, ":"):
			recorded = append(recorded, id)
		case strings.HasPrefix(id, "tollgate_"), strings.HasPrefix(id, "gen_ai_"):
			metrics = append(metrics, id)
		}
	}
	return metrics, recorded
}

// documented says whether a selected series name belongs to a metric in
// docs/metrics.md: the name itself, a histogram's _bucket/_sum/_count, or
// a member of a documented family.
func documented(docs map[string]string, name string) bool {
	if _, ok := docs[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && docs[base] == "histogram" {
			return true
		}
	}
	for doc := range docs {
		if prefix, ok := strings.CutSuffix(doc, "*"); ok && strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

func TestRulesUseDocumentedMetrics(t *testing.T) {
	docs := documentedMetrics(t)
	rules := loadRules(t)
	recordedHere := map[string]bool{}
	for _, r := range rules {
		if r.Record != "" {
			recordedHere[r.Record] = true
		}
	}
	used := map[string]bool{}
	for _, r := range rules {
		id := r.Record + r.Alert
		metrics, recorded := exprNames(r.Expr)
		for _, m := range metrics {
			used[m] = true
			if !documented(docs, m) {
				t.Errorf("%s uses %s, which docs/metrics.md does not define", id, m)
			}
		}
		// Annotations may query recorded series too ({{ … | query }}).
		for _, a := range r.Annotations {
			recorded = append(recorded, recordedName.FindAllString(a, -1)...)
		}
		for _, m := range recorded {
			if !recordedHere[m] {
				t.Errorf("%s uses %s, which no rule in %s records", id, m, rulesFile)
			}
		}
	}
	// Against a parser that silently finds nothing: these must be seen.
	for _, m := range []string{
		"gen_ai_server_time_to_first_token_seconds_bucket",
		"gen_ai_server_time_per_output_token_seconds_bucket",
		"gen_ai_server_request_duration_seconds_bucket",
		"tollgate_phase_seconds_bucket",
		"tollgate_requests_total",
		"tollgate_tokens_total",
		"gen_ai_client_token_usage_bucket",
	} {
		if !used[m] {
			t.Errorf("no rule selects %s; has the rules file or exprNames changed?", m)
		}
	}
	t.Logf("metrics used: %s", strings.Join(slices.Sorted(maps.Keys(used)), ", "))
}

func TestExprNames(t *testing.T) {
	docs := map[string]string{"tollgate_requests_total": "counter", "gen_ai_client_token_usage": "histogram", "tollgate_wal_*": "various"}
	metrics, recorded := exprNames(`sum by (model, gen_ai_token_type) (rate(gen_ai_client_token_usage_bucket{gen_ai_token_type="input", le=~"1(\\.0)?"}[5m]))
		/ on (model) model:tollgate_requests:ok_rate5m and tollgate_wal_fsyncs_total > 0 or tollgate_request_total offset 1d`)
	if want := []string{"gen_ai_client_token_usage_bucket", "tollgate_wal_fsyncs_total", "tollgate_request_total"}; !slices.Equal(metrics, want) {
		t.Errorf("metrics = %q, want %q", metrics, want)
	}
	if want := []string{"model:tollgate_requests:ok_rate5m"}; !slices.Equal(recorded, want) {
		t.Errorf("recorded = %q, want %q", recorded, want)
	}
	for name, want := range map[string]bool{
		"tollgate_requests_total":         true,
		"gen_ai_client_token_usage_count": true,
		"tollgate_wal_fsyncs_total":       true,
		"tollgate_request_total":          false, // a typo
		"tollgate_requests_total_count":   false, // not a histogram
	} {
		if got := documented(docs, name); got != want {
			t.Errorf("documented(%s) = %v, want %v", name, got, want)
		}
	}
}

// TestAlertsAreComplete holds every alert to the conventions: a severity
// of warning or critical, a summary and a description, an explicit for:,
// and unit tests that see it fire at each of its severities and see it
// stay silent.
func TestAlertsAreComplete(t *testing.T) {
	type key struct{ alert, severity string }
	alerts := map[key]bool{}
	for _, r := range loadRules(t) {
		if r.Alert == "" {
			continue
		}
		sev := r.Labels["severity"]
		if sev != "warning" && sev != "critical" {
			t.Errorf("%s: severity %q, want warning or critical", r.Alert, sev)
		}
		for _, a := range []string{"summary", "description"} {
			if strings.TrimSpace(r.Annotations[a]) == "" {
				t.Errorf("%s (%s): no %s annotation", r.Alert, sev, a)
			}
		}
		if r.For == "" {
			t.Errorf("%s (%s): no for: duration", r.Alert, sev)
		}
		alerts[key{r.Alert, sev}] = true
	}

	b, err := os.ReadFile(testFile)
	if err != nil {
		t.Fatal(err)
	}
	var tf struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []struct {
					ExpLabels map[string]string `yaml:"exp_labels"`
				} `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(b, &tf); err != nil {
		t.Fatalf("%s: %v", testFile, err)
	}
	if !slices.Contains(tf.RuleFiles, rulesFile) {
		t.Errorf("%s: rule_files %q does not name %s", testFile, tf.RuleFiles, filepath.Base(rulesFile))
	}
	fired := map[key]bool{}
	silent := map[string]bool{}
	for _, tc := range tf.Tests {
		for _, at := range tc.AlertRuleTest {
			if len(at.ExpAlerts) == 0 {
				silent[at.Alertname] = true
			}
			for _, e := range at.ExpAlerts {
				fired[key{at.Alertname, e.ExpLabels["severity"]}] = true
			}
		}
	}
	for k := range alerts {
		if !fired[k] {
			t.Errorf("%s: no test expects it to fire at severity %s", k.alert, k.severity)
		}
		if !silent[k.alert] {
			t.Errorf("%s: no test expects it to stay silent", k.alert)
		}
	}
	for k := range fired {
		if !alerts[k] {
			t.Errorf("%s: a test expects severity %q, which no rule has", k.alert, k.severity)
		}
	}
}
