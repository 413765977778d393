package h2

import (
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/serve-zone/ingress/internal/testwait"
)

// parkedAnswer answers with fields that the response encoder indexes (the same on every
// answer) and the request's path in a field and the body.
var parkedAnswer = HandlerFunc(func(st *Stream) {
	path := st.Request().Path
	_ = st.WriteHead(200, []hpack.HeaderField{
		{Name: "x-fixed", Value: "a constant value the encoder indexes"},
		{Name: "x-path", Value: path},
	}, []byte("answer to "+path), true)
})

// TestParkResume: a connection without streams parks (Serve returns ErrParked), and
// Resume serves it on from its next frame: Go's client gets every answer right on its
// one connection across many parks, HPACK tables in step both ways (the parked
// connection's encoder starts afresh, and tells the client so); a PING on a parked
// connection is answered; a Shutdown of a parked connection sends its GOAWAY.
func TestParkResume(t *testing.T) {
	for _, useTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "h2c", true: "tls"}[useTLS], func(t *testing.T) {
			ts := startServer(t, Config{ParkAfter: 20 * time.Millisecond}, parkedAnswer, useTLS)
			cl := ts.client()
			for i := range 6 {
				parks := ts.parks.Load()
				path := fmt.Sprintf("/req/%d", i)
				res, err := cl.Get(ts.url() + path)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != 200 || string(body) != "answer to "+path || res.Header.Get("X-Path") != path ||
					res.Header.Get("X-Fixed") != "a constant value the encoder indexes" {
					t.Fatalf("%s: %d %q %v", path, res.StatusCode, body, res.Header)
				}
				testwait.Until(t, 10*time.Second, "the connection parked", func() bool { return ts.parks.Load() > parks })
			}
			if n := ts.conns.Load(); n != 1 {
				t.Fatalf("%d connections served, want the client's one", n)
			}

			p := newPeer(t, ts)
			p.get(1, "/peer")
			if st := p.expectResponse(1); st != "200" {
				t.Fatalf("status %s", st)
			}
			parks := ts.parks.Load()
			testwait.Until(t, 10*time.Second, "the peer's connection parked", func() bool { return ts.parks.Load() > parks })
			if err := p.fr.WritePing(false, [8]byte{'w', 'a', 'k', 'e'}); err != nil {
				t.Fatal(err)
			}
			for {
				f, err := p.next()
				if err != nil {
					t.Fatalf("waiting for the PING's answer: %v", err)
				}
				if pf, ok := f.(*http2.PingFrame); ok && pf.IsAck() && pf.Data == [8]byte{'w', 'a', 'k', 'e'} {
					break
				}
			}
			parks = ts.parks.Load()
			testwait.Until(t, 10*time.Second, "parked again after the PING", func() bool { return ts.parks.Load() > parks })
			ts.shutdown()
			if code := p.expectGoAway(); code != http2.ErrCodeNo {
				t.Fatalf("GOAWAY %v on Shutdown", code)
			}
			p.expectClosed()
		})
	}
}

// TestShutdownDuringParkAttempt: a Shutdown that lands while a connection is trying to
// park (after its probe read, before it decides) ends the connection once its GOAWAY is
// out, as on a busy or a parked one, and does not leave it waiting for its idle timeout
// (an hour here).
func TestShutdownDuringParkAttempt(t *testing.T) {
	for _, useTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "h2c", true: "tls"}[useTLS], func(t *testing.T) {
			ts := startServer(t, Config{ParkAfter: 20 * time.Millisecond, IdleTimeout: time.Hour}, parkedAnswer, useTLS)
			var once sync.Once
			landed := make(chan struct{})
			hook := func(c *Conn) { once.Do(func() { c.Shutdown(); close(landed) }) }
			testHookParkProbed.Store(&hook)
			t.Cleanup(func() { testHookParkProbed.Store(nil) })

			p := newPeer(t, ts)
			p.get(1, "/peer")
			if st := p.expectResponse(1); st != "200" {
				t.Fatalf("status %s", st)
			}
			<-landed
			if code := p.expectGoAway(); code != http2.ErrCodeNo {
				t.Fatalf("GOAWAY %v on Shutdown", code)
			}
			p.expectClosed()
			if n := ts.parks.Load(); n != 0 {
				t.Fatalf("%d parks: the Shutdown was meant to land during the attempt", n)
			}
		})
	}
}
