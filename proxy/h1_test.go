package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/serve-zone/ingress/routetable"
)

// End-to-end tests of the fast HTTP/1.1 path (h1serve.go, h1forward.go): raw bytes on
// one client connection, answers read with net/http's parser.
//
// Which path served a request is visible at the target: the fast path forwards field
// lines as the client sent them, net/http canonicalizes names. Requests carry
// "x-via: 1" and the target's raw head says "x-via" (fast) or "X-Via" (net/http).

const h1Host = "app.example.test"

// rawClient is one client connection to the proxy.
type rawClient struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func newRawClient(t *testing.T, addr string) *rawClient {
	t.Helper()
	c := dialRaw(t, addr)
	// No test waits long: a hang fails instead of timing out the whole run.
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return &rawClient{t: t, c: c, br: bufio.NewReader(c)}
}

func (rc *rawClient) send(s string) {
	rc.t.Helper()
	if _, err := io.WriteString(rc.c, s); err != nil {
		rc.t.Fatalf("write: %v", err)
	}
}

// read reads one response to a request with method and its whole body.
func (rc *rawClient) read(method string) (*http.Response, string) {
	rc.t.Helper()
	res, err := http.ReadResponse(rc.br, &http.Request{Method: method})
	if err != nil {
		rc.t.Fatalf("reading response: %v", err)
	}
	b, err := io.ReadAll(res.Body)
	if err != nil {
		rc.t.Fatalf("reading body: %v", err)
	}
	res.Body.Close()
	return res, string(b)
}

// closed checks that the proxy closed the connection (nothing more arrives).
func (rc *rawClient) closed() {
	rc.t.Helper()
	b, err := io.ReadAll(rc.br)
	if len(b) > 0 || (err != nil && !errors.Is(err, net.ErrClosed) && !isReset(err)) {
		rc.t.Fatalf("after the last response: %q, %v; want the connection closed", b, err)
	}
}

func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) && strings.Contains(err.Error(), "reset")
}

// h1Target is a raw target: it reads requests with net/http's parser, records them
// with their raw heads, and answers with answer (false closes the connection).
type h1Target struct {
	addr  string
	conns atomic.Int32
	mu    sync.Mutex
	seen  []seenReq
}

type seenReq struct {
	rawHead string
	req     *http.Request
	body    string
}

// recReader records everything read through it.
type recReader struct {
	r   io.Reader
	buf bytes.Buffer
}

func (r *recReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.buf.Write(p[:n])
	return n, err
}

func newH1Target(t *testing.T, answer func(c net.Conn, r *http.Request, body string) bool) *h1Target {
	tg := &h1Target{}
	tg.addr = rawServer(t, func(c net.Conn) {
		tg.conns.Add(1)
		serveRecorded(c, func(rawHead string, req *http.Request, body string) bool {
			tg.mu.Lock()
			tg.seen = append(tg.seen, seenReq{rawHead, req, body})
			tg.mu.Unlock()
			return answer(c, req, body)
		})
	})
	return tg
}

// serveRecorded reads requests from c, answering Expect: 100-continue as net/http's
// server does (else the proxy's transport waits a second, its ExpectContinueTimeout,
// before it sends the body), and calls each with the request's raw head as it came off
// the wire, the parsed request and its body, until each returns false or c ends.
func serveRecorded(c net.Conn, each func(rawHead string, req *http.Request, body string) bool) {
	rec := &recReader{r: c}
	br := bufio.NewReader(rec)
	for {
		start := rec.buf.Len() - br.Buffered()
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if req.Header.Get("Expect") == "100-continue" {
			io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n")
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return
		}
		raw := rec.buf.Bytes()[start:]
		head := string(raw[:bytes.Index(raw, []byte("\r\n\r\n"))+4])
		rec.buf.Next(start) // keep only what the next request needs
		if !each(head, req, string(body)) {
			return
		}
	}
}

func (tg *h1Target) requests() []seenReq {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return append([]seenReq(nil), tg.seen...)
}

func (tg *h1Target) last(t *testing.T) seenReq {
	t.Helper()
	s := tg.requests()
	if len(s) == 0 {
		t.Fatal("the target saw no request")
	}
	return s[len(s)-1]
}

// echoAnswer answers "METHOD URI len:body" with a Content-Length.
func echoAnswer(c net.Conn, r *http.Request, body string) bool {
	b := fmt.Sprintf("%s %s %d:%s", r.Method, r.RequestURI, len(body), body)
	fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(b), b)
	return true
}

// echoTarget is an h1Target that echoes every request.
func echoTarget(t *testing.T) *h1Target { return newH1Target(t, echoAnswer) }

