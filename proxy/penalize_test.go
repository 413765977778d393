package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/serve-zone/ingress/routetable"
)

// pingFlood opens an h2c connection to addr and sends PINGs until the server cuts it
// (the engine's budget for frames that do no work); it fails the test if the server
// takes a million.
func pingFlood(t *testing.T, addr string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go func() { _, _ = io.Copy(io.Discard, c) }()
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	fr := http2.NewFramer(c, c)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	for range 1_000_000 {
		if err := fr.WritePing(false, [8]byte{1}); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("the server neither read nor cut the PING flood")
			}
			return
		}
	}
	t.Fatal("the server took a million PINGs")
}

// TestPenaltyAfterH2Abuse: a connection the HTTP/2 engine ends for abuse penalises its
// client address: the next connection from it is refused at accept (held, then reset
// when the penalty ends, counted), and once the penalty is over the address is served
// again.
func TestPenaltyAfterH2Abuse(t *testing.T) {
	e := newEnv(t)
	be := backend(t, echoInfo())
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{be}}})

	pingFlood(t, e.http)
	waitFor(t, "the abuse counted", func() bool { return e.totals.Snapshot().ClientAbuse == 1 })
	if ok, _ := e.srv.penalties.Penalized(netip.MustParseAddr("127.0.0.1")); !ok {
		t.Fatal("the flooding address is not penalised")
	}

	// Refused: held without an answer, reset when the penalty (1 s) ends.
	c := dialRaw(t, e.http)
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: app.example.test\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	n, err := c.Read(make([]byte, 100))
	var ne net.Error
	if n > 0 || err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("a penalised client's connection: read %d bytes, %v; want a reset when the penalty ends", n, err)
	}
	t.Logf("refused connection held %s, then %v", time.Since(start).Round(time.Millisecond), err)
	if got := e.totals.Snapshot().PenalizedRefusals; got != 1 {
		t.Fatalf("%d refusals counted, want 1", got)
	}

	// Served again.
	res, err := e.h1Client().Get("http://app.example.test/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("after the penalty: %s", res.Status)
	}
}

// TestNoPenaltyForTrustedProxies: a trusted proxy carries many clients, so its
// address is never penalised (the abusive connection is still ended and counted).
func TestNoPenaltyForTrustedProxies(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")} })
	be := backend(t, echoInfo())
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{be}}})
	pingFlood(t, e.http)
	waitFor(t, "the abuse counted", func() bool { return e.totals.Snapshot().ClientAbuse == 1 })
	res, err := e.h1Client().Get("http://app.example.test/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK || e.totals.Snapshot().PenalizedRefusals != 0 {
		t.Fatalf("trusted proxy after abuse: %s, %d refusals", res.Status, e.totals.Snapshot().PenalizedRefusals)
	}
}

// TestRefusePenalizedAllocs: the check on every accepted connection allocates nothing
// for an address that is not penalised.
func TestRefusePenalizedAllocs(t *testing.T) {
	s, err := New(Config{HTTPAddr: "127.0.0.1:0", Tables: routetable.NewStore(routetable.StoreOptions{})})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c := dialRaw(t, ln.Addr().String())
	if n := testing.AllocsPerRun(1000, func() {
		if s.refusePenalized(c) {
			t.Fatal("refused")
		}
	}); n != 0 {
		t.Fatalf("refusePenalized allocates %.1f times per connection", n)
	}
}

// TestTarpit: held connections are closed when their penalty ends, all of them when the
// tarpit stops (hold refuses from then on), and no more than tarpitMax are held.
func TestTarpit(t *testing.T) {
	tp := newTarpit()
	now := time.Now()
	type pair struct{ held, peer net.Conn }
	var early, late []pair
	for i := range tarpitMax {
		a, b := net.Pipe()
		t.Cleanup(func() { a.Close(); b.Close() })
		until := now.Add(time.Hour)
		if i%2 == 0 {
			until = now.Add(time.Second)
			early = append(early, pair{a, b})
		} else {
			late = append(late, pair{a, b})
		}
		if !tp.hold(a, until) {
			t.Fatalf("connection %d not held", i)
		}
	}
	extra, _ := net.Pipe()
	defer extra.Close()
	if tp.hold(extra, now.Add(time.Second)) {
		t.Fatalf("held more than %d connections", tarpitMax)
	}
	closed := func(p pair) bool {
		// A pipe's write fails at once when the other end is closed; else nobody reads
		// it, and the deadline ends it.
		_ = p.peer.SetWriteDeadline(time.Now().Add(time.Second))
		_, err := p.peer.Write([]byte{1})
		return errors.Is(err, io.ErrClosedPipe)
	}
	if next := tp.release(now.Add(2 * time.Second)); !next.Equal(now.Add(time.Hour)) {
		t.Fatalf("next end %s, want the late ones' %s", next, now.Add(time.Hour))
	}
	for _, p := range early {
		if !closed(p) {
			t.Fatal("a connection whose penalty ended is still held open")
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); tp.run(ctx) }()
	cancel()
	<-done
	for _, p := range late {
		if !closed(p) {
			t.Fatal("a held connection survived the tarpit's end")
		}
	}
	if tp.hold(extra, now.Add(time.Hour)) {
		t.Fatal("held a connection after the tarpit ended")
	}
}
