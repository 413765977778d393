package h2

import (
	"bytes"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// abuseLog records Config.OnAbuse calls.
type abuseLog struct {
	mu      sync.Mutex
	reasons []string
	remote  []net.Addr
}

func (l *abuseLog) onAbuse(nc net.Conn, reason string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reasons = append(l.reasons, reason)
	l.remote = append(l.remote, nc.RemoteAddr())
}

func (l *abuseLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.reasons...)
}

// floodUntilCut runs write until it fails (the server cut the connection), failing the
// test if the server took limit writes.
func floodUntilCut(t *testing.T, p *peer, limit int, write func(i int) error) {
	t.Helper()
	_ = p.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	for i := range limit {
		if write(i) != nil {
			return
		}
	}
	t.Fatalf("the server took %d frames", limit)
}

// TestAbuseReported: each flood the engine ends for abuse is reported to OnAbuse once,
// on the connection, with its reason, before Serve returns; ordinary ends (a clean
// close, a protocol error, an oversized request head now and then) are not reported.
func TestAbuseReported(t *testing.T) {
	get := func(p *peer) []byte {
		return p.block([2]string{":method", "GET"}, [2]string{":scheme", "http"}, [2]string{":authority", "a.example"}, [2]string{":path", "/"})
	}
	floods := []struct {
		name   string
		reason string
		flood  func(t *testing.T, p *peer)
	}{
		{"PING flood", "too many control frames", func(t *testing.T, p *peer) {
			floodUntilCut(t, p, 1_000_000, func(int) error { return p.fr.WritePing(false, [8]byte{1}) })
		}},
		{"SETTINGS flood", "too many control frames", func(t *testing.T, p *peer) {
			floodUntilCut(t, p, 1_000_000, func(int) error { return p.fr.WriteSettings() })
		}},
		{"rapid reset", "too many stream resets", func(t *testing.T, p *peer) {
			floodUntilCut(t, p, 1_000_000, func(i int) error {
				id := uint32(2*i + 1)
				if err := p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: get(p), EndStream: true, EndHeaders: true}); err != nil {
					return err
				}
				return p.fr.WriteRSTStream(id, http2.ErrCodeCancel)
			})
		}},
		{"CONTINUATION flood", reasonHeaderBlockOverLimit, func(t *testing.T, p *peer) {
			if err := p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: get(p)}); err != nil {
				t.Fatal(err)
			}
			junk := p.block([2]string{"x-junk", strings.Repeat("j", 8000)})
			floodUntilCut(t, p, 1_000_000, func(int) error { return p.fr.WriteContinuation(1, false, junk) })
		}},
		{"empty CONTINUATION flood", "CONTINUATION flood", func(t *testing.T, p *peer) {
			if err := p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: get(p)}); err != nil {
				t.Fatal(err)
			}
			floodUntilCut(t, p, 2_000_000, func(int) error { return p.fr.WriteContinuation(1, false, nil) })
		}},
		{"HPACK bomb", "too many stream resets", func(t *testing.T, p *peer) {
			// A 4 KB value in the dynamic table, then requests naming it 1,000 times.
			seed := p.block([2]string{":method", "GET"}, [2]string{":scheme", "http"}, [2]string{":authority", "a.example"}, [2]string{":path", "/"},
				[2]string{"x-bomb", strings.Repeat("b", 4000)})
			if err := p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: seed, EndStream: true, EndHeaders: true}); err != nil {
				t.Fatal(err)
			}
			floodUntilCut(t, p, 100_000, func(i int) error {
				block := append(get(p), bytes.Repeat([]byte{0x80 | 62}, 1000)...)
				return p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 3), BlockFragment: block, EndStream: true, EndHeaders: true})
			})
		}},
	}
	for _, f := range floods {
		t.Run(f.name, func(t *testing.T) {
			var log abuseLog
			ts := startServer(t, Config{OnAbuse: log.onAbuse}, echoHandler, false)
			p := newPeer(t, ts)
			go func() { p.expectClosed() }() // the server's answers must not stall it
			f.flood(t, p)
			p.nc.Close()
			<-ts.served
			if got := log.get(); len(got) != 1 || got[0] != f.reason {
				t.Fatalf("OnAbuse told %q, want once %q", got, f.reason)
			}
			if log.remote[0].String() != p.nc.LocalAddr().String() {
				t.Fatalf("OnAbuse told about %s, want the flooding connection %s", log.remote[0], p.nc.LocalAddr())
			}
		})
	}

	t.Run("ordinary ends", func(t *testing.T) {
		var log abuseLog
		ts := startServer(t, Config{OnAbuse: log.onAbuse, MaxHeaderBytes: 8 << 10}, echoHandler, false)
		// A request, a few oversized heads (431), then a clean close.
		p := newPeer(t, ts)
		p.get(1, "/")
		if st := p.expectResponse(1); st != "200" {
			t.Fatalf("status %s", st)
		}
		for id := uint32(3); id < 3+2*10; id += 2 {
			p.headers(id, true, [2]string{":method", "GET"}, [2]string{":scheme", "http"}, [2]string{":authority", "a"}, [2]string{":path", "/"},
				[2]string{"x-big1", strings.Repeat("b", 3<<10)}, [2]string{"x-big2", strings.Repeat("c", 3<<10)}, [2]string{"x-big3", strings.Repeat("d", 3<<10)})
			if st := p.expectResponse(id); st != "431" {
				t.Fatalf("oversized head: status %s, want 431", st)
			}
		}
		p.nc.Close()
		<-ts.served
		// A protocol error (HEADERS on an even stream id).
		p = newPeer(t, ts)
		p.headers(2, true, [2]string{":method", "GET"}, [2]string{":scheme", "http"}, [2]string{":authority", "a"}, [2]string{":path", "/"})
		if code := p.expectGoAway(); code != http2.ErrCodeProtocol {
			t.Fatalf("GOAWAY %v, want PROTOCOL_ERROR", code)
		}
		<-ts.served
		if got := log.get(); len(got) != 0 {
			t.Fatalf("OnAbuse told %q about ordinary ends", got)
		}
	})
}

