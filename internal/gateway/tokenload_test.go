//go:build unix

package gateway

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/record"
	"github.com/tollgate-dev/tollgate/internal/sim"
	"github.com/tollgate-dev/tollgate/internal/tokenizer"
)

// The tests here hold a configured tokenizer's load open for as long as
// they like: its tokenizer.json is a named pipe, which the loader reads
// until the test writes the real file (Qwen3's, from the repository)
// into it. So "the tokenizer is still loading" is a state the test
// controls, not a race against a one-second load.

// qwen3File is the repository's own Qwen3 tokenizer (the built-in's data).
const qwen3File = "../tokenizer/data/qwen3/tokenizer.json.xz"

// slowTokenizer is a tokenizer.json.xz that loads when feed is called.
type slowTokenizer struct {
	path string
	once sync.Once
}

func newSlowTokenizer(t *testing.T) *slowTokenizer {
	t.Helper()
	dir := t.TempDir()
	st := &slowTokenizer{path: filepath.Join(dir, "tokenizer.json.xz")}
	if err := syscall.Mkfifo(st.path, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join(filepath.Dir(qwen3File), "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	return st
}

// feed writes the tokenizer into the pipe: the load under way ends. It
// blocks until the loader has opened the pipe.
func (st *slowTokenizer) feed(t *testing.T) {
	st.once.Do(func() {
		b, err := os.ReadFile(qwen3File)
		if err != nil {
			t.Error(err)
			return
		}
		if err := os.WriteFile(st.path, b, 0o600); err != nil {
			t.Error(err)
		}
	})
}

// slowGateway is a gateway in front of se whose model has the slow
// tokenizer configured, waited for up to wait; the pipe is fed at cleanup
// if the test did not, so that Close (which waits for loads) returns.
func slowGateway(t *testing.T, se *simEngine, st *slowTokenizer, wait time.Duration) *testGateway {
	t.Helper()
	cfg := testConfig(se.URL)
	cfg.Upstreams[0].Models = []string{simModel}
	cfg.Tokenizers = map[string]tokenizer.Spec{simModel: {Tokenizer: st.path}}
	cfg.TokenizerWait = wait
	tg := newTestGateway(t, cfg)
	t.Cleanup(func() { st.feed(t) }) // runs before the gateway's Close
	return tg
}

func readyz(t *testing.T, tg *testGateway) (int, string) {
	t.Helper()
	resp, err := http.Get(tg.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(readAll(t, resp))
}

// TestReadyWaitsForTokenizers: /readyz answers 503, naming the model and
// its tokenizer, while a configured tokenizer loads, and 200 once it has.
func TestReadyWaitsForTokenizers(t *testing.T) {
	st := newSlowTokenizer(t)
	tg := slowGateway(t, startSim(t, sim.Config{}), st, time.Minute)
	code, body := readyz(t, tg)
	if want := "not ready: tokenizers still loading: " + simModel + " (" + st.path + ")\n"; code != 503 || body != want {
		t.Errorf("while loading: /readyz = %d %q, want 503 %q", code, body, want)
	}
	st.feed(t)
	// Loading Qwen3's tokenizer takes seconds, and over 30 s under the
	// race detector on a loaded machine: the deadline is generous.
	deadline := time.Now().Add(2 * time.Minute)
	for code != 200 {
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d %q 2 min after the tokenizer was written", code, body)
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
		code, body = readyz(t, tg)
	}
	if body != "ready\n" {
		t.Errorf("loaded: /readyz body %q", body)
	}
}

// TestReadyNamesFailedTokenizer: a configured tokenizer that cannot load
// does not hold readiness for ever; /readyz says so in its detail.
func TestReadyNamesFailedTokenizer(t *testing.T) {
	cfg := testConfig("http://127.0.0.1:9/v1")
	cfg.Tokenizers = map[string]tokenizer.Spec{"m": {Tokenizer: filepath.Join(t.TempDir(), "missing.json")}}
	tg := newTestGateway(t, cfg)
	tg.G.counters.wait()
	code, body := readyz(t, tg)
	if code != 200 || !strings.Contains(body, "tokenizer failed to load") || !strings.Contains(body, "m: load tokenizer") {
		t.Errorf("/readyz = %d %q, want 200 naming the failed tokenizer of m", code, body)
	}
}

const noUsageChat = `{"model":"` + simModel + `","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Tell me about water, in a few words."}]`

// TestFirstRequestWaitsForTokenizer is issue 18's defect 3: a request
// that arrives while its model's tokenizer is still loading, to an engine
// that reports no usage, was recorded "counted by chunks" with 0 input
// tokens for good. Now its content goes out at once, and its Record waits
// for the tokenizer as it finishes: input and output are counted.
func TestFirstRequestWaitsForTokenizer(t *testing.T) {
	qwen, err := tokenizer.Open(tokenizer.Spec{Tokenizer: qwen3File})
	if err != nil {
		t.Fatal(err)
	}
	for _, stream := range []bool{true, false} {
		t.Run(map[bool]string{true: "stream", false: "whole"}[stream], func(t *testing.T) {
			st := newSlowTokenizer(t)
			// A minute: Qwen3's tokenizer loads in a second or so, ten
			// under the race detector; the wait's bound is not under test.
			tg := slowGateway(t, startSim(t, sim.Config{Dialect: sim.DialectNoUsage, EOS: true}), st, time.Minute)
			body := noUsageChat + `,"stream":` + map[bool]string{true: "true", false: "false"}[stream] + `}`
			resp := post(t, tg.URL+"/v1/chat/completions", body, map[string]string{sim.OutputTokensHeader: "12"})
			defer resp.Body.Close()

			// The whole content reaches the client with the tokenizer
			// still loading: nothing the client reads waits for it.
			var text strings.Builder
			var whole []byte
			if stream {
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() {
					line, _ := strings.CutPrefix(sc.Text(), "data: ")
					var t streamText
					t.add([]byte(line))
					text.Write(t.b)
					if strings.Contains(line, `"finish_reason":"`) { // the last content event
						break
					}
				}
			} else {
				whole = make([]byte, resp.ContentLength-1) // the last byte waits for the ledger
				if _, err := io.ReadFull(resp.Body, whole); err != nil {
					t.Fatal(err)
				}
			}
			if tg.G.counters.get(simModel) != nil {
				t.Fatal("the tokenizer is loaded already; the test proves nothing")
			}
			st.feed(t)
			if whole = append(whole, readAll(t, resp)...); !stream {
				text.WriteString(responseText(whole))
			}
			r := tg.next(t)

			wantIn, err := qwen.ChatPromptTokens([]byte(body))
			if err != nil {
				t.Fatal(err)
			}
			// The text shown, plus the end-of-sequence token it never
			// shows but the engine counts (endToken).
			want := record.Usage{Source: record.SourceTokenizer, InputTokens: int64(wantIn), OutputTokens: int64(qwen.TextTokens(text.String())) + 1}
			if r.Usage != want || want.OutputTokens != 12 {
				t.Errorf("usage %+v, want %+v (12 output tokens)", r.Usage, want)
			}
			checkInvariants(t, r)
		})
	}
}

// TestTokenizerNotInTime: when the tokenizer has not loaded within the
// wait, the Record goes on with what it knows: output counted by chunks,
// input unknown (never a count of 0).
func TestTokenizerNotInTime(t *testing.T) {
	st := newSlowTokenizer(t)
	tg := slowGateway(t, startSim(t, sim.Config{Dialect: sim.DialectNoUsage, EOS: true}), st, 50*time.Millisecond)
	readAll(t, post(t, tg.URL+"/v1/chat/completions", noUsageChat+`,"stream":true}`, map[string]string{sim.OutputTokensHeader: "7"}))
	r := tg.next(t)
	if r.Usage.Source != record.SourceChunks || r.Usage.OutputTokens != 7 || r.Usage.InputKnown() {
		t.Errorf("usage %+v, want 7 output tokens counted by chunks, input unknown", r.Usage)
	}
}
