package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/pires/go-proxyproto"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/serve-zone/ingress/internal/testwait"
	"github.com/serve-zone/ingress/routetable"
	"github.com/serve-zone/ingress/stats"
)

// Connections from a trusted load balancer (balancer.go): the PROXY header's client is
// the connection's client for every per-client rule.

var (
	// lbAddr is the balancer: the tests' connections to it come from this loopback
	// address, and only it is in Config.ProxyProtocolFrom.
	lbAddr = netip.MustParseAddr("127.0.0.9")
	cliX   = netip.MustParseAddrPort("198.51.100.7:40001")
	cliY   = netip.MustParseAddrPort("198.51.100.8:40002")
	cliV6  = netip.MustParseAddrPort("[2001:db8::7]:40003")
)

// lbEnv is a proxy that trusts lbAddr as a balancer, with its access log and its log
// observed.
func lbEnv(t *testing.T, opts ...func(*Config)) (e *env, access, logs *observer.ObservedLogs) {
	t.Helper()
	ac, al := observer.New(zap.InfoLevel)
	lc, ll := observer.New(zap.InfoLevel)
	e = newEnv(t, append([]func(*Config){func(c *Config) {
		c.ProxyProtocolFrom = []netip.Prefix{netip.PrefixFrom(lbAddr, 32)}
		c.AccessLog, c.Logger = zap.New(ac), zap.New(lc)
	}}, opts...)...)
	e.tlsRoute(h1Host, backend(t, echoInfo()))
	return e, al, ll
}

