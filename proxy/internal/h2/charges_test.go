package h2

import (
	"bytes"
	"net"
	"strings"
	"testing"
	"time"

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

// unservedConn returns an engine connection on loopback that Serve was not called for
// yet, and the client's end of it.
func unservedConn(t *testing.T) (*Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	// A long idle timeout: the connection must end because of the call, not of it.
	return NewConn(nc, Config{IdleTimeout: time.Minute, ReadIdleTimeout: time.Minute}, echoHandler), client
}

// TestHeadersAfterGoAwayCharged: a request the client sends after our GOAWAY, above its
// last stream id, is ignored and costs a reset token, as a stream refused for
// concurrency does (it is refused, only silently): its head was decoded all the same,
// and a client that keeps one stream open after reaching MaxStreams must not get heads
// decoded at the junk budget's rate (burst 1000, 500 a second) instead of the reset
// budget's (256, 100 a second). A browser has at most a few requests in flight when the
// GOAWAY arrives.
func TestHeadersAfterGoAwayCharged(t *testing.T) {
	var log abuseLog
	h := newStuck(t)
	ts := startServer(t, Config{OnAbuse: log.onAbuse, MaxStreams: 1, ResetRate: 1}, h, false)
	t.Cleanup(h.free) // before the server's cleanup, which waits for the handlers
	p := newPeer(t, ts)
	get(p, 1, true) // the last stream; its handler holds the connection open
	waitFor(t, "the handler", func() bool { return h.running.Load() == 1 })
	n := 2*128 + 1 // the default reset burst, and one more
	var frames bytes.Buffer
	fr := http2.NewFramer(&frames, nil)
	for i := range n {
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(3 + 2*i), BlockFragment: p.block([2]string{":method", "GET"},
			[2]string{":scheme", "http"}, [2]string{":authority", "a.example"}, [2]string{":path", "/"}), EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
	}
	if code := floodThenPing(t, p, frames.Bytes()); code != http2.ErrCodeEnhanceYourCalm {
		t.Fatalf("%d requests after the GOAWAY: GOAWAY %v (0xff: none), want ENHANCE_YOUR_CALM", n, code)
	}
	h.free()
	<-ts.served
	if got := log.get(); len(got) != 1 {
		t.Fatalf("OnAbuse told %q, want once", got)
	}
	if got := h.started.Load(); got != 1 {
		t.Fatalf("%d handlers started, want 1", got)
	}
}

// TestIgnoredBlockKeepsHPACK: a header block above the GOAWAY's last stream id is
// ignored, but decoded: a dynamic table size update at its start and a field it adds to
// the table, in a HEADERS and a CONTINUATION, are in the decoder's state when the
// trailers of the stream still open name that field by its index.
func TestIgnoredBlockKeepsHPACK(t *testing.T) {
	ts := startServer(t, Config{MaxStreams: 1}, echoHandler, false)
	p := newPeer(t, ts)
	p.headers(1, false, [2]string{":method", "POST"}, [2]string{":scheme", "http"}, [2]string{":authority", "a.example"}, [2]string{":path", "/up"})
	for {
		f, err := p.next()
		if err != nil {
			t.Fatalf("waiting for GOAWAY: %v", err)
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			if g.ErrCode != http2.ErrCodeNo || g.LastStreamID != 1 {
				t.Fatalf("GOAWAY %v last %d, want NO_ERROR last 1", g.ErrCode, g.LastStreamID)
			}
			break
		}
	}
	p.henc.SetMaxDynamicTableSize(1024) // a size update opens the next block
	block := p.block([2]string{":method", "GET"}, [2]string{":scheme", "http"}, [2]string{":authority", "a.example"}, [2]string{":path", "/"},
		[2]string{"x-sync", "c0ffee-after-goaway"})
	half := len(block) / 2
	if err := p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block[:half], EndStream: true}); err != nil {
		t.Fatal(err)
	}
	if err := p.fr.WriteContinuation(3, true, block[half:]); err != nil {
		t.Fatal(err)
	}
	if err := p.fr.WriteData(1, false, []byte("body")); err != nil {
		t.Fatal(err)
	}
	trailers := p.block([2]string{"x-sync", "c0ffee-after-goaway"})
	if len(trailers) != 1 {
		t.Fatalf("the trailers' block is %d bytes, want the field's index alone", len(trailers))
	}
	if err := p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: trailers, EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	heads := 0
	for {
		f, err := p.next()
		if err != nil {
			t.Fatalf("waiting for the answer's trailers: %v", err)
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY %v", f.ErrCode)
		case *http2.RSTStreamFrame:
			t.Fatalf("stream %d reset: %v", f.StreamID, f.ErrCode)
		case *http2.MetaHeadersFrame:
			if f.StreamID != 1 {
				t.Fatalf("HEADERS on stream %d", f.StreamID)
			}
			if heads++; heads == 2 {
				var got string
				for _, hf := range f.Fields {
					if hf.Name == "x-sync" {
						got = hf.Value
					}
				}
				if got != "c0ffee-after-goaway" {
					t.Fatalf("the trailers echoed x-sync %q, want %q: the decoder missed the ignored block", got, "c0ffee-after-goaway")
				}
				return
			}
		}
	}
}

// TestRepeatedLateHeadersCharged: a stream has one late header block at most (its
// trailers, which end it), so every header block the engine ignores costs a reset token,
// not a junk token after the first: else one ignored stream (above the GOAWAY's last
// stream id, or one the engine reset) took header block after header block, each
// decoded, at the junk budget's rate (1000 back to back, 500 a second). Before the
// change under review they were a connection error STREAM_CLOSED.
func TestRepeatedLateHeadersCharged(t *testing.T) {
	n := 2*128 + 1 // the default reset burst, and one more
	repeat := func(p *peer, id uint32) []byte {
		var frames bytes.Buffer
		fr := http2.NewFramer(&frames, nil)
		for range n {
			if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: p.block([2]string{"x-trailer", "t"}), EndStream: true, EndHeaders: true}); err != nil {
				t.Fatal(err)
			}
		}
		return frames.Bytes()
	}
	t.Run("above GOAWAY", func(t *testing.T) {
		h := newStuck(t)
		ts := startServer(t, Config{MaxStreams: 1, ResetRate: 1}, h, false)
		t.Cleanup(h.free)
		p := newPeer(t, ts)
		get(p, 1, true) // the last stream; its handler holds the connection open
		waitFor(t, "the handler", func() bool { return h.running.Load() == 1 })
		get(p, 3, false) // ignored
		if code := floodThenPing(t, p, repeat(p, 3)); code != http2.ErrCodeEnhanceYourCalm {
			t.Fatalf("%d header blocks on an ignored stream: GOAWAY %v (0xff: none), want ENHANCE_YOUR_CALM", n, code)
		}
	})
	t.Run("reset stream", func(t *testing.T) {
		ts := startServer(t, Config{ResetRate: 1}, earlyAnswer, false)
		p := newPeer(t, ts)
		p.headers(1, false, [2]string{":method", "POST"}, [2]string{":scheme", "http"}, [2]string{":authority", "a.example"}, [2]string{":path", "/up"})
		if code, cut := awaitEnd(t, p, 1, true); cut { // answered, then reset (NO_ERROR)
			t.Fatalf("GOAWAY %v", code)
		}
		if code := floodThenPing(t, p, repeat(p, 1)); code != http2.ErrCodeEnhanceYourCalm {
			t.Fatalf("%d header blocks on a reset stream: GOAWAY %v (0xff: none), want ENHANCE_YOUR_CALM", n, code)
		}
	})
}
