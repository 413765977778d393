package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/serve-zone/ingress/routetable"
	"github.com/serve-zone/ingress/stats"
)

func init() {
	// quic-go warns once per process when it cannot enlarge the UDP buffers; harmless on
	// loopback and noise in test output.
	_ = os.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true")
}

func withHTTP3(c *Config) { c.HTTP3 = true }

// h3Client returns a client speaking HTTP/3 to the proxy's UDP address whatever the URL's
// host says (the URL's host is the SNI and :authority), and its transport.
func (e *env) h3Client() (*http.Client, *http3.Transport) {
	e.t.Helper()
	a := e.srv.HTTP3Addr()
	if a == nil {
		e.t.Fatal("HTTP/3 is not bound")
	}
	udp := a.String()
	tr := &http3.Transport{
		TLSClientConfig:    &tls.Config{InsecureSkipVerify: true},
		DisableCompression: true,
		Dial: func(ctx context.Context, _ string, tlsCfg *tls.Config, cfg *quic.Config) (*quic.Conn, error) {
			return quic.DialAddr(ctx, udp, tlsCfg, cfg)
		},
	}
	e.t.Cleanup(func() { _ = tr.Close() }) // before the env's Shutdown (cleanups run LIFO)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}, tr
}

func h3Requests(s stats.TotalsSnapshot) (n uint64) {
	for _, c := range s.Requests[stats.ProtoHTTP3] {
		n += c
	}
	return n
}

// tlsRoute applies one TLS route for host to the given backend.
func (e *env) tlsRoute(host, be string) {
	e.t.Helper()
	e.apply([]routeSpec{{host: host, tls: &routetable.RouteTLS{CertificateID: "c1"}, backends: []string{be}}}, certSpec{"c1", []string{host}})
}

func TestHTTP3Get(t *testing.T) {
	e := newEnv(t, withHTTP3)
	e.tlsRoute("app.example.test", backend(t, echoInfo()))
	c, _ := e.h3Client()
	res, body := get(t, c, "https://app.example.test/p?q=1", "")
	if res.StatusCode != 200 || body != "hello from app.example.test" {
		t.Fatalf("got %d %q", res.StatusCode, body)
	}
	if res.ProtoMajor != 3 {
		t.Errorf("client spoke %s", res.Proto)
	}
	if got := res.Header.Get("X-Seen-Path"); got != "/p?q=1" {
		t.Errorf("target saw path %q", got)
	}
	if got := res.Header.Get("X-Seen-X-Forwarded-Proto"); got != "https" {
		t.Errorf("X-Forwarded-Proto %q, want https", got)
	}
	if got := res.Header.Get("Alt-Svc"); got != "" {
		t.Errorf("HTTP/3 response announces Alt-Svc %q", got)
	}
	e.waitRequests("app.example.test", 1)
	if n := h3Requests(e.totals.Snapshot()); n != 1 {
		t.Errorf("Totals HTTP/3 requests %d, want 1", n)
	}
}

