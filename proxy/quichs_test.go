package proxy

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/quic-go/quic-go"

	"github.com/serve-zone/ingress/proxy/internal/clients"
	"github.com/serve-zone/ingress/stats"
)

// TestQUICHandshakeBounds: a QUIC connection takes its place in its address's budget at
// startQUIC (its first packet), counted as a handshake in progress until done; an address
// with quicRetryPerAddr in progress, and every address while quicRetryAll are in
// progress over all, is asked for a Retry; beyond quicHandshakesPerAddr, or the bound
// over all, a new one is refused; a handshake that ends gives its place back.
func TestQUICHandshakeBounds(t *testing.T) {
	e := newEnv(t, withHTTP3)
	s := e.srv
	from := func(a string, port int) *quic.ClientInfo {
		return &quic.ClientInfo{RemoteAddr: net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(a), uint16(port)))}
	}
	a := netip.MustParseAddr("192.0.2.9")
	var cancels []context.CancelFunc
	start := func(ci *quic.ClientInfo) (*quicHandshake, error) {
		ctx, cancel := context.WithCancel(context.Background())
		cancels = append(cancels, cancel)
		c, err := s.startQUIC(ctx, ci)
		if err != nil {
			return nil, err
		}
		return c.Value(quicHandshakeKey{}).(*quicHandshake), nil
	}
	var hss []*quicHandshake
	for i := range quicHandshakesPerAddr {
		if i == quicRetryPerAddr && !s.retryQUIC(from("192.0.2.9", 1000+i).RemoteAddr) {
			t.Fatalf("no Retry asked with %d handshakes in progress", i)
		}
		if i < quicRetryPerAddr && s.retryQUIC(from("192.0.2.9", 1000+i).RemoteAddr) {
			t.Fatalf("a Retry asked with %d handshakes in progress", i)
		}
		hs, err := start(from("192.0.2.9", 1000+i))
		if err != nil {
			t.Fatalf("handshake %d refused: %v", i, err)
		}
		hss = append(hss, hs)
	}
	if _, err := start(from("192.0.2.9", 2000)); err == nil {
		t.Fatalf("handshake %d admitted from one address", quicHandshakesPerAddr+1)
	}
	if n := e.totals.Snapshot().Refusals[stats.RefusalHandshakes]; n != 1 {
		t.Fatalf("%d refusals counted as handshakes, want 1", n)
	}
	if u := s.clients.Usage(a); u.Conns != quicHandshakesPerAddr || u.Handshakes != quicHandshakesPerAddr {
		t.Fatalf("usage %+v", u)
	}
	hss[0].done() // completed: stays a connection, no longer a handshake
	hss[0].done()
	cancels[1]() // ended during its handshake
	waitFor(t, "the ended handshake's place given back", func() bool {
		u := s.clients.Usage(a)
		return u.Conns == quicHandshakesPerAddr-1 && u.Handshakes == quicHandshakesPerAddr-2
	})
	if n := s.h3.handshakes.Load(); n != quicHandshakesPerAddr-2 {
		t.Fatalf("%d handshakes in progress over all, want %d", n, quicHandshakesPerAddr-2)
	}

	// Over all: a Retry for everyone past quicRetryAll, a refusal past the bound.
	s.h3.handshakes.Add(quicRetryAll)
	if !s.retryQUIC(from("198.51.100.1", 1).RemoteAddr) {
		t.Fatal("no Retry asked of a fresh address with handshakes piled up over all")
	}
	s.h3.handshakes.Add(s.h3.maxHandshakes)
	if _, err := start(from("198.51.100.1", 1)); err == nil {
		t.Fatal("a handshake admitted over the bound over all")
	}
	s.h3.handshakes.Add(-quicRetryAll - s.h3.maxHandshakes)
	for _, c := range cancels {
		c()
	}
	waitFor(t, "every place given back", func() bool { return s.clients.Usage(a) == clients.Usage{} })
	if n := s.h3.handshakes.Load(); n != 0 {
		t.Fatalf("%d handshakes in progress once every one ended", n)
	}
}
