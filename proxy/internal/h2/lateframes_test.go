package h2

import (
	"bytes"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// earlyAnswer answers without reading the request body: for a POST whose body is still
// open, the engine sends END_STREAM and then RST_STREAM(NO_ERROR). A GET is answered
// with the request's x-checksum in x-seen (what the engine decoded).
var earlyAnswer = HandlerFunc(func(st *Stream) {
	v, _ := st.Request().Get("x-checksum")
	_ = st.WriteHead(200, []hpack.HeaderField{{Name: "x-seen", Value: v}}, []byte("ok"), true)
})

// awaitEnd reads until the frame that ends stream id's answer, and with untilReset
// until the RST_STREAM(NO_ERROR) that follows it (a request whose body was left open);
// it returns the GOAWAY's code instead if the server sends one first.
func awaitEnd(t *testing.T, p *peer, id uint32, untilReset bool) (goaway http2.ErrCode, cut bool) {
	t.Helper()
	for {
		f, err := p.next()
		if err != nil {
			t.Fatalf("waiting for the end of stream %d: %v", id, err)
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			return f.ErrCode, true
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				if f.ErrCode != http2.ErrCodeNo {
					t.Fatalf("stream %d reset: %v", id, f.ErrCode)
				}
				if untilReset {
					return 0xff, false
				}
			}
		}
		if !untilReset && f.Header().StreamID == id && f.Header().Flags.Has(http2.FlagDataEndStream) {
			return 0xff, false
		}
	}
}

// TestLateTrailersIgnored (finding 6): a request answered before the client sent its
// body's end gets its trailers, and body bytes, after the engine reset it; they are
// ignored (RFC 9113 §5.1), not a connection error, the HPACK table stays in step (the
// next request names the trailers' field by its index) and the connection serves on.
// Frames on a stream both sides ended stay a connection error STREAM_CLOSED.
func TestLateTrailersIgnored(t *testing.T) {
	ts := startServer(t, Config{}, earlyAnswer, false)
	p := newPeer(t, ts)
	p.headers(1, false, [2]string{":method", "POST"}, [2]string{":scheme", "http"}, [2]string{":authority", "a.example"}, [2]string{":path", "/up"})
	if code, cut := awaitEnd(t, p, 1, true); cut { // answered, then reset (NO_ERROR)
		t.Fatalf("GOAWAY %v", code)
	}
	// What the client had on its way when the answer came.
	if err := p.fr.WriteData(1, false, []byte("the rest of the body")); err != nil {
		t.Fatal(err)
	}
	p.headers(1, true, [2]string{"x-checksum", "c0ffee"}) // the encoder indexes the field
	p.headers(3, true, [2]string{":method", "GET"}, [2]string{":scheme", "http"}, [2]string{":authority", "a.example"}, [2]string{":path", "/"},
		[2]string{"x-checksum", "c0ffee"}) // named by its index in the dynamic table
	for {
		f, err := p.next()
		if err != nil {
			t.Fatal(err)
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY %v after late trailers", f.ErrCode)
		case *http2.RSTStreamFrame:
			t.Fatalf("RST_STREAM %v on stream %d: the late frames were answered, not ignored", f.ErrCode, f.StreamID)
		case *http2.MetaHeadersFrame:
			if f.StreamID != 3 {
				t.Fatalf("HEADERS on stream %d", f.StreamID)
			}
			if st, seen := f.PseudoValue("status"), f.Fields[len(f.Fields)-1]; st != "200" || seen.Name != "x-seen" || seen.Value != "c0ffee" {
				t.Fatalf("status %s, %v: want 200 and x-seen c0ffee", st, seen)
			}
			goto served
		}
	}
served:
	// Stream 3 was ended by both sides: HEADERS on it is a connection error.
	p.headers(3, true, [2]string{"x-late", "1"})
	if code := p.expectGoAway(); code != http2.ErrCodeStreamClosed {
		t.Fatalf("HEADERS on a closed stream: GOAWAY %v, want STREAM_CLOSED", code)
	}
}

