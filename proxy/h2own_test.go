package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/toolbin"
	"github.com/serve-zone/ingress/routetable"
	"github.com/serve-zone/ingress/stats"
)

// Tests of the own HTTP/2 server through the proxy; the rest of the package's tests run
// on it too. net/http's HTTP/2 server is the oracle of the differential tests only.

// h2Std and h2Own name the two HTTP/2 servers of the differential tests: net/http's,
// the oracle, and the own engine, the ingress's only one.
const (
	h2Std = "std"
	h2Own = "own"
)

// withH2 makes newEnv serve HTTP/2 with impl (h2Std or h2Own).
func withH2(impl string) func(*Config) { return func(c *Config) { c.stdH2 = impl == h2Std } }

// withH1Off makes every connection go to net/http's front-end at once (Config.h1Off).
func withH1Off(c *Config) { c.h1Off = true }

// withH1OffIf is withH1Off when off is true.
func withH1OffIf(off bool) func(*Config) { return func(c *Config) { c.h1Off = off } }

// TestOwnH2Forwards: GET and a streamed upload over h2c and h2 over TLS, trailers from
// the target, the forwarding fields, the route's counters.
func TestOwnH2Forwards(t *testing.T) {
	e := newEnv(t)
	be := backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Sum")
		w.Header().Set("X-Seen-Xff", r.Header.Get("X-Forwarded-For"))
		w.Header().Set("X-Seen-Proto", r.Header.Get("X-Forwarded-Proto"))
		n, _ := io.Copy(w, r.Body)
		w.Header().Set("X-Sum", fmt.Sprint(n))
	}))
	e.apply([]routeSpec{{host: "app.example.test", tls: &routetable.RouteTLS{CertificateID: "c"}, backends: []string{be}}},
		certSpec{id: "c", hosts: []string{"app.example.test"}})
	body := make([]byte, 3<<20+5)
	rand.Read(body)
	for _, tc := range []struct {
		name, url, proto string
		c                *http.Client
	}{
		{"h2c", "http://app.example.test/up", "http", e.h2cClient()},
		{"h2 over TLS", "https://app.example.test/up", "https", e.tlsClient(true)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := tc.c.Post(tc.url, "application/octet-stream", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(res.Body)
			res.Body.Close()
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("echo: %d of %d bytes, %v", len(got), len(body), err)
			}
			if res.ProtoMajor != 2 || res.Header.Get("X-Seen-Xff") != "127.0.0.1" || res.Header.Get("X-Seen-Proto") != tc.proto {
				t.Fatalf("proto %s, target saw XFF %q proto %q", res.Proto, res.Header.Get("X-Seen-Xff"), res.Header.Get("X-Seen-Proto"))
			}
			if res.Trailer.Get("X-Sum") != fmt.Sprint(len(body)) {
				t.Fatalf("trailer %v", res.Trailer)
			}
		})
	}
	e.waitRequests("app.example.test", 2)
	if st := e.stat("app.example.test"); st.BytesIn < 2*uint64(len(body)) || st.BytesOut < 2*uint64(len(body)) {
		t.Fatalf("counted in %d out %d, want at least the bodies", st.BytesIn, st.BytesOut)
	}
}

// wsFrame writes one masked client text frame (payload < 126 bytes).
func wsFrame(w io.Writer, opcode byte, payload []byte) error {
	b := []byte{0x80 | opcode, 0x80 | byte(len(payload)), 1, 2, 3, 4}
	for i, c := range payload {
		b = append(b, c^b[2+i%4])
	}
	_, err := w.Write(b)
	return err
}

// wsRead reads one unmasked server frame (payload < 126 bytes).
func wsRead(r io.Reader) (byte, []byte, error) {
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := int(h[1] & 0x7f)
	if n >= 126 {
		return 0, nil, fmt.Errorf("frame too long for the test: %d", n)
	}
	p := make([]byte, n)
	_, err := io.ReadFull(r, p)
	return h[0] & 0x0f, p, err
}

