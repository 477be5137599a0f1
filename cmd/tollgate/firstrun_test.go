package main

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/sqlite"
	"github.com/tollgate-dev/tollgate/internal/store/storetest"
)

// TestRequestsNoMatch: a filter that matches no row says so, naming the
// filter; "no requests recorded yet" is kept for an empty ledger.
func TestRequestsNoMatch(t *testing.T) {
	dir := t.TempDir()
	full, empty := filepath.Join(dir, "full.db"), filepath.Join(dir, "empty.db")
	for _, db := range []string{full, empty} {
		st, err := sqlite.Open(context.Background(), db, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		if db == full {
			if err := st.Insert(context.Background(), store.Batch{Records: storetest.Records(0, 4)}); err != nil {
				t.Fatal(err)
			}
		}
		st.Close()
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"requests", "--db", full, "--user", "nobody"}, `no requests match --user "nobody"`},
		{[]string{"requests", "--errors", "--db", full, "--model", "none"}, `no requests match --errors --model "none"`},
		{[]string{"requests", "--db", empty}, "no requests recorded yet"},
	} {
		out, _, err := runCmd(t, tc.args...)
		if err != nil || strings.TrimSpace(out) != tc.want {
			t.Errorf("%q: err %v, output %q; want %q", tc.args, err, out, tc.want)
		}
	}
}
