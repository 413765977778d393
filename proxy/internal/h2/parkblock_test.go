package h2

import (
	"errors"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/serve-zone/ingress/internal/testwait"
)

// lateDeadlineConn counts the reads that ended at their read deadline after it was armed
// and bytes had been read since (a deadline that expired inside what the client sent
// after arming).
type lateDeadlineConn struct {
	net.Conn
	armed, saw atomic.Bool
	late       atomic.Int64
}

func (c *lateDeadlineConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.armed.Load() {
		if n > 0 {
			c.saw.Store(true)
		} else if errors.Is(err, os.ErrDeadlineExceeded) && c.saw.Load() {
			c.late.Add(1)
		}
	}
	return n, err
}

// TestHeaderBlockOutlivesParkWakeUp (issue 33, item 4): a header block split over
// HEADERS and CONTINUATION on an idle connection that parks is bounded by HeaderTimeout,
// not by the park wake-up's read deadline. The HEADERS comes after the connection parked;
// the CONTINUATION only once a read deadline expired after it (the wake-up, 250 ms after
// the resume): the request is answered. A block that never ends gets its GOAWAY
// (ENHANCE_YOUR_CALM) after HeaderTimeout rather than a silent close.
func TestHeaderBlockOutlivesParkWakeUp(t *testing.T) {
	var wrapped atomic.Pointer[lateDeadlineConn]
	ts := startServerWrapped(t, Config{ParkAfter: 20 * time.Millisecond, HeaderTimeout: 3 * time.Second}, parkedAnswer, false,
		func(nc net.Conn) net.Conn {
			c := &lateDeadlineConn{Conn: nc}
			wrapped.Store(c)
			return c
		})
	p := newPeer(t, ts)
	p.get(1, "/first")
	if st := p.expectResponse(1); st != "200" {
		t.Fatalf("first request: status %s", st)
	}
	parks := ts.parks.Load()
	testwait.Until(t, 10*time.Second, "the connection parked", func() bool { return ts.parks.Load() > parks })

	wc := wrapped.Load()
	wc.armed.Store(true)
	head := p.block([2]string{":method", "GET"}, [2]string{":scheme", "http"})
	rest := p.block([2]string{":authority", "a.example"}, [2]string{":path", "/split"})
	if err := p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: head, EndStream: true}); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 10*time.Second, "a read deadline expired after the HEADERS", func() bool { return wc.late.Load() > 0 })
	if err := p.fr.WriteContinuation(3, true, rest); err != nil {
		t.Fatal(err)
	}
	if st := p.expectResponse(3); st != "200" {
		t.Fatalf("split header block: status %s", st)
	}

	// A block that never ends: GOAWAY after HeaderTimeout (3 s), counted from its HEADERS.
	parks = ts.parks.Load()
	testwait.Until(t, 10*time.Second, "the connection parked again", func() bool { return ts.parks.Load() > parks })
	start := time.Now()
	if err := p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: head, EndStream: true}); err != nil {
		t.Fatal(err)
	}
	if code := p.expectGoAway(); code != http2.ErrCodeEnhanceYourCalm {
		t.Fatalf("GOAWAY %v for a header block that never ended, want ENHANCE_YOUR_CALM", code)
	}
	if d := time.Since(start); d < 3*time.Second {
		t.Fatalf("the unfinished block was ended after %v, before HeaderTimeout (3s)", d)
	}
	p.expectClosed()
}
