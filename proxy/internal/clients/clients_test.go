package clients

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
)

type ender struct{ n atomic.Int32 }

func (e *ender) End() { e.n.Add(1) }

func TestConnBudgetAndRelease(t *testing.T) {
	tab := New(Limits{Conns: 3})
	a := netip.MustParseAddr("192.0.2.1")
	b := netip.MustParseAddr("192.0.2.2")
	holds := make([]Hold, 4)
	for i := range 3 {
		if !tab.Open(&holds[i], a, &ender{}) {
			t.Fatalf("connection %d refused under budget", i+1)
		}
	}
	if tab.Open(&holds[3], a, &ender{}) {
		t.Fatal("the 4th connection of a 3-connection budget was admitted")
	}
	if holds[3].Held() {
		t.Fatal("a refused hold says it holds")
	}
	if !tab.Full(a) || tab.Full(b) {
		t.Fatalf("Full: a %v (want true), b %v (want false)", tab.Full(a), tab.Full(b))
	}
	var hb Hold
	if !tab.Open(&hb, b, &ender{}) {
		t.Fatal("another address refused")
	}
	holds[1].Close()
	holds[1].Close() // twice: counted once
	if got := tab.Usage(a).Conns; got != 2 {
		t.Fatalf("after a close a holds %d connections, want 2", got)
	}
	if !tab.Open(&holds[3], a, &ender{}) {
		t.Fatal("refused after a connection closed")
	}
	for i := range holds {
		holds[i].Close()
	}
	hb.Close()
	if n := tab.Len(); n != 0 {
		t.Fatalf("%d entries left after every connection closed", n)
	}
}

func TestKeys(t *testing.T) {
	tab := New(Limits{Conns: 1})
	var h1, h2, h3, h4 Hold
	if !tab.Open(&h1, netip.MustParseAddr("2001:db8:1:2::1"), &ender{}) {
		t.Fatal("first refused")
	}
	if tab.Open(&h2, netip.MustParseAddr("2001:db8:1:2:ffff::9%eth0"), &ender{}) {
		t.Fatal("the same /64 is a second address")
	}
	if !tab.Open(&h3, netip.MustParseAddr("2001:db8:1:3::1"), &ender{}) {
		t.Fatal("another /64 refused")
	}
	if !tab.Open(&h4, netip.MustParseAddr("198.51.100.1"), &ender{}) {
		t.Fatal("v4 refused")
	}
	if !tab.Full(netip.MustParseAddr("::ffff:198.51.100.1")) {
		t.Fatal("the IPv4-mapped form is another address")
	}
}

func TestRequestAndTunnelBudgets(t *testing.T) {
	tab := New(Limits{Requests: 2, Tunnels: 1})
	a := netip.MustParseAddr("203.0.113.9")
	var x, y Hold
	tab.Open(&x, a, &ender{})
	tab.Open(&y, a, &ender{})
	if !x.StartRequest() || !y.StartRequest() {
		t.Fatal("requests under budget refused")
	}
	if x.StartRequest() || y.StartRequest() {
		t.Fatal("a third request across two connections admitted")
	}
	x.EndRequest()
	if !y.StartRequest() {
		t.Fatal("refused after a request ended")
	}
	if !x.StartTunnel() || y.StartTunnel() {
		t.Fatal("tunnel budget of 1 not enforced across connections")
	}
	if u := tab.Usage(a); u != (Usage{Conns: 2, Requests: 2, Tunnels: 1}) {
		t.Fatalf("usage %+v", u)
	}
	var zero Hold
	for range 10 {
		if !zero.StartRequest() || !zero.StartTunnel() {
			t.Fatal("a zero hold (trusted) refused")
		}
	}
	zero.EndRequest()
	zero.EndTunnel()
	zero.Close()
}