func TestHTTP3AltSvc(t *testing.T) {
	t.Run("on", func(t *testing.T) {
		e := newEnv(t, withHTTP3)
		be := backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Alt-Svc", `h3=":9999"`) // the target's own: never the client's business
			io.WriteString(w, "ok")
		}))
		e.tlsRoute("app.example.test", be)
		_, tcpPort, _ := net.SplitHostPort(e.https)
		_, udpPort, _ := net.SplitHostPort(e.srv.HTTP3Addr().String())
		if tcpPort != udpPort {
			t.Fatalf("HTTP/3 on port %s, TLS on %s", udpPort, tcpPort)
		}
		want := `h3=":` + udpPort + `"; ma=86400`
		for _, tc := range []struct {
			name   string
			c      *http.Client
			url    string
			status int
			want   string
		}{
			{"h2", e.tlsClient(true), "https://app.example.test/", 200, want},
			{"h1-tls", e.tlsClient(false), "https://app.example.test/", 200, want},
			{"h2-unknown-host", e.tlsClient(true), "https://app.example.test/", 421, want},
			// Plain HTTP announces nothing of its own: the target's value is relayed as is.
			{"h1-plain", e.h1Client(), "http://app.example.test/", 200, `h3=":9999"`},
			{"h2c", e.h2cClient(), "http://app.example.test/", 200, `h3=":9999"`},
			{"h1-plain-unknown-host", e.h1Client(), "http://app.example.test/", 404, ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				host := ""
				if strings.HasSuffix(tc.name, "unknown-host") {
					host = "other.example.test" // SNI app.example.test, Host unknown: 421 on TLS, 404 plain
				}
				res, _ := get(t, tc.c, tc.url, host)
				tc.c.CloseIdleConnections() // spares the env's Shutdown a GOAWAY round
				if res.StatusCode != tc.status {
					t.Errorf("status %d, want %d", res.StatusCode, tc.status)
				}
				if got := res.Header.Values("Alt-Svc"); tc.want == "" && len(got) != 0 || tc.want != "" && (len(got) != 1 || got[0] != tc.want) {
					t.Errorf("status %d, Alt-Svc %q, want %q", res.StatusCode, got, tc.want)
				}
			})
		}
	})
	t.Run("off", func(t *testing.T) {
		e := newEnv(t)
		e.tlsRoute("app.example.test", backend(t, echoInfo()))
		if a := e.srv.HTTP3Addr(); a != nil {
			t.Fatalf("HTTP/3 bound on %v while off", a)
		}
		c := e.tlsClient(true)
		res, _ := get(t, c, "https://app.example.test/", "")
		c.CloseIdleConnections()
		if got := res.Header.Get("Alt-Svc"); got != "" {
			t.Errorf("Alt-Svc %q without HTTP/3", got)
		}
	})
}

func TestHTTP3UnknownSNIRefused(t *testing.T) {
	e := newEnv(t, withHTTP3)
	e.apply([]routeSpec{
		{host: "app.example.test", tls: &routetable.RouteTLS{CertificateID: "c1"}, backends: []string{backend(t, echoInfo())}},
		{host: "plain.example.test", backends: []string{backend(t, echoInfo())}},
	}, certSpec{"c1", []string{"app.example.test"}})
	for _, sni := range []string{"unknown.test", "plain.example.test"} {
		t.Run(sni, func(t *testing.T) {
			before := e.totals.Snapshot().TLSHandshakeFailures
			c, _ := e.h3Client()
			res, err := c.Get("https://" + sni + "/")
			if err == nil {
				res.Body.Close()
				t.Fatalf("request for SNI %s succeeded: %d", sni, res.StatusCode)
			}
			if got := e.totals.Snapshot().TLSHandshakeFailures; got != before+1 {
				t.Errorf("TLS handshake failures %d, want %d", got, before+1)
			}
		})
	}
	if n := e.totals.Snapshot().Conns[stats.ProtoHTTP3]; n != 0 {
		t.Errorf("refused handshakes left %d HTTP/3 connections counted", n)
	}
}

// TestHTTP3RetriesAfterConnectFailure: an HTTP/3 GET carries a request body of unknown
// length as far as net/http knows; a dial failure must still move it to another target.
func TestHTTP3RetriesAfterConnectFailure(t *testing.T) {
	e := newEnv(t, withHTTP3)
	live, dead := backend(t, echoInfo()), deadAddr(t)
	e.apply([]routeSpec{{host: "app.example.test", tls: &routetable.RouteTLS{CertificateID: "c1"}, backends: []string{dead, live}}},
		certSpec{"c1", []string{"app.example.test"}})
	// Make the live target look busy, so that the first pick is the dead one.
	for _, b := range e.store.Load().Lookup("app.example.test").Backends {
		if b.Addr == live {
			b.State.InFlight.Add(1000)
			defer b.State.InFlight.Add(-1000)
		}
	}
	c, _ := e.h3Client()
	if res, body := get(t, c, "https://app.example.test/", ""); res.StatusCode != 200 {
		t.Fatalf("%d %q", res.StatusCode, body)
	}
	e.waitRequests("app.example.test", 1)
	if f := e.stat("app.example.test").BackendFailures.Connect; f != 1 {
		t.Errorf("connect failures %d, want 1: the dead target was tried first, then the live one", f)
	}
}