func echoed(method, uri, body string) string {
	return fmt.Sprintf("%s %s %d:%s", method, uri, len(body), body)
}

// fastHead reports whether a raw head reached the target over the fast path (x-via
// kept its case) rather than net/http (X-Via); it fails when neither is there.
func fastHead(t *testing.T, raw string) bool {
	t.Helper()
	switch {
	case strings.Contains(raw, "\r\nx-via: 1\r\n"):
		return true
	case strings.Contains(raw, "\r\nX-Via: 1\r\n"):
		return false
	}
	t.Fatalf("no x-via field in %q", raw)
	return false
}

func get1(path string) string {
	return "GET " + path + " HTTP/1.1\r\nHost: " + h1Host + "\r\nx-via: 1\r\n\r\n"
}

func post1(path, body string) string {
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nx-via: 1\r\nContent-Length: %d\r\n\r\n%s", path, h1Host, len(body), body)
}

func TestH1Pipelined(t *testing.T) {
	e := newEnv(t)
	tg := echoTarget(t)
	e.apply([]routeSpec{{host: h1Host, backends: []string{tg.addr}}})
	// A body that fits the read buffer with its head, but not behind a first request.
	postHead := len(post1("/2", strings.Repeat("b", 8000))) - 8000
	big := strings.Repeat("b", h1ReadBuf-postHead-20)
	huge := strings.Repeat("h", h1ReadBuf+1000)
	if len(get1("/1")) <= 20 {
		t.Fatal("the first request must be longer than the slack")
	}
	type exp struct {
		method, uri, body string
		fast              bool
	}
	tests := []struct {
		name string
		raw  string // everything in one write
		want []exp
	}{
		{"three GETs", get1("/1") + get1("/2") + get1("/3"),
			[]exp{{"GET", "/1", "", true}, {"GET", "/2", "", true}, {"GET", "/3", "", true}}},
		{"GET POST GET", get1("/1") + post1("/2", "hello world") + get1("/3"),
			[]exp{{"GET", "/1", "", true}, {"POST", "/2", "hello world", true}, {"GET", "/3", "", true}}},
		// The second request's body ends past the buffer: the buffer is compacted and
		// the head parsed again at its new place.
		{"body needing compaction", get1("/1") + post1("/2", big) + get1("/3"),
			[]exp{{"GET", "/1", "", true}, {"POST", "/2", big, true}, {"GET", "/3", "", true}}},
		// The request whose body does not fit the buffer goes to net/http together with
		// the bytes behind it, which were already read: the third request must not be lost.
		{"fast then hand-off", get1("/1") + post1("/2", huge) + get1("/3"),
			[]exp{{"GET", "/1", "", true}, {"POST", "/2", huge, false}, {"GET", "/3", "", false}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := len(tg.requests())
			rc := newRawClient(t, e.http)
			rc.send(tc.raw)
			for i, w := range tc.want {
				res, body := rc.read(w.method)
				if res.StatusCode != 200 || body != echoed(w.method, w.uri, w.body) {
					t.Fatalf("response %d: %d %.80q, want the echo of %s %s", i, res.StatusCode, body, w.method, w.uri)
				}
			}
			seen := tg.requests()[before:]
			if len(seen) != len(tc.want) {
				t.Fatalf("target saw %d requests, want %d", len(seen), len(tc.want))
			}
			for i, w := range tc.want {
				if got := fastHead(t, seen[i].rawHead); got != w.fast {
					t.Errorf("request %d: fast path %v, want %v", i, got, w.fast)
				}
			}
			// Still usable.
			rc.send(get1("/after"))
			if res, body := rc.read("GET"); res.StatusCode != 200 || body != echoed("GET", "/after", "") {
				t.Errorf("after: %d %q", res.StatusCode, body)
			}
		})
	}
}

