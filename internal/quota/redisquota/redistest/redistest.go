// Package redistest starts a real redis-server for tests: the one at
// TOLLGATE_REDIS_ADDR when set, else Debian's redis-server binary on a free
// loopback port in a temp dir, without persistence, stopped when the test
// ends. With neither the test skips, saying what is missing.
package redistest

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
)

// Server is a real redis-server for a test.
type Server struct {
	Addr string
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

// Start returns the test's Redis. own demands one this test starts (to
// kill or freeze it): with only TOLLGATE_REDIS_ADDR the test skips.
func Start(t testing.TB, own bool) *Server {
	t.Helper()
	if a := os.Getenv("TOLLGATE_REDIS_ADDR"); a != "" && !own {
		return &Server{Addr: a}
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
	s := &Server{Addr: fmt.Sprintf("127.0.0.1:%d", port), bin: bin, dir: t.TempDir()}
	s.Restart(t)
	t.Cleanup(func() { s.Kill(t) })
	return s
}

// Restart starts the server again on its address after Kill.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	_, port, _ := net.SplitHostPort(s.Addr)
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

	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DisableIdentity: true})
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
			t.Fatalf("redis-server on %s did not answer PING within 10s: %v\n%s", s.Addr, err, s.output())
		}
	}
}

func (s *Server) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}

// Kill stops the server at once (SIGKILL: no goodbye to clients) and
// waits for it to exit.
func (s *Server) Kill(t testing.TB) {
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

// Signal sends sig (SIGSTOP freezes the server: connections stay open and
// calls hang, the worst case for a deadline; SIGCONT thaws it).
func (s *Server) Signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// Client is a plain client for inspecting keys, closed with the test.
func (s *Server) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, DisableIdentity: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// Prefix is a key prefix of the test's own, so that tests sharing
// TOLLGATE_REDIS_ADDR never see each other's keys; its keys are deleted
// when the test ends (if the server still runs).
func (s *Server) Prefix(t testing.TB) string {
	b := make([]byte, 6)
	rand.Read(b)
	p := "tgtest-" + hex.EncodeToString(b)
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DisableIdentity: true})
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		it := c.Scan(ctx, 0, p+":*", 1000).Iterator()
		for it.Next(ctx) {
			c.Del(ctx, it.Val())
		}
	})
	return p
}

// WaitFor polls cond until it holds or the deadline passes.
func WaitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(10 * time.Millisecond) // poll interval; the condition is the synchronisation
	}
}
