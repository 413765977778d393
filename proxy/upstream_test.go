package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/serve-zone/ingress/stats"
)

// The target engine (exchange.go, relay.go) is shared by every front-end; these tests
// run each behaviour through the HTTP/1.1 fast path and through net/http's front-end.

// frontEnds are the two HTTP/1.1 front-ends: the fast path, and net/http's (forward.go).
var frontEnds = []struct {
	name    string
	netOnly bool
}{{"fast", false}, {"net/http", true}}

// upEnv makes an env on the given front-end with app.example.test routed to addr.
func upEnv(t *testing.T, netOnly bool, addr string, opts ...func(*Config)) *env {
	t.Helper()
	e := newEnv(t, append(opts, withH1OffIf(netOnly))...)
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{addr}}})
	return e
}

// do sends method to app.example.test through c and returns status and body.
func do(t *testing.T, c *http.Client, method, path, body string, hdr ...string) (int, string) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://app.example.test"+path, r)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func TestUpstreamReusesOneConnection(t *testing.T) {
	for _, fe := range frontEnds {
		t.Run(fe.name, func(t *testing.T) {
			be, conns := countingBackend(t, echoInfo())
			e := upEnv(t, fe.netOnly, be)
			c := e.h1Client()
			for i := range 20 {
				if st, b := do(t, c, "GET", "/x", ""); st != 200 || b != "hello from app.example.test" {
					t.Fatalf("request %d: %d %q", i, st, b)
				}
			}
			if n := conns.Load(); n != 1 {
				t.Errorf("target saw %d connections for 20 sequential requests, want 1", n)
			}
			waitFor(t, "one idle connection", func() bool { return e.srv.up.Idle(be) == 1 })
		})
	}
}

func TestUpstreamConnectionCloseHonoured(t *testing.T) {
	for _, fe := range frontEnds {
		t.Run(fe.name, func(t *testing.T) {
			be, conns := countingBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Connection", "close")
				io.WriteString(w, "ok")
			}))
			e := upEnv(t, fe.netOnly, be)
			c := e.h1Client()
			for i := range 3 {
				if st, b := do(t, c, "GET", "/", ""); st != 200 || b != "ok" {
					t.Fatalf("request %d: %d %q", i, st, b)
				}
			}
			e.waitRequests("app.example.test", 3)
			if n := e.srv.up.Idle(be); n != 0 {
				t.Errorf("a Connection: close connection went idle (%d)", n)
			}
			if n := conns.Load(); n != 3 {
				t.Errorf("%d connections, want 3", n)
			}
		})
	}
}

func TestUpstreamHTTP10WithoutKeepAliveNotReused(t *testing.T) {
	for _, fe := range frontEnds {
		t.Run(fe.name, func(t *testing.T) {
			var accepted atomic.Int64
			addr := rawServer(t, func(c net.Conn) {
				accepted.Add(1)
				br := bufio.NewReader(c)
				if _, err := http.ReadRequest(br); err != nil {
					return
				}
				io.WriteString(c, "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")
				io.Copy(io.Discard, br) // keep it open: only the version says "close"
			})
			e := upEnv(t, fe.netOnly, addr)
			c := e.h1Client()
			for i := range 2 {
				if st, b := do(t, c, "GET", "/", ""); st != 200 || b != "ok" {
					t.Fatalf("request %d: %d %q", i, st, b)
				}
			}
			e.waitRequests("app.example.test", 2)
			if n := e.srv.up.Idle(addr); n != 0 {
				t.Errorf("HTTP/1.0 connection without keep-alive went idle")
			}
			if n := accepted.Load(); n != 2 {
				t.Errorf("%d connections, want 2", n)
			}
		})
	}
}

func TestUpstreamResponseHeaderTimeout(t *testing.T) {
	for _, fe := range frontEnds {
		t.Run(fe.name, func(t *testing.T) {
			hang := make(chan struct{})
			defer close(hang)
			be := backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-hang:
				case <-r.Context().Done():
				}
			}))
			e := upEnv(t, fe.netOnly, be, func(c *Config) { c.ResponseHeaderTimeout = 200 * time.Millisecond })
			start := time.Now()
			if st, _ := do(t, e.h1Client(), "GET", "/", ""); st != 504 {
				t.Fatalf("status %d, want 504", st)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("took %v", d)
			}
			e.waitRequests("app.example.test", 1)
			if st := e.stat("app.example.test"); st.BackendFailures != (stats.BackendFailures{Request: 1}) {
				t.Errorf("failures %+v", st.BackendFailures)
			}
		})
	}
}

func TestUpstreamHeaderLimit(t *testing.T) {
	for _, fe := range frontEnds {
		t.Run(fe.name, func(t *testing.T) {
			addr := rawServer(t, func(c net.Conn) {
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					return
				}
				io.WriteString(c, "HTTP/1.1 200 OK\r\n")
				line := "X-Big: " + strings.Repeat("a", 1000) + "\r\n"
				for range 2000 { // 2 MB, over upstream.DefaultLimits' 1 MiB
					if _, err := io.WriteString(c, line); err != nil {
						return
					}
				}
			})
			e := upEnv(t, fe.netOnly, addr)
			if st, _ := do(t, e.h1Client(), "GET", "/", ""); st != 502 {
				t.Fatalf("status %d, want 502", st)
			}
		})
	}
}

func TestUpstreamDialFailureIsConnect(t *testing.T) {
	for _, fe := range frontEnds {
		t.Run(fe.name, func(t *testing.T) {
			e := upEnv(t, fe.netOnly, deadAddr(t))
			if st, _ := do(t, e.h1Client(), "GET", "/", ""); st != 502 {
				t.Fatalf("status %d, want 502", st)
			}
			e.waitRequests("app.example.test", 1)
			if st := e.stat("app.example.test"); st.BackendFailures.Connect != 1 {
				t.Errorf("failures %+v, want one connect failure", st.BackendFailures)
			}
		})
	}
}

func TestUpstreamIdleExpiry(t *testing.T) {
	for _, fe := range frontEnds {
		t.Run(fe.name, func(t *testing.T) {
			be, conns := countingBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
			e := upEnv(t, fe.netOnly, be)
			var skew atomic.Int64
			e.srv.up.now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
			c := e.h1Client()
			do(t, c, "GET", "/", "")
			waitFor(t, "idle", func() bool { return e.srv.up.Idle(be) == 1 })
			e.srv.up.Sweep(e.srv.up.now())
			if e.srv.up.Idle(be) != 1 {
				t.Fatal("a fresh idle connection was swept")
			}
			skew.Store(int64(e.srv.up.IdleTimeout))
			e.srv.up.Sweep(e.srv.up.now())
			if e.srv.up.Idle(be) != 0 {
				t.Fatal("an expired idle connection was kept")
			}
			// Lazy expiry at checkout: the expired connection is not used.
			do(t, c, "GET", "/", "")
			waitFor(t, "idle", func() bool { return e.srv.up.Idle(be) == 1 })
			skew.Add(int64(e.srv.up.IdleTimeout))
			if st, b := do(t, c, "GET", "/", ""); st != 200 || b != "ok" {
				t.Fatalf("%d %q", st, b)
			}
			if n := conns.Load(); n != 3 {
				t.Errorf("%d connections, want 3 (each expired one replaced)", n)
			}
		})
	}
}
