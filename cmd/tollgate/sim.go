package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/internal/sim"
)

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// simFlags registers the simulator's flags on fs and returns its config.
func simFlags(fs *flag.FlagSet) (*sim.Config, *stringList) {
	c := &sim.Config{}
	models := &stringList{}
	fs.Var(models, "model", "served model `name` (repeatable; default Qwen/Qwen3-8B)")
	fs.Int64Var(&c.Seed, "seed", 1, "random seed: same seed and requests, same outputs")
	fs.IntVar(&c.MaxRunning, "max-running", 32, "continuous-batching slots; more requests wait in the engine queue")
	fs.DurationVar(&c.PrefillPerToken, "prefill-per-token", 40*time.Microsecond, "prefill time per uncached prompt token")
	fs.DurationVar(&c.DecodeBase, "decode-step", 8*time.Millisecond, "base time of one decode step")
	fs.DurationVar(&c.DecodePerSeq, "decode-per-seq", 150*time.Microsecond, "extra decode step time per running sequence")
	fs.IntVar(&c.OutputMean, "output-mean", 120, "mean output length in tokens when the request does not fix it")
	fs.Float64Var(&c.Faults.ErrorRate, "error-rate", 0, "share of requests answered with HTTP 500 (0–1)")
	fs.Float64Var(&c.Faults.ResetRate, "reset-rate", 0, "share of streams cut mid-way (0–1)")
	fs.Float64Var(&c.Faults.StallRate, "stall-rate", 0, "share of streams that stall mid-way (0–1)")
	fs.Float64Var(&c.Faults.MalformedRate, "malformed-rate", 0, "share of streams with a malformed chunk (0–1)")
	fs.StringVar(&c.Dialect, "dialect", sim.DialectVLLM, "the engine whose wire format to speak: vllm, llamacpp (timings on the last event) or no-usage (never reports usage)")
	return c, models
}

func runSim(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlagSet("sim", "sim [--listen ADDR] [--model NAME]... [flags]", stderr)
	listen := fs.String("listen", "127.0.0.1:8000", "listen `address` (vLLM's default port)")
	c, models := simFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	c.Models = *models
	log := slog.New(slog.NewTextHandler(stderr, nil))
	addr := make(chan string, 1)
	go func() {
		if a, ok := <-addr; ok {
			log.Info("simulated engine listening", "addr", a, "openai_base_url", "http://"+a+"/v1", "models", c.Models)
		}
	}()
	return runSimServer(ctx, *c, *listen, log, addr)
}

// runSimServer serves the simulator until ctx is done. addr receives the
// bound address once listening.
func runSimServer(ctx context.Context, c sim.Config, listen string, log *slog.Logger, addr chan<- string) error {
	eng, err := sim.New(c, log.With("component", "sim"), prometheus.NewRegistry())
	if err != nil {
		return fmt.Errorf("simulator: %w", err)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", listen, err)
	}
	addr <- ln.Addr().String()
	close(addr)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	engDone := make(chan error, 1)
	go func() { engDone <- eng.Run(runCtx) }()
	srv := &http.Server{Handler: eng.Handler(), ReadHeaderTimeout: 10 * time.Second}
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
	case err := <-srvDone:
		stop()
		<-engDone
		return err
	}
	stop()
	shCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(shCtx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = srv.Close()
	}
	<-engDone
	return err
}
