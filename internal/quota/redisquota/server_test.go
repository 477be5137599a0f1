package redisquota

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// server is a real redis-server for a test: TOLLGATE_REDIS_ADDR when set,
// else one started by the test on a free loopback port in a temp dir,
// without persistence, stopped at the end. Tests that need neither skip
// with the reason.
type server struct {
	addr string
	bin  string // "" for an external server, which the test cannot kill
	dir  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	out  bytes.Buffer
}

func findRedis() string {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/bin/redis-server", "/usr/sbin/redis-server"} {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
	}
	return ""
}

// startRedis returns the test's Redis. own demands one this test starts
// (to kill or freeze it): with only TOLLGATE_REDIS_ADDR the test skips.
func startRedis(t *testing.T, own bool) *server {
	t.Helper()
	if a := os.Getenv("TOLLGATE_REDIS_ADDR"); a != "" && !own {
		return &server{addr: a}
	}
	bin := findRedis()
	if bin == "" {
		if own {
			t.Skip("needs a redis-server binary it can kill (Debian package redis-server; scripts/test.sh installs it)")
		}
		t.Skip("no Redis: set TOLLGATE_REDIS_ADDR, or install Debian's redis-server (scripts/test.sh does)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s := &server{addr: fmt.Sprintf("127.0.0.1:%d", port), bin: bin, dir: t.TempDir()}
	s.start(t)
	t.Cleanup(func() { s.kill(t) })
	return s
}

func (s *server) start(t *testing.T) {
	t.Helper()
	_, port, _ := net.SplitHostPort(s.addr)
	s.mu.Lock()
	s.out.Reset()
	cmd := exec.Command(s.bin, "--port", port, "--bind", "127.0.0.1", "--dir", s.dir,
		"--save", "", "--appendonly", "no", "--protected-mode", "no", "--daemonize", "no")
	cmd.Stdout, cmd.Stderr = &s.out, &s.out
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		t.Fatalf("start redis-server: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()

	c := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1, DisableIdentity: true})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		select {
		case <-done:
			t.Fatalf("redis-server exited at start: %s", s.output())
		case <-time.After(20 * time.Millisecond): // poll interval, not synchronisation
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not answer PING within 10s: %v\n%s", s.addr, err, s.output())
		}
	}
}

func (s *server) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}

// kill stops the server at once (SIGKILL: no goodbye to clients) and
// waits for it to exit.
func (s *server) kill(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // in case it is frozen
	_ = cmd.Process.Kill()
	<-done
}

// signal sends sig (SIGSTOP freezes the server: connections stay open and
// calls hang, the worst case for a deadline).
func (s *server) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// client is a plain client for inspecting keys.
func (s *server) client(t *testing.T) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.addr, DisableIdentity: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// prefix is a key prefix of the test's own, so that tests sharing
// TOLLGATE_REDIS_ADDR never see each other's keys.
func prefix() string {
	b := make([]byte, 6)
	rand.Read(b)
	return "tgtest-" + hex.EncodeToString(b)
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(10 * time.Millisecond) // poll interval; the condition is the synchronisation
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
