// Package redistest runs Debian's redis-server for the tests of the shared certificate
// store (--acme-storage): on loopback only, on a port of its own, with a password, and with
// its data in an append-only file under a temporary directory, so that a test can stop it
// and start it again on the same port with its data kept. It also serves a fake Redis that
// answers every command with what the test says (a hostile server echoing a password).
//
// The binary is found through $REDIS_SERVER, then PATH, then /usr/bin/redis-server
// (.ci/run installs the Debian package when it is missing). Without it a test is skipped
// with the reason (toolbin.Missing, which also says so on the terminal), unless CI is set:
// then it fails, so that CI cannot pass by skipping.
package redistest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/toolbin"
)

// Binary returns the path of redis-server, skipping the test (or failing it when the CI
// variable is set) when there is none.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("REDIS_SERVER"); p != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
		t.Fatalf("REDIS_SERVER=%s: no such file", p)
	}
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/redis-server"); err == nil {
		return "/usr/bin/redis-server"
	}
	toolbin.Missing(t, "redis-server was not found in $REDIS_SERVER, PATH or /usr/bin; install it with: apt-get install redis-server")
	return ""
}

// Options describe one Redis.
type Options struct {
	// Password is required of every client (requirepass); "" means none.
	Password string
}

// Server is one redis-server of a test.
type Server struct {
	// Addr is 127.0.0.1:port; it stays the same across Stop and Start.
	Addr string
	// Password is Options.Password.
	Password string

	bin, dir string
	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
	out      *syncBuffer
}

// Start runs a redis-server for the test, on a free loopback port; the test's cleanup
// stops it.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	s := &Server{bin: Binary(t), dir: t.TempDir(), Password: o.Password}
	t.Cleanup(s.Stop)
	var err error
	for try := 0; try < 3; try++ {
		s.Addr = freePort(t)
		if err = s.run(); err == nil {
			return s
		}
		if !strings.Contains(s.Output(), "Address already in use") {
			break
		}
	}
	t.Fatalf("redis-server did not start: %v", err)
	return nil
}

// URL is the server's redis:// URL without the password.
func (s *Server) URL() string { return "redis://" + s.Addr + "/0" }

// Restart starts the stopped server again on the same port with the same data.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.run(); err != nil {
		t.Fatalf("redis-server did not start again: %v", err)
	}
}

// Stop ends the server (SIGTERM: redis-server flushes its append-only file and exits)
// and waits for it; nothing answers at Addr afterwards.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// Output is what the server printed since it last started.
func (s *Server) Output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.out == nil {
		return ""
	}
	return s.out.String()
}

func (s *Server) run() error {
	_, port, _ := net.SplitHostPort(s.Addr)
	args := []string{
		"--bind", "127.0.0.1", "--port", port, "--dir", s.dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "",
		"--daemonize", "no", "--logfile", "", "--databases", "4",
	}
	if s.Password != "" {
		args = append(args, "--requirepass", s.Password)
	}
	out := &syncBuffer{}
	cmd := exec.Command(s.bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done, s.out = cmd, done, out
	s.mu.Unlock()
	if err := s.waitUp(done, 15*time.Second); err != nil {
		s.Stop()
		return err
	}
	return nil
}

// waitUp polls until the server answers PING (with the password when one is set).
func (s *Server) waitUp(done chan struct{}, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		err := s.ping()
		if err == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("redis-server exited:\n%s", s.Output())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer at %s within %s: %v\n%s", s.Addr, limit, err, s.Output())
		}
	}
}

func (s *Server) ping() error {
	c, err := net.DialTimeout("tcp", s.Addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	var req bytes.Buffer
	if s.Password != "" {
		req.WriteString(Command("AUTH", s.Password))
	}
	req.WriteString(Command("PING"))
	if _, err := c.Write(req.Bytes()); err != nil {
		return err
	}
	r := bufio.NewReader(c)
	if s.Password != "" {
		if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
			return fmt.Errorf("AUTH: %q %v", line, err)
		}
	}
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING: %q %v", line, err)
	}
	return nil
}

// Do sends one command to the server (authenticated) and returns its answer's first line.
func (s *Server) Do(t testing.TB, args ...string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", s.Addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	if s.Password != "" {
		if _, err := io.WriteString(c, Command("AUTH", s.Password)); err != nil {
			t.Fatal(err)
		}
		if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
			t.Fatalf("AUTH: %q %v", line, err)
		}
	}
	if _, err := io.WriteString(c, Command(args...)); err != nil {
		t.Fatal(err)
	}
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("%s: %v", args[0], err)
	}
	return strings.TrimRight(line, "\r\n")
}

// Command encodes a command as a RESP array of bulk strings.
func Command(args ...string) string {
	var b strings.Builder
	b.WriteString("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b.WriteString("$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n")
	}
	return b.String()
}

// Fake serves a Redis look-alike on a free loopback port until the test ends: every
// command (its arguments, the name first) is answered with the raw RESP reply that answer
// returns, such as "-ERR ...\r\n". It returns the address.
func Fake(t testing.TB, answer func(args []string) string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				stop := context.AfterFunc(ctx, func() { c.Close() })
				defer stop()
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					args, err := readCommand(r)
					if err != nil {
						return
					}
					if _, err := io.WriteString(c, answer(args)); err != nil {
						return
					}
				}
			})
		}
	})
	return ln.Addr().String()
}

// readCommand reads one RESP array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(line, "*") {
		return nil, fmt.Errorf("not an array: %q", line)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || n < 0 || n > 1024 {
		return nil, fmt.Errorf("bad array length %q", line)
	}
	args := make([]string, 0, n)
	for range n {
		h, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		if !strings.HasPrefix(h, "$") {
			return nil, fmt.Errorf("not a bulk string: %q", h)
		}
		l, err := strconv.Atoi(strings.TrimSpace(h[1:]))
		if err != nil || l < 0 || l > 1<<20 {
			return nil, fmt.Errorf("bad bulk length %q", h)
		}
		b := make([]byte, l+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		args = append(args, string(b[:l]))
	}
	return args, nil
}

// freePort returns a loopback "127.0.0.1:port" that was free a moment ago.
func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