// TestHTTP3Accounting sends a GET and a POST on one QUIC connection and checks the
// route's counters exactly: decoded field names and values (pseudo-headers included)
// plus body bytes, in both directions, and one connection.
func TestHTTP3Accounting(t *testing.T) {
	e := newEnv(t, withHTTP3)
	be := backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("X-Got", strconv.Itoa(len(b)))
		fmt.Fprintf(w, "%s %s %s", r.Method, r.URL.Path, b)
	}))
	e.tlsRoute("app.example.test", be)
	c, _ := e.h3Client()

	var wantIn, wantOut int64
	reqFields := func(method, path string, hdr http.Header) int64 {
		n := len(":method") + len(method) + len(":scheme") + len("https") +
			len(":authority") + len("app.example.test") + len(":path") + len(path)
		return int64(n) + fieldBytes(hdr)
	}
	do := func(method, path, body string) {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequest(method, "https://app.example.test"+path, rd)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("User-Agent", "h3-test")
		sent := http.Header{"User-Agent": {"h3-test"}}
		if body != "" {
			sent.Set("Content-Length", strconv.Itoa(len(body)))
		}
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if want := method + " " + path + " " + body; string(b) != want || res.StatusCode != 200 {
			t.Fatalf("got %d %q, want %q", res.StatusCode, b, want)
		}
		if res.Header.Get("X-Got") != strconv.Itoa(len(body)) {
			t.Fatalf("target read %s body bytes, want %d", res.Header.Get("X-Got"), len(body))
		}
		wantIn += reqFields(method, path, sent) + int64(len(body))
		// The client sees every response field the proxy sent (Content-Length included).
		wantOut += responseFieldBytes(res.Header) + int64(len(b))
	}
	do("GET", "/first", "")
	body := strings.Repeat("payload-", 1000) // 8000 bytes: several DATA frames
	do("POST", "/second", body)

	e.waitRequests("app.example.test", 2)
	st := e.stat("app.example.test")
	if int64(st.BytesIn) != wantIn || int64(st.BytesOut) != wantOut {
		t.Errorf("bytes in/out %d/%d, want %d/%d", st.BytesIn, st.BytesOut, wantIn, wantOut)
	}
	if st.Connections != 1 {
		t.Errorf("connections %d, want 1 for two requests on one QUIC connection", st.Connections)
	}
	tot := e.totals.Snapshot()
	if h3Requests(tot) != 2 || int64(tot.BytesIn[stats.ProtoHTTP3]) != wantIn || int64(tot.BytesOut[stats.ProtoHTTP3]) != wantOut {
		t.Errorf("totals: %d requests, %d/%d bytes; want 2, %d/%d", h3Requests(tot), tot.BytesIn[stats.ProtoHTTP3], tot.BytesOut[stats.ProtoHTTP3], wantIn, wantOut)
	}
	if tot.Conns[stats.ProtoHTTP3] != 1 {
		t.Errorf("open HTTP/3 connections %d, want 1", tot.Conns[stats.ProtoHTTP3])
	}
}

