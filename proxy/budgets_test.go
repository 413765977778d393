package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/net/http2"

	"github.com/serve-zone/ingress/internal/testwait"
	"github.com/serve-zone/ingress/stats"
)

// The per-address budgets (budgets.go). Clients pose as different addresses by binding
// to other loopback addresses (127.0.0.0/8 is all loopback on Linux).

var (
	addrA = netip.MustParseAddr("127.0.0.1")
	addrB = netip.MustParseAddr("127.0.0.2")
)

// dialFrom dials addr over TCP from the local address from; closed at cleanup.
func dialFrom(t testing.TB, from netip.Addr, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: from.AsSlice()}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// tlsFrom is dialFrom with a TLS handshake (HTTP/1.1 by ALPN); the error is the
// handshake's.
func tlsFrom(t testing.TB, from netip.Addr, addr string) (*tls.Conn, error) {
	t.Helper()
	c := tls.Client(dialFrom(t, from, addr), &tls.Config{InsecureSkipVerify: true, ServerName: "app.example.test", NextProtos: []string{"http/1.1"}})
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	err := c.Handshake()
	_ = c.SetDeadline(time.Time{})
	return c, err
}

// getOn sends a GET for app.example.test on c and returns the answer's status (0 and
// the error when none came).
func getOn(c net.Conn, br *bufio.Reader) (int, error) {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: app.example.test\r\n\r\n"); err != nil {
		return 0, err
	}
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode, nil
}

// refusedAtAccept dials addr from the local address from and asserts that the proxy
// closes the connection without a byte of answer: a reset (which may come before the
// dial has even returned) or EOF, not a timeout.
func refusedAtAccept(t *testing.T, what string, from netip.Addr, addr string) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: from.AsSlice()}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("%s: dial: %v; want a connection that is reset", what, err)
		}
		return
	}
	defer c.Close()
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: app.example.test\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(make([]byte, 64))
	var ne net.Error
	if n > 0 || err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: read %d bytes, %v; want the connection refused (reset)", what, n, err)
	}
}

// tlsRefused asserts that a TLS connection from the local address from is refused
// before its handshake completes.
func tlsRefused(t *testing.T, what string, from netip.Addr, addr string) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: from.AsSlice()}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("%s: dial: %v; want a connection that is reset", what, err)
		}
		return
	}
	tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, ServerName: "app.example.test"})
	defer tc.Close()
	_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
	err = tc.Handshake()
	var ne net.Error
	if err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: handshake %v; want the connection refused", what, err)
	}
}

// TestConnBudget: an address's connections are counted across the plain and TLS
// listeners; the one beyond the budget is refused at accept (before its TLS handshake)
// while another address is served, a closed connection gives its place back, and the
// refusals are counted under their kind.
func TestConnBudget(t *testing.T) {
	const budget = 3
	e := newEnv(t, func(c *Config) { c.MaxConnsPerClient = budget })
	e.tlsRoute("app.example.test", backend(t, echoInfo()))

	// Two plain connections and one TLS connection from A, each served once.
	var held []net.Conn
	for i := range budget {
		var c net.Conn
		if i < 2 {
			c = dialFrom(t, addrA, e.http)
		} else {
			tc, err := tlsFrom(t, addrA, e.https)
			if err != nil {
				t.Fatalf("TLS connection %d under the budget: %v", i+1, err)
			}
			c = tc
		}
		if st, err := getOn(c, bufio.NewReader(c)); st != http.StatusOK {
			t.Fatalf("connection %d under the budget: %d %v", i+1, st, err)
		}
		held = append(held, c)
	}
	if u := e.srv.clients.Usage(addrA); u.Conns != budget {
		t.Fatalf("A holds %d connections, want %d", u.Conns, budget)
	}

	// The next one from A is refused on either listener; TLS gets no handshake.
	refusedAtAccept(t, "plain connection over the budget", addrA, e.http)
	tlsRefused(t, "TLS connection over the budget", addrA, e.https)

	// B is served meanwhile, on both listeners.
	cb := dialFrom(t, addrB, e.http)
	if st, err := getOn(cb, bufio.NewReader(cb)); st != http.StatusOK {
		t.Fatalf("another address: %d %v", st, err)
	}
	tb, err := tlsFrom(t, addrB, e.https)
	if err != nil {
		t.Fatalf("another address over TLS: %v", err)
	}
	if st, err := getOn(tb, bufio.NewReader(tb)); st != http.StatusOK {
		t.Fatalf("another address over TLS: %d %v", st, err)
	}

	// A closed connection gives its place back.
	held[0].Close()
	testwait.UntilWhy(t, 5*time.Second, "A's closed connection given back", func() (bool, string) {
		u := e.srv.clients.Usage(addrA)
		return u.Conns == budget-1, "A holds " + strconv.Itoa(u.Conns)
	})
	c := dialFrom(t, addrA, e.http)
	if st, err := getOn(c, bufio.NewReader(c)); st != http.StatusOK {
		t.Fatalf("after a close: %d %v", st, err)
	}

	snap := e.totals.Snapshot()
	if got := snap.Refusals[stats.RefusalConnections]; got != 2 {
		t.Fatalf("%d connection refusals counted, want 2", got)
	}
	if snap.PenalizedRefusals != 0 {
		t.Fatalf("budget refusals counted as penalties (%d)", snap.PenalizedRefusals)
	}
}