// TestH1HandOffKeepsConnection: requests outside the fast path's subset are answered by
// net/http on the same connection, with their exact bodies, and the connection serves
// further requests afterwards.
func TestH1HandOffKeepsConnection(t *testing.T) {
	e := newEnv(t)
	tg := echoTarget(t)
	e.apply([]routeSpec{{host: h1Host, backends: []string{tg.addr}}})
	cookie := "c=" + strings.Repeat("k", 10<<10)
	body20k := strings.Repeat("0123456789abcdef", 20<<10/16)
	tests := []struct {
		name       string
		head       string // sent first
		body       string // sent after the 100 Continue when expect100, else with head
		expect100  bool
		wantURI    string
		wantBody   string // what the target must receive
		wantCookie string
		closes     bool // the connection ends after the request
	}{
		// net/http hides whether a chunked request also had a Content-Length; RFC 9112
		// §6.1 then wants the connection closed, so every chunked request closes it.
		{name: "chunked request body",
			head:    "POST /chunked HTTP/1.1\r\nHost: " + h1Host + "\r\nx-via: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
			body:    "5\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\n",
			wantURI: "/chunked", wantBody: "hello world", closes: true},
		{name: "Expect 100-continue",
			head:      "POST /expect HTTP/1.1\r\nHost: " + h1Host + "\r\nx-via: 1\r\nExpect: 100-continue\r\nContent-Length: 11\r\n\r\n",
			body:      "hello world",
			expect100: true, wantURI: "/expect", wantBody: "hello world"},
		// net/http ignores and hides Transfer-Encoding in HTTP/1.0 (RFC 9112 §6.1:
		// faulty framing), so every HTTP/1.0 request closes its connection.
		{name: "HTTP/1.0 keep-alive",
			head:    "POST /ten HTTP/1.0\r\nHost: " + h1Host + "\r\nx-via: 1\r\nConnection: keep-alive\r\nContent-Length: 5\r\n\r\n",
			body:    "hello",
			wantURI: "/ten", wantBody: "hello", closes: true},
		{name: "10 KiB head",
			head:    "GET /bighead HTTP/1.1\r\nHost: " + h1Host + "\r\nx-via: 1\r\nCookie: " + cookie + "\r\n\r\n",
			wantURI: "/bighead", wantCookie: cookie},
		{name: "20 KiB body",
			head:    "POST /bigbody HTTP/1.1\r\nHost: " + h1Host + "\r\nx-via: 1\r\nContent-Length: " + fmt.Sprint(len(body20k)) + "\r\n\r\n",
			body:    body20k,
			wantURI: "/bigbody", wantBody: body20k},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rc := newRawClient(t, e.http)
			// A fast-path request first, so that the hand-off happens mid-connection.
			rc.send(get1("/before"))
			if res, body := rc.read("GET"); res.StatusCode != 200 || body != echoed("GET", "/before", "") {
				t.Fatalf("before: %d %q", res.StatusCode, body)
			}
			if !fastHead(t, tg.last(t).rawHead) {
				t.Fatalf("the first request did not take the fast path")
			}
			method := strings.Fields(tc.head)[0]
			if tc.expect100 {
				rc.send(tc.head)
				res, err := http.ReadResponse(rc.br, nil)
				if err != nil || res.StatusCode != 100 {
					t.Fatalf("want 100 Continue, got %v %v", res, err)
				}
				rc.send(tc.body)
			} else {
				rc.send(tc.head + tc.body)
			}
			res, body := rc.read(method)
			if res.StatusCode != 200 || body != echoed(method, tc.wantURI, tc.wantBody) {
				t.Fatalf("status %d, body %.100q", res.StatusCode, body)
			}
			if res.Close != tc.closes {
				t.Errorf("the proxy closes the connection after the hand-off request: %v, want %v", res.Close, tc.closes)
			}
			got := tg.last(t)
			if fastHead(t, got.rawHead) {
				t.Errorf("the request took the fast path; it must be handed off")
			}
			if got.body != tc.wantBody || got.req.Header.Get("Cookie") != tc.wantCookie {
				t.Errorf("target got body of %d bytes and a cookie of %d, want %d and %d",
					len(got.body), len(got.req.Header.Get("Cookie")), len(tc.wantBody), len(tc.wantCookie))
			}
			if tc.closes {
				return
			}
			rc.send(get1("/after"))
			if res, body := rc.read("GET"); res.StatusCode != 200 || body != echoed("GET", "/after", "") {
				t.Errorf("after: %d %q", res.StatusCode, body)
			}
		})
	}
}

