package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/serve-zone/ingress/proxy/internal/upstream"
	"github.com/serve-zone/ingress/stats"
)

// countingBackend is an httptest target that counts the connections it accepted.
func countingBackend(t testing.TB, h http.Handler) (addr string, conns *atomic.Int64) {
	t.Helper()
	conns = new(atomic.Int64)
	ts := httptest.NewUnstartedServer(h)
	ts.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	ts.Start()
	t.Cleanup(ts.Close)
	return strings.TrimPrefix(ts.URL, "http://"), conns
}

// newTestUpstream is an upstream as New builds it, with a fallback that records use.
func newTestUpstream(t testing.TB, headerTimeout time.Duration) (*leanTransport, *recordingRT) {
	t.Helper()
	_, tr := newTransport(Config{DialTimeout: 2 * time.Second, ResponseHeaderTimeout: headerTimeout})
	t.Cleanup(tr.CloseIdleConnections)
	u := newLeanTransport(Config{ResponseHeaderTimeout: headerTimeout}, tr)
	rec := &recordingRT{rt: tr}
	u.fallback = rec
	t.Cleanup(u.CloseIdle)
	return u, rec
}

type recordingRT struct {
	rt http.RoundTripper
	n  atomic.Int64
}

func (r *recordingRT) RoundTrip(req *http.Request) (*http.Response, error) {
	r.n.Add(1)
	return r.rt.RoundTrip(req)
}

func doUp(t testing.TB, u *leanTransport, req *http.Request) (*http.Response, string, error) {
	t.Helper()
	res, err := u.RoundTrip(req)
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	return res, string(b), err
}

func upReq(t testing.TB, method, addr, path string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+addr+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header["User-Agent"] = valEmpty
	return req
}

func TestUpstreamReusesOneConnection(t *testing.T) {
	e := newEnv(t)
	be, conns := countingBackend(t, echoInfo())
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{be}}})
	c := e.h1Client()
	for i := range 50 {
		req, _ := http.NewRequest("GET", "http://app.example.test/x", nil)
		req.Header["User-Agent"] = valEmpty // the client sends none
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || string(b) != "hello from app.example.test" {
			t.Fatalf("request %d: %d %q", i, res.StatusCode, b)
		}
		if ua, ok := res.Header["X-Seen-User-Agent"]; ok {
			t.Fatalf("target saw User-Agent %q (net/http's default leaked in)", ua)
		}
		if got := res.Header.Get("X-Seen-Host"); got != "app.example.test" {
			t.Fatalf("target saw Host %q", got)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("target saw %d connections for 50 sequential requests, want 1", n)
	}
	// The fast path writes the last response before it pools the target connection.
	waitFor(t, "one idle connection", func() bool { return e.srv.up.Idle(be) == 1 })
}

func TestUpstreamPoolIsBounded(t *testing.T) {
	release := make(chan struct{})
	var arrived sync.WaitGroup
	var seen atomic.Int64
	be, conns := countingBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if seen.Add(1) <= 5 {
			arrived.Done()
			<-release
		}
		io.WriteString(w, "ok")
	}))
	u, _ := newTestUpstream(t, 5*time.Second)
	u.MaxIdle = 2
	const n = 5
	arrived.Add(n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			_, body, err := doUp(t, u, upReq(t, "GET", be, "/", nil))
			if err == nil && body != "ok" {
				err = fmt.Errorf("body %q", body)
			}
			errs <- err
		})
	}
	arrived.Wait()
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if c := conns.Load(); c != n {
		t.Fatalf("%d connections for %d concurrent requests", c, n)
	}
	if got := u.Idle(be); got != 2 {
		t.Errorf("%d idle connections, want the bound 2", got)
	}
	// The two kept are reused: no new connection for the next two requests.
	for range 2 {
		if _, _, err := doUp(t, u, upReq(t, "GET", be, "/", nil)); err != nil {
			t.Fatal(err)
		}
	}
	if c := conns.Load(); c != n {
		t.Errorf("%d connections after reuse, want %d", c, n)
	}
}

// closingTarget answers one request per connection with a keep-alive response and then
// closes the connection, as a target whose keep-alive timeout fired would.
func closingTarget(t testing.TB) (addr string, accepted *atomic.Int64) {
	t.Helper()
	accepted = new(atomic.Int64)
	addr = rawServer(t, func(c net.Conn) {
		accepted.Add(1)
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	})
	return addr, accepted
}