// TestHTTP3ConnectionLifecycle checks that Totals.Conn follows a QUIC connection's
// life and that its attribution happened at the handshake, before any request.
func TestHTTP3ConnectionLifecycle(t *testing.T) {
	e := newEnv(t, withHTTP3)
	e.tlsRoute("app.example.test", backend(t, echoInfo()))
	tlsConf := &tls.Config{InsecureSkipVerify: true, ServerName: "app.example.test", NextProtos: []string{http3.NextProtoH3}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	qc, err := quic.DialAddr(ctx, e.srv.HTTP3Addr().String(), tlsConf, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "connection attributed at the handshake", func() bool {
		return e.stat("app.example.test").Connections == 1 && e.totals.Snapshot().Conns[stats.ProtoHTTP3] == 1
	})
	_ = qc.CloseWithError(0, "")
	waitFor(t, "connection uncounted", func() bool { return e.totals.Snapshot().Conns[stats.ProtoHTTP3] == 0 })
	if st := e.stat("app.example.test"); st.Requests != 0 || st.Connections != 1 {
		t.Errorf("requests %d connections %d, want 0 and 1", st.Requests, st.Connections)
	}
}

func TestHTTP3ShutdownReleasesPort(t *testing.T) {
	e := newEnv(t, withHTTP3)
	e.tlsRoute("app.example.test", backend(t, echoInfo()))
	c, tr := e.h3Client()
	if res, _ := get(t, c, "https://app.example.test/", ""); res.StatusCode != 200 {
		t.Fatalf("status %d", res.StatusCode)
	}
	udp := e.srv.HTTP3Addr().String()
	// The idle QUIC connection stays open: Shutdown's GOAWAY makes the client close it.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := e.srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Shutdown took %v", d)
	}
	e.waitServed(t)
	if n := e.totals.Snapshot().Conns[stats.ProtoHTTP3]; n != 0 {
		t.Errorf("%d HTTP/3 connections still counted after Serve returned", n)
	}
	pc, err := net.ListenPacket("udp", udp)
	if err != nil {
		t.Fatalf("UDP port not released: %v", err)
	}
	pc.Close()
	tr.CloseIdleConnections()
	rctx, rcancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer rcancel()
	req, _ := http.NewRequestWithContext(rctx, "GET", "https://app.example.test/", nil)
	if res, err := c.Do(req); err == nil {
		res.Body.Close()
		t.Fatalf("request after Shutdown succeeded")
	}
}

// TestHTTP3ShutdownDeadline: a request still running at the deadline
// is cut off, Shutdown returns the ctx error and Serve returns.
func TestHTTP3ShutdownDeadline(t *testing.T) {
	e := newEnv(t, withHTTP3)
	release := make(chan struct{})
	defer close(release)
	started := make(chan struct{}, 1)
	e.tlsRoute("app.example.test", backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		io.WriteString(w, "first bytes")
		w.(http.Flusher).Flush()
		started <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})))
	c, _ := e.h3Client()
	res, err := c.Get("https://app.example.test/slow")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := e.srv.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v, want deadline exceeded", err)
	}
	if _, err := io.ReadAll(res.Body); err == nil {
		t.Errorf("body of the cut-off response ended cleanly")
	}
	e.waitServed(t)
	if n := e.totals.Snapshot().Conns[stats.ProtoHTTP3]; n != 0 {
		t.Errorf("%d HTTP/3 connections still counted", n)
	}
}

