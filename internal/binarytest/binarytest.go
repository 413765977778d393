// Package binarytest is the harness of the tests that drive the real ingress binary (the
// end-to-end tests of cmd/ingress and the reliability suite): it builds the binary once by
// package path with go build, runs it as a child process with only PATH and a given
// environment, collects its JSON log lines from stderr and waits for a line (woken by each
// new line, never by a poll), reads the bound addresses from its "ingress started" line,
// and waits for its exit. It also holds the fixtures both suites share: route tables,
// routes, targets and the atomic replacement of a routes file.
//
// It is test support only: nothing but tests imports it. It does not import the binary's
// package (a main package), so any test package may use it without an import cycle.
package binarytest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// IngressPackage is the package path of the ingress binary.
const IngressPackage = "github.com/serve-zone/ingress/cmd/ingress"

// Binary is a binary built once, on first use, and shared by the tests of a package.
type Binary struct {
	// Package is the package path to build, e.g. IngressPackage.
	Package string
	// Flags are go build flags besides -o, e.g. -ldflags.
	Flags []string
	// Env is added to the environment of go build, e.g. CGO_ENABLED=0.
	Env []string

	mu   sync.Mutex
	path string
	err  error
}

// Build builds the binary into a new temporary directory on the first call and returns
// its path; later calls return the same path (or the same error).
func (b *Binary) Build() (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.path != "" || b.err != nil {
		return b.path, b.err
	}
	dir, err := os.MkdirTemp("", "ingress-bin")
	if err != nil {
		b.err = err
		return "", err
	}
	bin := filepath.Join(dir, filepath.Base(b.Package))
	args := append(append([]string{"build"}, b.Flags...), "-o", bin, b.Package)
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), b.Env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		b.err = fmt.Errorf("go build: %v\n%s", err, out)
		return "", b.err
	}
	b.path = bin
	return bin, nil
}

// Path builds the binary on the first call and returns its path, failing the test when
// it cannot be built.
func (b *Binary) Path(t testing.TB) string {
	t.Helper()
	bin, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// Remove deletes the built binary, if any (from TestMain, after the tests ran).
func (b *Binary) Remove() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.path != "" {
		_ = os.RemoveAll(filepath.Dir(b.path))
		b.path = ""
	}
}

// BaseArgs are the flags every run uses: loopback, ephemeral ports, no HTTP/3, JSON logs
// at debug level (so that a secret leaked at any level would show), then extra.
func BaseArgs(extra ...string) []string {
	return append([]string{
		"--http-addr", "127.0.0.1:0", "--https-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
		"--http3=false", "--log-format", "json", "--log-level", "debug",
	}, extra...)
}

// RelayEnv is the environment of a relay-mode run.
func RelayEnv(bearer, origin, node string) []string {
	return []string{
		"SERVEZONE_CLUSTER_INGRESS_BEARER=" + bearer,
		"SERVEZONE_CLUSTER_RELAY_ORIGIN=" + origin,
		"SERVEZONE_CLUSTER_NODE_ID=" + node,
	}
}

// Proc is one running binary.
type Proc struct {
	// HTTP, HTTPS and Admin are the bound addresses, set by AwaitStarted.
	HTTP, HTTPS, Admin string
	// TailLines, when positive, limits the stderr that the harness' own failure messages
	// quote to its last TailLines lines.
	TailLines int

	t   testing.TB
	cmd *exec.Cmd

	mu      sync.Mutex
	lines   []string // every stderr line so far
	stdout  strings.Builder
	changed chan struct{} // closed and replaced on every new stderr line

	done    chan struct{} // closed once the pipes reached EOF and the process was reaped
	waitErr error         // cmd.Wait's error; read after done
}

// Exec runs bin with only PATH and env in its environment and collects its output. It
// does not wait for anything; the cleanup kills a process still running.
func Exec(t testing.TB, bin string, env []string, args ...string) *Proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	return Collect(t, cmd)
}

// Start is Exec, then AwaitStarted within limit.
func Start(t testing.TB, bin string, limit time.Duration, env []string, args ...string) *Proc {
	t.Helper()
	p := Exec(t, bin, env, args...)
	p.AwaitStarted(limit)
	return p
}