func TestUpstreamStaleConnection(t *testing.T) {
	t.Run("GET retried once on a fresh connection", func(t *testing.T) {
		addr, accepted := closingTarget(t)
		u, _ := newTestUpstream(t, 5*time.Second)
		for i := range 3 {
			res, body, err := doUp(t, u, upReq(t, "GET", addr, "/", nil))
			if err != nil || res.StatusCode != 200 || body != "ok" {
				t.Fatalf("request %d: %v %q", i, err, body)
			}
		}
		// Request 1 dialled; 2 and 3 each found the pooled connection closed by the
		// target and dialled once more.
		if n := accepted.Load(); n != 3 {
			t.Errorf("target accepted %d connections, want 3", n)
		}
	})
	t.Run("POST with a started body is not retried", func(t *testing.T) {
		e := newEnv(t)
		// The target answers a connection's first request and dies under its second one,
		// after reading it: the reuse probe finds the idle connection alive, so only the
		// retry rule decides.
		accepted := new(atomic.Int64)
		addr := rawServer(t, func(c net.Conn) {
			accepted.Add(1)
			br := bufio.NewReader(c)
			for i := 0; ; i++ {
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				if i == 1 {
					return
				}
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			}
		})
		e.apply([]routeSpec{{host: "app.example.test", backends: []string{addr}}})
		c := e.h1Client()
		res, body := get(t, c, "http://app.example.test/", "")
		if res.StatusCode != 200 || body != "ok" {
			t.Fatalf("first: %d %q", res.StatusCode, body)
		}
		req, _ := http.NewRequest("POST", "http://app.example.test/", strings.NewReader("payload"))
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 502 {
			t.Errorf("status %d, want 502 (the body was sent once, on the stale connection)", res.StatusCode)
		}
		if n := accepted.Load(); n != 1 {
			t.Errorf("target accepted %d connections: the POST was retried", n)
		}
		e.waitRequests("app.example.test", 2)
		if st := e.stat("app.example.test"); st.BackendFailures.Request != 1 || st.BackendFailures.Connect != 0 {
			t.Errorf("failures %+v, want one request failure", st.BackendFailures)
		}
	})
}

// TestUpstreamRetryRule checks what the lean path tells upstream.MayReplay about a
// request (the rule itself is tested in the upstream package).
func TestUpstreamRetryRule(t *testing.T) {
	get := upReq(t, "GET", "x", "/", nil)
	post := upReq(t, "POST", "x", "/", nil)
	keyed := upReq(t, "POST", "x", "/", nil)
	keyed.Header.Set("Idempotency-Key", "k")
	started := upReq(t, "PUT", "x", "/", nil)
	tb := &trackedBody{rc: io.NopCloser(strings.NewReader("b"))}
	tb.started.Store(true)
	started.Body = tb
	fresh := upReq(t, "PUT", "x", "/", nil)
	fresh.Body = &trackedBody{rc: io.NopCloser(strings.NewReader("b"))}
	foreign := upReq(t, "PUT", "x", "/", nil)
	foreign.Body = io.NopCloser(strings.NewReader("b"))
	tests := []struct {
		name              string
		req               *http.Request
		taken, replayable bool
	}{
		{"GET", get, false, true},
		{"POST", post, false, false},
		{"POST with idempotency key", keyed, false, true},
		{"body started", started, true, false},
		{"body not started", fresh, false, false},
		{"a body we do not track", foreign, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := bodyTaken(tc.req); got != tc.taken {
				t.Errorf("bodyTaken = %v, want %v", got, tc.taken)
			}
			if got := replayableReq(tc.req); got != tc.replayable {
				t.Errorf("replayableReq = %v, want %v", got, tc.replayable)
			}
		})
	}
}

func TestUpstreamConnectionCloseHonoured(t *testing.T) {
	be, conns := countingBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/close" {
			w.Header().Set("Connection", "close")
		}
		io.WriteString(w, "ok")
	}))
	u, _ := newTestUpstream(t, 5*time.Second)
	for range 3 {
		if _, _, err := doUp(t, u, upReq(t, "GET", be, "/close", nil)); err != nil {
			t.Fatal(err)
		}
		if n := u.Idle(be); n != 0 {
			t.Fatalf("a Connection: close connection went idle (%d)", n)
		}
	}
	if n := conns.Load(); n != 3 {
		t.Errorf("%d connections, want 3", n)
	}
}

