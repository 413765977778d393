package h2

import (
	"bytes"
	"strings"
	"testing"

	"golang.org/x/net/http2"
)

// floodThenPing writes frames in one write followed by a PING, and reads until either a
// GOAWAY (its code returned) or the PING's acknowledgement (0xff: the flood was all
// handled without a verdict).
func floodThenPing(t *testing.T, p *peer, frames []byte) http2.ErrCode {
	t.Helper()
	var buf bytes.Buffer
	buf.Write(frames)
	if err := http2.NewFramer(&buf, nil).WritePing(false, [8]byte{'r', 'e', 'v', 'i', 'e', 'w'}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.nc.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := p.next()
		if err != nil {
			t.Fatalf("waiting for GOAWAY or the PING's ack: %v", err)
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			if f.ErrCode != http2.ErrCodeNo {
				return f.ErrCode
			}
		case *http2.PingFrame:
			if f.IsAck() && f.Data == [8]byte{'r', 'e', 'v', 'i', 'e', 'w'} {
				return 0xff
			}
		}
	}
}

// oversizeHeads returns n request heads over an 8 KiB MaxHeaderBytes on streams from,
// from+2, ...
func oversizeHeads(t *testing.T, p *peer, from uint32, n int) []byte {
	t.Helper()
	var frames bytes.Buffer
	fr := http2.NewFramer(&frames, nil)
	for i := range n {
		block := p.block([2]string{":method", "GET"}, [2]string{":scheme", "http"}, [2]string{":authority", "a"}, [2]string{":path", "/"},
			[2]string{"x-big1", strings.Repeat("b", 3<<10)}, [2]string{"x-big2", strings.Repeat("c", 3<<10)}, [2]string{"x-big3", strings.Repeat("d", 3<<10)})
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: from + uint32(2*i), BlockFragment: block, EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
	}
	return frames.Bytes()
}

// TestIgnoredOversizeHeadsCharged: a request head over MaxHeaderBytes costs
// oversizeHeadResets of the reset budget (an HPACK bomb) also when the engine ignores
// it, above the last stream id of a GOAWAY it sent: once a client reached MaxStreams
// and keeps one stream open, it must not get its bombs decoded for a junk token each
// (1000 back to back, 500 a second), 16 times cheaper than before the GOAWAY.
func TestIgnoredOversizeHeadsCharged(t *testing.T) {
	var log abuseLog
	h := newStuck(t)
	ts := startServer(t, Config{OnAbuse: log.onAbuse, MaxHeaderBytes: 8 << 10, MaxStreams: 1, ResetRate: 1}, h, false)
	t.Cleanup(h.free) // before the server's cleanup, which waits for the handlers
	p := newPeer(t, ts)
	get(p, 1, true) // the last stream; its handler holds the connection open
	waitFor(t, "the handler", func() bool { return h.running.Load() == 1 })
	n := (2*128)/oversizeHeadResets + 1 // the default reset burst is 2*MaxConcurrentStreams
	if code := floodThenPing(t, p, oversizeHeads(t, p, 3, n)); code != http2.ErrCodeEnhanceYourCalm {
		t.Fatalf("%d oversized heads above the GOAWAY's last stream: GOAWAY %v (0xff: none), want ENHANCE_YOUR_CALM", n, code)
	}
	h.free()
	<-ts.served
	if got := log.get(); len(got) != 1 {
		t.Fatalf("OnAbuse told %q, want once", got)
	}
}

// TestRefusedOversizeHeadsCharged: likewise for heads refused because
// MaxConcurrentStreams streams are at work (REFUSED_STREAM): a bomb costs what it costs
// when it is answered 431.
func TestRefusedOversizeHeadsCharged(t *testing.T) {
	var log abuseLog
	h := newStuck(t)
	ts := startServer(t, Config{OnAbuse: log.onAbuse, MaxHeaderBytes: 8 << 10, MaxConcurrentStreams: 1, ResetRate: 1}, h, false)
	t.Cleanup(h.free)
	p := newPeer(t, ts)
	get(p, 1, true)
	waitFor(t, "the handler", func() bool { return h.running.Load() == 1 })
	// The default reset burst is 2*MaxConcurrentStreams = 2: the first bomb empties it.
	if code := floodThenPing(t, p, oversizeHeads(t, p, 3, 2)); code != http2.ErrCodeEnhanceYourCalm {
		t.Fatalf("2 oversized heads refused for concurrency: GOAWAY %v (0xff: none), want ENHANCE_YOUR_CALM", code)
	}
	h.free()
	<-ts.served
}