// ppHeader is a PROXY protocol header of version v (1 or 2) naming src as the client;
// the zero src makes a LOCAL (version 1: UNKNOWN) one.
func ppHeader(t testing.TB, v byte, src netip.AddrPort) []byte {
	t.Helper()
	h := &proxyproto.Header{Version: v, Command: proxyproto.LOCAL, TransportProtocol: proxyproto.UNSPEC}
	if src.IsValid() {
		dst := netip.MustParseAddrPort("203.0.113.1:443")
		h.TransportProtocol = proxyproto.TCPv4
		if src.Addr().Is6() {
			dst, h.TransportProtocol = netip.MustParseAddrPort("[2001:db8::1]:443"), proxyproto.TCPv6
		}
		h.Command, h.SourceAddr, h.DestinationAddr = proxyproto.PROXY, net.TCPAddrFromAddrPort(src), net.TCPAddrFromAddrPort(dst)
	}
	b, err := h.Format()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// headerConn sends pre in front of its first write, in the same segment: a balancer
// that sends its header with the client's first bytes.
type headerConn struct {
	net.Conn
	pre []byte
}

func (c *headerConn) Write(b []byte) (int, error) {
	if c.pre == nil {
		return c.Conn.Write(b)
	}
	p := append(c.pre, b...)
	c.pre = nil
	n, err := c.Conn.Write(p)
	return max(n-(len(p)-len(b)), 0), err
}

// lbDial connects to addr as the balancer, with hdr sent in front of the first write.
func lbDial(t testing.TB, addr string, hdr []byte) net.Conn {
	t.Helper()
	return &headerConn{Conn: dialFrom(t, lbAddr, addr), pre: hdr}
}

// lbClient is an HTTP client whose connections come through the balancer with a
// header from hdr: proto is "h1" (plain), "h2c", "h1tls" or "h2".
func (e *env) lbClient(t *testing.T, proto string, hdr func() []byte) *http.Client {
	var p http.Protocols
	tr := &http.Transport{Proxy: nil, DisableCompression: true, Protocols: &p}
	dialTLS := func(next string) func(context.Context, string, string) (net.Conn, error) {
		return func(ctx context.Context, _, _ string) (net.Conn, error) {
			tc := tls.Client(lbDial(t, e.https, hdr()), &tls.Config{InsecureSkipVerify: true, ServerName: h1Host, NextProtos: []string{next}})
			return tc, tc.HandshakeContext(ctx)
		}
	}
	switch proto {
	case "h1":
		p.SetHTTP1(true)
		tr.DialContext = func(context.Context, string, string) (net.Conn, error) { return lbDial(t, e.http, hdr()), nil }
	case "h2c":
		p.SetUnencryptedHTTP2(true)
		tr.DialContext = func(context.Context, string, string) (net.Conn, error) { return lbDial(t, e.http, hdr()), nil }
	case "h1tls":
		p.SetHTTP1(true)
		tr.DialTLSContext = dialTLS("http/1.1")
	case "h2":
		p.SetHTTP2(true)
		tr.DialTLSContext = dialTLS("h2")
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// forElement is what Forwarded's for= says of a.
func forElement(a netip.Addr) string {
	if a.Is6() {
		return `for="[` + a.String() + `]"`
	}
	return "for=" + a.String()
}

// TestBalancerNamesTheClient: through the balancer, with a version 1 or 2 header, over
// plain HTTP/1.1 (the fast path and net/http's hand-off: a chunked body), h2c, TLS
// HTTP/1.1 (both paths) and h2, the target sees the header's client in
// X-Forwarded-For and Forwarded (never the balancer), and the access log names it with
// its port.
func TestBalancerNamesTheClient(t *testing.T) {
	e, access, _ := lbEnv(t)
	for _, v := range []byte{1, 2} {
		for _, src := range []netip.AddrPort{cliX, cliV6} {
			for _, proto := range []string{"h1", "h2c", "h1tls", "h2"} {
				for _, chunked := range []bool{false, true} {
					if chunked && (proto == "h2c" || proto == "h2") {
						continue
					}
					name := fmt.Sprintf("v%d/%s/%s/chunked=%v", v, src.Addr(), proto, chunked)
					t.Run(name, func(t *testing.T) {
						cl := e.lbClient(t, proto, func() []byte { return ppHeader(t, v, src) })
						scheme := "http"
						if proto == "h1tls" || proto == "h2" {
							scheme = "https"
						}
						var body io.Reader
						method := http.MethodGet
						if chunked {
							method, body = http.MethodPost, io.MultiReader(strings.NewReader("chunked body")) // no length: chunked
						}
						req, _ := http.NewRequest(method, scheme+"://"+h1Host+"/who", body)
						before := access.Len()
						res, err := cl.Do(req)
						if err != nil {
							t.Fatal(err)
						}
						_, _ = io.Copy(io.Discard, res.Body)
						res.Body.Close()
						if res.StatusCode != http.StatusOK {
							t.Fatalf("status %d", res.StatusCode)
						}
						if got := res.Header.Get("X-Seen-X-Forwarded-For"); got != src.Addr().String() {
							t.Fatalf("X-Forwarded-For %q, want %q", got, src.Addr())
						}
						if got := res.Header.Get("X-Seen-Forwarded"); !strings.Contains(got, forElement(src.Addr())+";") {
							t.Fatalf("Forwarded %q, want %s", got, forElement(src.Addr()))
						}
						waitFor(t, "the access log line", func() bool { return access.Len() > before })
						line := access.All()[before].ContextMap()
						if line["client"] != src.String() {
							t.Fatalf("access log client %v, want %s", line["client"], src)
						}
					})
				}
			}
		}
	}
	if u := e.srv.clients.Usage(lbAddr); u.Conns != 0 {
		t.Fatalf("the balancer's address holds %d connections in its budget", u.Conns)
	}
}

// TestBalancerOneSegment: the header, the first request and a pipelined second one in
// one segment (plain), and the header with the ClientHello in one segment then two
// pipelined requests (TLS): nothing after the header is lost to its reading, and both
// requests are the header's client's.
func TestBalancerOneSegment(t *testing.T) {
	e, _, _ := lbEnv(t)
	two := "GET /1 HTTP/1.1\r\nHost: " + h1Host + "\r\n\r\nGET /2 HTTP/1.1\r\nHost: " + h1Host + "\r\n\r\n"
	for _, v := range []byte{1, 2} {
		for _, secure := range []bool{false, true} {
			t.Run(fmt.Sprintf("v%d/tls=%v", v, secure), func(t *testing.T) {
				var c net.Conn
				if secure {
					tc := tls.Client(lbDial(t, e.https, ppHeader(t, v, cliX)), &tls.Config{InsecureSkipVerify: true, ServerName: h1Host, NextProtos: []string{"http/1.1"}})
					_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
					if err := tc.Handshake(); err != nil {
						t.Fatal(err)
					}
					c = tc
					if _, err := io.WriteString(c, two); err != nil {
						t.Fatal(err)
					}
				} else {
					c = dialFrom(t, lbAddr, e.http)
					if _, err := c.Write(append(ppHeader(t, v, cliX), two...)); err != nil {
						t.Fatal(err)
					}
				}
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				br := bufio.NewReader(c)
				for i := 1; i <= 2; i++ {
					res, err := http.ReadResponse(br, &http.Request{Method: "GET"})
					if err != nil {
						t.Fatalf("response %d: %v", i, err)
					}
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					if res.StatusCode != 200 || res.Header.Get("X-Seen-Path") != fmt.Sprintf("/%d", i) ||
						res.Header.Get("X-Seen-X-Forwarded-For") != cliX.Addr().String() {
						t.Fatalf("response %d: %d, path %q, X-Forwarded-For %q", i, res.StatusCode,
							res.Header.Get("X-Seen-Path"), res.Header.Get("X-Seen-X-Forwarded-For"))
					}
				}
			})
		}
	}
}

// lbGet makes one GET on a balancer connection whose header names src (zero: LOCAL)
// and returns the connection, still open, with its status.
func lbGet(t *testing.T, e *env, src netip.AddrPort) (net.Conn, int, error) {
	t.Helper()
	c := lbDial(t, e.http, ppHeader(t, 2, src))
	st, err := getOn(c, bufio.NewReader(c))
	return c, st, err
}

// refusedThroughBalancer asserts that a balancer connection naming src is closed
// without an answer, at once (not held in the tarpit, nor after a timeout).
func refusedThroughBalancer(t *testing.T, what string, e *env, src netip.AddrPort) {
	t.Helper()
	c := dialFrom(t, lbAddr, e.http)
	_, _ = c.Write(append(ppHeader(t, 2, src), "GET / HTTP/1.1\r\nHost: app.example.test\r\n\r\n"...))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(make([]byte, 64))
	var ne net.Error
	if n > 0 || err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: read %d bytes, %v; want the connection refused", what, n, err)
	}
}

// TestBalancerBudgets: a balancer's connections count in their header's client's
// budget, not the balancer's: two clients each get the whole budget through the one
// balancer, the next connection of a client over it is refused (counted as a
// connections refusal) while the other client and the balancer's LOCAL connections
// (counted nowhere) are served.
func TestBalancerBudgets(t *testing.T) {
	const budget = 3
	e, _, _ := lbEnv(t, func(c *Config) { c.MaxConnsPerClient = budget })
	for _, src := range []netip.AddrPort{cliX, cliY, {}, {}, {}, {}} {
		for range budget {
			if _, st, err := lbGet(t, e, src); st != http.StatusOK {
				t.Fatalf("client %v under its budget: %d %v", src, st, err)
			}
		}
	}
	for _, a := range []netip.Addr{cliX.Addr(), cliY.Addr()} {
		if u := e.srv.clients.Usage(a); u.Conns != budget {
			t.Fatalf("%s holds %d connections, want %d", a, u.Conns, budget)
		}
	}
	if u := e.srv.clients.Usage(lbAddr); u.Conns != 0 {
		t.Fatalf("the balancer holds %d connections in its budget, want 0", u.Conns)
	}
	refusedThroughBalancer(t, "X over its budget", e, cliX)
	if _, st, err := lbGet(t, e, netip.AddrPort{}); st != http.StatusOK {
		t.Fatalf("a LOCAL connection after X's refusal: %d %v", st, err)
	}
	if got := e.totals.Snapshot().Refusals[stats.RefusalConnections]; got != 1 {
		t.Fatalf("%d connection refusals counted, want 1", got)
	}
}

// TestBalancerPenalty: a strike of a client behind the balancer ends that client's
// connections only (the other client's and the balancer's own go on), its next
// connection is refused at once (reset, not held: the tarpit would hold one of the
// balancer's connections), and the balancer's address is never penalised. An HTTP/2
// flood through the balancer penalises the header's client; one on a LOCAL connection
// penalises nobody.
func TestBalancerPenalty(t *testing.T) {
	e, _, _ := lbEnv(t)
	x, st, err := lbGet(t, e, cliX)
	if st != http.StatusOK {
		t.Fatalf("X: %d %v", st, err)
	}
	y, st, err := lbGet(t, e, cliY)
	if st != http.StatusOK {
		t.Fatalf("Y: %d %v", st, err)
	}
	own, st, err := lbGet(t, e, netip.AddrPort{})
	if st != http.StatusOK {
		t.Fatalf("LOCAL: %d %v", st, err)
	}
	e.srv.strike(cliX.Addr(), "test")
	_ = x.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := x.Read(make([]byte, 1)); n > 0 || err == nil || isTimeout(err) {
		t.Fatalf("X's connection after the strike: %d, %v; want it ended", n, err)
	}
	for name, c := range map[string]net.Conn{"Y": y, "LOCAL": own} {
		if st, err := getOn(c, bufio.NewReader(c)); st != http.StatusOK {
			t.Fatalf("%s's connection after X's strike: %d %v", name, st, err)
		}
	}
	start := time.Now()
	refusedThroughBalancer(t, "X while penalised", e, cliX)
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("X's refused connection took %s: held in the tarpit?", d)
	}
	if got := e.totals.Snapshot().PenalizedRefusals; got != 1 {
		t.Fatalf("%d penalty refusals counted, want 1", got)
	}
	if _, st, err := lbGet(t, e, cliY); st != http.StatusOK {
		t.Fatalf("Y while X is penalised: %d %v", st, err)
	}

	// A flood through the balancer: the header's client is penalised, not the balancer.
	pingFloodConn(t, lbDial(t, e.http, ppHeader(t, 1, cliY)))
	waitFor(t, "Y's flood judged", func() bool { return e.totals.Snapshot().ClientAbuse == 1 })
	if hit, _ := e.srv.penalties.Penalized(cliY.Addr()); !hit {
		t.Fatal("Y is not penalised for its flood")
	}
	// A flood on the balancer's own connection: ended and counted, nobody penalised.
	pingFloodConn(t, lbDial(t, e.http, ppHeader(t, 2, netip.AddrPort{})))
	waitFor(t, "the LOCAL flood judged", func() bool { return e.totals.Snapshot().ClientAbuse == 2 })
	if hit, _ := e.srv.penalties.Penalized(lbAddr); hit {
		t.Fatal("the balancer's address is penalised")
	}
	if _, st, err := lbGet(t, e, netip.AddrPort{}); st != http.StatusOK {
		t.Fatalf("LOCAL after the floods: %d %v", st, err)
	}
}

// pingFloodConn is pingFlood on an open connection.
func pingFloodConn(t *testing.T, c net.Conn) {
	t.Helper()
	defer c.Close()
	go func() { _, _ = io.Copy(io.Discard, c) }()
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	ping := []byte{0, 0, 8, 6, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0}
	settings := []byte{0, 0, 0, 4, 0, 0, 0, 0, 0}
	if _, err := c.Write(settings); err != nil {
		t.Fatal(err)
	}
	for range 1_000_000 {
		if _, err := c.Write(ping); err != nil {
			if isTimeout(err) {
				t.Fatal("the server neither read nor cut the PING flood")
			}
			return
		}
	}
	t.Fatal("the server took a million PINGs")
}

// TestBalancerRefusesBadHeaders: a balancer connection whose header is malformed,
// truncated or missing (a request instead, or nothing until ProxyProtocolTimeout) is
// closed without an answer, counted as a proxy-protocol refusal and logged with the
// balancer's address, once per penaltyLogEvery (the next line counts the unlogged); one
// that closes before its first byte (a TCP health check) is not a refusal. None of it
// reaches the target.
func TestBalancerRefusesBadHeaders(t *testing.T) {
	const timeout = 300 * time.Millisecond
	e, access, logs := lbEnv(t, func(c *Config) { c.ProxyProtocolTimeout = timeout })
	v2 := ppHeader(t, 2, cliX)
	bad := [][]byte{
		[]byte("GET / HTTP/1.1\r\nHost: app.example.test\r\n\r\n"),
		[]byte("PROXY TCP4 198.51.100.7 203.0.113.1 1\r\nGET / HTTP/1.1\r\n\r\n"),
		[]byte("PROXY TCP4 1.2.3.4 5.6.7.8 1 2\nGET / HTTP/1.1\r\n\r\n"),
		append(append([]byte(nil), v2[:12]...), 0x31, 0x11, 0, 12),
		append(append([]byte(nil), v2[:15]...), 11),
		[]byte("PROXY TCP4 198.51.100.7 203.0.113.1 1 "), // then nothing: the timeout
		nil, // nothing at all: the timeout
	}
	for i, b := range bad {
		c := dialFrom(t, lbAddr, e.http)
		if len(b) > 0 {
			_, _ = c.Write(b)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(make([]byte, 64)); n > 0 || err == nil || isTimeout(err) {
			t.Fatalf("bad header %d (%q): read %d, %v; want the connection closed", i, b, n, err)
		}
		_ = c.Close()
	}
	// Over TLS: a header that is not one, before the ClientHello.
	tc := tls.Client(&headerConn{Conn: dialFrom(t, lbAddr, e.https), pre: []byte("PROXY TCP9 x\r\n")}, &tls.Config{InsecureSkipVerify: true, ServerName: h1Host})
	_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.Handshake(); err == nil || isTimeout(err) {
		t.Fatalf("TLS after a bad header: %v; want the connection closed", err)
	}
	// A health check that only connects.
	dialFrom(t, lbAddr, e.http).Close()

	want := uint64(len(bad) + 1)
	testwait.UntilWhy(t, 5*time.Second, "every bad header counted", func() (bool, string) {
		n := e.totals.Snapshot().Refusals[stats.RefusalProxyProtocol]
		return n == want, fmt.Sprint(n)
	})
	lines := logs.FilterMessageSnippet("PROXY protocol header").All()
	if len(lines) != 1 {
		t.Fatalf("%d log lines for %d refusals within %s, want 1", len(lines), want, penaltyLogEvery)
	}
	if f := lines[0].ContextMap(); !strings.HasPrefix(fmt.Sprint(f["balancer"]), lbAddr.String()+":") || f["error"] == "" {
		t.Fatalf("log line fields %v", f)
	}
	if e.stat(h1Host).Requests != 0 || access.Len() != 0 {
		t.Fatalf("refused connections reached the target or the access log: %d requests, %d lines", e.stat(h1Host).Requests, access.Len())
	}
	// The health check's connection was not counted: still as many after it closed.
	if got := e.totals.Snapshot().Refusals[stats.RefusalProxyProtocol]; got != want {
		t.Fatalf("%d refusals, want %d", got, want)
	}
	testwait.UntilWhy(t, 5*time.Second, "every connection closed", func() (bool, string) {
		n := e.openH1()
		return n == 0, fmt.Sprint(n, " open")
	})
}

// TestProxyHeaderFromElsewhere: a PROXY header from an address outside
// ProxyProtocolFrom is not honoured: on plain HTTP it is a request line that fails
// (400, no target reached), over TLS a handshake that fails; a request from there names
// the socket's peer.
func TestProxyHeaderFromElsewhere(t *testing.T) {
	e, _, _ := lbEnv(t)
	for _, v := range []byte{1, 2} {
		c := dialFrom(t, addrB, e.http)
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write(append(ppHeader(t, v, cliX), "GET / HTTP/1.1\r\nHost: app.example.test\r\n\r\n"...)); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if v == 1 && (err != nil || res.StatusCode != http.StatusBadRequest) {
			t.Fatalf("v1 header from elsewhere: %v %v; want 400", res, err)
		}
		if v == 2 && err == nil && res.StatusCode != http.StatusBadRequest {
			t.Fatalf("v2 header from elsewhere: %d; want 400 or the connection closed", res.StatusCode)
		}
		tc := tls.Client(&headerConn{Conn: dialFrom(t, addrB, e.https), pre: ppHeader(t, v, cliX)}, &tls.Config{InsecureSkipVerify: true, ServerName: h1Host})
		_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
		if err := tc.Handshake(); err == nil || isTimeout(err) {
			t.Fatalf("TLS after a v%d header from elsewhere: %v; want it failed", v, err)
		}
	}
	if e.stat(h1Host).Requests != 0 {
		t.Fatalf("%d requests reached the target", e.stat(h1Host).Requests)
	}
	res, err := e.h1ClientFrom(addrB).Get("http://" + h1Host + "/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if got := res.Header.Get("X-Seen-X-Forwarded-For"); got != addrB.String() {
		t.Fatalf("X-Forwarded-For %q, want the peer %s", got, addrB)
	}
}

// TestBalancerKeyOfAbuse: the HTTP/2 engine's verdict lands on the connection's
// client key: the header's client, nobody for the balancer's own connection.
func TestBalancerKeyOfAbuse(t *testing.T) {
	e := newEnv(t)
	peer := &net.TCPAddr{IP: lbAddr.AsSlice(), Port: 1}
	own := &clientConn{Conn: fakeAddrConn{remote: peer}, s: e.srv, via: &balanced{client: peer}}
	e.srv.h2Abuse(own, "test")
	if hit, _ := e.srv.penalties.Penalized(lbAddr); hit {
		t.Fatal("a verdict on the balancer's own connection penalised the balancer")
	}
	relayed := &clientConn{Conn: fakeAddrConn{remote: peer}, s: e.srv, via: &balanced{client: net.TCPAddrFromAddrPort(cliX), key: cliX.Addr()}}
	e.srv.h2Abuse(relayed, "test")
	if hit, _ := e.srv.penalties.Penalized(cliX.Addr()); !hit {
		t.Fatal("a verdict on a relayed connection did not penalise its client")
	}
	if hit, _ := e.srv.penalties.Penalized(lbAddr); hit {
		t.Fatal("a verdict on a relayed connection penalised the balancer")
	}
	if got := relayed.RemoteAddr().String(); got != cliX.String() {
		t.Fatalf("RemoteAddr %s, want %s", got, cliX)
	}
	if got := e.totals.Snapshot().ClientAbuse; got != 2 {
		t.Fatalf("%d abuses counted, want 2", got)
	}
}

// fakeAddrConn is a net.Conn with a remote address and nothing else.
type fakeAddrConn struct {
	net.Conn
	remote net.Addr
}

func (c fakeAddrConn) RemoteAddr() net.Addr { return c.remote }

// TestBalancerHeaderWaitBlocksNobody: balancer connections whose headers do not come
// (or come in part) wait on their own goroutines: the accept loops serve other
// connections meanwhile, direct and through the balancer, plain and TLS; a Shutdown
// ends the waiting ones without counting them as refusals.
func TestBalancerHeaderWaitBlocksNobody(t *testing.T) {
	e, _, _ := lbEnv(t, func(c *Config) { c.ProxyProtocolTimeout = time.Minute })
	var waiting []net.Conn
	for i := range 20 {
		addr := e.http
		if i%2 == 1 {
			addr = e.https
		}
		c := dialFrom(t, lbAddr, addr)
		if i%4 < 2 {
			_, _ = c.Write([]byte("PROXY TCP4 1.2."))
		}
		waiting = append(waiting, c)
	}
	waitFor(t, "the waiting connections accepted", func() bool { return e.openH1() == 20 })
	if _, st, err := lbGet(t, e, cliX); st != http.StatusOK {
		t.Fatalf("a balancer connection while others wait for their headers: %d %v", st, err)
	}
	c := dialFrom(t, addrB, e.http)
	if st, err := getOn(c, bufio.NewReader(c)); st != http.StatusOK {
		t.Fatalf("a direct connection while balancer connections wait: %d %v", st, err)
	}
	tc := tls.Client(lbDial(t, e.https, ppHeader(t, 1, cliY)), &tls.Config{InsecureSkipVerify: true, ServerName: h1Host, NextProtos: []string{"http/1.1"}})
	if st, err := getOn(tc, bufio.NewReader(tc)); st != http.StatusOK {
		t.Fatalf("a TLS balancer connection while others wait: %d %v", st, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { _ = e.srv.Shutdown(ctx) })
	for i, c := range waiting {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := c.Read(make([]byte, 1)); n > 0 || err == nil || isTimeout(err) {
			t.Fatalf("waiting connection %d after Shutdown: %d, %v; want it closed", i, n, err)
		}
	}
	wg.Wait()
	if n := e.totals.Snapshot().Refusals[stats.RefusalProxyProtocol]; n != 0 {
		t.Fatalf("Shutdown's closes counted as %d refusals", n)
	}
}

// TestBalancerTunnels: a WebSocket through the balancer (an HTTP/1.1 upgrade, net/http's
// path, plain and TLS) reaches its target with the header's client in X-Forwarded-For,
// and the tunnel budget is the header client's: a second tunnel of one client is
// refused (503) while another client's opens.
func TestBalancerTunnels(t *testing.T) {
	e, _, _ := lbEnv(t, func(c *Config) { c.MaxTunnelsPerClient = 1 })
	seen := make(chan string, 8)
	be := backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("X-Forwarded-For")
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, b, err := c.Read(r.Context())
			if err != nil || c.Write(r.Context(), typ, b) != nil {
				return
			}
		}
	}))
	e.apply([]routeSpec{{host: "ws.example.test", backends: []string{be}}})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	dial := func(src netip.AddrPort) (*websocket.Conn, *http.Response, error) {
		cl := e.lbClient(t, "h1", func() []byte { return ppHeader(t, 2, src) })
		return websocket.Dial(ctx, "ws://ws.example.test/ws", &websocket.DialOptions{Host: "ws.example.test", HTTPClient: cl})
	}
	x, _, err := dial(cliX)
	if err != nil {
		t.Fatal(err)
	}
	defer x.CloseNow()
	if got := <-seen; got != cliX.Addr().String() {
		t.Fatalf("the tunnel's target saw X-Forwarded-For %q, want %s", got, cliX.Addr())
	}
	if err := x.Write(ctx, websocket.MessageText, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if _, b, err := x.Read(ctx); err != nil || string(b) != "hi" {
		t.Fatalf("echo: %q %v", b, err)
	}
	if _, res, err := dial(cliX); err == nil || res == nil || res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("X's second tunnel: %v %v; want 503", err, res)
	}
	y, _, err := dial(cliY)
	if err != nil {
		t.Fatalf("Y's tunnel while X holds its budget: %v", err)
	}
	defer y.CloseNow()
	if got := <-seen; got != cliY.Addr().String() {
		t.Fatalf("Y's tunnel's target saw X-Forwarded-For %q", got)
	}
	if u := e.srv.clients.Usage(cliX.Addr()); u.Tunnels != 1 {
		t.Fatalf("X holds %d tunnels, want 1", u.Tunnels)
	}
}