func TestUpstreamHTTP10WithoutKeepAliveNotReused(t *testing.T) {
	addr := rawServer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		http.ReadRequest(br)
		io.WriteString(c, "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")
		io.Copy(io.Discard, br) // keep it open: only the header says "close"
	})
	u, _ := newTestUpstream(t, 5*time.Second)
	_, body, err := doUp(t, u, upReq(t, "GET", addr, "/", nil))
	if err != nil || body != "ok" {
		t.Fatalf("%v %q", err, body)
	}
	if n := u.Idle(addr); n != 0 {
		t.Errorf("HTTP/1.0 connection without keep-alive went idle")
	}
}

func TestUpstreamResponseHeaderTimeout(t *testing.T) {
	hang := make(chan struct{})
	defer close(hang)
	be := backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	u, _ := newTestUpstream(t, 200*time.Millisecond)
	req := upReq(t, "GET", be, "/", nil)
	start := time.Now()
	_, err := u.RoundTrip(req)
	if !errors.Is(err, upstream.ErrHeaderTimeout) {
		t.Fatalf("err %v, want the response header timeout", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %v", d)
	}
	if o := classify(err, req, nil); o != outcomeTimeout || o.status() != 504 {
		t.Errorf("classified %v (status %d), want outcomeTimeout/504", o, o.status())
	}
	// Through the proxy: 504, one request failure (TestFailureMapping covers a raw
	// target; this is a target that read the request and hangs).
	e := newEnv(t, func(c *Config) { c.ResponseHeaderTimeout = 200 * time.Millisecond })
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{be}}})
	res, _ := get(t, e.h1Client(), "http://app.example.test/", "")
	if res.StatusCode != 504 {
		t.Fatalf("status %d", res.StatusCode)
	}
	e.waitRequests("app.example.test", 1)
	if st := e.stat("app.example.test"); st.BackendFailures != (stats.BackendFailures{Request: 1}) {
		t.Errorf("failures %+v", st.BackendFailures)
	}
}

func TestUpstreamClientCancel(t *testing.T) {
	started := make(chan struct{}, 1)
	be := backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/body" {
			w.Header().Set("Content-Length", "10")
			io.WriteString(w, "12345")
			w.(http.Flusher).Flush()
		}
		started <- struct{}{}
		<-r.Context().Done()
	}))
	u, _ := newTestUpstream(t, 10*time.Second)
	t.Run("waiting for the header", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		req := upReq(t, "GET", be, "/", nil).WithContext(ctx)
		go func() { <-started; cancel() }()
		start := time.Now()
		_, err := u.RoundTrip(req)
		if err == nil {
			t.Fatal("no error")
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("cancel took %v", d)
		}
		if o := classify(err, req, nil); o != outcomeClientGone {
			t.Errorf("classified %v, want outcomeClientGone", o)
		}
	})
	t.Run("reading the body", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		req := upReq(t, "GET", be, "/body", nil).WithContext(ctx)
		res, err := u.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		<-started
		buf := make([]byte, 5)
		if _, err := io.ReadFull(res.Body, buf); err != nil {
			t.Fatal(err)
		}
		cancel()
		if _, err := io.ReadAll(res.Body); err == nil {
			t.Fatal("body read survived the cancel")
		}
		res.Body.Close()
		if n := u.Idle(be); n != 0 {
			t.Errorf("cancelled connection went idle")
		}
	})
}

