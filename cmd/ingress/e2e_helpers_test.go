package main

// Helpers of the end-to-end tests: each test runs the real ingress binary (built once by
// buildBinary) as a child process on loopback, reads its JSON log lines from stderr and
// talks to it over real sockets.

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/testwait"
	"github.com/serve-zone/ingress/routetable"
)

// e2eWait bounds every poll of the end-to-end tests.
const e2eWait = 5 * time.Second

// ingressProc is one running ingress binary.
type ingressProc struct {
	t   *testing.T
	cmd *exec.Cmd

	mu      sync.Mutex
	lines   []string      // every stderr line so far
	changed chan struct{} // closed and replaced on every new line

	done    chan struct{} // closed once stderr reached EOF and the process was reaped
	waitErr error         // cmd.Wait's error; read after done

	httpAddr, httpsAddr, adminAddr string
}

// baseArgs are the flags every end-to-end run uses: loopback, ephemeral ports, no HTTP/3,
// JSON logs at debug level (so that a leak of a secret at any level would show).
func baseArgs(extra ...string) []string {
	return append([]string{
		"--http-addr", "127.0.0.1:0", "--https-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
		"--http3=false", "--log-format", "json", "--log-level", "debug",
	}, extra...)
}

// relayEnv is the environment of a relay-mode run.
func relayEnv(bearer, origin, node string) []string {
	return []string{
		"SERVEZONE_CLUSTER_INGRESS_BEARER=" + bearer,
		"SERVEZONE_CLUSTER_RELAY_ORIGIN=" + origin,
		"SERVEZONE_CLUSTER_NODE_ID=" + node,
	}
}

// execIngress starts the binary with only PATH and env in its environment and collects
// its stderr. It does not wait for anything; the cleanup kills a process still running.
func execIngress(t *testing.T, env []string, args ...string) *ingressProc {
	t.Helper()
	bin := buildBinary(t)
	cmd := exec.Command(bin, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	return startCollecting(t, cmd)
}

// startCollecting starts cmd and collects its stderr lines; the cleanup kills a process
// still running.
func startCollecting(t *testing.T, cmd *exec.Cmd) *ingressProc {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &ingressProc{t: t, cmd: cmd, changed: make(chan struct{}), done: make(chan struct{})}
	go func() {
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

// startIngress starts the binary and waits for its "ingress started" line, whose bound
// addresses it records.
func startIngress(t *testing.T, env []string, args ...string) *ingressProc {
	t.Helper()
	p := execIngress(t, env, args...)
	line := p.waitLine(e2eWait, func(m map[string]any) bool { return m["msg"] == "ingress started" })
	for _, f := range []struct {
		key string
		dst *string
	}{{"http", &p.httpAddr}, {"https", &p.httpsAddr}, {"admin", &p.adminAddr}} {
		s, _ := line[f.key].(string)
		if _, _, err := net.SplitHostPort(s); err != nil {
			t.Fatalf("ingress started line has no %s address (%q):\n%s", f.key, s, p.stderr())
		}
		*f.dst = s
	}
	return p
}

// stderr returns every line read so far.
func (p *ingressProc) stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// findLine returns the first JSON log line (from index from on) that match accepts, and
// the index after it.
func (p *ingressProc) findLine(from int, match func(map[string]any) bool) (map[string]any, int, chan struct{}) {
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

// waitLine waits until a JSON log line matches, failing the test after limit or when the
// process ends first.
func (p *ingressProc) waitLine(limit time.Duration, match func(map[string]any) bool) map[string]any {
	p.t.Helper()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	from := 0
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
			p.t.Fatalf("the ingress exited (%v) before the expected log line; stderr:\n%s", p.waitErr, p.stderr())
		case <-timer.C:
			p.t.Fatalf("no expected log line within %s; stderr:\n%s", limit, p.stderr())
		}
	}
}

// signal sends sig to the process.
func (p *ingressProc) signal(sig os.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v: %v", sig, err)
	}
}

// wait waits up to limit for the exit and returns the exit status.
func (p *ingressProc) wait(limit time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(limit):
		p.t.Fatalf("the ingress did not exit within %s; stderr:\n%s", limit, p.stderr())
	}
	var ee *exec.ExitError
	if p.waitErr != nil && !errors.As(p.waitErr, &ee) {
		p.t.Fatalf("wait: %v", p.waitErr)
	}
	return p.cmd.ProcessState.ExitCode()
}