// TestConnBudgetTrustedExempt: a trusted proxy's connections (TCP and QUIC) and requests
// are not counted.
func TestConnBudgetTrustedExempt(t *testing.T) {
	e := newEnv(t, withHTTP3, func(c *Config) {
		c.MaxConnsPerClient, c.MaxRequestsPerClient = 1, 1
		c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	})
	e.tlsRoute("app.example.test", backend(t, echoInfo()))
	for i := range 4 {
		c := dialFrom(t, addrA, e.http)
		if st, err := getOn(c, bufio.NewReader(c)); st != http.StatusOK {
			t.Fatalf("trusted connection %d: %d %v", i+1, st, err)
		}
	}
	for i := range 2 {
		h3OK(t, "trusted QUIC connection "+strconv.Itoa(i+1), h3From(t, e, addrA))
	}
	if n := e.srv.clients.Len(); n != 0 {
		t.Fatalf("%d addresses counted, want none (trusted)", n)
	}
	if got := e.totals.Snapshot().Refusals[stats.RefusalConnections]; got != 0 {
		t.Fatalf("%d refusals of a trusted proxy", got)
	}
}

// TestConnBudgetGivenBackEveryWay: whatever way a connection ends (fast path, hand-off
// to net/http, HTTP/2, closed by the client while parked or busy), its place is given
// back: no address is left counted once its connections are gone.
func TestConnBudgetGivenBackEveryWay(t *testing.T) {
	e := newEnv(t)
	e.tlsRoute("app.example.test", backend(t, echoInfo()))
	for i, cl := range []*http.Client{e.h1Client(), e.h2cClient(), e.tlsClient(false), e.tlsClient(true)} {
		url := "http://app.example.test/"
		if i >= 2 {
			url = "https://app.example.test/"
		}
		for range 3 {
			res, err := cl.Get(url)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
		}
		// A chunked upload goes through net/http's front-end (a hand-off).
		res, err := cl.Post(url, "text/plain", io.MultiReader(stringsReader("a"), stringsReader("b")))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		cl.CloseIdleConnections()
	}
	testwait.UntilWhy(t, 5*time.Second, "every connection's place given back", func() (bool, string) {
		return e.srv.clients.Len() == 0, "A holds " + strconv.Itoa(e.srv.clients.Usage(addrA).Conns)
	})
}

// sendGet writes a GET of path for app.example.test on c without reading the answer.
func sendGet(t testing.TB, c net.Conn, path string) {
	t.Helper()
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: app.example.test\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
}

// readAnswer reads one answer on br and returns it (its body read).
func readAnswer(t testing.TB, c net.Conn, br *bufio.Reader) *http.Response {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res
}

// TestRequestBudget: requests in flight are counted per address across its HTTP/1.1
// connections and HTTP/2 streams; with the budget spent, the next request gets 503 with
// Retry-After: 1 on HTTP/1.1 and REFUSED_STREAM on HTTP/2 (503 where net/http serves
// HTTP/2), the target never sees it, another address is served meanwhile, and once the
// slow requests finish the address is served again. On net/http's front-end too (h1Off).
func TestRequestBudget(t *testing.T) {
	for _, h1Off := range []bool{false, true} {
		t.Run("h1Off="+strconv.FormatBool(h1Off), func(t *testing.T) { testRequestBudget(t, h1Off) })
	}
}

