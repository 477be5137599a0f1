package loadgen

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestWarmupRetriesAndReports: a warm-up request that fails once is tried
// again and counts as answered; one that fails every time is reported
// (counted, with the first error) without stopping anything.
func TestWarmupRetriesAndReports(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		calls := map[int]int{}
		answer := func(failFirst int) SendFunc {
			return func(ctx context.Context, r *Request) Response {
				mu.Lock()
				calls[r.Index]++
				n := calls[r.Index]
				mu.Unlock()
				now := time.Now()
				if n <= failFirst {
					return Response{Sent: now, Err: errors.New("HTTP 401: invalid key"), ErrKind: "status_401"}
				}
				return Response{Sent: now, Status: 200, Events: []Event{{At: now, Kind: KindContent, Text: "a"}, {At: now, Kind: KindDone}}}
			}
		}

		rep := Warmup(t.Context(), fixed{}, answer(1), 2, 1)
		if rep.Requests != 2 || rep.Retried != 2 || rep.Failed != 0 || rep.FirstErr != nil || calls[0] != 2 || calls[1] != 2 {
			t.Errorf("failing once: %+v, calls %v", rep, calls)
		}

		clear(calls)
		rep = Warmup(t.Context(), fixed{}, answer(WarmupAttempts), 2, 2)
		if rep.Failed != 2 || calls[0] != WarmupAttempts || calls[1] != WarmupAttempts ||
			rep.FirstErr == nil || !strings.Contains(rep.FirstErr.Error(), "warm-up request 0: HTTP 401: invalid key") {
			t.Errorf("failing always: %+v, calls %v", rep, calls)
		}

		if rep := Warmup(t.Context(), fixed{}, answer(0), 0, 1); rep != (WarmupReport{}) {
			t.Errorf("no warm-up: %+v", rep)
		}
	})
}
