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
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/net/http2"

	"github.com/serve-zone/ingress/internal/testwait"
	"github.com/serve-zone/ingress/routetable"
)

// strikeWithin is how soon a struck address's connections must end (issue 25).
const strikeWithin = 2 * time.Second

// endsWithin asserts that c (a connection the client reads nothing more from) is ended
// by the proxy within d: its read fails with EOF or a reset, not a timeout.
func endsWithin(t *testing.T, what string, c net.Conn, d time.Duration) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1024))
	for err == nil {
		_, err = c.Read(make([]byte, 1024))
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Errorf("%s: still open %s after the strike", what, strikeWithin)
	}
}

// parkedConns counts the connections the parker holds (sleeping plain ones included).
func parkedConns(s *Server) int { return s.parker.Len() }

// TestStrikeEndsHeldConnections: an abuse verdict against an address ends, within 2 s,
// every connection it holds on every TCP protocol: parked ones (plain and TLS HTTP/1.1,
// h2c, h2: claimed from the parker), an idle HTTP/1.1 connection, one handed to
// net/http, TLS HTTP/1.1, h2c and h2 (both told GOAWAY ENHANCE_YOUR_CALM, parked or not)
// and a WebSocket tunnel; another address's connections are left alone.
func TestStrikeEndsHeldConnections(t *testing.T) {
	e := newEnv(t)
	ws := wsEcho(t)
	e.apply([]routeSpec{
		{host: "app.example.test", tls: &routetable.RouteTLS{CertificateID: "c1"}, backends: []string{backend(t, echoInfo())}},
		{host: "ws.example.test", backends: []string{ws}},
	}, certSpec{"c1", []string{"app.example.test"}})

	served := func(c net.Conn) net.Conn {
		t.Helper()
		if st, err := getOn(c, bufio.NewReader(c)); st != http.StatusOK {
			t.Fatalf("before the strike: %d %v", st, err)
		}
		return c
	}
	// A's connections, each served once. First four that go idle and park (plain and TLS
	// HTTP/1.1, h2c, h2: without a goroutine, in the parker's epoll)...
	parked := served(dialFrom(t, addrA, e.http))
	ptl, err := tlsFrom(t, addrA, e.https)
	if err != nil {
		t.Fatal(err)
	}
	served(ptl)
	ph2c := newH2Cli(t, dialFrom(t, addrA, e.http))
	ph2c.get(t, 1, "app.example.test", "/")
	ph2 := h2OverTLS(t, addrA, e.https)
	ph2.get(t, 1, "app.example.test", "/")
	for _, c := range []*h2Cli{ph2c, ph2} {
		if ev := c.wait(t, 1); ev.status != http.StatusOK {
			t.Fatalf("HTTP/2 before parking: %+v", ev)
		}
	}
	testwait.UntilWhy(t, 10*time.Second, "four idle connections parked", func() (bool, string) {
		n := parkedConns(e.srv)
		return n == 4, strconv.Itoa(n) + " parked"
	})
	// ... then six that are served on.
	plain := served(dialFrom(t, addrA, e.http))
	tl, err := tlsFrom(t, addrA, e.https)
	if err != nil {
		t.Fatal(err)
	}
	served(tl)
	handed := dialFrom(t, addrA, e.http)
	hbr := bufio.NewReader(handed)
	sendLarge(t, handed)
	if res := readAnswer(t, handed, hbr); res.StatusCode != http.StatusOK || res.Close {
		t.Fatalf("large upload (handed to net/http): %s, close %v", res.Status, res.Close)
	}
	h2c := newH2Cli(t, dialFrom(t, addrA, e.http))
	h2c.get(t, 1, "app.example.test", "/")
	if ev := h2c.wait(t, 1); ev.status != http.StatusOK {
		t.Fatalf("h2c: %+v", ev)
	}
	h2tls := h2OverTLS(t, addrA, e.https)
	h2tls.get(t, 1, "app.example.test", "/")
	if ev := h2tls.wait(t, 1); ev.status != http.StatusOK {
		t.Fatalf("h2: %+v", ev)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	tunnel, _, err := websocket.Dial(ctx, "ws://"+e.http+"/ws", &websocket.DialOptions{Host: "ws.example.test", HTTPClient: e.h1Client()})
	if err != nil {
		t.Fatal(err)
	}
	defer tunnel.CloseNow()

	// B's connections.
	bPlain := served(dialFrom(t, addrB, e.http))
	bH2 := newH2Cli(t, dialFrom(t, addrB, e.http))
	bH2.get(t, 1, "app.example.test", "/")
	if ev := bH2.wait(t, 1); ev.status != http.StatusOK {
		t.Fatalf("B's h2c: %+v", ev)
	}
	// And two that have sent nothing yet (no parker record, no protocol).
	freshPlain, freshTLS := dialFrom(t, addrA, e.http), dialFrom(t, addrA, e.https)
	testwait.UntilWhy(t, 5*time.Second, "A's 12 connections accepted", func() (bool, string) {
		n := e.srv.clients.Usage(addrA).Conns
		return n == 12, strconv.Itoa(n)
	})

	// The verdict: A floods PINGs on yet another connection.
	pingFlood(t, e.http)
	struck := time.Now()
	for what, c := range map[string]net.Conn{"fresh plain": freshPlain, "fresh TLS": freshTLS, "parked HTTP/1.1": parked, "parked TLS HTTP/1.1": ptl, "idle HTTP/1.1": plain, "TLS HTTP/1.1": tl, "handed to net/http": handed} {
		endsWithin(t, what, c, strikeWithin-time.Since(struck))
	}
	// HTTP/2 connections are told why (h2.Conn.Abort).
	for what, c := range map[string]*h2Cli{"h2c": h2c, "h2": h2tls, "parked h2c": ph2c, "parked h2": ph2} {
		if code, got := c.ended(t, strikeWithin-time.Since(struck)); !got || code != http2.ErrCodeEnhanceYourCalm {
			t.Errorf("%s: ended with GOAWAY %v (sent: %v); want ENHANCE_YOUR_CALM", what, code, got)
		}
	}
	rctx, rcancel := context.WithTimeout(ctx, strikeWithin-time.Since(struck))
	defer rcancel()
	if _, _, err := tunnel.Read(rctx); err == nil || rctx.Err() != nil {
		t.Errorf("the WebSocket tunnel: %v (still open %s after the strike?)", err, strikeWithin)
	}
	testwait.UntilWhy(t, 5*time.Second, "A's connections given back", func() (bool, string) {
		return e.srv.clients.Usage(addrA).Conns == 0, "not yet"
	})

	// B is untouched: both connections still serve.
	served(bPlain)
	bH2.get(t, 3, "app.example.test", "/")
	if ev := bH2.wait(t, 3); ev.status != http.StatusOK {
		t.Fatalf("B's h2c after the strike: %+v", ev)
	}
}

// sendLarge sends a POST whose body does not fit the fast path's buffer: net/http's
// front-end serves the connection from then on (a hand-off), and keeps it open.
func sendLarge(t *testing.T, c net.Conn) {
	t.Helper()
	body := strings.Repeat("x", 16<<10)
	if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: app.example.test\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body); err != nil {
		t.Fatal(err)
	}
}

