// Package childproc runs a tollgate child process (a simulator, a mock or
// a gateway) for the bench harnesses: start it with its output in a log
// file, wait until it answers its health check, stop it with SIGTERM.
package childproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// FreeAddr picks a loopback port that is free now.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// Spec is what to run and how to tell it is ready.
type Spec struct {
	Name    string   // for errors
	Exe     string   // the executable
	Args    []string // its arguments
	Env     []string // added to this process's environment
	Addr    string   // host:port it listens on
	Health  string   // path that answers 200 once ready; "/healthz" when empty
	LogPath string   // its stdout and stderr go here
	Within  time.Duration
}

// Proc is a running child process.
type Proc struct {
	Name, Addr, LogPath string
	cmd                 *exec.Cmd
	done                chan struct{}
	waitErr             error
}

// Start runs s.Exe and waits until http://Addr+Health answers 200, the
// process exits, ctx ends or s.Within (a minute when 0) passes; on
// failure the process is killed.
func Start(ctx context.Context, s Spec) (*Proc, error) {
	lf, err := os.Create(s.LogPath)
	if err != nil {
		return nil, err
	}
	p := &Proc{Name: s.Name, Addr: s.Addr, LogPath: s.LogPath, done: make(chan struct{})}
	p.cmd = exec.Command(s.Exe, s.Args...)
	p.cmd.Env = append(os.Environ(), s.Env...)
	p.cmd.Stdout, p.cmd.Stderr = lf, lf
	if err := p.cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s: %w", s.Name, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		lf.Close()
		close(p.done)
	}()
	health, within := s.Health, s.Within
	if health == "" {
		health = "/healthz"
	}
	if within <= 0 {
		within = time.Minute
	}
	if err := p.waitReady(ctx, health, within); err != nil {
		p.Kill()
		return nil, err
	}
	return p, nil
}

// waitReady polls health until it answers 200, the process exits, ctx
// ends or within passes.
func (p *Proc) waitReady(ctx context.Context, health string, within time.Duration) error {
	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(within)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := c.Get("http://" + p.Addr + health)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready at %s within %s; its log %s:\n%s", p.Name, p.Addr, within, p.LogPath, p.LogTail())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.done:
			return fmt.Errorf("%s exited before it was ready (%v); its log %s:\n%s", p.Name, p.waitErr, p.LogPath, p.LogTail())
		case <-tick.C:
		}
	}
}

// Pid is the process's id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Stop sends SIGTERM and waits for the exit (tollgate serve flushes its
// ledger on the way out); past within it kills. A non-zero exit is an
// error.
func (p *Proc) Stop(within time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(within):
		p.Kill()
		return fmt.Errorf("%s did not stop within %s after SIGTERM; killed", p.Name, within)
	}
	var ee *exec.ExitError
	if p.waitErr != nil && !errors.As(p.waitErr, &ee) {
		return p.waitErr
	}
	if ee != nil && ee.ExitCode() != 0 {
		return fmt.Errorf("%s exited with %v; its log %s:\n%s", p.Name, p.waitErr, p.LogPath, p.LogTail())
	}
	return nil
}

// Kill ends the process if it still runs and waits for it; safe to call
// more than once.
func (p *Proc) Kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// LogTail is the last 4,000 bytes of the process's log.
func (p *Proc) LogTail() string {
	b, _ := os.ReadFile(p.LogPath)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}
