package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/serve-zone/ingress/stats"
)

func TestUpstreamPoolIsBounded(t *testing.T) {
	for _, fe := range frontEnds {
		t.Run(fe.name, func(t *testing.T) {
			const n = 5
			release := make(chan struct{})
			var arrived sync.WaitGroup
			arrived.Add(n)
			var seen atomic.Int64
			be, conns := countingBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if seen.Add(1) <= n {
					arrived.Done()
					<-release
				}
				io.WriteString(w, "ok")
			}))
			e := upEnv(t, fe.netOnly, be)
			e.srv.up.MaxIdle = 2
			var wg sync.WaitGroup
			var errs collect
			for range n {
				c := e.h1Client() // one client connection each: n concurrent exchanges
				wg.Go(func() {
					res, err := c.Get("http://app.example.test/")
					if err != nil {
						errs.add(err)
						return
					}
					b, _ := io.ReadAll(res.Body)
					res.Body.Close()
					if string(b) != "ok" {
						errs.add(fmt.Errorf("body %q", b))
					}
				})
			}
			arrived.Wait()
			close(release)
			wg.Wait()
			errs.check(t)
			if c := conns.Load(); c != n {
				t.Fatalf("%d connections for %d concurrent requests", c, n)
			}
			e.waitRequests("app.example.test", n)
			waitFor(t, "the bound's idle connections", func() bool { return e.srv.up.Idle(be) == 2 })
			c := e.h1Client()
			for range 2 {
				if st, b := do(t, c, "GET", "/", ""); st != 200 || b != "ok" {
					t.Fatalf("%d %q", st, b)
				}
			}
			if c := conns.Load(); c != n {
				t.Errorf("%d connections after reuse, want %d (the idle ones reused)", c, n)
			}
		})
	}
}

// TestUpstreamStaleConnection: a target that answers a connection's first request and
// dies under its second, after reading it. A replayable request goes again on a new
// connection (upstream.MayReplay, Replayable): a GET is; a POST is only with an
// idempotency key, and only when its body, if any, is held whole (Config.RequestBuffer;
// the fast path's is in its read buffer): a body that streamed is never sent twice, as
// http.Transport sends again only a body it can get again (GetBody).
func TestUpstreamStaleConnection(t *testing.T) {
	tests := []struct {
		name, method, body string
		hdr                []string
		status             int
		conns              int64
	}{
		{"GET replayed", "GET", "", nil, 200, 2},
		{"POST not replayed", "POST", "payload", nil, 502, 1},
		{"POST without body not replayed", "POST", "", nil, 502, 1},
		{"POST without body, Idempotency-Key, replayed", "POST", "", []string{"Idempotency-Key", "k1"}, 200, 2},
		{"POST with body and X-Idempotency-Key replayed", "POST", "payload", []string{"X-Idempotency-Key", "k1"}, 200, 2},
		{"POST with a body beyond the held bound and X-Idempotency-Key not replayed", "POST", strings.Repeat("b", 100<<10), []string{"X-Idempotency-Key", "k1"}, 502, 1},
	}
	for _, fe := range frontEnds {
		for _, tc := range tests {
			t.Run(fe.name+"/"+tc.name, func(t *testing.T) {
				var accepted atomic.Int64
				addr := rawServer(t, func(c net.Conn) {
					accepted.Add(1)
					br := bufio.NewReader(c)
					for i := 0; ; i++ {
						req, err := http.ReadRequest(br)
						if err != nil {
							return
						}
						io.Copy(io.Discard, req.Body)
						if i == 1 && accepted.Load() == 1 {
							return
						}
						io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
					}
				})
				e := upEnv(t, fe.netOnly, addr)
				c := e.h1Client()
				if st, b := do(t, c, "GET", "/", ""); st != 200 || b != "ok" {
					t.Fatalf("first: %d %q", st, b)
				}
				waitFor(t, "idle", func() bool { return e.srv.up.Idle(addr) == 1 })
				st, _ := do(t, c, tc.method, "/", tc.body, tc.hdr...)
				if st != tc.status {
					t.Errorf("status %d, want %d", st, tc.status)
				}
				if n := accepted.Load(); n != tc.conns {
					t.Errorf("target accepted %d connections, want %d", n, tc.conns)
				}
				e.waitRequests("app.example.test", 2)
				want := stats.BackendFailures{}
				if tc.status == 502 {
					want.Request = 1
				}
				if got := e.stat("app.example.test").BackendFailures; got != want {
					t.Errorf("failures %+v, want %+v", got, want)
				}
			})
		}
	}
}

// TestUpstreamClientCancel: a client that leaves while the target thinks makes the
// ingress close the target connection (the target's request context ends).
func TestUpstreamClientCancel(t *testing.T) {
	for _, fe := range frontEnds {
		t.Run(fe.name, func(t *testing.T) {
			started := make(chan struct{}, 1)
			gone := make(chan struct{}, 1)
			be := backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				started <- struct{}{}
				select {
				case <-r.Context().Done():
					gone <- struct{}{}
				case <-time.After(10 * time.Second):
				}
			}))
			e := upEnv(t, fe.netOnly, be)
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, "GET", "http://app.example.test/", nil)
			go func() { <-started; cancel() }()
			if _, err := e.h1Client().Do(req); err == nil {
				t.Fatal("no error after cancel")
			}
			select {
			case <-gone:
			case <-time.After(5 * time.Second):
				t.Fatal("the target connection stayed open after the client left")
			}
			if n := e.srv.up.Idle(be); n != 0 {
				t.Errorf("cancelled connection went idle")
			}
		})
	}
}

func TestUpstreamBodiesAndStatuses(t *testing.T) {
	big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
		case "/404":
			w.WriteHeader(404)
			io.WriteString(w, "nope")
		case "/post":
			b, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "%s %d %q", r.Method, r.ContentLength, b)
		case "/early":
			w.Header().Set("Link", "</a.css>; rel=preload")
			w.WriteHeader(103)
			io.WriteString(w, "after hints")
		}
	})
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
		{"GET", "/404", "", 404, "nope", nil},
		{"POST", "/post", "small body", 200, `POST 10 "small body"`, nil},
		{"POST", "/post", "", 200, `POST 0 ""`, nil},
		{"GET", "/early", "", 200, "after hints", nil},
	}
	for _, fe := range frontEnds {
		t.Run(fe.name, func(t *testing.T) {
			be, conns := countingBackend(t, h)
			e := upEnv(t, fe.netOnly, be)
			c := e.h1Client()
			for _, tc := range tests {
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
					t.Fatalf("%s %s: got %d, %d bytes (%v), want %d, %d bytes", tc.method, tc.path, res.StatusCode, len(b), err, tc.status, len(tc.wantBody))
				}
				if tc.check != nil {
					tc.check(t, res)
				}
			}
			e.waitRequests("app.example.test", uint64(len(tests)))
			if n := conns.Load(); n != 1 {
				t.Errorf("target saw %d connections, want every request on one", n)
			}
			if st := e.stat("app.example.test"); st.BackendFailures != (stats.BackendFailures{}) {
				t.Errorf("failures %+v", st.BackendFailures)
			}
		})
	}
}