func TestStrikeEndsOnlyThatAddress(t *testing.T) {
	tab := New(Limits{})
	a, b := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("192.0.2.11")
	ea, eb := &ender{}, &ender{}
	hs := make([]Hold, 5)
	for i := range 4 {
		tab.Open(&hs[i], a, ea)
	}
	tab.Open(&hs[4], b, eb)
	hs[2].Close()
	if n := tab.Strike(a); n != 3 || ea.n.Load() != 3 {
		t.Fatalf("strike ended %d (End called %d times), want the 3 live ones", n, ea.n.Load())
	}
	if eb.n.Load() != 0 {
		t.Fatal("another address's connection was ended")
	}
	if tab.Strike(netip.MustParseAddr("192.0.2.99")) != 0 {
		t.Fatal("an address without connections had some to end")
	}
}

// TestStrikeCoversPenaltyKey: a strike ends the connections of every address the penalty
// covers, which is an IPv6 address's whole /64: an IPv6 client rotating its source
// address within its /64 must not keep pre-opened connections through a penalty of the
// address that got the verdict.
func TestStrikeCoversPenaltyKey(t *testing.T) {
	tab := New(Limits{})
	e := &ender{}
	addrs := []string{
		"2001:db8::1",
		"2001:db8::2:3",    // same /64
		"2001:db8:0:1::1",  // another /64
		"::ffff:192.0.2.1", // IPv4-mapped
		"192.0.2.2",        // another IPv4 address
	}
	hs := make([]Hold, len(addrs))
	for i, a := range addrs {
		if !tab.Open(&hs[i], netip.MustParseAddr(a), e) {
			t.Fatalf("%s refused", a)
		}
	}
	if n := tab.Strike(netip.MustParseAddr("2001:db8::1")); n != 2 {
		t.Fatalf("a strike of 2001:db8::1 ended %d connections, want the 2 of its /64", n)
	}
	if n := tab.Strike(netip.MustParseAddr("192.0.2.1")); n != 1 {
		t.Fatalf("a strike of 192.0.2.1 ended %d connections, want 1", n)
	}
}

// TestPerRequestAllocs: the per-request calls allocate nothing.
func TestPerRequestAllocs(t *testing.T) {
	tab := New(Limits{Requests: 100, Tunnels: 100})
	var h Hold
	tab.Open(&h, netip.MustParseAddr("192.0.2.1"), &ender{})
	if n := testing.AllocsPerRun(1000, func() {
		if h.StartRequest() {
			h.EndRequest()
		}
		if h.StartTunnel() {
			h.EndTunnel()
		}
	}); n != 0 {
		t.Fatalf("%.1f allocations per request", n)
	}
}

// TestConcurrent is for the race detector: opens, closes, requests and strikes at once;
// every entry is gone at the end.
func TestConcurrent(t *testing.T) {
	tab := New(Limits{Conns: 4, Requests: 3, Tunnels: 2})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			a := netip.AddrFrom4([4]byte{10, 0, 0, byte(g % 3)})
			for range 500 {
				var h Hold
				if !tab.Open(&h, a, &ender{}) {
					continue
				}
				if h.StartRequest() {
					h.EndRequest()
				}
				if h.StartTunnel() {
					h.EndTunnel()
				}
				tab.Strike(a)
				h.Close()
			}
		})
	}
	wg.Wait()
	if n := tab.Len(); n != 0 {
		t.Fatalf("%d entries left", n)
	}
}

// BenchmarkOpenClose is a connection's cost at accept and close (one address with 100
// other connections open).
func BenchmarkOpenClose(b *testing.B) {
	tab := New(Limits{Conns: 512})
	a := netip.MustParseAddr("192.0.2.1")
	held := make([]Hold, 100)
	for i := range held {
		tab.Open(&held[i], a, &ender{})
	}
	e := &ender{}
	for b.Loop() {
		var h Hold
		tab.Open(&h, a, e)
		h.Close()
	}
}

// BenchmarkRequest is a request's cost: admission and its end.
func BenchmarkRequest(b *testing.B) {
	tab := New(Limits{Requests: 512})
	var h Hold
	tab.Open(&h, netip.MustParseAddr("192.0.2.1"), &ender{})
	for b.Loop() {
		if h.StartRequest() {
			h.EndRequest()
		}
	}
}