// TestOwnH2WebSocketSurvivesSwaps: a WebSocket over HTTP/2 (RFC 8441 extended CONNECT)
// reaches an HTTP/1.1 WebSocket target, echoes through five table swaps (one of which
// removes its route), and is counted as one request with its bytes.
func TestOwnH2WebSocketSurvivesSwaps(t *testing.T) {
	e := newEnv(t)
	be := wsEcho(t)
	other := backend(t, echoInfo())
	e.apply([]routeSpec{{host: "ws.example.test", backends: []string{be}}})

	res, pw := extendedConnect(t, e.http, "ws.example.test", "/ws", "websocket", "sec-websocket-version", "13")
	defer pw.Close()
	defer res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("status %d", res.StatusCode)
	}
	echo := func(i int) {
		t.Helper()
		msg := fmt.Sprintf("message %d", i)
		if err := wsFrame(pw, 1, []byte(msg)); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		op, b, err := wsRead(res.Body)
		if err != nil || op != 1 || string(b) != msg {
			t.Fatalf("read %d: %d %q %v", i, op, b, err)
		}
	}
	echo(0)
	for i := 1; i <= 5; i++ {
		routes := []routeSpec{{host: "ws.example.test", backends: []string{be}}, {host: fmt.Sprintf("r%d.example.test", i), backends: []string{other}}}
		if i == 3 {
			routes = routes[1:] // the tunnel's target (and route) disappear
		}
		e.apply(routes)
		echo(i)
	}
	if e.totals.Snapshot().WebSockets != 1 {
		t.Fatalf("%d open WebSockets counted, want 1", e.totals.Snapshot().WebSockets)
	}
	// The closing handshake, then both sides end.
	var code [2]byte
	binary.BigEndian.PutUint16(code[:], 1000)
	if err := wsFrame(pw, 8, code[:]); err != nil {
		t.Fatal(err)
	}
	if op, _, err := wsRead(res.Body); err != nil || op != 8 {
		t.Fatalf("close answer: %d %v", op, err)
	}
	pw.Close()
	if _, err := io.Copy(io.Discard, res.Body); err != nil {
		t.Fatalf("stream end: %v", err)
	}
	waitFor(t, "tunnel bytes", func() bool {
		st := e.stat("ws.example.test")
		return st.Requests == 1 && st.BytesIn > 6*10 && st.BytesOut > 6*10 && e.totals.Snapshot().WebSockets == 0
	})
	if s := e.totals.Snapshot(); s.BytesIn[stats.ProtoHTTP1] != 0 || s.BytesIn[stats.ProtoHTTP2] < 6*10 {
		t.Errorf("tunnel bytes in the totals: HTTP/1.1 %d, HTTP/2 %d; want them under HTTP/2", s.BytesIn[stats.ProtoHTTP1], s.BytesIn[stats.ProtoHTTP2])
	}
}

// TestOwnH2ExtendedConnectOtherwise: extended CONNECT for another protocol and plain
// CONNECT are 405; an unknown host is 404; a target that refuses the upgrade has its
// answer relayed.
func TestOwnH2ExtendedConnectOtherwise(t *testing.T) {
	e := newEnv(t)
	refuse := backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no", http.StatusForbidden) }))
	e.apply([]routeSpec{{host: "ws.example.test", backends: []string{refuse}}})
	for _, tc := range []struct {
		host, proto string
		want        int
	}{
		{"ws.example.test", "websocket", 403},
		{"ws.example.test", "webtransport", 405},
		{"nope.example.test", "websocket", 404},
	} {
		res, w := extendedConnect(t, e.http, tc.host, "/ws", tc.proto)
		w.Close()
		res.Body.Close()
		if res.StatusCode != tc.want {
			t.Errorf("%s %s: status %d, want %d", tc.host, tc.proto, res.StatusCode, tc.want)
		}
	}
}

// TestOwnH2ConnectionCounts: an HTTP/2 connection is counted under HTTP/2 while open
// and gone after; its bytes go to its requests' hostname and HTTP/2 only (no tail is
// attributed at close as for HTTP/1.1), the route's and the totals' the same.
func TestOwnH2ConnectionCounts(t *testing.T) {
	e := newEnv(t)
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{backend(t, echoInfo())}}})
	c := e.h2cClient()
	for range 3 {
		res, body := get(t, c, "http://app.example.test/x", "")
		if res.StatusCode != 200 || res.ProtoMajor != 2 {
			t.Fatalf("%s %d %q", res.Proto, res.StatusCode, body)
		}
	}
	if n := e.totals.Snapshot().Conns[stats.ProtoHTTP2]; n != 1 {
		t.Fatalf("%d HTTP/2 connections counted, want 1", n)
	}
	c.CloseIdleConnections()
	waitFor(t, "the connection's end", func() bool {
		s := e.totals.Snapshot()
		return s.Conns[stats.ProtoHTTP2] == 0 && s.Conns[stats.ProtoHTTP1] == 0
	})
	s, st := e.totals.Snapshot(), e.stat("app.example.test")
	if s.BytesIn[stats.ProtoHTTP1] != 0 || s.BytesOut[stats.ProtoHTTP1] != 0 {
		t.Errorf("HTTP/1.1 bytes %d/%d counted for an HTTP/2 connection", s.BytesIn[stats.ProtoHTTP1], s.BytesOut[stats.ProtoHTTP1])
	}
	if st.Requests != 3 || st.BytesIn != s.BytesIn[stats.ProtoHTTP2] || st.BytesOut != s.BytesOut[stats.ProtoHTTP2] || st.BytesOut == 0 {
		t.Errorf("route: %d requests %d/%d bytes; totals %d/%d", st.Requests, st.BytesIn, st.BytesOut, s.BytesIn[stats.ProtoHTTP2], s.BytesOut[stats.ProtoHTTP2])
	}
}

