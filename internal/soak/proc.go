package soak

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"

	_ "modernc.org/sqlite" // the ledger's driver, to count its rows
)

// rss is the process's resident set in KiB (VmRSS).
func rss(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS line", pid)
}

// scrapeGauges reads the unlabelled samples named from a Prometheus text
// exposition, in the order asked; a missing one is an error.
func scrapeGauges(ctx context.Context, c *http.Client, url string, names ...string) ([]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return parseGauges(bufio.NewScanner(resp.Body), names)
}

func parseGauges(sc *bufio.Scanner, names []string) ([]float64, error) {
	out := make([]float64, len(names))
	found := make([]bool, len(names))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		for i, n := range names {
			if name == n {
				v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
				if err != nil {
					return nil, fmt.Errorf("metric %s: %q is not a number", n, val)
				}
				out[i], found[i] = v, true
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for i, n := range names {
		if !found[i] {
			return nil, fmt.Errorf("metric %s not exposed", n)
		}
	}
	return out, nil
}

// ledgerRows counts the rows of the SQLite ledger at path.
func ledgerRows(ctx context.Context, path string) (int64, error) {
	db, err := sql.Open("sqlite", path+"?_query_only=1")
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var n int64
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM requests").Scan(&n); err != nil {
		return 0, fmt.Errorf("count the ledger's rows in %s: %w", path, err)
	}
	return n, nil
}

// loadavg is the first three fields of /proc/loadavg, "" when unreadable.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
