package overhead

import (
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Report is a run's outcome: the machine, the settings, every round, and
// the summary across rounds.
type Report struct {
	Machine  Machine  `json:"machine"`
	Settings Settings `json:"settings"`

	// The headline figures: medians across rounds (see Metrics for the
	// min–max). The JSON latencies are at the first of Settings.Rates.
	CPURatioBOverA    float64 `json:"cpu_ratio_b_over_a"`    // CPU per request at saturation, B / A
	RPSRatioBOverA    float64 `json:"rps_ratio_b_over_a"`    // requests/s at saturation, B / A
	AddedP50MsBOverA  float64 `json:"added_p50_ms_b_over_a"` // JSON p50, B − A
	AddedRatioP50     float64 `json:"added_ratio_p50"`       // (B − D) / (A − D) at p50
	AddedRatioP99     float64 `json:"added_ratio_p99"`       // (B − D) / (A − D) at p99
	SSEAddedTTFTP50Ms float64 `json:"sse_added_ttft_p50_ms"` // B − D, the worst concurrency's
	RowsLost          int64   `json:"rows_lost"`             // over all rounds
	FramesLost        int     `json:"frames_lost"`           // B's, over all rounds
	FramesLostAll     int     `json:"frames_lost_all_arms"`
	TokensMatch       bool    `json:"tokens_match"`
	RequestErrors     int     `json:"request_errors"` // failed or dropped requests, all arms and rounds

	Targets []Target        `json:"targets"`
	Metrics map[string]Stat `json:"metrics"`
	Rounds  []*Round        `json:"rounds"`
}

// Machine describes where the run happened.
type Machine struct {
	CPUs         int    `json:"nproc"`
	CPUModel     string `json:"cpu_model"`
	Kernel       string `json:"kernel"`
	Go           string `json:"go"`
	LoadAvgStart string `json:"loadavg_start"`
	LoadAvgEnd   string `json:"loadavg_end"`
	Pinning      string `json:"pinning"`
	Started      string `json:"started"`
	Nginx        string `json:"nginx"`
}

// Settings are the run's options as reported.
type Settings struct {
	Rounds  int       `json:"rounds"`
	Phase   string    `json:"phase"`
	Warmup  string    `json:"warmup"`
	Rates   []float64 `json:"rates"`
	Workers int       `json:"workers"`
	SSE     []int     `json:"sse_concurrency"`
	Frames  int       `json:"frames"`
	TTFT    string    `json:"mock_ttft"`
	ITL     string    `json:"mock_itl"`
	Seed    uint64    `json:"seed"`
	// ClickHouse is arm BC's server (password hidden); "" when BC did not run.
	ClickHouse string `json:"clickhouse,omitempty"`
}

// Stat is one metric across rounds.
type Stat struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	N      int     `json:"n"`
}

// Target is one of issue 8's targets against the measured median.
type Target struct {
	Name  string  `json:"name"`
	Limit string  `json:"limit"`
	Value float64 `json:"value"`
	Met   bool    `json:"met"`
}

func settingsOf(o Options) Settings {
	return Settings{Rounds: o.Rounds, Phase: o.Phase.String(), Warmup: o.Warmup.String(), Rates: o.Rates, Workers: o.Workers, SSE: o.SSE,
		Frames: o.Mock.Frames, TTFT: o.Mock.TTFT.String(), ITL: o.Mock.ITL.String(), Seed: o.Seed, ClickHouse: redactURL(o.ClickHouse)}
}

func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version(), LoadAvgStart: loadavg(), Started: time.Now().UTC().Format(time.RFC3339),
		Nginx: "not run (optional floor arm not built)"}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// summarise derives each round's comparisons, then their medians and