// Collect starts cmd and collects its stderr lines, and its stdout unless cmd.Stdout is
// set; the cleanup kills a process still running.
func Collect(t testing.TB, cmd *exec.Cmd) *Proc {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stdout io.Reader
	if cmd.Stdout == nil {
		if stdout, err = cmd.StdoutPipe(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Proc{t: t, cmd: cmd, changed: make(chan struct{}), done: make(chan struct{})}
	var pipes sync.WaitGroup
	pipes.Add(1)
	go func() {
		defer pipes.Done()
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			close(p.changed)
			p.changed = make(chan struct{})
			p.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, stderr) // a line over the buffer: keep the pipe drained
	}()
	if stdout != nil {
		pipes.Add(1)
		go func() {
			defer pipes.Done()
			b, _ := io.ReadAll(stdout)
			p.mu.Lock()
			p.stdout.Write(b)
			p.mu.Unlock()
		}()
	}
	go func() {
		pipes.Wait()
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// AwaitStarted waits up to limit for the "ingress started" line and records the bound
// addresses it names (HTTPS stays empty when the line says "off": `ingress proxy`
// without TLS binds none).
func (p *Proc) AwaitStarted(limit time.Duration) {
	p.t.Helper()
	line := p.WaitLine(limit, func(m map[string]any) bool { return m["msg"] == "ingress started" })
	for _, f := range []struct {
		key string
		dst *string
	}{{"http", &p.HTTP}, {"https", &p.HTTPS}, {"admin", &p.Admin}} {
		s, _ := line[f.key].(string)
		if f.key == "https" && s == "off" {
			continue
		}
		if _, _, err := net.SplitHostPort(s); err != nil {
			p.t.Fatalf("ingress started line has no %s address (%q):\n%s", f.key, s, p.Stderr())
		}
		*f.dst = s
	}
}

// PID is the process's id (for its /proc entries).
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Stderr returns every stderr line so far.
func (p *Proc) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// Output returns stdout (complete once the process ended) and stderr.
func (p *Proc) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stdout.String() + "\n" + strings.Join(p.lines, "\n")
}

// LineCount is the number of stderr lines so far.
func (p *Proc) LineCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.lines)
}

// quoted is the stderr a failure message of the harness quotes.
func (p *Proc) quoted() string {
	if p.TailLines > 0 {
		return Tail(p.Stderr(), p.TailLines)
	}
	return p.Stderr()
}

// findLine returns the first JSON log line (from index from on) that match accepts and
// the index after it; without one, the number of lines and the channel closed on the next.
func (p *Proc) findLine(from int, match func(map[string]any) bool) (map[string]any, int, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := from; i < len(p.lines); i++ {
		var m map[string]any
		if json.Unmarshal([]byte(p.lines[i]), &m) == nil && match(m) {
			return m, i + 1, nil
		}
	}
	return nil, len(p.lines), p.changed
}

// FindLine returns the first JSON stderr line so far, at index from (see LineCount) or
// later, that match accepts, or nil; it does not wait.
func (p *Proc) FindLine(from int, match func(map[string]any) bool) map[string]any {
	m, _, _ := p.findLine(from, match)
	return m
}

// WaitLine waits until a JSON stderr line matches, failing the test after limit or when
// the process ends first.
func (p *Proc) WaitLine(limit time.Duration, match func(map[string]any) bool) map[string]any {
	p.t.Helper()
	return p.WaitLineFrom(0, limit, match)
}

// WaitLineFrom is WaitLine for the lines at index from (see LineCount) or later.
func (p *Proc) WaitLineFrom(from int, limit time.Duration, match func(map[string]any) bool) map[string]any {
	p.t.Helper()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		m, next, changed := p.findLine(from, match)
		if m != nil {
			return m
		}
		from = next
		select {
		case <-changed:
		case <-p.done:
			if m, _, _ := p.findLine(from, match); m != nil {
				return m
			}
			p.t.Fatalf("the ingress exited (%v) before the expected log line; stderr:\n%s", p.waitErr, p.quoted())
		case <-timer.C:
			p.t.Fatalf("no expected log line within %s; stderr:\n%s", limit, p.quoted())
		}
	}
}

// Signal sends sig to the process.
func (p *Proc) Signal(sig os.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v: %v", sig, err)
	}
}

// Wait waits up to limit for the exit and returns the exit status.
func (p *Proc) Wait(limit time.Duration) int {
	p.t.Helper()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		p.t.Fatalf("the ingress did not exit within %s; stderr:\n%s", limit, p.quoted())
	}
	var ee *exec.ExitError
	if p.waitErr != nil && !errors.As(p.waitErr, &ee) {
		p.t.Fatalf("wait: %v", p.waitErr)
	}
	return p.cmd.ProcessState.ExitCode()
}

// Stop sends SIGTERM and asserts a graceful stop: exit status 0 within limit.
func (p *Proc) Stop(limit time.Duration) {
	p.t.Helper()
	p.Signal(syscall.SIGTERM)
	if code := p.Wait(limit); code != 0 {
		p.t.Fatalf("exit status %d after SIGTERM, want 0; stderr:\n%s", code, p.quoted())
	}
}

// AssertNoSecret fails the test when secret appears anywhere in stderr.
func (p *Proc) AssertNoSecret(secret string) {
	p.t.Helper()
	if strings.Contains(p.Stderr(), secret) {
		p.t.Fatalf("stderr quotes a secret:\n%s", p.Stderr())
	}
}

// Tail is the last n lines of s (after a "…" line when there were more), for failure
// messages.
func Tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = append([]string{"…"}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
