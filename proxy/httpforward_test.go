package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/serve-zone/ingress/routetable"
)

func TestForwardProtocols(t *testing.T) {
	e := newEnv(t)
	be := backend(t, echoInfo())
	e.apply([]routeSpec{
		{host: "app.example.test", tls: &routetable.RouteTLS{CertificateID: "c1"}, backends: []string{be}},
	}, certSpec{"c1", []string{"app.example.test"}})
	tests := []struct {
		name      string
		client    *http.Client
		url       string
		wantProto string // client side
		xfp       string
	}{
		{"http1 plain", e.h1Client(), "http://app.example.test/p?q=1", "HTTP/1.1", "http"},
		{"h2c prior knowledge", e.h2cClient(), "http://app.example.test/p?q=1", "HTTP/2.0", "http"},
		{"http1 over TLS", e.tlsClient(false), "https://app.example.test/p?q=1", "HTTP/1.1", "https"},
		{"h2 over TLS", e.tlsClient(true), "https://app.example.test/p?q=1", "HTTP/2.0", "https"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, body := get(t, tc.client, tc.url, "")
			if res.StatusCode != 200 || body != "hello from app.example.test" {
				t.Fatalf("got %d %q", res.StatusCode, body)
			}
			if res.Proto != tc.wantProto {
				t.Errorf("client proto %s, want %s", res.Proto, tc.wantProto)
			}
			if got := res.Header.Get("X-Seen-Proto"); got != "HTTP/1.1" {
				t.Errorf("target saw %s, want HTTP/1.1", got)
			}
			if got := res.Header.Get("X-Seen-X-Forwarded-Proto"); got != tc.xfp {
				t.Errorf("X-Forwarded-Proto %q, want %q", got, tc.xfp)
			}
			if got := res.Header.Get("X-Seen-Path"); got != "/p?q=1" {
				t.Errorf("path %q", got)
			}
			if _, ok := res.Header["X-Seen-User-Agent"]; ok && strings.Contains(res.Header.Get("X-Seen-User-Agent"), "Go-http-client") && tc.name == "" {
				t.Errorf("unexpected UA")
			}
		})
	}
	e.waitRequests("app.example.test", 4)
	st := e.stat("app.example.test")
	if st.Requests != 4 {
		t.Errorf("requests %d, want 4", st.Requests)
	}
	// One TLS connection per TLS client (counted at its handshake), one per plain client.
	if st.Connections != 4 {
		t.Errorf("connections %d, want 4", st.Connections)
	}
	if st.BytesIn == 0 || st.BytesOut == 0 {
		t.Errorf("bytes not counted: %+v", st)
	}
}

func TestForwardedHeaders(t *testing.T) {
	for _, trusted := range []bool{false, true} {
		t.Run(fmt.Sprintf("trusted=%v", trusted), func(t *testing.T) {
			e := newEnv(t, func(c *Config) {
				if trusted {
					c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
				}
			})
			be := backend(t, echoInfo())
			e.apply([]routeSpec{{host: "app.example.test", backends: []string{be}}})
			req, _ := http.NewRequest("GET", "http://app.example.test/", nil)
			req.Header.Set("X-Forwarded-For", "6.6.6.6")
			req.Header.Set("Forwarded", "for=6.6.6.6")
			req.Header.Set("X-Forwarded-Proto", "https")
			req.Header.Set("X-Forwarded-Host", "evil.example")
			res, err := e.h1Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			want := map[string]string{
				"X-Seen-X-Forwarded-For":   "127.0.0.1",
				"X-Seen-Forwarded":         "for=127.0.0.1;host=app.example.test;proto=http",
				"X-Seen-X-Forwarded-Proto": "http",
				"X-Seen-X-Forwarded-Host":  "app.example.test",
			}
			if trusted {
				want = map[string]string{
					"X-Seen-X-Forwarded-For":   "6.6.6.6, 127.0.0.1",
					"X-Seen-Forwarded":         "for=6.6.6.6, for=127.0.0.1;host=app.example.test;proto=http",
					"X-Seen-X-Forwarded-Proto": "https",
					"X-Seen-X-Forwarded-Host":  "evil.example",
				}
			}
			for k, v := range want {
				if got := res.Header.Get(k); got != v {
					t.Errorf("%s = %q, want %q", strings.TrimPrefix(k, "X-Seen-"), got, v)
				}
			}
		})
	}
}

