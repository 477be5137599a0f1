package web

import (
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestQueryParser(t *testing.T) {
	cases := []struct {
		query   string
		wantErr string
		limit   int
	}{
		{"limit=5&since=2026-01-02", "", 5},
		{"", "", 0},
		{"limit=0", `limit: want how many, an integer from 1 to 100, got "0"`, 0},
		{"limit=101", `limit: want how many, an integer from 1 to 100, got "101"`, 0},
		{"limit=x", `limit: want how many, an integer from 1 to 100, got "x"`, 0},
		{"since=yesterday-ish&limit=0", "since: ", 0}, // the first error is kept
	}
	for _, tc := range cases {
		q, err := url.ParseQuery(tc.query)
		if err != nil {
			t.Fatal(err)
		}
		p := queryParser{q: q, loc: time.UTC}
		var since time.Time
		var limit int
		p.time("since", &since)
		p.limit(&limit, 100)
		switch {
		case tc.wantErr == "" && p.err != nil:
			t.Errorf("%q: %v", tc.query, p.err)
		case tc.wantErr != "" && (p.err == nil || !strings.HasPrefix(p.err.Error(), tc.wantErr)):
			t.Errorf("%q: error %v; want it to start %q", tc.query, p.err, tc.wantErr)
		}
		if tc.wantErr == "" && limit != tc.limit {
			t.Errorf("%q: limit %d, want %d", tc.query, limit, tc.limit)
		}
		if tc.query == "limit=5&since=2026-01-02" && !since.Equal(time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)) {
			t.Errorf("since %v", since)
		}
	}
}
