package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/serve-zone/ingress/internal/testwait"
	"github.com/serve-zone/ingress/stats"
)

// quicFrom opens a QUIC connection to the proxy's HTTP/3 address from the local address
// from (the error is the handshake's); everything is closed at cleanup.
func quicFrom(t testing.TB, e *env, from netip.Addr) (*quic.Conn, error) {
	t.Helper()
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: from.AsSlice()})
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: pc}
	t.Cleanup(func() { _ = tr.Close(); _ = pc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := tr.Dial(ctx, e.srv.HTTP3Addr(), &tls.Config{InsecureSkipVerify: true, ServerName: "app.example.test", NextProtos: []string{http3.NextProtoH3}}, &quic.Config{})
	if err == nil {
		// Told, not left to time out: the server's Shutdown at cleanup waits for it.
		t.Cleanup(func() { _ = c.CloseWithError(0, "") })
	}
	return c, err
}

// h3From is an HTTP/3 client connection from the local address from.
func h3From(t testing.TB, e *env, from netip.Addr) *http3.ClientConn {
	t.Helper()
	c, err := quicFrom(t, e, from)
	if err != nil {
		t.Fatalf("QUIC handshake from %s: %v", from, err)
	}
	return (&http3.Transport{}).NewClientConn(c)
}

// h3Get sends a GET of path for app.example.test on cc and returns the answer (body read).
func h3Get(t testing.TB, cc *http3.ClientConn, path string) (*http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://app.example.test"+path, nil)
	res, err := cc.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res, nil
}

func h3OK(t testing.TB, what string, cc *http3.ClientConn) {
	t.Helper()
	res, err := h3Get(t, cc, "/")
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("%s: %v %v", what, res, err)
	}
}

// TestConnBudgetQUIC: QUIC connections count in the same budget as TCP ones; the one
// beyond it is refused at the handshake (CONNECTION_REFUSED) on QUIC and at accept on
// TCP, while another address is served over QUIC.
func TestConnBudgetQUIC(t *testing.T) {
	const budget = 2
	e := newEnv(t, withHTTP3, func(c *Config) { c.MaxConnsPerClient = budget })
	e.tlsRoute("app.example.test", backend(t, echoInfo()))
	if _, err := tlsFrom(t, addrA, e.https); err != nil {
		t.Fatal(err)
	}
	h3OK(t, "A's QUIC connection under the budget", h3From(t, e, addrA))
	testwait.UntilWhy(t, 5*time.Second, "A holds both connections", func() (bool, string) {
		u := e.srv.clients.Usage(addrA)
		return u.Conns == budget, strconv.Itoa(u.Conns)
	})

	_, err := quicFrom(t, e, addrA)
	var te *quic.TransportError
	if !errors.As(err, &te) || te.ErrorCode != quic.ConnectionRefused {
		t.Fatalf("QUIC connection over the budget: %v; want CONNECTION_REFUSED", err)
	}
	tlsRefused(t, "TLS connection over the budget", addrA, e.https)
	h3OK(t, "another address over QUIC", h3From(t, e, addrB))
	if got := e.totals.Snapshot().Refusals[stats.RefusalConnections]; got != 2 {
		t.Fatalf("%d connection refusals counted, want 2", got)
	}
}

// TestRequestBudgetHTTP3: HTTP/3 requests count in the in-flight budget: with it spent by
// slow ones, the next gets 503 with Retry-After: 1 and never reaches the target; once
// they finish, the address is served again.
func TestRequestBudgetHTTP3(t *testing.T) {
	const budget = 2
	e := newEnv(t, withHTTP3, func(c *Config) { c.MaxRequestsPerClient = budget })
	tg := newSlowTarget(t)
	e.tlsRoute("app.example.test", tg.addr)
	cc := h3From(t, e, addrA)
	done := make(chan error, budget)
	for range budget {
		go func() {
			res, err := h3Get(t, cc, "/slow")
			if err == nil && res.StatusCode != http.StatusOK {
				err = errors.New(res.Status)
			}
			done <- err
		}()
	}
	tg.waitArrivals(t, budget)
	res, err := h3Get(t, cc, "/")
	if err != nil || res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") != "1" {
		t.Fatalf("HTTP/3 request over the budget: %v %v; want 503 with Retry-After: 1", res, err)
	}
	if n := tg.seen.Load(); n != budget {
		t.Fatalf("the target saw %d requests, want %d", n, budget)
	}
	tg.free()
	for range budget {
		if err := <-done; err != nil {
			t.Fatalf("slow request: %v", err)
		}
	}
	testwait.UntilWhy(t, 5*time.Second, "A's requests ended", func() (bool, string) {
		u := e.srv.clients.Usage(addrA)
		return u.Requests == 0, strconv.Itoa(u.Requests)
	})
	h3OK(t, "after the slow requests", cc)
	if got := e.totals.Snapshot().Refusals[stats.RefusalRequests]; got != 1 {
		t.Fatalf("%d request refusals counted, want 1", got)
	}
}

// TestStrikeEndsQUIC: an abuse verdict against an address closes its QUIC connections
// within 2 s (H3_EXCESSIVE_LOAD) and refuses its next QUIC handshake (counted as
// http3-penalty), while another address's QUIC connection still serves.
func TestStrikeEndsQUIC(t *testing.T) {
	e := newEnv(t, withHTTP3)
	e.tlsRoute("app.example.test", backend(t, echoInfo()))
	a, b := h3From(t, e, addrA), h3From(t, e, addrB)
	h3OK(t, "A before the strike", a)
	h3OK(t, "B before the strike", b)

	pingFlood(t, e.http) // from A
	select {
	case <-a.Context().Done():
		var ae *quic.ApplicationError
		if err := context.Cause(a.Context()); !errors.As(err, &ae) || ae.ErrorCode != quic.ApplicationErrorCode(http3.ErrCodeExcessiveLoad) {
			t.Errorf("A's QUIC connection ended with %v; want H3_EXCESSIVE_LOAD", err)
		}
	case <-time.After(strikeWithin):
		t.Fatalf("A's QUIC connection still open %s after the strike", strikeWithin)
	}
	_, err := quicFrom(t, e, addrA)
	var te *quic.TransportError
	if !errors.As(err, &te) || te.ErrorCode != quic.ConnectionRefused {
		t.Fatalf("a penalised address's QUIC handshake: %v; want CONNECTION_REFUSED", err)
	}
	if got := e.totals.Snapshot().Refusals[stats.RefusalHTTP3Penalty]; got != 1 {
		t.Fatalf("%d http3-penalty refusals counted, want 1", got)
	}
	h3OK(t, "B after the strike", b)
}
