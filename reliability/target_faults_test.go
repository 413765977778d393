package reliability

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/binarytest"
	"github.com/serve-zone/ingress/internal/testwait"
	"github.com/serve-zone/ingress/routetable"
)

// faultTarget is a target on loopback that reads each request head and then does what
// its behaviour says. open counts its connections the other side has not closed yet.
type faultTarget struct {
	ln      net.Listener
	open    atomic.Int64
	written atomic.Int64 // response bytes written, all connections
	wg      sync.WaitGroup
}

// behaviour serves one request read from br on c; it returns false to stop serving c
// (c is then closed, if the behaviour did not close it).
type behaviour func(c *net.TCPConn, br *bufio.Reader, req *http.Request, ft *faultTarget) bool

func newFaultTarget(t *testing.T, b behaviour) (*faultTarget, routetable.Target) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ft := &faultTarget{ln: ln}
	ft.wg.Add(1)
	go func() {
		defer ft.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			ft.open.Add(1)
			ft.wg.Add(1)
			go func() {
				defer ft.wg.Done()
				defer ft.open.Add(-1)
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return // the ingress closed the connection (or sent nonsense)
					}
					if req.Body != nil {
						_, _ = io.Copy(io.Discard, req.Body)
					}
					if !b(c.(*net.TCPConn), br, req, ft) {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); ft.wg.Wait() })
	return ft, binarytest.TargetOf(t, ln.Addr().String(), "lease-fault")
}

func (ft *faultTarget) write(c net.Conn, s string) error {
	n, err := io.WriteString(c, s)
	ft.written.Add(int64(n))
	return err
}

// waitEOF reads c until the ingress closes it (or limit passes); the target keeps quiet.
func waitEOF(c net.Conn, limit time.Duration) {
	_ = c.SetReadDeadline(time.Now().Add(limit))
	_, _ = io.Copy(io.Discard, c)
}

// reset closes c with an RST.
func reset(c *net.TCPConn) {
	_ = c.SetLinger(0)
	_ = c.Close()
}

