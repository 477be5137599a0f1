package clickhouse

import (
	"runtime"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/store"
	"github.com/tollgate-dev/tollgate/internal/store/storetest"
)

// A replayed batch that is mostly stored costs memory for the rows it
// writes, not for the whole batch: here one new row of ~64 KB ahead of
// 2,000 stored ones (a buffer sized from the batch once reserved ~160 MB;
// the body is streamed now).
func TestInsertBufferSizedFromNewRows(t *testing.T) {
	s := openTest(t)
	recs := storetest.Records(0, 2000)
	if err := s.Insert(t.Context(), store.Batch{Records: recs}); err != nil {
		t.Fatal(err)
	}
	big := storetest.Record(5000)
	big.ErrorMessage = strings.Repeat("x", 64<<10)
	big.Finish()
	batch := append([]*record.Record{big}, recs...)

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := s.Insert(t.Context(), store.Batch{Records: batch}); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if mb := float64(after.TotalAlloc-before.TotalAlloc) / (1 << 20); mb > 32 {
		t.Errorf("inserting 1 new row of 64 KB with 2,000 stored ones allocated %.0f MB, want under 32", mb)
	}
	n := selectRowBinary(t, s, "SELECT count() FROM "+quoteIdent(s.db)+".requests", (*dec).u64)
	if len(n) != 1 || n[0] != 2001 {
		t.Errorf("rows = %v, want 2001", n)
	}
}