// TestH1OtherProtocols: connections the HTTP/1.1 fast path does not serve (h2c prior
// knowledge on the plain port, h2 over TLS) reach the HTTP/2 server, whose bodiless
// requests the own server forwards as bytes too (h2bytes.go) and net/http's through
// its request writer; HTTP/1.1 over TLS takes the fast path.
func TestH1OtherProtocols(t *testing.T) {
	const ownH2 = true // the own HTTP/2 engine forwards as bytes
	e := newEnv(t)
	tg := echoTarget(t)
	e.apply([]routeSpec{{host: h1Host, tls: &routetable.RouteTLS{CertificateID: "c1"}, backends: []string{tg.addr}}},
		certSpec{"c1", []string{h1Host}})
	tests := []struct {
		name      string
		client    *http.Client
		url       string
		major     int
		wantFast  bool
		wantProto string // X-Forwarded-Proto at the target
	}{
		{"h2c prior knowledge", e.h2cClient(), "http://" + h1Host + "/h2c", 2, ownH2, "http"},
		{"h2 over TLS", e.tlsClient(true), "https://" + h1Host + "/h2", 2, ownH2, "https"},
		{"HTTP/1.1 over TLS", e.tlsClient(false), "https://" + h1Host + "/h1tls", 1, true, "https"},
		{"HTTP/1.1 plain", e.h1Client(), "http://" + h1Host + "/h1", 1, true, "http"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer tc.client.CloseIdleConnections() // lets Shutdown finish without waiting
			req, _ := http.NewRequest("GET", tc.url, nil)
			res, err := tc.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			path := strings.TrimPrefix(strings.TrimPrefix(tc.url, "https://"+h1Host), "http://"+h1Host)
			if res.StatusCode != 200 || string(b) != echoed("GET", path, "") {
				t.Fatalf("%d %q", res.StatusCode, b)
			}
			if res.ProtoMajor != tc.major {
				t.Errorf("client saw %s, want major %d", res.Proto, tc.major)
			}
			got := tg.last(t)
			// Go's clients canonicalize field names, so x-via cannot tell the paths apart
			// here; the order of the forwarding fields can: the fast path appends
			// X-Forwarded-For then Forwarded, net/http writes fields sorted by name.
			if xfp := got.req.Header.Get("X-Forwarded-Proto"); xfp != tc.wantProto {
				t.Errorf("X-Forwarded-Proto %q, want %q", xfp, tc.wantProto)
			}
			fast := strings.Contains(got.rawHead, "\r\nX-Forwarded-For: 127.0.0.1\r\nForwarded: ")
			if fast != tc.wantFast {
				t.Errorf("fast path %v, want %v (head %q)", fast, tc.wantFast, got.rawHead)
			}
		})
	}
}

