package reliability

// The running binary: started as a child process on loopback, its stdout and stderr
// collected (JSON log lines on stderr), its admin listener scraped.

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// waitLimit bounds every wait for an event of the binary on a loaded 2-core box.
const waitLimit = 10 * time.Second

// proc is one running ingress binary.
type proc struct {
	t   *testing.T
	cmd *exec.Cmd

	mu      sync.Mutex
	lines   []string // every stderr line so far
	stdout  strings.Builder
	changed chan struct{} // closed and replaced on every new stderr line

	done    chan struct{} // closed once both pipes reached EOF and the process was reaped
	waitErr error

	http, https, admin string
}

// baseArgs: loopback, ephemeral ports, no HTTP/3, JSON logs at debug level (so that a
// secret leaked at any level shows).
func baseArgs(extra ...string) []string {
	return append([]string{
		"--http-addr", "127.0.0.1:0", "--https-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
		"--http3=false", "--log-format", "json", "--log-level", "debug",
	}, extra...)
}

// relayEnv is a relay-mode environment.
func relayEnv(bearer, origin, node string) []string {
	return []string{
		"SERVEZONE_CLUSTER_INGRESS_BEARER=" + bearer,
		"SERVEZONE_CLUSTER_RELAY_ORIGIN=" + origin,
		"SERVEZONE_CLUSTER_NODE_ID=" + node,
	}
}

// start runs the binary with only PATH and env in its environment and waits for its
// "ingress started" line. The cleanup kills a process still running.
func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := spawn(t, env, args...)
	p.awaitStarted()
	return p
}

// spawn runs the binary without waiting for anything.
func spawn(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, cmd: cmd, changed: make(chan struct{}), done: make(chan struct{})}
	var pipes sync.WaitGroup
	pipes.Add(2)
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
		_, _ = io.Copy(io.Discard, stderr)
	}()
	go func() {
		defer pipes.Done()
		b, _ := io.ReadAll(stdout)
		p.mu.Lock()
		p.stdout.Write(b)
		p.mu.Unlock()
	}()
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

func (p *proc) awaitStarted() {
	p.t.Helper()
	line := p.waitLine(waitLimit, func(m map[string]any) bool { return m["msg"] == "ingress started" })
	for _, f := range []struct {
		key string
		dst *string
	}{{"http", &p.http}, {"https", &p.https}, {"admin", &p.admin}} {
		s, _ := line[f.key].(string)
		if _, _, err := net.SplitHostPort(s); err != nil {
			p.t.Fatalf("ingress started line has no %s address (%q):\n%s", f.key, s, p.stderr())
		}
		*f.dst = s
	}
}

// stderr returns every stderr line so far.
func (p *proc) stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// output returns stdout (complete once the process ended) and stderr.
func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stdout.String() + "\n" + strings.Join(p.lines, "\n")
}

// lineCount is the number of stderr lines so far.
func (p *proc) lineCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.lines)
}

func (p *proc) findLine(from int, match func(map[string]any) bool) (map[string]any, int, chan struct{}) {
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

// waitLine waits for a JSON stderr line that match accepts.
func (p *proc) waitLine(limit time.Duration, match func(map[string]any) bool) map[string]any {
	p.t.Helper()
	return p.waitLineFrom(0, limit, match)
}

// waitLineFrom waits for a matching line at index from or later.
func (p *proc) waitLineFrom(from int, limit time.Duration, match func(map[string]any) bool) map[string]any {
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
			p.t.Fatalf("the ingress exited (%v) before the expected log line; stderr:\n%s", p.waitErr, tail(p.stderr()))
		case <-timer.C:
			p.t.Fatalf("no expected log line within %s; stderr:\n%s", limit, tail(p.stderr()))
		}
	}
}

// signal sends sig.
func (p *proc) signal(sig os.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v: %v", sig, err)
	}
}

// wait waits up to limit for the exit and returns the exit status.
func (p *proc) wait(limit time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(limit):
		p.t.Fatalf("the ingress did not exit within %s; stderr:\n%s", limit, tail(p.stderr()))
	}
	var ee *exec.ExitError
	if p.waitErr != nil && !errors.As(p.waitErr, &ee) {
		p.t.Fatalf("wait: %v", p.waitErr)
	}
	return p.cmd.ProcessState.ExitCode()
}

// stop sends SIGTERM and asserts a graceful stop (exit status 0).
func (p *proc) stop() {
	p.t.Helper()
	p.signal(syscall.SIGTERM)
	if code := p.wait(waitLimit + 30*time.Second); code != 0 {
		p.t.Fatalf("exit status %d after SIGTERM, want 0; stderr:\n%s", code, tail(p.stderr()))
	}
}

// tail is the last 60 lines of s, for failure messages.
func tail(s string) string {
	lines := strings.Split(s, "\n")
	if len(lines) > 60 {
		lines = append([]string{"…"}, lines[len(lines)-60:]...)
	}
	return strings.Join(lines, "\n")
}