// TestMove: a moved place keeps its count and its place in the list; Strike then ends
// the new owner, Close of the old one does nothing, Close of the new one gives it back.
func TestMove(t *testing.T) {
	tab := New(Limits{Conns: 2})
	a := netip.MustParseAddr("192.0.2.7")
	var first, second, moved Hold
	e1, e2, e3 := &ender{}, &ender{}, &ender{}
	if !tab.Open(&first, a, e1) || !tab.Open(&second, a, e2) {
		t.Fatal("opening two connections under a budget of two failed")
	}
	first.Move(&moved, e3)
	if first.Held() || !moved.Held() {
		t.Fatalf("after the move: old holds %v (want false), new holds %v (want true)", first.Held(), moved.Held())
	}
	if got := tab.Usage(a).Conns; got != 2 {
		t.Fatalf("a move changed the count to %d, want 2", got)
	}
	first.Close() // the old one is zero: nothing
	if got := tab.Usage(a).Conns; got != 2 {
		t.Fatalf("closing the moved-from hold changed the count to %d", got)
	}
	if n := tab.Strike(a); n != 2 {
		t.Fatalf("Strike ended %d connections, want 2", n)
	}
	if e1.n.Load() != 0 || e2.n.Load() != 1 || e3.n.Load() != 1 {
		t.Fatalf("Strike reached old %d, other %d, new %d times; want 0, 1, 1", e1.n.Load(), e2.n.Load(), e3.n.Load())
	}
	// Moved back and forth, the list stays whole: the head (second, opened last) moves too.
	var back Hold
	second.Move(&back, e2)
	moved.Close()
	if got := tab.Usage(a).Conns; got != 1 {
		t.Fatalf("after closing the moved hold the address holds %d, want 1", got)
	}
	back.Close()
	if tab.Len() != 0 {
		t.Fatal("entry left after every hold closed")
	}
	var zero, dst Hold
	zero.Move(&dst, e1)
	if dst.Held() {
		t.Fatal("moving a zero hold made a holding one")
	}
}

// TestHandshakes: a hold opened in a handshake counts among its address's connections
// and its handshakes until Established (then only among the connections) or Close; the
// handshakes' bound refuses one more while the connections' still has room, and
// Handshakes reports both.
func TestHandshakes(t *testing.T) {
	tb := New(Limits{Conns: 4})
	a := netip.MustParseAddr("192.0.2.7")
	var e ender
	var hs [4]Hold
	for i := range 2 {
		if !tb.OpenHandshake(&hs[i], a, &e, 2) {
			t.Fatalf("handshake %d refused", i)
		}
	}
	if tb.OpenHandshake(&hs[2], a, &e, 2) {
		t.Fatal("a third handshake admitted over a bound of 2")
	}
	if n, full := tb.Handshakes(a); n != 2 || full {
		t.Fatalf("Handshakes: %d, full %v; want 2, false", n, full)
	}
	hs[0].Established()
	hs[0].Established()
	if u := tb.Usage(a); u.Conns != 2 || u.Handshakes != 1 {
		t.Fatalf("after one handshake completed: %+v", u)
	}
	if !tb.OpenHandshake(&hs[2], a, &e, 2) || !tb.Open(&hs[3], a, &e) {
		t.Fatal("room left, but refused")
	}
	if n, full := tb.Handshakes(a); n != 2 || !full {
		t.Fatalf("Handshakes: %d, full %v; want 2, true", n, full)
	}
	hs[1].Close()
	hs[2].Close()
	if u := tb.Usage(a); u.Conns != 2 || u.Handshakes != 0 {
		t.Fatalf("after two handshakes ended: %+v", u)
	}
	hs[0].Close()
	hs[3].Close()
	if tb.Len() != 0 {
		t.Fatal("entry kept once every hold closed")
	}
}