func TestUpstreamBodiesAndStatuses(t *testing.T) {
	big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	be, conns := countingBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/chunked":
			w.Header().Set("Trailer", "X-Sum")
			w.WriteHeader(200)
			io.WriteString(w, "part1,")
			w.(http.Flusher).Flush()
			io.WriteString(w, "part2")
			w.Header().Set("X-Sum", "s1")
		case "/big":
			w.Header().Set("Content-Length", strconv.Itoa(len(big)))
			io.WriteString(w, big)
		case "/head":
			w.Header().Set("Content-Length", "1234")
		case "/204":
			w.WriteHeader(204)
		case "/304":
			w.WriteHeader(304)
		case "/post":
			b, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "%s %d %q", r.Method, r.ContentLength, b)
		case "/early":
			w.Header().Set("Link", "</a.css>; rel=preload")
			w.WriteHeader(103)
			io.WriteString(w, "after hints")
		}
	}))
	e := newEnv(t)
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{be}}})
	c := e.h1Client()
	tests := []struct {
		method, path, body string
		status             int
		wantBody           string
		check              func(t *testing.T, res *http.Response)
	}{
		{"GET", "/chunked", "", 200, "part1,part2", func(t *testing.T, res *http.Response) {
			if got := res.Trailer.Get("X-Sum"); got != "s1" {
				t.Errorf("trailer %q", got)
			}
		}},
		{"GET", "/big", "", 200, big, nil},
		{"HEAD", "/head", "", 200, "", func(t *testing.T, res *http.Response) {
			if res.ContentLength != 1234 {
				t.Errorf("HEAD Content-Length %d", res.ContentLength)
			}
		}},
		{"GET", "/204", "", 204, "", nil},
		{"GET", "/304", "", 304, "", nil},
		{"POST", "/post", "small body", 200, `POST 10 "small body"`, nil},
		{"POST", "/post", "", 200, `POST 0 ""`, nil},
		{"GET", "/early", "", 200, "after hints", nil},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			var rb io.Reader
			if tc.body != "" {
				rb = strings.NewReader(tc.body)
			}
			req, _ := http.NewRequest(tc.method, "http://app.example.test"+tc.path, rb)
			res, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(res.Body)
			res.Body.Close()
			if err != nil || res.StatusCode != tc.status || string(b) != tc.wantBody {
				t.Fatalf("got %d, %d bytes (%v), want %d, %d bytes", res.StatusCode, len(b), err, tc.status, len(tc.wantBody))
			}
			if tc.check != nil {
				tc.check(t, res)
			}
		})
	}
	e.waitRequests("app.example.test", uint64(len(tests)))
	if n := conns.Load(); n != 1 {
		t.Errorf("target saw %d connections, want every request on one", n)
	}
	if st := e.stat("app.example.test"); st.BackendFailures != (stats.BackendFailures{}) {
		t.Errorf("failures %+v", st.BackendFailures)
	}
}

func TestUpstreamFallback(t *testing.T) {
	be, _ := countingBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "%d", n)
	}))
	u, rec := newTestUpstream(t, 5*time.Second)
	expect := upReq(t, "POST", be, "/", strings.NewReader("abc"))
	expect.Header.Set("Expect", "100-continue")
	chunked := upReq(t, "POST", be, "/", io.MultiReader(strings.NewReader("abcd")))
	chunked.ContentLength = -1
	large := upReq(t, "PUT", be, "/", strings.NewReader(strings.Repeat("x", upMaxBody+1)))
	small := upReq(t, "PUT", be, "/", strings.NewReader(strings.Repeat("x", upMaxBody)))
	tests := []struct {
		name     string
		req      *http.Request
		fallback bool
		want     string
	}{
		{"Expect: 100-continue", expect, true, "3"},
		{"unknown length", chunked, true, "4"},
		{"body over the lean limit", large, true, strconv.Itoa(upMaxBody + 1)},
		{"body at the lean limit", small, false, strconv.Itoa(upMaxBody)},
		{"GET", upReq(t, "GET", be, "/", nil), false, "0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := rec.n.Load()
			res, body, err := doUp(t, u, tc.req)
			if err != nil || res.StatusCode != 200 || body != tc.want {
				t.Fatalf("%v %q, want %q", err, body, tc.want)
			}
			if got := rec.n.Load() - before; got != map[bool]int64{false: 0, true: 1}[tc.fallback] {
				t.Errorf("fallback used %d times", got)
			}
		})
	}
}

func TestUpstreamBodyClose(t *testing.T) {
	be, conns := countingBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "10")
		io.WriteString(w, "0123456789")
	}))
	u, _ := newTestUpstream(t, 5*time.Second)
	res, err := u.RoundTrip(upReq(t, "GET", be, "/", nil))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 3)
	io.ReadFull(res.Body, buf)
	for range 2 {
		if err := res.Body.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := res.Body.Read(buf); !errors.Is(err, http.ErrBodyReadAfterClose) {
		t.Errorf("read after close: %v", err)
	}
	if n := u.Idle(be); n != 0 {
		t.Errorf("a half-read connection went idle")
	}
	if _, _, err := doUp(t, u, upReq(t, "GET", be, "/", nil)); err != nil {
		t.Fatal(err)
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2 (the half-read one is not reused)", n)
	}
}

