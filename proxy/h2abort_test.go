package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/serve-zone/ingress/proxy/internal/h2"
)

// h2Conns returns the engine's connections the server holds.
func (s *Server) h2Conns() []*h2.Conn {
	s.h2.mu.Lock()
	defer s.h2.mu.Unlock()
	var cs []*h2.Conn
	for c := range s.h2.m {
		cs = append(cs, c)
	}
	return cs
}

// TestH2EndForAbuse: endH2ForAbuse, called from another goroutine, ends an HTTP/2
// connection whose streams wait for their target: the client gets GOAWAY
// ENHANCE_YOUR_CALM and its connection closed within the engine's grace, the target's
// requests are cancelled, and every goroutine the connection made is gone. The
// address form (a strike through the budgets' table) finds the connections of that
// address only.
func TestH2EndForAbuse(t *testing.T) {
	const streams = 5
	var started, cancelled atomic.Int64
	held := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started.Add(1)
		select {
		case <-r.Context().Done():
			cancelled.Add(1)
		case <-time.After(20 * time.Second):
		}
	})
	e := newEnv(t)
	e.apply([]routeSpec{{host: "app.example.test", backends: []string{backend(t, held)}}})

	for _, byAddr := range []bool{false, true} {
		started.Store(0)
		cancelled.Store(0)
		base := runtime.NumGoroutine()
		c := dialRaw(t, e.http)
		fr := http2.NewFramer(c, c)
		var hbuf bytes.Buffer
		henc := hpack.NewEncoder(&hbuf)
		if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
			t.Fatal(err)
		}
		if err := fr.WriteSettings(); err != nil {
			t.Fatal(err)
		}
		for i := range streams {
			hbuf.Reset()
			for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "app.example.test"}, {":path", "/held"}} {
				_ = henc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
			}
			if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: hbuf.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, "the target to hold every request", func() bool { return started.Load() == streams })
		conns := e.srv.h2Conns()
		if len(conns) != 1 {
			t.Fatalf("%d HTTP/2 connections held, want 1", len(conns))
		}
		start := time.Now()
		if byAddr {
			if n := e.srv.clients.Strike(netip.MustParseAddr("127.0.0.2")); n != 0 {
				t.Fatalf("%d connections ended for another address", n)
			}
			go func() { _ = e.srv.clients.Strike(netip.MustParseAddr("127.0.0.1")) }()
		} else {
			go e.srv.endH2ForAbuse(conns[0])
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		var goaway http2.ErrCode = 0xff
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					t.Fatal("the connection was not closed")
				}
				break // closed
			}
			if g, ok := f.(*http2.GoAwayFrame); ok {
				goaway = g.ErrCode
			}
		}
		if goaway != http2.ErrCodeEnhanceYourCalm {
			t.Fatalf("GOAWAY %v, want ENHANCE_YOUR_CALM", goaway)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("the connection took %s to end", d)
		}
		waitFor(t, "the target's requests cancelled", func() bool { return cancelled.Load() == streams })
		waitFor(t, "the connection forgotten", func() bool { return len(e.srv.h2Conns()) == 0 })
		c.Close()
		waitFor(t, "goroutines back to the baseline", func() bool { return runtime.NumGoroutine() <= base })
	}
}