// h2OverTLS opens an h2 connection over TLS from the local address from.
func h2OverTLS(t *testing.T, from netip.Addr, addr string) *h2Cli {
	t.Helper()
	c := tls.Client(dialFrom(t, from, addr), &tls.Config{InsecureSkipVerify: true, ServerName: "app.example.test", NextProtos: []string{"h2"}})
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := c.Handshake(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Time{})
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN %q, want h2", p)
	}
	return newH2Cli(t, c)
}

// TestStruckBetweenCheckAndHold: a connection whose address is penalised after the
// accept's penalty check but before its hold is open (a strike then misses it in the
// budgets' table) is refused by admitConn's check once the hold is open: tarpitted like any
// penalised connection, its place given back, not served.
func TestStruckBetweenCheckAndHold(t *testing.T) {
	e := newEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dialFrom(t, addrB, ln.Addr().String())
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if e.srv.refusePenalized(c) {
		t.Fatal("refused before any penalty")
	}
	// The strike lands here: after the check, before the hold.
	if _, started := e.srv.penalties.Strike(addrB); !started {
		t.Fatal("no penalty started")
	}
	e.srv.clients.Strike(addrB) // finds nothing of this connection yet
	cc := &clientConn{Conn: c, s: e.srv}
	if e.srv.admitConn(cc, c, addrB) {
		t.Fatal("a connection of an address struck before its hold opened was let through")
	}
	if u := e.srv.clients.Usage(addrB); u.Conns != 0 {
		t.Fatalf("the refused connection still holds %d places", u.Conns)
	}
	// Not penalised: let through, hold kept.
	dialFrom(t, addrA, ln.Addr().String())
	c2, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	cc2 := &clientConn{Conn: c2, s: e.srv}
	if !e.srv.admitConn(cc2, c2, addrA) {
		t.Fatal("a connection of an unpenalised address refused")
	}
	if u := e.srv.clients.Usage(addrA); u.Conns != 1 {
		t.Fatalf("the admitted connection holds %d places, want 1", u.Conns)
	}
	cc2.hold.Close()
}