func TestForwardedElement(t *testing.T) {
	tests := []struct {
		f    forwardedFor
		want string
	}{
		{forwardedFor{clientIP: "192.0.2.1", host: "a.test", https: true}, "for=192.0.2.1;host=a.test;proto=https"},
		{forwardedFor{clientIP: "2001:db8::1", host: "a.test:8080"}, `for="[2001:db8::1]";host="a.test:8080";proto=http`},
	}
	for _, tc := range tests {
		if got := string(appendForwardedElement(nil, tc.f.clientIP, tc.f.host, tc.f.https)); got != tc.want {
			t.Errorf("got %s, want %s", got, tc.want)
		}
	}
	for in, want := range map[string]string{"1.2.3.4:5": "1.2.3.4", "[::1]:80": "::1", "[2001:db8::1]:1": "2001:db8::1"} {
		if got := clientIP(in); got != want {
			t.Errorf("clientIP(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestHopByHopRemoved(t *testing.T) {
	e := newEnv(t)
	be := backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var seen []string
		for _, k := range []string{"Connection", "Keep-Alive", "X-Drop-Me", "Proxy-Authorization", "Proxy-Connection", "Upgrade", "Http2-Settings"} {
			if _, ok := r.Header[k]; ok {
				seen = append(seen, k)
			}
		}
		w.Header().Set("X-Seen", strings.Join(seen, ","))
		w.Header().Set("X-Seen-Te", r.Header.Get("Te"))
		w.Header().Set("X-Kept", r.Header.Get("X-Kept"))
		w.Header().Set("Connection", "X-Resp-Drop")
		w.Header().Set("X-Resp-Drop", "1")
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("Proxy-Authenticate", "Basic")
		io.WriteString(w, "ok")
	}))
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{be}}})
	raw := "GET / HTTP/1.1\r\nHost: app.example.test\r\nConnection: keep-alive, X-Drop-Me, Upgrade, HTTP2-Settings\r\n" +
		"X-Drop-Me: 1\r\nKeep-Alive: 300\r\nProxy-Authorization: Basic c2VjcmV0\r\nProxy-Connection: keep-alive\r\n" +
		"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\nTE: trailers, deflate\r\nX-Kept: yes\r\n\r\n"
	c := dialRaw(t, e.http)
	io.WriteString(c, raw)
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if got := res.Header.Get("X-Seen"); got != "" {
		t.Errorf("target saw hop-by-hop headers %s", got)
	}
	if got := res.Header.Get("X-Seen-Te"); got != "trailers" {
		t.Errorf("TE %q, want trailers", got)
	}
	if got := res.Header.Get("X-Kept"); got != "yes" {
		t.Errorf("end-to-end header lost")
	}
	for _, k := range []string{"X-Resp-Drop", "Keep-Alive", "Proxy-Authenticate"} {
		if _, ok := res.Header[k]; ok {
			t.Errorf("client got response hop-by-hop header %s", k)
		}
	}
}

func TestTrailersAndExpectContinue(t *testing.T) {
	e := newEnv(t)
	be := backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Trailer", "X-Checksum")
		w.WriteHeader(200)
		fmt.Fprintf(w, "got %d bytes, req trailer %q", len(b), r.Trailer.Get("X-Req-Trailer"))
		w.Header().Set("X-Checksum", "abc")
	}))
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{be}}})
	for _, c := range []*http.Client{e.h1Client(), e.h2cClient()} {
		pr, pw := io.Pipe()
		go func() {
			pw.Write([]byte("hello"))
			pw.Close()
		}()
		req, _ := http.NewRequest("POST", "http://app.example.test/", pr)
		req.Trailer = http.Header{"X-Req-Trailer": nil}
		req.Header.Set("Expect", "100-continue")
		req.Trailer.Set("X-Req-Trailer", "t1")
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if string(b) != `got 5 bytes, req trailer "t1"` {
			t.Errorf("body %q", b)
		}
		if got := res.Trailer.Get("X-Checksum"); got != "abc" {
			t.Errorf("%s: response trailer %q", res.Proto, got)
		}
	}
}