// ranges across rounds.
func (rep *Report) summarise() {
	per := map[string][]float64{}
	add := func(name string, v float64) {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			per[name] = append(per[name], v)
		}
	}
	ratio := func(num, den float64) float64 {
		if den <= 0 {
			return math.NaN() // the bare proxy added nothing measurable: no ratio
		}
		return num / den
	}
	rep.TokensMatch = len(rep.Rounds) > 0
	for _, rd := range rep.Rounds {
		d, a, b := rd.Arms["D"], rd.Arms["A"], rd.Arms["B"]
		for arm, ar := range rd.Arms {
			for i, j := range ar.JSON {
				k := fmt.Sprintf("json_%grps_", j.Rate)
				add(k+"p50_ms_"+arm, j.P50)
				add(k+"p99_ms_"+arm, j.P99)
				if arm != "D" {
					add(k+"added_p50_ms_"+arm, j.P50-d.JSON[i].P50)
					add(k+"added_p99_ms_"+arm, j.P99-d.JSON[i].P99)
					add(k+"cpu_us_per_req_"+arm, j.CPUPerReq)
				}
				rep.RequestErrors += j.Errors + j.Dropped
			}
			add("sat_rps_"+arm, ar.Saturation.RPS)
			add("sat_p50_ms_"+arm, ar.Saturation.P50)
			rep.RequestErrors += ar.Saturation.Errors
			if arm != "D" {
				add("sat_cpu_us_per_req_"+arm, ar.Saturation.CPUPerReq)
			}
			for i, s := range ar.SSE {
				k := fmt.Sprintf("sse%d_", s.Conc)
				add(k+"ttft_p50_ms_"+arm, s.TTFTP50)
				add(k+"itl_p50_ms_"+arm, s.ITLP50)
				add(k+"itl_p99_ms_"+arm, s.ITLP99)
				add(k+"frames_lost_"+arm, float64(s.FramesLost))
				add(k+"streams_"+arm, float64(s.OK))
				if arm != "D" {
					ds := d.SSE[i]
					add(k+"added_ttft_p50_ms_"+arm, s.TTFTP50-ds.TTFTP50)
					add(k+"added_ttft_p99_ms_"+arm, s.TTFTP99-ds.TTFTP99)
					add(k+"added_itl_p50_ms_"+arm, s.ITLP50-ds.ITLP50)
					add(k+"added_itl_p99_ms_"+arm, s.ITLP99-ds.ITLP99)
					add(k+"cpu_us_per_stream_"+arm, s.CPUPerReq)
				}
				rep.FramesLostAll += s.FramesLost
				if arm == "B" {
					rep.FramesLost += s.FramesLost
				}
				rep.RequestErrors += s.Errors
			}
			add("sut_cpu_others_pct_"+arm, ar.othersMean())
			if m := ar.Memory; m != nil {
				add("mem_idle_mib_"+arm, m.Idle)
				add("mem_load_mib_"+arm, m.Load)
				add("mem_after_mib_"+arm, m.After)
			}
		}
		for i, j := range b.JSON {
			k := fmt.Sprintf("json_%grps_", j.Rate)
			add(k+"added_ratio_p50", ratio(j.P50-d.JSON[i].P50, a.JSON[i].P50-d.JSON[i].P50))
			add(k+"added_ratio_p99", ratio(j.P99-d.JSON[i].P99, a.JSON[i].P99-d.JSON[i].P99))
			add(k+"added_p50_ms_b_over_a", j.P50-a.JSON[i].P50)
		}
		add("cpu_ratio_b_over_a", ratio(b.Saturation.CPUPerReq, a.Saturation.CPUPerReq))
		add("cpu_ratio_b0_over_a", ratio(rd.Arms["B0"].Saturation.CPUPerReq, a.Saturation.CPUPerReq))
		add("rps_ratio_b_over_a", ratio(b.Saturation.RPS, a.Saturation.RPS))
		add("rps_ratio_b0_over_a", ratio(rd.Arms["B0"].Saturation.RPS, a.Saturation.RPS))
		rep.RowsLost += rd.Integrity.RowsLost
		if !rd.Integrity.TokensMatch {
			rep.TokensMatch = false
		}
		add("ledger_rows", float64(rd.Integrity.LedgerRows))
		if bc := rd.Arms["BC"]; bc != nil {
			// The two stores side by side, in the same round.
			add("cpu_ratio_bc_over_a", ratio(bc.Saturation.CPUPerReq, a.Saturation.CPUPerReq))
			add("cpu_ratio_bc_over_b", ratio(bc.Saturation.CPUPerReq, b.Saturation.CPUPerReq))
			add("rps_ratio_bc_over_a", ratio(bc.Saturation.RPS, a.Saturation.RPS))
			add("rps_ratio_bc_over_b", ratio(bc.Saturation.RPS, b.Saturation.RPS))
			for i, j := range bc.JSON {
				add(fmt.Sprintf("json_%grps_cpu_ratio_bc_over_b", j.Rate), ratio(j.CPUPerReq, b.JSON[i].CPUPerReq))
			}
		}
		if in := rd.Integrity.BC; in != nil {
			rep.RowsLost += in.RowsLost
			if !in.TokensMatch {
				rep.TokensMatch = false
			}
			add("ledger_rows_bc", float64(in.LedgerRows))
		}
	}
	rep.Metrics = map[string]Stat{}
	for name, vs := range per {
		rep.Metrics[name] = stat(vs)
	}
	med := func(name string) float64 { return rep.Metrics[name].Median }
	first := fmt.Sprintf("json_%grps_", rep.Settings.Rates[0])
	rep.CPURatioBOverA = med("cpu_ratio_b_over_a")
	rep.RPSRatioBOverA = med("rps_ratio_b_over_a")
	rep.AddedP50MsBOverA = med(first + "added_p50_ms_b_over_a")
	rep.AddedRatioP50 = med(first + "added_ratio_p50")
	rep.AddedRatioP99 = med(first + "added_ratio_p99")
	for _, c := range rep.Settings.SSE {
		rep.SSEAddedTTFTP50Ms = max(rep.SSEAddedTTFTP50Ms, med(fmt.Sprintf("sse%d_added_ttft_p50_ms_B", c)))
	}
	rep.Targets = []Target{
		{Name: "CPU per request, B / A", Limit: "≤ 1.3", Value: rep.CPURatioBOverA, Met: rep.CPURatioBOverA <= 1.3},
		{Name: "saturation requests/s, B / A", Limit: "≥ 0.8", Value: rep.RPSRatioBOverA, Met: rep.RPSRatioBOverA >= 0.8},
		{Name: "added latency p50 over A, ms (" + strings.TrimSuffix(first, "_") + ")", Limit: "≤ 0.3", Value: rep.AddedP50MsBOverA, Met: rep.AddedP50MsBOverA <= 0.3},
		{Name: "SSE added TTFT p50 over D, ms (worst concurrency)", Limit: "≤ 1", Value: rep.SSEAddedTTFTP50Ms, Met: rep.SSEAddedTTFTP50Ms <= 1},
		{Name: "frames lost (B)", Limit: "0", Value: float64(rep.FramesLost), Met: rep.FramesLost == 0},
		{Name: "ledger rows lost", Limit: "0", Value: float64(rep.RowsLost), Met: rep.RowsLost == 0 && rep.TokensMatch},
	}
}