// TestTargetFaults: every way a target can misbehave gets the right status, is counted
// once with the right kind (or not at all when it is the client's doing), leaves the
// healthy route untouched while it happens, and leaves no target connection or goroutine
// of the binary behind.
func TestTargetFaults(t *testing.T) {
	t.Parallel()
	const healthy = "healthy.rel.test"
	good := echoBackend(t, "good")

	type fault struct {
		name   string
		b      behaviour
		check  func(t *testing.T, p *proc, host string) // sends the request(s) and checks what the client saw
		kind   string                                   // the failure kind counted once; "" none
		ownEnd bool                                     // the target itself ends its connections
	}
	faults := []fault{
		{
			name: "killed mid-response",
			b: func(c *net.TCPConn, _ *bufio.Reader, _ *http.Request, ft *faultTarget) bool {
				_ = ft.write(c, "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n"+strings.Repeat("k", 5000))
				reset(c)
				return false
			},
			check: func(t *testing.T, p *proc, host string) { expectCut(t, p, host, 200) }, kind: "request", ownEnd: true,
		},
		{
			name: "accepts and never answers",
			b: func(c *net.TCPConn, _ *bufio.Reader, _ *http.Request, _ *faultTarget) bool {
				waitEOF(c, time.Minute)
				return false
			},
			check: func(t *testing.T, p *proc, host string) { expectStatus(t, p, host, http.StatusGatewayTimeout) }, kind: "request",
		},
		{
			name: "resets after the request head",
			b: func(c *net.TCPConn, _ *bufio.Reader, _ *http.Request, _ *faultTarget) bool {
				reset(c)
				return false
			},
			check: func(t *testing.T, p *proc, host string) { expectStatus(t, p, host, http.StatusBadGateway) }, kind: "request", ownEnd: true,
		},
		{
			name: "resets after the response headers",
			b: func(c *net.TCPConn, _ *bufio.Reader, _ *http.Request, ft *faultTarget) bool {
				_ = ft.write(c, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
				reset(c)
				return false
			},
			check: func(t *testing.T, p *proc, host string) { expectCut(t, p, host, 200) }, kind: "request", ownEnd: true,
		},
		{
			name: "truncates",
			b: func(c *net.TCPConn, _ *bufio.Reader, _ *http.Request, ft *faultTarget) bool {
				_ = ft.write(c, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nonly this")
				_ = c.CloseWrite()
				waitEOF(c, time.Minute)
				return false
			},
			check: func(t *testing.T, p *proc, host string) { expectCut(t, p, host, 200) }, kind: "request",
		},
		{
			name: "answers garbage",
			b: func(c *net.TCPConn, _ *bufio.Reader, _ *http.Request, ft *faultTarget) bool {
				_ = ft.write(c, "SSH-2.0-OpenSSH_9.6\r\n\x00\x01\x02garbage\r\n\r\n")
				waitEOF(c, time.Minute)
				return false
			},
			check: func(t *testing.T, p *proc, host string) { expectStatus(t, p, host, http.StatusBadGateway) }, kind: "request",
		},
		{
			name: "answers twice",
			b: func(c *net.TCPConn, _ *bufio.Reader, req *http.Request, ft *faultTarget) bool {
				body := "answer " + req.URL.Path
				stale := "STALE second answer"
				return ft.write(c, fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%sHTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s",
					len(body), body, len(stale), stale)) == nil
			},
			check: func(t *testing.T, p *proc, host string) {
				c := client(t)
				for i := range 3 {
					path := fmt.Sprintf("/twice-%d", i)
					if got := mustStatus(t, c, p.HTTP, host, path, 200); got != "answer "+path {
						t.Fatalf("request %d got %q, want %q (a target's extra answer reached another request)", i, got, "answer "+path)
					}
				}
			},
		},
		{
			name: "sends a body to HEAD",
			b: func(c *net.TCPConn, _ *bufio.Reader, req *http.Request, ft *faultTarget) bool {
				body := "answer " + req.URL.Path
				if req.Method == http.MethodHead {
					body = "HEAD-BODY-LEAK" // 14 bytes nobody asked for
				}
				return ft.write(c, fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)) == nil
			},
			check: func(t *testing.T, p *proc, host string) { expectHeadThenGet(t, p, host) },
		},
	}

	var routes []routetable.Route
	targets := make([]*faultTarget, len(faults))
	for i, f := range faults {
		ft, tg := newFaultTarget(t, f.b)
		targets[i] = ft
		routes = append(routes, binarytest.Route(fmt.Sprintf("fault%d.rel.test", i), "", false, tg))
	}
	gigaTarget, gigaTg := newFaultTarget(t, func(c *net.TCPConn, _ *bufio.Reader, _ *http.Request, ft *faultTarget) bool {
		if ft.write(c, "HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n\r\n") != nil {
			return false
		}
		chunk := strings.Repeat("g", 64<<10)
		for range (1 << 30) / len(chunk) {
			if ft.write(c, chunk) != nil {
				return false
			}
		}
		return true
	})
	routes = append(routes, binarytest.Route("giga.rel.test", "", false, gigaTg), binarytest.Route(healthy, "", false, good))

	p, _ := standalone(t, binarytest.TableJSON(t, 1, nil, routes...), "--response-header-timeout", "1s")

	// The healthy route is loaded for the whole test: not one of its requests may fail.
	ctx, stopLoad := context.WithCancel(context.Background())
	load := runLoad(ctx, t, p.HTTP, healthy, 4)
	mustStatus(t, client(t), p.HTTP, healthy, "/warm", 200)
	base := scrape(t, p.Admin).usage()

	for i, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			host := routes[i].Hostname
			before := scrape(t, p.Admin).failures()
			f.check(t, p, host)
			want := map[string]float64{}
			if f.kind != "" {
				want[f.kind] = 1
			}
			expectFailures(t, p, before, want)
			if !f.ownEnd {
				testwait.UntilWhy(t, waitLimit, "the ingress closed its connections to the faulty target", func() (bool, string) {
					n := targets[i].open.Load()
					return n == 0 || f.kind == "" && n <= 1, fmt.Sprintf("%d still open", n)
				})
			}
		})
	}

	t.Run("1 GiB to a client that leaves", func(t *testing.T) {
		before := scrape(t, p.Admin).failures()
		c, err := net.Dial("tcp", p.HTTP)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET /giga HTTP/1.1\r\nHost: giga.rel.test\r\n\r\n")
		if _, err := io.CopyN(io.Discard, c, 1<<20); err != nil {
			t.Fatalf("the first MiB: %v", err)
		}
		c.Close()
		testwait.UntilWhy(t, waitLimit, "the ingress closed the target's connection", func() (bool, string) {
			n := gigaTarget.open.Load()
			return n == 0, fmt.Sprintf("%d open, %d MiB written", n, gigaTarget.written.Load()>>20)
		})
		if w := gigaTarget.written.Load(); w > 256<<20 {
			t.Fatalf("the target wrote %d MiB before the ingress let go, want it stopped soon after the client left", w>>20)
		}
		expectFailures(t, p, before, map[string]float64{}) // the client's doing, not a backend failure
	})

	stopLoad()
	if n, failed := load.wait(); failed > 0 || n == 0 {
		t.Fatalf("healthy route during the faults: %d requests, %d failed: %v", n, failed, load.firstErr())
	}
	after := settle(t, p.Admin, base, 8, 8<<20, waitLimit)
	t.Logf("goroutines/heap: baseline %s; after the faults %s", base, after)
}