// TestH1ResponseFraming: each way a target can frame its answer reaches the client as a
// correct HTTP/1.1 response, and the client's connection serves a second request.
func TestH1ResponseFraming(t *testing.T) {
	const second = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond"
	bigBody := strings.Repeat("0123456789", 10<<10) // 100 KiB: many reads of the upstream buffer
	bigField := strings.Repeat("h", 100<<10)
	tests := []struct {
		name        string
		method      string
		writes      []string // the target's answer to the first request, write by write
		closeTarget bool     // the target closes after it
		status      int
		body        string
		check       func(t *testing.T, res *http.Response)
		conns       int32 // target connections after both requests
		failures    uint64
		maxDelay    time.Duration // for the first answer
	}{
		{name: "chunked with trailers",
			writes: []string{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\nX-Sum: 42\r\nX-Other: b\r\n\r\n"},
			status: 200, body: "hello world", conns: 1,
			check: func(t *testing.T, res *http.Response) {
				if res.Trailer.Get("X-Sum") != "42" || res.Trailer.Get("X-Other") != "b" {
					t.Errorf("trailers %v", res.Trailer)
				}
			}},
		{name: "chunked in pieces",
			writes: []string{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", "lo\r\n6\r", "\n world\r\n0\r\n", "\r\n"},
			status: 200, body: "hello world", conns: 1},
		{name: "close-delimited",
			writes: []string{"HTTP/1.1 200 OK\r\nX-A: 1\r\n\r\nfirst part ", "and the rest"}, closeTarget: true,
			status: 200, body: "first part and the rest", conns: 2,
			check: func(t *testing.T, res *http.Response) {
				if len(res.TransferEncoding) != 1 || res.TransferEncoding[0] != "chunked" || res.Close {
					t.Errorf("re-framed as %v, close %v; want chunked, kept open", res.TransferEncoding, res.Close)
				}
			}},
		{name: "close-delimited HTTP/1.0, empty body",
			writes: []string{"HTTP/1.0 200 OK\r\n\r\n"}, closeTarget: true,
			status: 200, body: "", conns: 2},
		{name: "Content-Length over many reads",
			writes: []string{"HTTP/1.1 200 OK\r\nContent-Length: " + fmt.Sprint(len(bigBody)) + "\r\n\r\n" + bigBody[:1000], bigBody[1000:]},
			status: 200, body: bigBody, conns: 1},
		{name: "HEAD with Content-Length", method: "HEAD",
			writes: []string{"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n"},
			status: 200, body: "", conns: 1,
			check: func(t *testing.T, res *http.Response) {
				if res.ContentLength != 1234 {
					t.Errorf("Content-Length %d, want 1234", res.ContentLength)
				}
			}},
		{name: "204", writes: []string{"HTTP/1.1 204 No Content\r\n\r\n"}, status: 204, conns: 1},
		{name: "304 with Content-Length", writes: []string{"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\nETag: \"x\"\r\n\r\n"}, status: 304, conns: 1},
		{name: "103 before 200",
			writes: []string{"HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"},
			status: 200, body: "ok", conns: 1},
		// Both heads in one segment: the 200 is already in the buffer when the 103 is
		// skipped, and must be answered without waiting for more bytes.
		{name: "103 and 200 in one write",
			writes: []string{"HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"},
			// maxDelay: half the env's 5 s response header timeout, which a wait for
			// more bytes would run into; far above a loaded machine's delay.
			status: 200, body: "ok", conns: 1, maxDelay: 2500 * time.Millisecond},
		{name: "101 unasked",
			writes: []string{"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n"},
			status: 502, body: "502 Bad Gateway\n", conns: 2, failures: 1},
		{name: "100 KiB response head",
			writes: []string{"HTTP/1.1 200 OK\r\nX-Big: " + bigField + "\r\nContent-Length: 2\r\n\r\nok"},
			status: 200, body: "ok", conns: 1,
			check: func(t *testing.T, res *http.Response) {
				if res.Header.Get("X-Big") != bigField {
					t.Errorf("X-Big of %d bytes, want %d", len(res.Header.Get("X-Big")), len(bigField))
				}
			}},
		{name: "hop-by-hop fields dropped, Date kept",
			writes: []string{"HTTP/1.1 200 OK\r\nConnection: X-Hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\nProxy-Connection: x\r\nDate: Mon, 01 Jan 2024 00:00:00 GMT\r\nContent-Length: 0\r\n\r\n"},
			status: 200, conns: 1,
			check: func(t *testing.T, res *http.Response) {
				for _, k := range []string{"X-Hop", "Keep-Alive", "Proxy-Connection", "Connection"} {
					if _, ok := res.Header[k]; ok {
						t.Errorf("%s reached the client", k)
					}
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
			rc := newRawClient(t, e.http)
			start := time.Now()
			rc.send(method + " /first HTTP/1.1\r\nHost: " + h1Host + "\r\n\r\n")
			res, body := rc.read(method)
			if d := time.Since(start); tc.maxDelay > 0 && d > tc.maxDelay {
				t.Errorf("answer took %v, want at most %v", d, tc.maxDelay)
			}
			if res.StatusCode != tc.status || body != tc.body {
				t.Fatalf("got %d %.80q, want %d %.80q", res.StatusCode, body, tc.status, tc.body)
			}
			if d := res.Header["Date"]; len(d) != 1 {
				t.Errorf("Date fields %q, want one", d)
			}
			if tc.check != nil {
				tc.check(t, res)
			}
			rc.send("GET /second HTTP/1.1\r\nHost: " + h1Host + "\r\n\r\n")
			if res, body := rc.read("GET"); res.StatusCode != 200 || body != "second" {
				t.Fatalf("second request: %d %q", res.StatusCode, body)
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

// piecewiseTarget answers /second with second and any other request with writes,
// write by write, closing after them when closeTarget.
func piecewiseTarget(t *testing.T, writes []string, closeTarget bool, second string) *h1Target {
	return newH1Target(t, func(c net.Conn, r *http.Request, _ string) bool {
		if r.URL.Path == "/second" {
			io.WriteString(c, second)
			return true
		}
		for i, w := range writes {
			if i > 0 {
				// Part of what is tested: a target that sends its answer in pieces,
				// apart in time, so that the proxy reads them separately.
				time.Sleep(20 * time.Millisecond)
			}
			io.WriteString(c, w)
		}
		return !closeTarget
	})
}

// TestH1MalformedChunkedAborts: a broken chunked body is never passed on as whole. When
// nothing reached the client yet it gets a 502 and the connection closes; when the head
// is out, the connection is cut. Either way it is a request failure.
func TestH1MalformedChunkedAborts(t *testing.T) {
	t.Run("in the first bytes", func(t *testing.T) {
		e := newEnv(t)
		tg := newH1Target(t, func(c net.Conn, r *http.Request, _ string) bool {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n")
			return true
		})
		e.apply([]routeSpec{{host: h1Host, backends: []string{tg.addr}}})
		rc := newRawClient(t, e.http)
		rc.send(get1("/"))
		res, body := rc.read("GET")
		if res.StatusCode != 502 || body != "502 Bad Gateway\n" || !res.Close {
			t.Fatalf("got %d %q close=%v, want 502 and Connection: close", res.StatusCode, body, res.Close)
		}
		rc.closed()
		waitFor(t, "request failure", func() bool { return e.stat(h1Host).BackendFailures.Request == 1 })
	})
	t.Run("after the head", func(t *testing.T) {
		e := newEnv(t)
		headSeen := make(chan struct{})
		tg := newH1Target(t, func(c net.Conn, r *http.Request, _ string) bool {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
			select {
			case <-headSeen:
			case <-time.After(5 * time.Second):
			}
			io.WriteString(c, "5\r\nworld!!\r\n0\r\n\r\n") // data longer than announced
			return true
		})
		e.apply([]routeSpec{{host: h1Host, backends: []string{tg.addr}}})
		rc := newRawClient(t, e.http)
		rc.send(get1("/"))
		res, err := http.ReadResponse(rc.br, nil)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("%v %v", res, err)
		}
		first := make([]byte, 5)
		if _, err := io.ReadFull(res.Body, first); err != nil || string(first) != "hello" {
			t.Fatalf("first chunk %q %v", first, err)
		}
		close(headSeen)
		if b, err := io.ReadAll(res.Body); err == nil {
			t.Fatalf("client read the broken body to its end without an error (%q)", b)
		}
		rc.closed()
		waitFor(t, "request failure", func() bool { return e.stat(h1Host).BackendFailures.Request == 1 })
		if n := len(tg.requests()); n != 1 {
			t.Errorf("target saw %d requests, want 1", n)
		}
	})
}

// TestH1UpstreamReuse: sequential requests share one target connection, also across
// client connections.
func TestH1UpstreamReuse(t *testing.T) {
	e := newEnv(t)
	addr, newConns := countingBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.URL.Path)
	}))
	e.apply([]routeSpec{{host: h1Host, backends: []string{addr}}})
	for c := range 2 {
		rc := newRawClient(t, e.http)
		for i := range 2 {
			p := fmt.Sprintf("/c%d/r%d", c, i)
			rc.send(get1(p))
			if res, body := rc.read("GET"); res.StatusCode != 200 || body != p {
				t.Fatalf("%s: %d %q", p, res.StatusCode, body)
			}
		}
	}
	if n := newConns.Load(); n != 1 {
		t.Errorf("target accepted %d connections for 4 sequential requests, want 1", n)
	}

	// A pooled connection is probed before every reuse; the probe must find it alive
	// (the target did not close it).
	rc := newRawClient(t, e.http)
	rc.send(get1("/after-idle"))
	if res, body := rc.read("GET"); res.StatusCode != 200 || body != "/after-idle" {
		t.Fatalf("after idle: %d %q", res.StatusCode, body)
	}
	if n := newConns.Load(); n != 1 {
		t.Errorf("target accepted %d connections, want 1: the idle connection was dropped, not reused", n)
	}
}

// byteCounter counts what the client read.
type byteCounter struct {
	r io.Reader
	n int64
}

func (c *byteCounter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// TestH1ByteAccountingExact: on the fast path a hostname is charged exactly the bytes
// its client wrote and read, the close of the last response included.
func TestH1ByteAccountingExact(t *testing.T) {
	be := backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/chunked" {
			for i := range 3 {
				fmt.Fprintf(w, "piece %d %s\n", i, strings.Repeat("z", 100*i))
				w.(http.Flusher).Flush()
			}
			return
		}
		fmt.Fprintf(w, "%s %d", r.URL.Path, len(b))
	}))
	reqs := []struct{ method, raw string }{
		{"GET", get1("/a")},
		{"POST", post1("/b", strings.Repeat("p", 3000))},
		{"HEAD", "HEAD /c HTTP/1.1\r\nHost: " + h1Host + "\r\nx-via: 1\r\n\r\n"},
		{"GET", get1("/chunked")},
		{"GET", "GET /padded HTTP/1.1\r\nHost: " + h1Host + ":80\r\nx-via: 1\r\nX-Pad: " + strings.Repeat("q", 500) + "\r\n\r\n"},
		{"GET", "GET /last HTTP/1.1\r\nHost: " + h1Host + "\r\nx-via: 1\r\nConnection: close\r\n\r\n"},
	}
	for _, pipelined := range []bool{false, true} {
		t.Run(fmt.Sprintf("pipelined=%v", pipelined), func(t *testing.T) {
			e := newEnv(t)
			e.apply([]routeSpec{{host: h1Host, backends: []string{be}}})
			rc := newRawClient(t, e.http)
			cnt := &byteCounter{r: rc.c}
			rc.br = bufio.NewReader(cnt)
			var sent int64
			if pipelined {
				var all strings.Builder
				for _, r := range reqs {
					all.WriteString(r.raw)
				}
				rc.send(all.String())
				sent = int64(all.Len())
			}
			for _, r := range reqs {
				if !pipelined {
					rc.send(r.raw)
					sent += int64(len(r.raw))
				}
				if res, _ := rc.read(r.method); res.StatusCode != 200 {
					t.Fatalf("%.30q: status %d", r.raw, res.StatusCode)
				}
				if !pipelined {
					// Each request is charged its own bytes as soon as it is done, not
					// only the connection's total at its close.
					in, out := sent, cnt.n
					waitFor(t, "this request's bytes", func() bool {
						st := e.stat(h1Host)
						return int64(st.BytesIn) == in && int64(st.BytesOut) == out
					})
				}
			}
			rc.closed() // Connection: close: the proxy closes, and we read all there was
			waitFor(t, "exact bytes", func() bool {
				st := e.stat(h1Host)
				return int64(st.BytesIn) == sent && int64(st.BytesOut) == cnt.n && st.Requests == uint64(len(reqs))
			})
			if st := e.stat(h1Host); st.Connections != 1 {
				t.Errorf("connections %d, want 1", st.Connections)
			}
		})
	}
}