// othersMean is the mean share of the arms' CPU other processes used
// over the arm's scenarios.
func (ar *ArmResult) othersMean() float64 {
	sum, n := ar.Saturation.Others, 1
	for _, j := range ar.JSON {
		sum += j.Others
		n++
	}
	for _, s := range ar.SSE {
		sum += s.Others
		n++
	}
	return sum / float64(n)
}

func stat(vs []float64) Stat {
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	m := s[n/2]
	if n%2 == 0 {
		m = (s[n/2-1] + s[n/2]) / 2
	}
	return Stat{Median: m, Min: s[0], Max: s[n-1], N: n}
}

// WriteText prints the report for people: the machine, the comparisons
// per scenario, the targets.
func (rep *Report) WriteText(w io.Writer) {
	m := rep.Machine
	fmt.Fprintf(w, "tollgate bench overhead — %d round(s), %s per scenario, started %s\n", rep.Settings.Rounds, rep.Settings.Phase, m.Started)
	fmt.Fprintf(w, "machine: nproc %d, %s, kernel %s, %s; load average %s at start, %s at end\n", m.CPUs, m.CPUModel, m.Kernel, m.Go, m.LoadAvgStart, m.LoadAvgEnd)
	fmt.Fprintf(w, "pinning: %s; nginx: %s\n", m.Pinning, m.Nginx)
	fmt.Fprintf(w, "mock: %d frames per stream, TTFT %s, ITL %s; saturation with %d closed loops\n\n", rep.Settings.Frames, rep.Settings.TTFT, rep.Settings.ITL, rep.Settings.Workers)

	cell := func(name string) string {
		s, ok := rep.Metrics[name]
		if !ok {
			return "—"
		}
		if rep.Settings.Rounds == 1 {
			return fmtNum(s.Median)
		}
		return fmt.Sprintf("%s [%s–%s]", fmtNum(s.Median), fmtNum(s.Min), fmtNum(s.Max))
	}
	row := func(label, prefix string, arms []string) {
		fmt.Fprintf(w, "  %-34s", label)
		for _, a := range arms {
			fmt.Fprintf(w, " %-24s", cell(prefix+a))
		}
		fmt.Fprintln(w)
	}
	arms := []string{"D", "A", "B", "B0"}
	fmt.Fprintf(w, "  %-34s %-24s %-24s %-24s %-24s", "median [min–max] across rounds", "D direct", "A bare proxy", "B tollgate", "B0 no ledger")
	if _, ok := rep.Metrics["sat_rps_BC"]; ok {
		arms = append(arms, "BC")
		fmt.Fprintf(w, " %-24s", "BC tollgate, ClickHouse")
	}
	fmt.Fprintln(w)
	for _, r := range rep.Settings.Rates {
		k := fmt.Sprintf("json_%grps_", r)
		row(fmt.Sprintf("JSON %g/s p50 ms", r), k+"p50_ms_", arms)
		row(fmt.Sprintf("JSON %g/s p99 ms", r), k+"p99_ms_", arms)
		row(fmt.Sprintf("JSON %g/s added p50 ms (− D)", r), k+"added_p50_ms_", arms)
		row(fmt.Sprintf("JSON %g/s added p99 ms (− D)", r), k+"added_p99_ms_", arms)
		row(fmt.Sprintf("JSON %g/s CPU µs/request", r), k+"cpu_us_per_req_", arms)
	}
	row("saturation requests/s", "sat_rps_", arms)
	row("saturation CPU µs/request", "sat_cpu_us_per_req_", arms)
	for _, c := range rep.Settings.SSE {
		k := fmt.Sprintf("sse%d_", c)
		row(fmt.Sprintf("SSE ×%d TTFT p50 ms", c), k+"ttft_p50_ms_", arms)
		row(fmt.Sprintf("SSE ×%d added TTFT p50 ms", c), k+"added_ttft_p50_ms_", arms)
		row(fmt.Sprintf("SSE ×%d added ITL p50 / p99 ms", c), k+"added_itl_p50_ms_", arms)
		row("", k+"added_itl_p99_ms_", arms)
		row(fmt.Sprintf("SSE ×%d frames lost", c), k+"frames_lost_", arms)
		row(fmt.Sprintf("SSE ×%d CPU µs/stream", c), k+"cpu_us_per_stream_", arms)
	}
	row("others' use of the arms' CPU, %", "sut_cpu_others_pct_", arms)
	row("RSS idle MiB", "mem_idle_mib_", arms)
	row("RSS under load MiB", "mem_load_mib_", arms)
	row("RSS after MiB", "mem_after_mib_", arms)

	fmt.Fprintln(w, "\n  comparisons")
	names := slices.Sorted(maps.Keys(rep.Metrics))
	for _, n := range names {
		if strings.Contains(n, "ratio") || strings.HasSuffix(n, "b_over_a") {
			fmt.Fprintf(w, "  %-40s %s\n", n, cell(n))
		}
	}
	fmt.Fprintf(w, "\n  integrity: rows lost %d, tokens match %v; frames lost B %d, all arms %d; failed or dropped requests %d\n",
		rep.RowsLost, rep.TokensMatch, rep.FramesLost, rep.FramesLostAll, rep.RequestErrors)
	fmt.Fprintln(w, "\n  targets (medians)")
	for _, t := range rep.Targets {
		verdict := "met"
		if !t.Met {
			verdict = "MISSED"
		}
		fmt.Fprintf(w, "  %-52s %-6s %-10s %s\n", t.Name, t.Limit, fmtNum(t.Value), verdict)
	}
}

func fmtNum(v float64) string {
	switch a := math.Abs(v); {
	case a == 0:
		return "0"
	case a >= 1000:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 0.1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}