// expectStatus sends GET on a fresh connection and wants status.
func expectStatus(t *testing.T, p *proc, host string, want int) {
	t.Helper()
	c := client(t)
	code, body, err := do(context.Background(), c, http.MethodGet, p.HTTP, host, "/fault")
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	if code != want {
		t.Fatalf("GET = %d %q, want %d", code, body, want)
	}
}

// expectCut wants a response that starts with status and is then cut: the client must not
// take a truncated body for a complete one.
func expectCut(t *testing.T, p *proc, host string, status int) {
	t.Helper()
	c := client(t)
	code, body, err := do(context.Background(), c, http.MethodGet, p.HTTP, host, "/fault")
	if code != 0 && code != status {
		t.Fatalf("GET = %d, want %d then a cut body", code, status)
	}
	if err == nil {
		t.Fatalf("GET = %d with a complete %d-byte body, want the body cut (the target never sent it all)", code, len(body))
	}
}

// expectHeadThenGet sends HEAD and GET pipelined on one connection: the HEAD's answer has
// no body and the GET gets its own answer.
func expectHeadThenGet(t *testing.T, p *proc, host string) {
	t.Helper()
	c, err := net.Dial("tcp", p.HTTP)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(waitLimit))
	fmt.Fprintf(c, "HEAD /h HTTP/1.1\r\nHost: %s\r\n\r\n", host)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodHead})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("HEAD: %v %v", resp, err)
	}
	fmt.Fprintf(c, "GET /after-head HTTP/1.1\r\nHost: %s\r\n\r\n", host)
	resp, err = http.ReadResponse(br, &http.Request{Method: http.MethodGet})
	if err != nil {
		t.Fatalf("GET after HEAD: %v (the HEAD's body reached the client's connection?)", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil || string(b) != "answer /after-head" {
		t.Fatalf("GET after HEAD = %d %q %v, want 200 \"answer /after-head\"", resp.StatusCode, b, err)
	}
	// And the target connection the HEAD left dirty is not reused for another client.
	if got := mustStatus(t, client(t), p.HTTP, host, "/third", 200); got != "answer /third" {
		t.Fatalf("a later request got %q, want \"answer /third\"", got)
	}
}

// expectFailures waits until the backend failure counters moved by want from before, then
// checks (after a request on another connection) that they moved by exactly that.
func expectFailures(t *testing.T, p *proc, before, want map[string]float64) {
	t.Helper()
	diff := func() map[string]float64 {
		now := scrape(t, p.Admin).failures()
		d := map[string]float64{}
		for k, v := range now {
			if v != before[k] {
				d[k] = v - before[k]
			}
		}
		return d
	}
	same := func(d map[string]float64) bool {
		if len(d) != len(want) {
			return false
		}
		for k, v := range want {
			if d[k] != v {
				return false
			}
		}
		return true
	}
	testwait.UntilWhy(t, waitLimit, "backend failures counted", func() (bool, string) {
		d := diff()
		return same(d), fmt.Sprintf("moved by %v, want %v", d, want)
	})
	// A second look after the ingress had time to count anything twice.
	time.Sleep(200 * time.Millisecond)
	if d := diff(); !same(d) {
		t.Fatalf("backend failures moved by %v, want exactly %v", d, want)
	}
}

// load is a closed-loop load generator: workers send GET in a loop until ctx ends.
type load struct {
	wg     sync.WaitGroup
	n      atomic.Int64
	failed atomic.Int64
	mu     sync.Mutex
	first  error
	lat    []time.Duration
}

func runLoad(ctx context.Context, t *testing.T, addr, host string, workers int) *load {
	l := &load{}
	c := client(t)
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				t0 := time.Now()
				code, _, err := do(ctx, c, http.MethodGet, addr, host, fmt.Sprintf("/load/%d/%d", w, i))
				if ctx.Err() != nil && err != nil {
					return // cancelled by the end of the load, not a failure
				}
				d := time.Since(t0)
				l.n.Add(1)
				if err == nil && code != 200 {
					err = fmt.Errorf("status %d", code)
				}
				l.mu.Lock()
				l.lat = append(l.lat, d)
				if err != nil {
					l.failed.Add(1)
					if l.first == nil {
						l.first = err
					}
				}
				l.mu.Unlock()
			}
		}()
	}
	return l
}

func (l *load) wait() (n, failed int64) {
	l.wg.Wait()
	return l.n.Load(), l.failed.Load()
}

func (l *load) firstErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.first == nil {
		return errors.New("none")
	}
	return l.first
}