// TestH1ForwardingHeaders: what the target sees of the client's forwarding and
// hop-by-hop fields on the fast path.
func TestH1ForwardingHeaders(t *testing.T) {
	raw := "GET /fwd HTTP/1.1\r\nHost: " + h1Host + "\r\n" +
		"X-Forwarded-For: 6.6.6.6\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: evil.test\r\n" +
		"Forwarded: for=6.6.6.6\r\nX-Real-Ip: 6.6.6.6\r\n" +
		"Connection: keep-alive, X-Hop\r\nX-Hop: secret\r\nKeep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\n" +
		"Proxy-Authorization: Basic eHl6\r\nTE: trailers\r\nTrailer: X-Sum\r\nx-via: 1\r\n\r\n"
	fwd := "for=127.0.0.1;host=" + h1Host + ";proto=http"
	tests := []struct {
		name    string
		trusted bool
		want    map[string]string // "" means absent
	}{
		{"untrusted client", false, map[string]string{
			"X-Forwarded-For": "127.0.0.1", "X-Forwarded-Proto": "http", "X-Forwarded-Host": h1Host,
			"Forwarded": fwd, "X-Real-Ip": ""}},
		{"trusted proxy", true, map[string]string{
			"X-Forwarded-For": "6.6.6.6, 127.0.0.1", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "evil.test",
			"Forwarded": "for=6.6.6.6, " + fwd, "X-Real-Ip": "6.6.6.6"}},
	}
	hop := map[string]string{"Connection": "", "X-Hop": "", "Keep-Alive": "", "Proxy-Connection": "",
		"Proxy-Authorization": "", "Trailer": "", "Te": "trailers", "X-Via": "1"}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, func(c *Config) {
				if tc.trusted {
					c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
				}
			})
			tg := echoTarget(t)
			e.apply([]routeSpec{{host: h1Host, backends: []string{tg.addr}}})
			rc := newRawClient(t, e.http)
			rc.send(raw)
			if res, _ := rc.read("GET"); res.StatusCode != 200 {
				t.Fatalf("status %d", res.StatusCode)
			}
			got := tg.last(t)
			if !fastHead(t, got.rawHead) {
				t.Fatalf("not served by the fast path")
			}
			for _, m := range []map[string]string{tc.want, hop} {
				for k, want := range m {
					v, ok := got.req.Header[k]
					switch {
					case want == "" && ok:
						t.Errorf("%s reached the target: %q", k, v)
					case want != "" && (len(v) != 1 || v[0] != want):
						t.Errorf("%s: %q, want exactly %q", k, v, want)
					}
				}
			}
		})
	}
}