func TestServerSentEventsArriveOneByOne(t *testing.T) {
	e := newEnv(t)
	next := make(chan struct{})
	be := backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
			select {
			case <-next:
			case <-r.Context().Done():
				return
			}
		}
	}))
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{be}}})
	for _, c := range []*http.Client{e.h1Client(), e.h2cClient()} {
		req, _ := http.NewRequest("GET", "http://app.example.test/events", nil)
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(res.Body)
		for i := range 3 {
			done := make(chan string, 1)
			go func() {
				line, _ := br.ReadString('\n')
				br.ReadString('\n')
				done <- line
			}()
			select {
			case line := <-done:
				if line != fmt.Sprintf("data: %d\n", i) {
					t.Fatalf("event %d: %q", i, line)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("%s: event %d did not arrive before the next was produced", res.Proto, i)
			}
			next <- struct{}{}
		}
		res.Body.Close()
	}
}

// closedAfter serves n bytes, then fails as net/http's server body does once closed.
type closedAfter struct{ n, reads int }

func (c *closedAfter) Read(p []byte) (int, error) {
	c.reads++
	if c.n == 0 {
		return 0, errors.New("http: invalid Read on closed Body")
	}
	k := min(len(p), c.n)
	c.n -= k
	return k, nil
}

func (c *closedAfter) Close() error { return nil }

// TestTrackedBodyEndsAtContentLength: once Content-Length bytes are read, the body
// answers EOF without reading the server's body again. http.Transport makes that one
// more read to see EOF; when the target had already answered, net/http's server had
// closed the body, the read failed, and the transport dropped the connection under the
// response being relayed (a truncated answer, found by TestH1FastPathMatchesNetHTTP).
func TestTrackedBodyEndsAtContentLength(t *testing.T) {
	for _, size := range []int{1, 100, 20 << 10} {
		src := &closedAfter{n: size}
		b := &trackedBody{rc: src, limit: int64(size)}
		got, err := io.ReadAll(b)
		if err != nil || len(got) != size {
			t.Fatalf("size %d: read %d bytes, %v", size, len(got), err)
		}
		reads := src.reads
		if n, err := b.Read(make([]byte, 8)); n != 0 || err != io.EOF {
			t.Fatalf("size %d: read after the end: %d, %v; want 0, EOF", size, n, err)
		}
		if src.reads != reads {
			t.Errorf("size %d: the body was read again after Content-Length bytes", size)
		}
		if b.failed.Load() {
			t.Errorf("size %d: a complete body counts as a client failure", size)
		}
	}
}

// TestNoContentTypeGuessed: a body the target sent without Content-Type reaches the
// client without one on every protocol (net/http's servers would sniff one; a proxy
// relays), and a Content-Type the target did send is kept.
func TestNoContentTypeGuessed(t *testing.T) {
	e := newEnv(t)
	target := rawServer(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if req.URL.Path == "/typed" {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/x-kept\r\nContent-Length: 15\r\n\r\n<html>hi</html>")
			} else {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n<html>hi</html>")
			}
		}
	})
	e.apply([]routeSpec{{host: "app.example.test", tls: &routetable.RouteTLS{CertificateID: "c1"}, backends: []string{target}}},
		certSpec{id: "c1", hosts: []string{"app.example.test"}})
	for _, tc := range []struct {
		name string
		c    *http.Client
		base string
	}{
		{"h1", e.h1Client(), "http://app.example.test"},
		{"h1-tls", e.tlsClient(false), "https://app.example.test"},
		{"h2", e.tlsClient(true), "https://app.example.test"},
		{"h2c", e.h2cClient(), "http://app.example.test"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for path, want := range map[string][]string{"/untyped": nil, "/typed": {"text/x-kept"}} {
				res, err := tc.c.Get(tc.base + path)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if string(body) != "<html>hi</html>" {
					t.Fatalf("%s: body %q", path, body)
				}
				if got := res.Header.Values("Content-Type"); !slices.Equal(got, want) {
					t.Errorf("%s over %s: Content-Type %q, want %q", path, res.Proto, got, want)
				}
			}
			tc.c.CloseIdleConnections()
		})
	}
}
