package h2

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"testing"

	"golang.org/x/net/http2"
)

// TestMaxStreamsPerConn: with the default Config.MaxStreams (1000), a client that sends
// 1001 requests at once has the first 1000 served and answered, gets GOAWAY(NO_ERROR)
// naming the 1000th stream as the last, sees the 1001st (and a later one) ignored, and
// the connection closes once the last answer is out.
func TestMaxStreamsPerConn(t *testing.T) {
	h := newStuck(t)
	// Room for every stream at once, so that none is refused for concurrency.
	ts := startServer(t, Config{MaxConcurrentStreams: 1024}, h, false)
	t.Cleanup(h.free) // before the server's cleanup, which waits for the handlers
	p := newPeer(t, ts)
	var frames bytes.Buffer
	fr := http2.NewFramer(&frames, nil)
	const n = 1001
	for i := range n {
		id := uint32(2*i + 1)
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: p.block([2]string{":method", "GET"},
			[2]string{":scheme", "http"}, [2]string{":authority", "a.example"}, [2]string{":path", "/"}), EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.nc.Write(frames.Bytes()); err != nil {
		t.Fatal(err)
	}
	const last = 2*(n-1) - 1 // the 1000th stream
	// The GOAWAY comes while the handlers still hold every answer.
	for {
		f, err := p.next()
		if err != nil {
			t.Fatalf("waiting for GOAWAY: %v", err)
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			if g.ErrCode != http2.ErrCodeNo || g.LastStreamID != last {
				t.Fatalf("GOAWAY %v last stream %d, want NO_ERROR last %d", g.ErrCode, g.LastStreamID, last)
			}
			break
		}
		if _, ok := f.(*http2.MetaHeadersFrame); ok {
			t.Fatal("an answer before the handlers were freed")
		}
	}
	// A stream sent after the GOAWAY is ignored as well.
	get(p, last+4, true)
	waitFor(t, "1000 handlers", func() bool { return h.running.Load() == n-1 })
	h.free()

	answered := map[uint32]bool{}
	for {
		f, err := p.next()
		if errors.Is(err, io.EOF) {
			break // closed after the last answer
		}
		if err != nil {
			t.Fatalf("after %d answers: %v", len(answered), err)
		}
		if f.Header().StreamID > last {
			t.Fatalf("a %v frame on stream %d, above the GOAWAY's last stream", f.Header().Type, f.Header().StreamID)
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if f.PseudoValue("status") != "200" || answered[f.StreamID] {
				t.Fatalf("stream %d: status %s (answered before: %v)", f.StreamID, f.PseudoValue("status"), answered[f.StreamID])
			}
			answered[f.StreamID] = true
		case *http2.RSTStreamFrame:
			t.Fatalf("stream %d reset: %v", f.StreamID, f.ErrCode)
		case *http2.GoAwayFrame:
			t.Fatalf("a second GOAWAY: %v", f.ErrCode)
		}
	}
	if len(answered) != n-1 {
		t.Fatalf("%d streams answered, want %d", len(answered), n-1)
	}
	if err := <-ts.served; err != nil {
		t.Fatalf("Serve: %v, want a clean end", err)
	}
	if got := h.started.Load(); got != n-1 {
		t.Fatalf("%d handlers started, want %d", got, n-1)
	}
}

// TestMaxStreamsReconnect: an honest client (x/net's transport) that meets the limit
// goes on over new connections without a failed request.
func TestMaxStreamsReconnect(t *testing.T) {
	ts := startServer(t, Config{MaxStreams: 10}, echoHandler, false)
	c := ts.client()
	for i := range 45 {
		resp, err := c.Get(ts.url() + "/")
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
	}
	if got := ts.conns.Load(); got != 5 {
		t.Fatalf("45 requests took %d connections, want 5 (10 streams each)", got)
	}
}