// TestH1GracefulShutdown: Shutdown closes idle fast-path connections at once, lets the
// in-flight request finish with Connection: close, then closes its connection.
func TestH1GracefulShutdown(t *testing.T) {
	e := newEnv(t)
	started := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	be := backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(started)
			<-release
		}
		io.WriteString(w, "done "+r.URL.Path)
	}))
	e.apply([]routeSpec{{host: h1Host, backends: []string{be}}})

	idle := newRawClient(t, e.http)
	idle.send(get1("/idle"))
	if res, body := idle.read("GET"); res.StatusCode != 200 || body != "done /idle" {
		t.Fatalf("idle: %d %q", res.StatusCode, body)
	}
	busy := newRawClient(t, e.http)
	busy.send(get1("/slow"))
	<-started

	shut := shutdownInBackground(t, e, 5*time.Second)
	// The idle connection closes while the other request is still running.
	idle.closed()
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) with a request in flight", err)
	default:
	}

	once.Do(func() { close(release) })
	res, body := busy.read("GET")
	if res.StatusCode != 200 || body != "done /slow" {
		t.Fatalf("in-flight request: %d %q", res.StatusCode, body)
	}
	if !res.Close {
		t.Errorf("the in-flight request's response lacks Connection: close (header %v)", res.Header)
	}
	busy.closed()
	waitShutdown(t, shut, 5*time.Second)
}

