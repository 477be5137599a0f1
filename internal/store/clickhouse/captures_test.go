package clickhouse

import (
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/capture"
	"github.com/tollgate-dev/tollgate/internal/store/storetest"
)

func TestCapturesConformance(t *testing.T) {
	storetest.RunCaptures(t, func(t *testing.T) storetest.CaptureStore { return openTest(t) })
}

// TestCapturesOwnMutex: AddCaptures does not take the ledger's mutex, so
// a capture batch is written while an Insert holds it (and a slow capture
// write never holds up the ledger).
func TestCapturesOwnMutex(t *testing.T) {
	s := openTest(t)
	s.mu.Lock()
	done := make(chan error, 1)
	go func() { done <- s.AddCaptures(t.Context(), []*capture.Capture{storetest.Capture(1)}) }()
	select {
	case err := <-done:
		s.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second): // a deadlock detector, not a speed bound
		s.mu.Unlock()
		<-done
		t.Fatal("AddCaptures waited for the ledger's mutex")
	}
	if c, err := s.Capture(t.Context(), "cap-0001"); err != nil || c.RequestBytes != len(storetest.Capture(1).Request) {
		t.Errorf("capture written under the ledger's lock: %+v, %v", c, err)
	}
}