// stop sends SIGTERM and asserts a graceful stop: exit status 0 within limit.
func (p *ingressProc) stop(limit time.Duration) {
	p.t.Helper()
	p.signal(syscall.SIGTERM)
	if code := p.wait(limit); code != 0 {
		p.t.Fatalf("exit status %d after SIGTERM, want 0; stderr:\n%s", code, p.stderr())
	}
}

// assertNoSecret fails when secret appears anywhere in stderr.
func (p *ingressProc) assertNoSecret(secret string) {
	p.t.Helper()
	if strings.Contains(p.stderr(), secret) {
		p.t.Fatalf("stderr quotes a secret:\n%s", p.stderr())
	}
}

// httpClient returns a keep-alive client whose idle connections are closed at cleanup.
// It never follows redirects.
func httpClient(t *testing.T) *http.Client {
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
		ForceAttemptHTTP2: true,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{
		Transport:     tr,
		Timeout:       e2eWait,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// result is one answered request.
type result struct {
	status int
	header http.Header
	body   string
}

// get sends GET http://addr/path with Host host.
func get(c *http.Client, addr, host, path string) (result, error) {
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return result{}, err
	}
	req.Host = host
	resp, err := c.Do(req)
	if err != nil {
		return result{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return result{}, err
	}
	return result{resp.StatusCode, resp.Header, string(b)}, nil
}

// mustGet sends the request and fails the test unless it is answered with want.
func mustGet(t *testing.T, c *http.Client, addr, host, path string, want int) result {
	t.Helper()
	r, err := get(c, addr, host, path)
	if err != nil {
		t.Fatalf("GET %s%s (Host %s): %v", addr, path, host, err)
	}
	if r.status != want {
		t.Fatalf("GET %s%s (Host %s) = %d %q, want %d", addr, path, host, r.status, r.body, want)
	}
	return r
}

// waitStatus polls GET host until it is answered with want.
func waitStatus(t *testing.T, c *http.Client, addr, host, path string, want int) result {
	t.Helper()
	var last result
	testwait.UntilWhy(t, e2eWait, fmt.Sprintf("GET %s%s (Host %s) answered %d", addr, path, host, want), func() (bool, string) {
		r, err := get(c, addr, host, path)
		if err != nil {
			return false, err.Error()
		}
		last = r
		return r.status == want, fmt.Sprintf("got %d %q", r.status, r.body)
	})
	return last
}

// echoBackend is a workload on 127.0.0.1 that answers "name host path" and counts
// its requests.
func echoBackend(t *testing.T, name string, delay time.Duration) (*httptest.Server, routetable.Target) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if delay > 0 {
			time.Sleep(delay) // part of what is tested: a slow backend keeps requests in flight
		}
		fmt.Fprintf(w, "%s %s %s", name, r.Host, r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	return srv, targetOf(t, srv.Listener.Addr().String(), "lease-"+name)
}

func targetOf(t *testing.T, addr, lease string) routetable.Target {
	t.Helper()
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(ps)
	if err != nil {
		t.Fatal(err)
	}
	return routetable.Target{LeaseID: lease, Address: host, Port: port}
}

// route is a route to targets; cert "" means tls null.
func route(hostname, cert string, redirect bool, targets ...routetable.Target) routetable.Route {
	targets = slices.Clone(targets)
	slices.SortFunc(targets, func(a, b routetable.Target) int {
		return cmp.Or(strings.Compare(a.Address, b.Address), cmp.Compare(a.Port, b.Port))
	})
	r := routetable.Route{Hostname: hostname, Targets: targets}
	if cert != "" {
		r.TLS = &routetable.RouteTLS{CertificateID: cert, RedirectHTTP: redirect}
	}
	return r
}

// tableJSON encodes a route table with its routes and certificates put in contract order.
func tableJSON(t *testing.T, revision int64, certs []routetable.Certificate, routes ...routetable.Route) []byte {
	t.Helper()
	routes = slices.Clone(routes)
	slices.SortFunc(routes, func(a, b routetable.Route) int { return strings.Compare(a.Hostname, b.Hostname) })
	certs = slices.Clone(certs)
	slices.SortFunc(certs, func(a, b routetable.Certificate) int { return strings.Compare(a.ID, b.ID) })
	if routes == nil {
		routes = []routetable.Route{}
	}
	if certs == nil {
		certs = []routetable.Certificate{}
	}
	b, err := json.Marshal(routetable.Table{Revision: revision, Routes: routes, Certificates: certs})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writeFileAtomic replaces path by a rename, as config managers do.
func writeFileAtomic(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "next-"+filepath.Base(path))
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// statEntry is one IClusterTrafficStatistics.
type statEntry struct {
	DayUtc          string `json:"dayUtc"`
	NodeID          string `json:"nodeId"`
	Hostname        string `json:"hostname"`
	Requests        int64  `json:"requests"`
	BytesIn         int64  `json:"bytesIn"`
	BytesOut        int64  `json:"bytesOut"`
	Connections     int64  `json:"connections"`
	BackendFailures struct {
		Connect   int64 `json:"connect"`
		Handshake int64 `json:"handshake"`
		Request   int64 `json:"request"`
	} `json:"backendFailures"`
}

// statPage is one getClusterTrafficStatistics response.
type statPage struct {
	Statistics []statEntry `json:"statistics"`
	NextCursor *string     `json:"nextCursor"`
}

// checkEntries compares entries with want (hostname → requests, in the order expected)
// for day and node, and returns what differs.
func checkEntries(got []statEntry, day, node string, want []string, requests map[string]int64) string {
	var problems []string
	if len(got) != len(want) {
		problems = append(problems, fmt.Sprintf("%d entries, want %d", len(got), len(want)))
	}
	for i, e := range got {
		if i < len(want) && e.Hostname != want[i] {
			problems = append(problems, fmt.Sprintf("entry %d is %q, want %q", i, e.Hostname, want[i]))
		}
		if e.DayUtc != day || e.NodeID != node {
			problems = append(problems, fmt.Sprintf("entry %d: day %s node %s, want %s %s", i, e.DayUtc, e.NodeID, day, node))
		}
		if e.Requests != requests[e.Hostname] {
			problems = append(problems, fmt.Sprintf("%s: %d requests, want %d", e.Hostname, e.Requests, requests[e.Hostname]))
		}
		if e.Requests > 0 && (e.BytesIn <= 0 || e.BytesOut <= 0) {
			problems = append(problems, fmt.Sprintf("%s: bytes in %d out %d, want both positive", e.Hostname, e.BytesIn, e.BytesOut))
		}
		if f := e.BackendFailures; f.Connect+f.Handshake+f.Request != 0 {
			problems = append(problems, fmt.Sprintf("%s: backend failures %+v, want none", e.Hostname, f))
		}
	}
	return strings.Join(problems, "; ")
}

// today is the UTC day of now.
func today() string { return time.Now().UTC().Format(time.DateOnly) }

// closedOrigin returns an http origin on loopback where nothing listens.
func closedOrigin(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// ctxT is a context that ends with the test or after limit.
func ctxT(t *testing.T, limit time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	t.Cleanup(cancel)
	return ctx
}