func TestUpstreamHeaderLimit(t *testing.T) {
	addr := rawServer(t, func(c net.Conn) {
		http.ReadRequest(bufio.NewReader(c))
		io.WriteString(c, "HTTP/1.1 200 OK\r\n")
		line := "X-Big: " + strings.Repeat("a", 1000) + "\r\n"
		for range 2000 {
			if _, err := io.WriteString(c, line); err != nil {
				return
			}
		}
	})
	u, _ := newTestUpstream(t, 5*time.Second)
	u.MaxHeaderBytes = 64 << 10
	_, err := u.RoundTrip(upReq(t, "GET", addr, "/", nil))
	if !errors.Is(err, upstream.ErrHeaderTooLong) {
		t.Fatalf("err %v, want the header limit", err)
	}
}

func TestUpstreamIdleExpiry(t *testing.T) {
	be, conns := countingBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	u, _ := newTestUpstream(t, 5*time.Second)
	var skew atomic.Int64
	u.now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	doUp(t, u, upReq(t, "GET", be, "/", nil))
	if u.Idle(be) != 1 {
		t.Fatal("not idle")
	}
	u.Sweep(u.now())
	if u.Idle(be) != 1 {
		t.Fatal("a fresh idle connection was swept")
	}
	skew.Store(int64(u.IdleTimeout))
	u.Sweep(u.now())
	if u.Idle(be) != 0 {
		t.Fatal("an expired idle connection was kept")
	}
	// Lazy expiry at checkout: the expired connection is not used.
	doUp(t, u, upReq(t, "GET", be, "/", nil))
	skew.Add(int64(u.IdleTimeout))
	doUp(t, u, upReq(t, "GET", be, "/", nil))
	if n := conns.Load(); n != 3 {
		t.Errorf("%d connections, want 3 (each expired one replaced)", n)
	}
	u.CloseIdle()
	if u.Idle(be) != 0 {
		t.Error("closeIdle left idle connections")
	}
	if _, _, err := doUp(t, u, upReq(t, "GET", be, "/", nil)); err != nil {
		t.Fatal(err)
	}
	if u.Idle(be) != 0 {
		t.Error("a connection went idle after closeIdle")
	}
}

func TestUpstreamDialFailureIsConnect(t *testing.T) {
	u, _ := newTestUpstream(t, 5*time.Second)
	req := upReq(t, "GET", deadAddr(t), "/", nil)
	_, err := u.RoundTrip(req)
	var de *dialError
	if !errors.As(err, &de) || classify(err, req, nil) != outcomeConnect {
		t.Fatalf("err %v not a connect failure", err)
	}
}

// TestUpstreamWireMatchesTransport checks that the lean path puts the same request bytes
// on the wire as http.Transport does for the proxy's outbound requests (Host, no
// User-Agent of net/http's own, Content-Length only where the Transport sends it).
func TestUpstreamWireMatchesTransport(t *testing.T) {
	got := make(chan string, 1)
	target := rawServer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			var sb strings.Builder
			req.Header.Del("X-Forwarded-For") // the client's port differs per run
			req.Header.Del("Forwarded")
			fmt.Fprintf(&sb, "%s %s %s host=%s cl=%d te=%v\n", req.Method, req.RequestURI, req.Proto, req.Host, req.ContentLength, req.TransferEncoding)
			req.Header.Write(&sb)
			b, _ := io.ReadAll(req.Body)
			sb.Write(b)
			got <- sb.String()
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
		}
	})
	viaTransport, viaLean := newEnv(t), newEnv(t)
	viaTransport.srv.rt = viaTransport.srv.transport
	for _, e := range []*env{viaTransport, viaLean} {
		e.apply([]routeSpec{{host: "app.example.test", backends: []string{target}}})
	}
	send := func(e *env, method, body string, ua bool) string {
		c := e.h1Client()
		var rb io.Reader
		if body != "" {
			rb = strings.NewReader(body)
		}
		req, _ := http.NewRequest(method, "http://app.example.test/p?q=1", rb)
		if !ua {
			req.Header["User-Agent"] = valEmpty
		}
		req.Header.Set("X-Custom", "v")
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return <-got
	}
	for _, tc := range []struct {
		method, body string
		ua           bool
	}{{"GET", "", false}, {"GET", "", true}, {"POST", "", false}, {"POST", "form=1", true}, {"HEAD", "", false}, {"DELETE", "", false}} {
		want := send(viaTransport, tc.method, tc.body, tc.ua)
		if have := send(viaLean, tc.method, tc.body, tc.ua); have != want {
			t.Errorf("%s %q: lean sent\n%s\nhttp.Transport sent\n%s", tc.method, tc.body, have, want)
		}
	}
}
