package loadgen

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"
)

// WriteTable prints the summary like vLLM's "Serving Benchmark Result":
// 50 columns, label left in 40, value after, mean/median/P99 per latency.
func WriteTable(w io.Writer, s *Summary) error {
	var b strings.Builder
	line := func(label string, v any) {
		var val string
		switch x := v.(type) {
		case float64:
			val = fmt.Sprintf("%.2f", x)
		default:
			val = fmt.Sprint(x)
		}
		fmt.Fprintf(&b, "%-40s %-10s\n", label, val)
	}
	section := func(title string) {
		pad := 50 - len(title)
		if pad < 0 {
			pad = 0
		}
		fmt.Fprintf(&b, "%s%s%s\n", strings.Repeat("-", pad/2), title, strings.Repeat("-", pad-pad/2))
	}
	b.WriteString("============ Serving Benchmark Result ============\n")
	line("Successful requests:", s.Completed)
	line("Failed requests:", s.Failed)
	if len(s.Errors) > 0 {
		kinds := make([]string, 0, len(s.Errors))
		for k := range s.Errors {
			kinds = append(kinds, k)
		}
		sort.Strings(kinds)
		for _, k := range kinds {
			line("  "+k+":", s.Errors[k])
		}
	}
	if s.Mode == "open" {
		line("Request rate configured (RPS):", s.RequestRate)
		line("Arrival process:", s.Arrival)
	}
	if s.MaxConcurrency > 0 {
		line("Maximum request concurrency:", s.MaxConcurrency)
	}
	line("Benchmark duration (s):", s.Duration)
	line("Total input tokens:", s.TotalInputTokens)
	line("Total generated tokens:", s.TotalOutputTokens)
	line("Generated tokens counted from:", s.OutputTokensFrom)
	line("Request throughput (req/s):", s.RequestThroughput)
	line("Output token throughput (tok/s):", s.OutputThroughput)
	line("Total Token throughput (tok/s):", s.TotalThroughput)
	for _, d := range []struct {
		title, short string
		d            Dist
	}{
		{"Time to First Token", "TTFT", s.TTFT},
		{"Time per Output Token (excl. 1st token)", "TPOT", s.TPOT},
		{"Inter-token Latency", "ITL", s.ITL},
		{"End-to-end Latency", "E2EL", s.E2EL},
	} {
		section(d.title)
		line("Mean "+d.short+" (ms):", d.d.Mean)
		line("Median "+d.short+" (ms):", d.d.Median)
		line("P99 "+d.short+" (ms):", d.d.P99)
	}
	if s.Mode == "open" {
		section("Send lag (client behind schedule)")
		line("Median send lag (ms):", s.SendLag.Median)
		line("Max send lag (ms):", s.SendLag.Max)
	}
	b.WriteString(strings.Repeat("=", 50) + "\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes the summary as indented JSON.
func WriteJSON(w io.Writer, s *Summary) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}

// Bar draws a one-line progress bar, redrawn in place with \r, at most
// every interval. It is for a terminal (or a user who asked for it).
type Bar struct {
	w        io.Writer
	total    int           // 0: unknown (a run bounded by time)
	duration time.Duration // shown when total is 0
	start    time.Time
	interval time.Duration

	mu           sync.Mutex
	done, failed int
	last         time.Time
}

// NewBar returns a bar for a run of total requests or, when total is 0,
// of duration.
func NewBar(w io.Writer, total int, duration time.Duration) *Bar {
	return &Bar{w: w, total: total, duration: duration, start: time.Now(), interval: 100 * time.Millisecond}
}

// Update is a Progress.
func (b *Bar) Update(done, failed int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done, b.failed = max(b.done, done), max(b.failed, failed)
	now := time.Now()
	if now.Sub(b.last) < b.interval && done != b.total {
		return
	}
	b.last = now
	b.draw(now)
}

// Finish draws the final state and ends the line.
func (b *Bar) Finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.draw(time.Now())
	fmt.Fprintln(b.w)
}

func (b *Bar) draw(now time.Time) {
	const width = 30
	elapsed := now.Sub(b.start)
	frac := 0.0
	switch {
	case b.total > 0:
		frac = float64(b.done) / float64(b.total)
	case b.duration > 0:
		frac = min(float64(elapsed)/float64(b.duration), 1)
	}
	fill := int(frac * width)
	count := fmt.Sprint(b.done)
	if b.total > 0 {
		count = fmt.Sprintf("%d/%d", b.done, b.total)
	}
	fmt.Fprintf(b.w, "\r[%s%s] %3.0f%% %s requests, %d failed, %.1fs ", strings.Repeat("=", fill), strings.Repeat(" ", width-fill),
		frac*100, count, b.failed, elapsed.Seconds())
}
