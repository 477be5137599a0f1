package baseline

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tollgate-dev/tollgate/internal/sim"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// freshSim serves a new simulator: seeded requests (the suite's default)
// get answers that depend only on the engine's config, the model, the
// prompt and the seed, as a deterministic engine's would — also when a
// prompt is repeated within a run.
func freshSim(t *testing.T, cfg sim.Config) string {
	t.Helper()
	eng, err := sim.New(cfg, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = eng.Run(ctx); close(done) }()
	srv := httptest.NewServer(eng.Handler())
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close(); cancel(); <-done })
	return srv.URL + "/v1"
}

const suiteYAML = `
model: Qwen/Qwen3-8B
max_tokens: 40
repeat: 2
prompts:
  - id: returns
    messages: [{role: user, content: "Can I return shoes after thirty days?"}]
  - id: summary
    messages:
      - {role: system, content: "You summarise."}
      - {role: user, content: "Summarise the shop policy in one line."}
  - id: story
    prompt: "Once upon a time"
  - id: short
    prompt: "Say yes."
    max_tokens: 1
  - id: list
    messages: [{role: user, content: "List five fruits."}]
  - id: code
    messages: [{role: user, content: "Write a Go hello world."}]
  - id: poem
    prompt: "Roses are red"
  - id: math
    messages: [{role: user, content: "What is seven times six?"}]
  - id: translate
    messages: [{role: user, content: "Translate good morning to French."}]
  - id: plan
    messages: [{role: user, content: "Plan a day in Paris."}]
`

func simConfig(seed int64, decode time.Duration, outputMean int) sim.Config {
	return sim.Config{Seed: seed, DecodeBase: decode, PrefillBase: 500 * time.Microsecond, PrefillPerToken: 10 * time.Microsecond,
		OutputMean: outputMean, DecodePerSeq: time.Microsecond}
}

// TestRunAndCompareAgainstSim runs the suite against fresh simulators: the
// same engine again shows no changed outputs and no model change; a
// decode step four times as long is TPOT drift with the outputs the same;
// an engine drawing other words (another seed) changes every output, which
// reads as a new model.
func TestRunAndCompareAgainstSim(t *testing.T) {
	s, err := ParseSuite([]byte(suiteYAML))
	if err != nil {
		t.Fatal(err)
	}
	run := func(cfg sim.Config) *Baseline {
		b, err := Run(t.Context(), s, freshSim(t, cfg), nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Samples) != 20 {
			t.Fatalf("%d samples, want 20 (10 prompts twice)", len(b.Samples))
		}
		for _, sm := range b.Samples {
			if !sm.OK || sm.InputTokens == 0 || sm.OutputSHA256 == "" {
				t.Fatalf("sample %+v", sm)
			}
			if sm.Prompt == "short" && (sm.OutputTokens != 1 || sm.TPOTMS != nil || sm.FinishReason != "length") {
				t.Errorf("one-token prompt: %+v", sm)
			}
		}
		return b
	}
	base := run(simConfig(1, 2*time.Millisecond, 20))
	base.Name = "base"
	dir := t.TempDir()
	if err := Save(dir, base); err != nil {
		t.Fatal(err)
	}
	saved, err := Load(dir, "base")
	if err != nil {
		t.Fatal(err)
	}
	if saved.ServedModels[0] != "Qwen/Qwen3-8B" || len(saved.Samples) != 20 || saved.SuiteHash != s.Hash() {
		t.Fatalf("saved baseline %+v", saved)
	}

	again := Compare(saved, run(simConfig(1, 2*time.Millisecond, 20)), Options{})
	if len(again.Changed) != 0 || again.ModelChanged || len(again.Unstable) != 0 || !again.SameSuite {
		t.Errorf("same engine: %d changed, model changed %v, unstable %v; %v", len(again.Changed), again.ModelChanged, again.Unstable, again.Reasons)
	}
	t.Logf("same engine again: drift %v %v", again.Drift, again.Reasons) // latency is the host's to decide

	slow := Compare(saved, run(simConfig(1, 8*time.Millisecond, 20)), Options{})
	if len(slow.Changed) != 0 || slow.ModelChanged || !slow.Shifts[1].Drift || !slow.Drift {
		t.Errorf("slower decode: %d changed, model changed %v, TPOT %+v", len(slow.Changed), slow.ModelChanged, slow.Shifts[1])
	}

	other := Compare(saved, run(simConfig(2, 2*time.Millisecond, 20)), Options{})
	if len(other.Changed) < 8 || !other.ModelChanged || !other.Drift {
		t.Errorf("other engine: %d of %d changed, model changed %v (%v)", len(other.Changed), other.Prompts, other.ModelChanged, other.ModelReasons)
	}
}

func TestSaveLoadNames(t *testing.T) {
	dir := t.TempDir()
	for _, bad := range []string{"", "../x", "a/b", ".hidden"} {
		if err := Save(dir, &Baseline{Name: bad}); err == nil {
			t.Errorf("name %q accepted", bad)
		}
	}
	if _, err := Load(dir, "missing"); err == nil || err.Error() != `no baseline "missing" in `+dir+" (save one with `tollgate baseline run --save missing`)" {
		t.Errorf("missing baseline: %v", err)
	}
}
