package childproc

import (
	"context"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain doubles as the child: CHILDPROC_TEST_ROLE=serve answers
// /healthz on CHILDPROC_TEST_ADDR until SIGTERM; =fail writes a line and
// exits 3 at once.
func TestMain(m *testing.M) {
	switch os.Getenv("CHILDPROC_TEST_ROLE") {
	case "serve":
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		srv := &http.Server{Addr: os.Getenv("CHILDPROC_TEST_ADDR"), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/healthz" {
				http.NotFound(w, r)
			}
		})}
		go func() { <-term; _ = srv.Close() }()
		if err := srv.ListenAndServe(); err != http.ErrServerClosed {
			os.Exit(2)
		}
		os.Exit(0)
	case "fail":
		os.Stderr.WriteString("cannot start: bad config\n")
		os.Exit(3)
	}
	os.Exit(m.Run())
}

func exe(t *testing.T) string {
	t.Helper()
	e, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestStartStop(t *testing.T) {
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	p, err := Start(context.Background(), Spec{Name: "serve", Exe: exe(t), Args: []string{"-test.run=^$"},
		Env: []string{"CHILDPROC_TEST_ROLE=serve", "CHILDPROC_TEST_ADDR=" + addr}, Addr: addr,
		LogPath: filepath.Join(t.TempDir(), "serve.log")})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	if p.Pid() <= 0 || p.Pid() == os.Getpid() {
		t.Fatalf("pid %d", p.Pid())
	}
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("child not serving after Start: %v", err)
	}
	resp.Body.Close()
	if err := p.Stop(time.Minute); err != nil {
		t.Fatalf("stop: %v", err)
	}
	p.Kill() // after the exit: returns at once
}

func TestExitBeforeReady(t *testing.T) {
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	_, err = Start(context.Background(), Spec{Name: "gw", Exe: exe(t), Args: []string{"-test.run=^$"},
		Env: []string{"CHILDPROC_TEST_ROLE=fail"}, Addr: addr, LogPath: filepath.Join(t.TempDir(), "gw.log")})
	if err == nil {
		t.Fatal("Start of a child that exits at once succeeded")
	}
	for _, want := range []string{"gw exited before it was ready", "exit status 3", "cannot start: bad config"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}
