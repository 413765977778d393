package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/serve-zone/ingress/routetable"
	"github.com/serve-zone/ingress/stats"
)

func get(t *testing.T, c *http.Client, url, host string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(b)
}

func TestNoTableAnswers503(t *testing.T) {
	e := newEnv(t)
	res, body := get(t, e.h1Client(), "http://"+e.http+"/x", "app.example.test")
	if res.StatusCode != 503 || res.Header.Get("Retry-After") != "5" || body != "503 Service Unavailable\n" {
		t.Fatalf("got %d %q Retry-After=%q", res.StatusCode, body, res.Header.Get("Retry-After"))
	}
}

func TestRouting(t *testing.T) {
	e := newEnv(t)
	be := backend(t, echoInfo())
	e.apply([]routeSpec{
		{host: "app.example.test", backends: []string{be}},
		{host: "*.wild.example.test", backends: []string{be}},
		{host: "secure.example.test", tls: &routetable.RouteTLS{CertificateID: "c1", RedirectHTTP: true}, backends: []string{be}},
		{host: "both.example.test", tls: &routetable.RouteTLS{CertificateID: "c2", RedirectHTTP: false}, backends: []string{be}},
	}, certSpec{"c1", []string{"secure.example.test"}}, certSpec{"c2", []string{"both.example.test"}})
	_, httpsPort, _ := net.SplitHostPort(e.https)
	c := e.h1Client()
	base := "http://" + e.http

	tests := []struct {
		name, host, path string
		status           int
		seenHost         string
		location         string
	}{
		{"exact", "app.example.test", "/a?b=c", 200, "app.example.test", ""},
		{"port uppercase trailing dot", "APP.Example.TEST.:8080", "/", 200, "APP.Example.TEST.:8080", ""},
		{"wildcard one label", "x.wild.example.test", "/", 200, "x.wild.example.test", ""},
		{"wildcard not two labels", "a.b.wild.example.test", "/", 404, "", ""},
		{"wildcard not apex", "wild.example.test", "/", 404, "", ""},
		{"unknown", "nope.example.test", "/", 404, "", ""},
		{"redirect", "secure.example.test:80", "/p/q?x=1&y=2", 308, "", "https://secure.example.test:" + httpsPort + "/p/q?x=1&y=2"},
		{"tls route served plain", "both.example.test", "/", 200, "both.example.test", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, body := get(t, c, base+tc.path, tc.host)
			if res.StatusCode != tc.status {
				t.Fatalf("status %d, want %d (%q)", res.StatusCode, tc.status, body)
			}
			if tc.seenHost != "" && res.Header.Get("X-Seen-Host") != tc.seenHost {
				t.Errorf("backend saw host %q", res.Header.Get("X-Seen-Host"))
			}
			if tc.status == 200 && res.Header.Get("X-Seen-Path") != tc.path {
				t.Errorf("backend saw path %q, want %q", res.Header.Get("X-Seen-Path"), tc.path)
			}
			if tc.location != "" && res.Header.Get("Location") != tc.location {
				t.Errorf("Location %q, want %q", res.Header.Get("Location"), tc.location)
			}
			if tc.status == 404 && body != "404 Not Found\n" {
				t.Errorf("404 body %q", body)
			}
		})
	}
	e.waitRequests("app.example.test", 2)
	e.waitRequests("*.wild.example.test", 1)
	e.waitRequests("secure.example.test", 1)
	e.waitRequests("both.example.test", 1)
	if got := e.stat("app.example.test").Requests; got != 2 {
		t.Errorf("app requests = %d, want 2", got)
	}
	if got := e.stat("*.wild.example.test").Requests; got != 1 {
		t.Errorf("wildcard requests = %d, want 1", got)
	}
	if got := e.stat("secure.example.test").Requests; got != 1 {
		t.Errorf("redirected requests = %d, want 1", got)
	}
	for _, h := range []string{"nope.example.test", "a.b.wild.example.test", "wild.example.test"} {
		if got := e.stat(h); got.Requests != 0 {
			t.Errorf("unknown host %s got a statistics entry", h)
		}
	}
	if n := e.entries(); n != 4 {
		t.Errorf("%d statistics entries, want 4", n)
	}
	// The totals behind the metrics see every request, unknown hosts included.
	waitFor(t, "totals", func() bool {
		tot := e.totals.Snapshot()
		return tot.Requests[stats.ProtoHTTP1][2] == 4 && tot.Requests[stats.ProtoHTTP1][4] == 3
	})
	tot := e.totals.Snapshot()
	if tot.UnknownHost != 3 || tot.Requests[stats.ProtoHTTP1][3] != 1 || tot.InFlight != 0 {
		t.Errorf("totals %+v: want 3 unknown hosts, one 3xx, nothing in flight", tot)
	}
	if tot.BytesIn[stats.ProtoHTTP1] == 0 || tot.BytesOut[stats.ProtoHTTP1] == 0 {
		t.Errorf("totals count no bytes: %+v", tot)
	}
}

// rawRoundTrip writes raw bytes to the proxy and returns the first response's status line.
func rawRoundTrip(t *testing.T, addr, raw string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("reading response to %q: %v", raw, err)
	}
	return strings.TrimSpace(line)
}

func TestBadInput(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxHeaderBytes = 4096 })
	var hits, sawCL atomic.Int32
	be := backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if _, ok := r.Header["Content-Length"]; ok && len(r.TransferEncoding) > 0 {
			sawCL.Add(1)
		}
	}))
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{be}}})
	tests := []struct{ name, raw, want string }{
		// (At least 14 bytes: net/http peeks that many for the h2c preface first.)
		{"malformed request line", "GARBAGE GARBAGE GARBAGE\r\n\r\n", "HTTP/1.1 400 Bad Request"},
		{"oversize header", "GET / HTTP/1.1\r\nHost: app.example.test\r\nX-Big: " + strings.Repeat("a", 8192) + "\r\n\r\n", "HTTP/1.1 431 Request Header Fields Too Large"},
		// RFC 9112 §6.1 lets a server refuse a request with both; the fast path does
		// (and closes the connection), so no target ever has to pick one.
		{"CL and TE refused", "POST / HTTP/1.1\r\nHost: app.example.test\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "HTTP/1.1 400 Bad Request"},
		{"duplicate CL", "POST / HTTP/1.1\r\nHost: app.example.test\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", "HTTP/1.1 400 Bad Request"},
		{"absolute-form unknown host", "GET http://evil.example.test/ HTTP/1.1\r\nHost: app.example.test\r\n\r\n", "HTTP/1.1 404 Not Found"},
		{"CONNECT unknown", "CONNECT evil.example.test:443 HTTP/1.1\r\nHost: evil.example.test:443\r\n\r\n", "HTTP/1.1 404 Not Found"},
		{"CONNECT known", "CONNECT app.example.test:443 HTTP/1.1\r\nHost: app.example.test:443\r\n\r\n", "HTTP/1.1 405 Method Not Allowed"},
		{"absolute-form known host", "GET http://app.example.test/ HTTP/1.1\r\nHost: other\r\n\r\n", "HTTP/1.1 200 OK"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := rawRoundTrip(t, e.http, tc.raw); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
	if hits.Load() != 1 {
		t.Errorf("backend got %d requests, want 1 (the absolute-form one)", hits.Load())
	}
	if sawCL.Load() != 0 {
		t.Errorf("a request reached the target with both Content-Length and Transfer-Encoding")
	}
}