// TestH1ClientGone: a client that goes away while its target thinks is noticed at the
// next client check (h1ClientWatch): the target's connection is closed, so the request
// stops there, and it is not a backend failure.
func TestH1ClientGone(t *testing.T) {
	e := newEnv(t)
	got := make(chan struct{})
	gone := make(chan struct{})
	tg := newH1Target(t, func(c net.Conn, r *http.Request, _ string) bool {
		close(got)
		io.Copy(io.Discard, c) // never answers; returns when the proxy closes
		close(gone)
		return false
	})
	e.apply([]routeSpec{{host: h1Host, backends: []string{tg.addr}}})
	rc := newRawClient(t, e.http)
	rc.send(get1("/wait"))
	<-got
	rc.c.Close()
	select {
	case <-gone:
	case <-time.After(h1ClientWatch + 2*time.Second):
		t.Fatal("the target's connection stayed open after the client left")
	}
	e.waitRequests(h1Host, 1)
	if f := e.stat(h1Host).BackendFailures; f.Connect+f.Handshake+f.Request != 0 {
		t.Errorf("client leaving counted as a backend failure: %+v", f)
	}
}

// TestH1ShutdownSparesNewConnections: a connection accepted just before Shutdown that has
// sent nothing yet is not closed under its client (its first request may be on the way,
// net/http's rule): the request it sends during the drain is answered, with
// Connection: close, and Shutdown returns once it is done.
func TestH1ShutdownSparesNewConnections(t *testing.T) {
	e := newEnv(t)
	tg := echoTarget(t)
	e.apply([]routeSpec{{host: h1Host, backends: []string{tg.addr}}})

	fresh := newRawClient(t, e.http)
	waitFor(t, "connection accepted", func() bool {
		return e.srv.conns.count() == 1
	})
	// A connection that has been answered and waits for its next request is idle: the
	// drain closes it at its first pass over the connections. Once it is closed, that
	// pass has judged the fresh connection too (and must have spared it).
	idle := newRawClient(t, e.http)
	idle.send(get1("/idle"))
	if res, _ := idle.read("GET"); res.StatusCode != 200 {
		t.Fatalf("request before the drain: %d", res.StatusCode)
	}
	shut := shutdownInBackground(t, e, 5*time.Second)
	idle.closed()

	fresh.send(get1("/late"))
	res, body := fresh.read("GET")
	if res.StatusCode != 200 || body != echoed("GET", "/late", "") {
		t.Fatalf("first request during the drain: %d %q", res.StatusCode, body)
	}
	if !res.Close {
		t.Error("the answer during the drain lacks Connection: close")
	}
	fresh.closed()
	waitShutdown(t, shut, 5*time.Second)
}

// TestH1BareLFResponseRefusedAtOnce: a target whose response head ends its lines with
// bare LF (which the fast path does not accept) and keeps its connection open gets a
// 502 at once, not a 504 when the response header timeout runs out.
func TestH1BareLFResponseRefusedAtOnce(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.ResponseHeaderTimeout = 10 * time.Second })
	target := rawServer(t, func(c net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\nContent-Length: 2\n\nok")
		io.Copy(io.Discard, c) // keep the connection open until the proxy closes it
	})
	e.apply([]routeSpec{{host: h1Host, backends: []string{target}}})
	rc := newRawClient(t, e.http)
	start := time.Now()
	rc.send(get1("/"))
	res, _ := rc.read("GET")
	if res.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %d, want 502", res.StatusCode)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("answered after %s: the refusal waited for the header timeout", d)
	}
	waitFor(t, "request failure counted", func() bool { return e.stat(h1Host).BackendFailures.Request == 1 })
}

// shutdownInBackground starts a graceful Shutdown bounded by limit and returns once it has
// begun (the server no longer reports ready); the channel yields Shutdown's result.
func shutdownInBackground(t testing.TB, e *env, limit time.Duration) <-chan error {
	t.Helper()
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		shut <- e.srv.Shutdown(ctx)
	}()
	waitFor(t, "draining", func() bool { return !e.srv.Ready() })
	return shut
}

// waitShutdown fails t unless shut yields nil within limit.
func waitShutdown(t testing.TB, shut <-chan error, limit time.Duration) {
	t.Helper()
	select {
	case err := <-shut:
		if err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	case <-time.After(limit):
		t.Fatal("Shutdown did not return")
	}
}