func testRequestBudget(t *testing.T, h1Off bool) {
	const budget = 3
	e := newEnv(t, func(c *Config) { c.MaxRequestsPerClient = budget; c.h1Off = h1Off })
	tg := newSlowTarget(t)
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{tg.addr}}})

	// Two slow HTTP/1.1 requests on two connections and one slow HTTP/2 stream, all from A.
	h1a, h1b := dialFrom(t, addrA, e.http), dialFrom(t, addrA, e.http)
	sendGet(t, h1a, "/slow")
	sendGet(t, h1b, "/slow")
	h2 := newH2Cli(t, dialFrom(t, addrA, e.http))
	h2.get(t, 1, "app.example.test", "/slow")
	tg.waitArrivals(t, budget)
	if u := e.srv.clients.Usage(addrA); u.Requests != budget {
		t.Fatalf("A has %d requests in flight, want %d", u.Requests, budget)
	}

	// Over the budget: refused on either protocol; the target sees neither.
	h1c := dialFrom(t, addrA, e.http)
	brc := bufio.NewReader(h1c)
	sendGet(t, h1c, "/")
	if res := readAnswer(t, h1c, brc); res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") != "1" {
		t.Fatalf("HTTP/1.1 request over the budget: %s, Retry-After %q; want 503, 1", res.Status, res.Header.Get("Retry-After"))
	}
	h2.get(t, 3, "app.example.test", "/")
	ev := h2.wait(t, 3)
	switch {
	case !h1Off && !(ev.reset && ev.rst == http2.ErrCodeRefusedStream):
		t.Fatalf("HTTP/2 stream over the budget: %+v; want RST_STREAM REFUSED_STREAM", ev)
	case h1Off && ev.status != http.StatusServiceUnavailable:
		t.Fatalf("HTTP/2 stream over the budget on net/http's server: %+v; want 503", ev)
	}

	// Another address is served meanwhile.
	cb := dialFrom(t, addrB, e.http)
	if st, err := getOn(cb, bufio.NewReader(cb)); st != http.StatusOK {
		t.Fatalf("another address: %d %v", st, err)
	}
	if n := tg.seen.Load(); n != budget+1 {
		t.Fatalf("the target saw %d requests, want %d (the refused ones never reach it)", n, budget+1)
	}

	// The slow ones finish; A is served again on both protocols.
	tg.free()
	for _, c := range []net.Conn{h1a, h1b} {
		if res := readAnswer(t, c, bufio.NewReader(c)); res.StatusCode != http.StatusOK {
			t.Fatalf("slow request: %s", res.Status)
		}
	}
	if ev := h2.wait(t, 1); ev.status != http.StatusOK {
		t.Fatalf("slow stream: %+v", ev)
	}
	testwait.UntilWhy(t, 5*time.Second, "A's requests ended", func() (bool, string) {
		u := e.srv.clients.Usage(addrA)
		return u.Requests == 0, strconv.Itoa(u.Requests) + " in flight"
	})
	sendGet(t, h1c, "/")
	if res := readAnswer(t, h1c, brc); res.StatusCode != http.StatusOK {
		t.Fatalf("after the slow requests: %s", res.Status)
	}
	h2.get(t, 5, "app.example.test", "/")
	if ev := h2.wait(t, 5); ev.status != http.StatusOK {
		t.Fatalf("stream after the slow requests: %+v", ev)
	}
	if got := e.totals.Snapshot().Refusals[stats.RefusalRequests]; got != 2 {
		t.Fatalf("%d request refusals counted, want 2", got)
	}
}