// TestOwnH2WebSocketDrainsOnStop: Shutdown waits for a WebSocket over HTTP/2 until its
// deadline, then closes it; the client's stream ends.
func TestOwnH2WebSocketDrainsOnStop(t *testing.T) {
	e := newEnv(t)
	e.apply([]routeSpec{{host: "ws.example.test", backends: []string{wsEcho(t)}}})
	res, pw := extendedConnect(t, e.http, "ws.example.test", "/ws", "websocket", "sec-websocket-version", "13")
	defer pw.Close()
	if res.StatusCode != 200 {
		t.Fatalf("CONNECT: status %d", res.StatusCode)
	}
	defer res.Body.Close()
	if err := wsFrame(pw, 1, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if _, b, err := wsRead(res.Body); err != nil || string(b) != "hi" {
		t.Fatalf("echo: %q %v", b, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := e.srv.Shutdown(ctx); err == nil {
		t.Fatal("Shutdown returned before the open tunnel ended")
	}
	if _, err := io.Copy(io.Discard, res.Body); err == nil {
		t.Fatal("the tunnel's stream ended cleanly, want it cut by the stop")
	}
	waitFor(t, "the tunnel's end", func() bool { return e.totals.Snapshot().WebSockets == 0 })
}

// TestOwnH2Curl: curl (nghttp2 inside) through the own HTTP/2 server, h2c with prior
// knowledge and h2 over TLS, a GET and an upload.
func TestOwnH2Curl(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err == nil {
		out, _ := exec.Command(curl, "--version").Output()
		if !strings.Contains(string(out), "HTTP2") {
			err = fmt.Errorf("curl without HTTP/2")
		}
	}
	if err != nil {
		toolbin.Missing(t, fmt.Sprintf("curl with HTTP/2 not found (Debian package curl): %v", err))
	}
	e := newEnv(t)
	e.apply([]routeSpec{{host: "app.example.test", tls: &routetable.RouteTLS{CertificateID: "c"}, backends: []string{backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %d", r.Method, r.URL.Path, len(b))
	}))}}}, certSpec{id: "c", hosts: []string{"app.example.test"}})
	_, httpPort, _ := net.SplitHostPort(e.http)
	_, httpsPort, _ := net.SplitHostPort(e.https)
	for _, args := range [][]string{
		{"--http2-prior-knowledge", "--resolve", "app.example.test:" + httpPort + ":127.0.0.1", "http://app.example.test:" + httpPort + "/c"},
		{"--http2", "-k", "--resolve", "app.example.test:" + httpsPort + ":127.0.0.1", "https://app.example.test:" + httpsPort + "/c"},
		{"--http2", "-k", "--resolve", "app.example.test:" + httpsPort + ":127.0.0.1", "-d", strings.Repeat("z", 70000), "https://app.example.test:" + httpsPort + "/c"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		out, err := exec.CommandContext(ctx, curl, append([]string{"-sS", "-i"}, args...)...).CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("curl %v: %v\n%s", args, err, out)
		}
		want := "GET /c 0"
		if slices.Contains(args, "-d") {
			want = "POST /c 70000"
		}
		if !strings.HasPrefix(string(out), "HTTP/2 200") || !strings.HasSuffix(string(out), want) {
			t.Fatalf("curl %v:\n%s", args[:1], out)
		}
	}
}

// TestOwnH2Nghttp: nghttp (nghttp2's client) through the own HTTP/2 server over h2c
// with prior knowledge: a GET and an upload. nghttp is not one of the pinned Go tools
// .ci/run installs: where it is missing (Debian's nghttp2-client) the test says so and
// skips; curl's test above runs everywhere.
func TestOwnH2Nghttp(t *testing.T) {
	nghttp, err := exec.LookPath("nghttp")
	if err != nil {
		toolbin.Skip(t, fmt.Sprintf("nghttp not found (Debian package nghttp2-client): %v", err))
	}
	e := newEnv(t)
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %d", r.Method, r.URL.Path, len(b))
	}))}}})
	upload := filepath.Join(t.TempDir(), "upload")
	if err := os.WriteFile(upload, bytes.Repeat([]byte("z"), 70000), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "GET /n 0"},
		{[]string{"-d", upload}, "POST /n 70000"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		args := append([]string{"-H", ":authority: app.example.test"}, tc.args...)
		out, err := exec.CommandContext(ctx, nghttp, append(args, "http://"+e.http+"/n")...).CombinedOutput()
		cancel()
		if err != nil || string(out) != tc.want {
			t.Fatalf("nghttp %v: %v\n%s", tc.args, err, out)
		}
	}
}