func TestHTTP3ListenFailsWhenUDPPortTaken(t *testing.T) {
	// A UDP port whose TCP twin is free (the TCP port may be some connection's local port).
	var pc net.PacketConn
	for range 20 {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if ln, err := net.Listen("tcp", c.LocalAddr().String()); err == nil {
			ln.Close()
			pc = c
			break
		}
		c.Close()
	}
	if pc == nil {
		t.Fatal("found no UDP port whose TCP twin is free")
	}
	defer pc.Close()
	addr := pc.LocalAddr().String()
	srv, err := New(Config{HTTPSAddr: addr, HTTP3: true, Tables: routetable.NewStore(routetable.StoreOptions{})})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err == nil {
		t.Fatal("Listen succeeded on a taken UDP port")
	}
	// The TCP listener bound before the failure was released.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("TCP port kept after the failed Listen: %v", err)
	}
	ln.Close()
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// TestAltSvcCostsNoAllocation: with HTTP/3 on, a request over TLS on TCP (here HTTP/2)
// carries the precomputed Alt-Svc value and allocates no more than the hot-path budget.
func TestAltSvcCostsNoAllocation(t *testing.T) {
	e := newEnv(t, withHTTP3)
	answer := []byte("HTTP/1.1 200 OK\r\nAlt-Svc: h3=\":1\"\r\nContent-Length: 5\r\n\r\nhello")
	target := rawTargetAnswering(t, answer) // a target that announces an HTTP/3 of its own
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{target}}})
	r, _ := http.NewRequest("GET", "https://app.example.test/path", nil)
	r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/2.0", 2, 0
	r.RemoteAddr = "192.0.2.7:4711"
	r.RequestURI = "/path"
	r.Header.Set("User-Agent", "bench")
	cc := &clientConn{s: e.srv, tc: &tls.Conn{}, sni: "app.example.test"} // a TLS connection of our listener, handshaken for the host
	r = r.WithContext(context.WithValue(r.Context(), connKey{}, cc))
	w := &discardRW{h: http.Header{}}
	h := e.srv.handler
	h.ServeHTTP(w, r) // warm: header maps reach their size
	_, port, _ := net.SplitHostPort(e.srv.HTTP3Addr().String())
	if got := w.h.Get("Content-Length"); got != "5" {
		t.Fatalf("answer not relayed: %d %v", w.code, w.h)
	}
	if got, want := w.h.Values("Alt-Svc"), `h3=":`+port+`"; ma=86400`; len(got) != 1 || got[0] != want {
		t.Fatalf("Alt-Svc %q, want [%q]", got, want)
	}
	allocs := testing.AllocsPerRun(500, func() {
		clear(w.h)
		h.ServeHTTP(w, r)
	})
	limit := 2.0 // TestHandlerHotPathAllocs's budget
	if raceEnabled {
		limit += 3
	}
	if allocs > limit {
		t.Errorf("%.1f allocs per request, want at most %.0f", allocs, limit)
	}
}

// TestHTTP3ServeCancelClosesAtOnce: cancelling Serve's ctx closes QUIC connections without
// a drain, and Serve returns only once their watchers have ended.
func TestHTTP3ServeCancelClosesAtOnce(t *testing.T) {
	reg := stats.NewRegistry(stats.Options{NodeID: "node-1"})
	store := routetable.NewStore(routetable.StoreOptions{Stats: reg})
	totals := new(stats.Totals)
	srv, err := New(Config{HTTPSAddr: "127.0.0.1:0", HTTP3: true, Tables: store, Totals: totals})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, reg: reg, store: store, srv: srv}
	e.tlsRoute("app.example.test", "127.0.0.1:9")
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	waitFor(t, "ready", srv.Ready)
	udp := srv.HTTP3Addr().String()
	dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer dcancel()
	qc, err := quic.DialAddr(dctx, udp, &tls.Config{InsecureSkipVerify: true, ServerName: "app.example.test", NextProtos: []string{http3.NextProtoH3}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer qc.CloseWithError(0, "")
	waitFor(t, "connection counted", func() bool { return totals.Snapshot().Conns[stats.ProtoHTTP3] == 1 })
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after its ctx was cancelled")
	}
	if n := totals.Snapshot().Conns[stats.ProtoHTTP3]; n != 0 {
		t.Errorf("%d HTTP/3 connections counted after Serve returned", n)
	}
	select {
	case <-qc.Context().Done():
	case <-time.After(5 * time.Second):
		t.Error("client connection still open")
	}
	pc, err := net.ListenPacket("udp", udp)
	if err != nil {
		t.Fatalf("UDP port not released: %v", err)
	}
	pc.Close()
	_ = srv.Shutdown(context.Background())
}