// TestOversizeHeadsCharged: a request head over MaxHeaderBytes is answered 431 and
// costs oversizeHeadResets of the reset budget, so that with the defaults the 17th of
// them sent back to back ends the connection (an HPACK bomb), reported as abuse.
func TestOversizeHeadsCharged(t *testing.T) {
	var log abuseLog
	ts := startServer(t, Config{OnAbuse: log.onAbuse, MaxHeaderBytes: 8 << 10}, echoHandler, false)
	p := newPeer(t, ts)
	n := (2*128)/oversizeHeadResets + 1 // the default burst is 2*MaxConcurrentStreams
	var frames bytes.Buffer
	fr := http2.NewFramer(&frames, nil)
	for i := range n {
		block := p.block([2]string{":method", "GET"}, [2]string{":scheme", "http"}, [2]string{":authority", "a"}, [2]string{":path", "/"},
			[2]string{"x-big1", strings.Repeat("b", 3<<10)}, [2]string{"x-big2", strings.Repeat("c", 3<<10)}, [2]string{"x-big3", strings.Repeat("d", 3<<10)})
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: block, EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.nc.Write(frames.Bytes()); err != nil { // in one write: no refill between them
		t.Fatal(err)
	}
	answered := 0
	for {
		f, err := p.next()
		if err != nil {
			t.Fatalf("after %d answers: %v", answered, err)
		}
		if h, ok := f.(*http2.MetaHeadersFrame); ok && h.PseudoValue("status") == "431" {
			answered++
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			if g.ErrCode != http2.ErrCodeEnhanceYourCalm {
				t.Fatalf("GOAWAY %v, want ENHANCE_YOUR_CALM", g.ErrCode)
			}
			break
		}
	}
	<-ts.served
	if answered >= n {
		t.Fatalf("%d of %d oversized heads answered 431; want the last refused", answered, n)
	}
	if got := log.get(); len(got) != 1 {
		t.Fatalf("OnAbuse told %q, want once", got)
	}
}