// TestH1HotPathAllocsBehindBalancer: behind the balancer, a request on the fast path
// allocates nothing either (plain and TLS): the header is read once per connection, and
// nothing per request looks at it again. The connection counts in its header client's
// budget.
func TestH1HotPathAllocsBehindBalancer(t *testing.T) {
	for _, secure := range []bool{false, true} {
		t.Run(fmt.Sprintf("tls=%v", secure), func(t *testing.T) {
			e := newEnv(t, func(c *Config) { c.ProxyProtocolFrom = []netip.Prefix{netip.PrefixFrom(lbAddr, 32)} })
			e.apply([]routeSpec{{host: h1Host, tls: &routetable.RouteTLS{CertificateID: "c"}, backends: []string{rawTarget(t)}}},
				certSpec{"c", []string{h1Host}})
			var c net.Conn
			if !secure {
				c = lbDial(t, e.http, ppHeader(t, 2, cliX))
			} else {
				tc := tls.Client(lbDial(t, e.https, ppHeader(t, 2, cliX)), &tls.Config{ServerName: h1Host, InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
				if err := tc.Handshake(); err != nil {
					t.Fatal(err)
				}
				c = tc
			}
			br := bufio.NewReaderSize(c, 4096)
			req := []byte("GET /bench?q=1 HTTP/1.1\r\nHost: " + h1Host + "\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n")
			var failed error
			do := func() {
				if failed != nil {
					return
				}
				if _, err := c.Write(req); err != nil {
					failed = err
					return
				}
				failed = readRawResponse(br)
			}
			for range 200 {
				do()
			}
			allocs := testing.AllocsPerRun(2000, do)
			if failed != nil {
				t.Fatal(failed)
			}
			if u := e.srv.clients.Usage(cliX.Addr()); u.Conns != 1 {
				t.Fatalf("the header's client holds %d connections, want 1", u.Conns)
			}
			t.Logf("%.3f allocations per request for client, proxy and target together", allocs)
			limit := 0.0
			switch {
			case raceEnabled && secure:
				limit = 3 // as TestH1HotPathAllocs
			case raceEnabled:
				limit = 1
			}
			if allocs > limit {
				t.Errorf("%.3f allocations per request, want at most %.0f", allocs, limit)
			}
		})
	}
}

// BenchmarkBalancedConnection: a whole plain connection with one request (Connection:
// close): from a client directly, and through the balancer with a version 1 or 2
// header (the header's cost, once per connection).
func BenchmarkBalancedConnection(b *testing.B) {
	e := newEnv(b, func(c *Config) { c.ProxyProtocolFrom = []netip.Prefix{netip.PrefixFrom(lbAddr, 32)} })
	e.apply([]routeSpec{{host: h1Host, backends: []string{rawTarget(b)}}})
	req := []byte("GET /bench HTTP/1.1\r\nHost: " + h1Host + "\r\nConnection: close\r\n\r\n")
	for _, m := range []struct {
		name string
		from netip.Addr
		hdr  []byte
	}{{"direct", addrB, nil}, {"v1", lbAddr, ppHeader(b, 1, cliX)}, {"v2", lbAddr, ppHeader(b, 2, cliX)}} {
		b.Run(m.name, func(b *testing.B) {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: m.from.AsSlice()}}
			msg := append(append([]byte(nil), m.hdr...), req...)
			buf := make([]byte, 4096)
			b.ReportAllocs()
			for b.Loop() {
				c, err := d.Dial("tcp", e.http)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := c.Write(msg); err != nil {
					b.Fatal(err)
				}
				for {
					if _, err := c.Read(buf); err != nil {
						break // the answer, then the close
					}
				}
				c.Close()
			}
		})
	}
}