// TestTunnelBudget: WebSocket tunnels are counted per address across HTTP/1.1 upgrades
// and HTTP/2 extended CONNECTs; the one beyond the budget gets 503 with Retry-After: 1
// before any target is contacted, ordinary requests from the address still pass (a
// tunnel is not a request in flight), and a closed tunnel gives its place back.
func TestTunnelBudget(t *testing.T) {
	const budget = 2
	e := newEnv(t, func(c *Config) { c.MaxTunnelsPerClient = budget })
	var upgrades atomic.Int64
	echo := wsEcho(t)
	counting := backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upgrades.Add(1)
		proxyTo(w, r, echo)
	}))
	e.apply([]routeSpec{{host: "ws.example.test", backends: []string{counting}}, {host: "app.example.test", backends: []string{backend(t, echoInfo())}}})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	dial := func() (*websocket.Conn, *http.Response, error) {
		return websocket.Dial(ctx, "ws://"+e.http+"/ws", &websocket.DialOptions{Host: "ws.example.test", HTTPClient: e.h1Client()})
	}
	first, _, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	defer first.CloseNow()
	res, w := extendedConnect(t, e.http, "ws.example.test", "/ws", "websocket", "sec-websocket-version", "13")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("HTTP/2 tunnel under the budget: %d", res.StatusCode)
	}
	defer w.Close()
	testwait.UntilWhy(t, 5*time.Second, "two tunnels counted", func() (bool, string) {
		u := e.srv.clients.Usage(addrA)
		return u.Tunnels == budget, strconv.Itoa(u.Tunnels) + " tunnels"
	})

	// Beyond the budget, on either protocol: 503, Retry-After: 1, no target contacted.
	_, res, err = dial()
	if err == nil || res == nil || res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") != "1" {
		t.Fatalf("HTTP/1.1 WebSocket over the budget: %v %+v; want 503 with Retry-After: 1", err, res)
	}
	if res, _ := extendedConnect(t, e.http, "ws.example.test", "/ws", "websocket", "sec-websocket-version", "13"); res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("HTTP/2 WebSocket over the budget: %d, want 503", res.StatusCode)
	}
	if n := upgrades.Load(); n != budget {
		t.Fatalf("the target saw %d upgrades, want %d", n, budget)
	}
	// Requests are another budget.
	c := dialFrom(t, addrA, e.http)
	if st, err := getOn(c, bufio.NewReader(c)); st != http.StatusOK {
		t.Fatalf("a request while the tunnels are open: %d %v", st, err)
	}

	// A closed tunnel gives its place back.
	_ = first.Close(websocket.StatusNormalClosure, "")
	testwait.UntilWhy(t, 5*time.Second, "a closed tunnel given back", func() (bool, string) {
		u := e.srv.clients.Usage(addrA)
		return u.Tunnels == budget-1, strconv.Itoa(u.Tunnels) + " tunnels"
	})
	again, _, err := dial()
	if err != nil {
		t.Fatalf("after a tunnel closed: %v", err)
	}
	again.CloseNow()
	if got := e.totals.Snapshot().Refusals[stats.RefusalTunnels]; got != 2 {
		t.Fatalf("%d tunnel refusals counted, want 2", got)
	}
}

// proxyTo relays the WebSocket upgrade r to the target at addr as raw bytes (a counting
// front for wsEcho).
func proxyTo(w http.ResponseWriter, r *http.Request, addr string) {
	bc, err := net.Dial("tcp", addr)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer bc.Close()
	cc, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer cc.Close()
	if err := r.Write(bc); err != nil {
		return
	}
	go func() { _, _ = io.Copy(bc, brw); bc.Close() }()
	_, _ = io.Copy(cc, bc)
}

// TestRefusalLogRateLimited: refusals are logged with the client's address and the kind,
// at most one line every penaltyLogEvery; the next line says how many went unlogged.
func TestRefusalLogRateLimited(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	e := newEnv(t, func(c *Config) { c.MaxConnsPerClient = 1; c.Logger = zap.New(core) })
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{backend(t, echoInfo())}}})
	c := dialFrom(t, addrA, e.http)
	if st, err := getOn(c, bufio.NewReader(c)); st != http.StatusOK {
		t.Fatalf("%d %v", st, err)
	}
	for i := range 3 {
		refusedAtAccept(t, "refusal "+strconv.Itoa(i+1), addrA, e.http)
	}
	lines := logs.FilterMessageSnippet("refused a client").All()
	if len(lines) != 1 {
		t.Fatalf("%d refusal lines for 3 refusals within %s, want 1", len(lines), penaltyLogEvery)
	}
	f := lines[0].ContextMap()
	if f["client"] != "127.0.0.1" || f["kind"] != "connections" || f["max_conns"] != int64(1) {
		t.Fatalf("refusal line fields %v", f)
	}
	if got := e.totals.Snapshot().Refusals[stats.RefusalConnections]; got != 3 {
		t.Fatalf("%d refusals counted, want 3 (logging is limited, counting is not)", got)
	}
}
