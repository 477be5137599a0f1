package quota

import "testing"

// TestReconfigureKeepsUsage: a reload that lowers alice's daily quota
// counts what she used and what she has in flight against the new one at
// once; one that raises it admits her again; a scope no longer limited is
// dropped; a bad config changes nothing.
func TestReconfigureKeepsUsage(t *testing.T) {
	clk := newClock(t0)
	l, _ := newLocal(t, users(map[string]Limits{"alice": {DailyTokens: 10_000}, "bob": {DailyTokens: 100}}), clk, nil)
	_, a := admit(t, l, alice(1000, 3000)) // 4000 used
	a.Commit(4000, 0)
	_, inflight := admit(t, l, alice(500, 500)) // 1000 in flight across the reload
	_, b := admit(t, l, Request{Subject: Subject{UserID: "bob"}, EstInputTokens: 10})
	b.Commit(10, 0)

	if err := l.Reconfigure(Config{Users: map[string]Limits{"alice": {DailyTokens: 5_000}}}); err != nil {
		t.Fatal(err)
	}
	if got := l.state(KindUser, "alice").tokens; got != (daily{used: 5000}) {
		t.Fatalf("alice after the reload %+v, want the 4000 used and the 1000 in flight carried over", got)
	}
	if d, _ := admit(t, l, alice(1, 0)); d.Allowed {
		t.Error("alice admitted over her lowered quota")
	}
	inflight.Commit(1000, 0) // settles on the retired entry: no double count
	if got := l.state(KindUser, "alice").tokens; got != (daily{used: 5000}) {
		t.Fatalf("alice after the in-flight commit %+v", got)
	}
	if d, _ := admit(t, l, Request{Subject: Subject{UserID: "bob"}, EstInputTokens: 1000}); !d.Allowed {
		t.Error("bob is no longer limited, yet refused")
	}

	if err := l.Reconfigure(Config{Users: map[string]Limits{"alice": {DailyCost: "x"}}}); err == nil {
		t.Fatal("a bad daily_cost was accepted")
	}
	if err := l.Reconfigure(Config{Users: map[string]Limits{"alice": {DailyTokens: 20_000}}}); err != nil {
		t.Fatal(err)
	}
	if d, _ := admit(t, l, alice(1000, 1000)); !d.Allowed {
		t.Errorf("alice refused under her raised quota: %+v", d)
	}
}
