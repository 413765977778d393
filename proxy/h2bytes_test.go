package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestH2ByteFraming: each way a target can frame its answer reaches an HTTP/2 client
// through the own server's byte-level path (h2bytes.go) as the same response: the
// content de-chunked and its trailers as trailers, a length as content-length, a
// close-delimited body to its end, no body for HEAD, 204 and 304, hop-by-hop fields
// dropped. The target connection goes back to its pool exactly when its framing says
// the exchange ended cleanly.
func TestH2ByteFraming(t *testing.T) {
	const second = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond"
	bigBody := strings.Repeat("0123456789", 10<<10) // 100 KiB: many reads of the upstream buffer
	tests := []struct {
		name        string
		method      string
		writes      []string // the target's answer to the first request, write by write
		closeTarget bool
		status      int
		body        string
		check       func(t *testing.T, res *http.Response)
		conns       int32 // target connections after both requests
		failures    uint64
	}{
		{name: "chunked with trailers",
			writes: []string{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\nX-Sum: 42\r\nX-Other: b\r\nConnection: x\r\n\r\n"},
			status: 200, body: "hello world", conns: 1,
			check: func(t *testing.T, res *http.Response) {
				if res.Trailer.Get("X-Sum") != "42" || res.Trailer.Get("X-Other") != "b" || res.Trailer.Get("Connection") != "" {
					t.Errorf("trailers %v", res.Trailer)
				}
			}},
		{name: "chunked in pieces",
			writes: []string{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", "lo\r\n6\r", "\n world\r\n0\r\n", "\r\n"},
			status: 200, body: "hello world", conns: 1},
		{name: "chunked, whole with the head",
			writes: []string{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"},
			status: 200, body: "hello", conns: 1},
		{name: "close-delimited",
			writes: []string{"HTTP/1.1 200 OK\r\nX-A: 1\r\n\r\nfirst part ", "and the rest"}, closeTarget: true,
			status: 200, body: "first part and the rest", conns: 2},
		{name: "close-delimited HTTP/1.0, empty body",
			writes: []string{"HTTP/1.0 200 OK\r\n\r\n"}, closeTarget: true,
			status: 200, body: "", conns: 2},
		{name: "Content-Length, body after the head",
			writes: []string{"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", "hello"},
			status: 200, body: "hello", conns: 1,
			check: func(t *testing.T, res *http.Response) {
				if res.ContentLength != 5 {
					t.Errorf("content-length %d, want 5", res.ContentLength)
				}
			}},
		{name: "Content-Length over many reads",
			writes: []string{"HTTP/1.1 200 OK\r\nContent-Length: " + fmt.Sprint(len(bigBody)) + "\r\n\r\n" + bigBody[:1000], bigBody[1000:]},
			status: 200, body: bigBody, conns: 1},
		{name: "HEAD with Content-Length", method: "HEAD",
			writes: []string{"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n"},
			status: 200, body: "", conns: 1,
			check: func(t *testing.T, res *http.Response) {
				if res.ContentLength != 1234 {
					t.Errorf("content-length %d, want 1234", res.ContentLength)
				}
			}},
		{name: "204", writes: []string{"HTTP/1.1 204 No Content\r\n\r\n"}, status: 204, conns: 1},
		{name: "304 with Content-Length", writes: []string{"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\nETag: \"x\"\r\n\r\n"}, status: 304, conns: 1,
			check: func(t *testing.T, res *http.Response) {
				if res.Header.Get("Etag") != `"x"` || res.Header.Get("Content-Length") != "" {
					t.Errorf("ETag %q, content-length %q (want none: Go's HTTP/2 client would wait for the body)", res.Header.Get("Etag"), res.Header.Get("Content-Length"))
				}
			}},
		{name: "Content-Length body broken before the head went out",
			writes: []string{"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhello"}, closeTarget: true,
			status: 502, body: "502 Bad Gateway\n", conns: 2, failures: 1},
		{name: "103 before 200",
			writes: []string{"HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"},
			status: 200, body: "ok", conns: 1},
		{name: "101 unasked",
			writes: []string{"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n"},
			status: 502, body: "502 Bad Gateway\n", conns: 2, failures: 1},
		{name: "garbage",
			writes: []string{"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nok"},
			status: 502, body: "502 Bad Gateway\n", conns: 2, failures: 1},
		{name: "broken chunk in the first bytes",
			writes: []string{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"},
			status: 502, body: "502 Bad Gateway\n", conns: 2, failures: 1},
		{name: "hop-by-hop fields dropped, Date kept, names in lower case",
			writes: []string{"HTTP/1.1 200 OK\r\nConnection: X-Hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\nProxy-Connection: x\r\nUpgrade: y\r\nX-Mixed-CASE: v\r\nDate: Mon, 01 Jan 2024 00:00:00 GMT\r\nContent-Length: 0\r\n\r\n"},
			status: 200, conns: 1,
			check: func(t *testing.T, res *http.Response) {
				for _, k := range []string{"X-Hop", "Keep-Alive", "Proxy-Connection", "Connection", "Upgrade"} {
					if _, ok := res.Header[k]; ok {
						t.Errorf("%s reached the client", k)
					}
				}
				if res.Header.Get("X-Mixed-Case") != "v" {
					t.Errorf("X-Mixed-Case %q", res.Header.Get("X-Mixed-Case"))
				}
				if d := res.Header["Date"]; len(d) != 1 || d[0] != "Mon, 01 Jan 2024 00:00:00 GMT" {
					t.Errorf("Date %q, want the target's only", d)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			method := tc.method
			if method == "" {
				method = "GET"
			}
			tg := piecewiseTarget(t, tc.writes, tc.closeTarget, second)
			e.apply([]routeSpec{{host: h1Host, backends: []string{tg.addr}}})
			c := e.h2cClient()
			defer c.CloseIdleConnections()
			req, _ := http.NewRequest(method, "http://"+h1Host+"/first", nil)
			res, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(res.Body)
			res.Body.Close()
			if err != nil || res.StatusCode != tc.status || string(b) != tc.body {
				t.Fatalf("got %d %.80q (%v), want %d %.80q", res.StatusCode, b, err, tc.status, tc.body)
			}
			if res.ProtoMajor != 2 {
				t.Fatalf("answered over %s", res.Proto)
			}
			if d := res.Header["Date"]; len(d) != 1 {
				t.Errorf("Date fields %q, want one", d)
			}
			if tc.check != nil {
				tc.check(t, res)
			}
			res, err = c.Get("http://" + h1Host + "/second")
			if err != nil {
				t.Fatal(err)
			}
			b, _ = io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 200 || string(b) != "second" {
				t.Fatalf("second request: %d %q", res.StatusCode, b)
			}
			if n := tg.conns.Load(); n != tc.conns {
				t.Errorf("target accepted %d connections, want %d", n, tc.conns)
			}
			e.waitRequests(h1Host, 2)
			if f := e.stat(h1Host).BackendFailures.Request; f != tc.failures {
				t.Errorf("request failures %d, want %d", f, tc.failures)
			}
		})
	}
}

// TestH2ByteBrokenBody: a body the target breaks off after the head went out resets
// the client's stream (never a clean end), counted once as a request failure; a client
// that resets its stream mid-body closes the target connection at once.
func TestH2ByteBrokenBody(t *testing.T) {
	t.Run("target breaks the body", func(t *testing.T) {
		e := newEnv(t)
		headSeen := make(chan struct{})
		tg := newH1Target(t, func(c net.Conn, r *http.Request, _ string) bool {
			// Longer than the proxy's buffer: the head goes out before the body is whole.
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\nhello")
			<-headSeen
			return false // closes 99,995 bytes short
		})
		e.apply([]routeSpec{{host: h1Host, backends: []string{tg.addr}}})
		c := e.h2cClient()
		defer c.CloseIdleConnections()
		res, err := c.Get("http://" + h1Host + "/")
		if err != nil {
			t.Fatal(err)
		}
		close(headSeen)
		if b, err := io.ReadAll(res.Body); err == nil {
			t.Fatalf("client read the broken body to its end without an error (%q)", b)
		}
		res.Body.Close()
		waitFor(t, "request failure", func() bool { return e.stat(h1Host).BackendFailures.Request == 1 })
	})
	t.Run("client resets mid-body", func(t *testing.T) {
		e := newEnv(t)
		var targetSawClose atomic.Bool
		tg := newH1Target(t, func(c net.Conn, r *http.Request, _ string) bool {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
			// Then nothing more, until the proxy closes the connection.
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.Read(make([]byte, 1)); err != nil && !isTimeout(err) {
				targetSawClose.Store(true)
			}
			return false
		})
		e.apply([]routeSpec{{host: h1Host, backends: []string{tg.addr}}})
		c := e.h2cClient()
		defer c.CloseIdleConnections()
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+h1Host+"/", nil)
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		first := make([]byte, 5)
		if _, err := io.ReadFull(res.Body, first); err != nil || string(first) != "hello" {
			t.Fatalf("first bytes %q %v", first, err)
		}
		cancel() // RST_STREAM(CANCEL)
		res.Body.Close()
		waitFor(t, "the target connection closed", targetSawClose.Load)
		if f := e.stat(h1Host).BackendFailures.Request; f != 0 {
			t.Errorf("request failures %d, want 0: the client left", f)
		}
	})
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestH2ResponseHeadsStayTheirOwn: response heads whose values change from request to
// request, many streams at a time on one connection: every client gets its own. The
// connection's HPACK encoder keeps the strings of the fields it indexes; a head built
// over a buffer reused for a later stream changed those strings under it, and clients
// got other requests' values (an indexed field the encoder thought was the new value).
func TestH2ResponseHeadsStayTheirOwn(t *testing.T) {
	e := newEnv(t)
	target := backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Id")
		w.Header().Set("X-Id", id)
		w.Header().Set("X-Echo", "echo-"+id)
		_, _ = io.WriteString(w, id)
	}))
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{target}}})
	c := e.h2cClient()
	defer c.CloseIdleConnections()
	var bad collect
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 40 {
				id := fmt.Sprintf("%d-%d", g, i)
				req, _ := http.NewRequest("GET", "http://app.example.test/", nil)
				req.Header.Set("X-Id", id)
				res, err := c.Do(req)
				if err != nil {
					bad.add(err)
					return
				}
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if string(body) != id || res.Header.Get("X-Id") != id || res.Header.Get("X-Echo") != "echo-"+id || res.ProtoMajor != 2 {
					bad.add(fmt.Errorf("%s: HTTP/%d body %q, x-id %q, x-echo %q", id, res.ProtoMajor, body, res.Header.Get("X-Id"), res.Header.Get("X-Echo")))
				}
			}
		})
	}
	wg.Wait()
	bad.check(t)
}