// TestLateFramesCharged (issue 25): a frame on a stream whose answer is complete costs
// the client a reset token: a flood of requests each followed, once answered, by a
// RST_STREAM, by trailers or by body bytes, ends with GOAWAY(ENHANCE_YOUR_CALM),
// reported as abuse, within the reset budget (ResetBurst, then ResetRate a second).
// Before, such a flood went on for as long as the client liked.
func TestLateFramesCharged(t *testing.T) {
	floods := []struct {
		name string
		open func(p *peer, id uint32)
		// bodyOpen: the request's body is left open, so the engine resets the stream
		// after its answer; the late frame is sent once that reset came.
		bodyOpen bool
		late     func(p *peer, id uint32) error
	}{
		{"RST_STREAM after the answer",
			func(p *peer, id uint32) { get(p, id, true) }, false,
			func(p *peer, id uint32) error { return p.fr.WriteRSTStream(id, http2.ErrCodeCancel) }},
		{"trailers after the answer",
			func(p *peer, id uint32) { get(p, id, false) }, true,
			func(p *peer, id uint32) error {
				return p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: p.block([2]string{"x-t", "1"}), EndStream: true, EndHeaders: true})
			}},
		{"DATA after the answer",
			func(p *peer, id uint32) { get(p, id, false) }, true,
			func(p *peer, id uint32) error { return p.fr.WriteData(id, true, []byte("late")) }},
	}
	for _, fl := range floods {
		t.Run(fl.name, func(t *testing.T) {
			var log abuseLog
			ts := startServer(t, Config{OnAbuse: log.onAbuse, MaxStreams: 1 << 30}, earlyAnswer, false)
			p := newPeer(t, ts)
			start := time.Now()
			sent := 0
			for id := uint32(1); ; id += 2 {
				if sent == 3000 {
					t.Fatalf("the server took %d late frames", sent)
				}
				fl.open(p, id)
				if code, cut := awaitEnd(t, p, id, fl.bodyOpen); cut {
					if code != http2.ErrCodeEnhanceYourCalm {
						t.Fatalf("after %d late frames: GOAWAY %v, want ENHANCE_YOUR_CALM", sent, code)
					}
					break
				}
				if fl.late(p, id) != nil {
					break // cut: the GOAWAY was checked above, or is checked below
				}
				sent++
			}
			elapsed := time.Since(start)
			p.nc.Close()
			<-ts.served
			if got := log.get(); len(got) != 1 || got[0] != "too many stream resets" {
				t.Fatalf("OnAbuse told %q, want once %q", got, "too many stream resets")
			}
			if most := 256 + int(100*elapsed.Seconds()) + 2; sent > most {
				t.Fatalf("%d late frames taken in %s, want at most %d", sent, elapsed, most)
			}
			t.Logf("cut after %d late frames in %s", sent, elapsed.Round(time.Millisecond))
		})
	}
}

// TestLateResetsBrowserBurst: a browser that cancels every stream it may have open
// (MaxConcurrentStreams, 128) when all their answers were already on their way, twice
// in a row, stays within the budget: the connection serves on.
func TestLateResetsBrowserBurst(t *testing.T) {
	ts := startServer(t, Config{}, earlyAnswer, false)
	p := newPeer(t, ts)
	id := uint32(1)
	for range 2 {
		first := id
		var frames bytes.Buffer
		fr := http2.NewFramer(&frames, nil)
		for range 128 {
			if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: p.block([2]string{":method", "GET"},
				[2]string{":scheme", "http"}, [2]string{":authority", "a.example"}, [2]string{":path", "/"}), EndStream: true, EndHeaders: true}); err != nil {
				t.Fatal(err)
			}
			id += 2
		}
		if _, err := p.nc.Write(frames.Bytes()); err != nil {
			t.Fatal(err)
		}
		frames.Reset()
		for ended := 0; ended < 128; {
			f, err := p.next()
			if err != nil {
				t.Fatalf("after %d answers: %v", ended, err)
			}
			if g, ok := f.(*http2.GoAwayFrame); ok {
				t.Fatalf("GOAWAY %v", g.ErrCode)
			}
			if f.Header().Flags.Has(http2.FlagDataEndStream) {
				ended++
			}
		}
		// Every answer is in; the cancels come now.
		for s := first; s < id; s += 2 {
			if err := fr.WriteRSTStream(s, http2.ErrCodeCancel); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := p.nc.Write(frames.Bytes()); err != nil {
			t.Fatal(err)
		}
	}
	p.get(id, "/")
	if st := p.expectResponse(id); st != "200" {
		t.Fatalf("status %s", st)
	}
}

// TestLateFramesLongAfter: the engine remembers the last resetMemory streams it reset;
// trailers on one of them are ignored, trailers on a stream reset before those are a
// connection error STREAM_CLOSED, as on any closed stream (RFC 9113 §5.1 lets the
// period of ignoring be limited), and so are frames on a stream never opened.
func TestLateFramesLongAfter(t *testing.T) {
	ts := startServer(t, Config{}, earlyAnswer, false)
	p := newPeer(t, ts)
	const n = resetMemory + 1
	id := uint32(1)
	for range n {
		p.headers(id, false, [2]string{":method", "POST"}, [2]string{":scheme", "http"}, [2]string{":authority", "a.example"}, [2]string{":path", "/up"})
		if code, cut := awaitEnd(t, p, id, true); cut {
			t.Fatalf("GOAWAY %v", code)
		}
		id += 2
	}
	last := id - 2
	// The last one reset: its trailers are ignored, the connection serves on.
	p.headers(last, true, [2]string{"x-t", "1"})
	p.get(id, "/")
	if st := p.expectResponse(id); st != "200" {
		t.Fatalf("status %s", st)
	}
	// The first one, resetMemory resets ago: forgotten, a connection error.
	p.headers(1, true, [2]string{"x-t", "1"})
	if code := p.expectGoAway(); code != http2.ErrCodeStreamClosed {
		t.Fatalf("trailers on a stream reset long ago: GOAWAY %v, want STREAM_CLOSED", code)
	}

	// DATA on a stream never opened stays a connection error PROTOCOL_ERROR.
	p = newPeer(t, ts)
	if err := p.fr.WriteData(1, true, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if code := p.expectGoAway(); code != http2.ErrCodeProtocol {
		t.Fatalf("DATA on an idle stream: GOAWAY %v, want PROTOCOL_ERROR", code)
	}
}
