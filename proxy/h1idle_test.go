package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/testwait"
	"github.com/serve-zone/ingress/proxy/internal/park"
	"github.com/serve-zone/ingress/stats"
)

// parkedOn is how many connections s has parked now.
func parkedOn(s *Server) int {
	s.mu.Lock()
	pk := s.parker
	s.mu.Unlock()
	return pk.Len()
}

func skipUnlessParking(t *testing.T) {
	if !park.CanPark {
		t.Skip("parking is Linux-only") // the platform cannot; not a missing feature here
	}
}

// openH1 is how many HTTP/1.1 connections e's totals count open.
func (e *env) openH1() int64 { return e.totals.Snapshot().Conns[stats.ProtoHTTP1] }

// TestIdleConnectionParksServesAndShutsDown: a plain keep-alive connection idle past
// h1ParkAfter parks (its buffer pooled, no goroutine left), serves its next request from
// there, parks again, and a Shutdown closes it at once like any idle connection.
func TestIdleConnectionParksServesAndShutsDown(t *testing.T) {
	skipUnlessParking(t)
	e := newEnv(t, func(c *Config) { c.IdleTimeout = 30 * time.Second })
	e.apply([]routeSpec{{host: h1Host, backends: []string{echoTarget(t).addr}}})
	rc := newRawClient(t, e.http)
	for i, path := range []string{"/first", "/after-park"} {
		parked := parkedTotal.Load()
		rc.send(get1(path))
		if res, _ := rc.read("GET"); res.StatusCode != 200 {
			t.Fatalf("request %d: %d", i, res.StatusCode)
		}
		waitFor(t, "the idle connection parked", func() bool { return parkedTotal.Load() > parked && parkedOn(e.srv) == 1 })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := e.srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown with a parked connection: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Shutdown took %s with only a parked idle connection", d)
	}
	_ = rc.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := rc.br.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("the parked connection after Shutdown: read %d, %v; want EOF", n, err)
	}
	if n := e.openH1(); n != 0 || parkedOn(e.srv) != 0 {
		t.Fatalf("after Shutdown: %d HTTP/1.1 connections counted open, %d parked; want 0", n, parkedOn(e.srv))
	}
}

// TestParkedConnections: many parked connections hold no goroutine each, each serves its
// next request and parks again, one the client closes is closed and counted at once,
// and the open-connection count is exact throughout.
func TestParkedConnections(t *testing.T) {
	skipUnlessParking(t)
	e := newEnv(t, func(c *Config) { c.IdleTimeout = 30 * time.Second })
	e.apply([]routeSpec{{host: h1Host, backends: []string{echoTarget(t).addr}}})
	const n = 16
	clients := make([]*rawClient, n)
	for i := range clients {
		clients[i] = newRawClient(t, e.http)
		clients[i].send(get1("/first"))
		if res, _ := clients[i].read("GET"); res.StatusCode != 200 {
			t.Fatalf("connection %d: %d", i, res.StatusCode)
		}
	}
	serving := runtime.NumGoroutine() // the n serving goroutines are alive until they park
	waitFor(t, "every connection parked", func() bool { return parkedOn(e.srv) == n })
	if g := runtime.NumGoroutine(); g > serving-n+4 {
		t.Errorf("%d goroutines with %d connections parked, %d before they parked: parked connections hold goroutines", g, n, serving)
	}
	if got := e.openH1(); got != n {
		t.Fatalf("%d HTTP/1.1 connections counted open, want %d", got, n)
	}
	parks := parkedTotal.Load()
	for i, rc := range clients {
		rc.send(get1("/again"))
		if res, body := rc.read("GET"); res.StatusCode != 200 || body == "" {
			t.Fatalf("request on parked connection %d: %d %q", i, res.StatusCode, body)
		}
	}
	waitFor(t, "every connection parked again", func() bool { return parkedOn(e.srv) == n && parkedTotal.Load() >= parks+n })
	if got := e.openH1(); got != n {
		t.Fatalf("%d HTTP/1.1 connections counted open after a request on each, want %d", got, n)
	}
	// A client hanging up on its parked connection: the parker sees it and the
	// connection is closed and counted at once, not at its idle timeout.
	_ = clients[0].c.Close()
	waitFor(t, "the hung-up connection closed", func() bool { return e.openH1() == n-1 && parkedOn(e.srv) == n-1 })
	// A request and the client's FIN arriving together on a parked connection: the
	// request is served before the connection closes.
	clients[1].send(get1("/then-fin"))
	if err := clients[1].c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if res, _ := clients[1].read("GET"); res.StatusCode != 200 {
		t.Fatalf("a request sent with the FIN to a parked connection: %d", res.StatusCode)
	}
	clients[1].closed()
	waitFor(t, "the half-closed connection closed", func() bool { return e.openH1() == n-2 && parkedOn(e.srv) == n-2 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	for i, rc := range clients[2:] {
		if n, err := rc.br.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("parked connection %d after Shutdown: read %d, %v; want EOF", i+2, n, err)
		}
	}
	if got := e.openH1(); got != 0 {
		t.Fatalf("%d HTTP/1.1 connections counted open after Shutdown, want 0", got)
	}
}

// TestParkedIdleTimeout: the parker closes a parked connection at its idle timeout
// (IdleTimeout after its wait for a request began), not before, and counts it closed.
func TestParkedIdleTimeout(t *testing.T) {
	skipUnlessParking(t)
	const idle = h1ParkAfter + time.Second
	e := newEnv(t, func(c *Config) { c.IdleTimeout = idle })
	e.apply([]routeSpec{{host: h1Host, backends: []string{echoTarget(t).addr}}})
	rc := newRawClient(t, e.http)
	rc.send(get1("/first"))
	if res, _ := rc.read("GET"); res.StatusCode != 200 {
		t.Fatalf("status %d", res.StatusCode)
	}
	answered := time.Now()
	testwait.Until(t, 2*idle, "the idle connection parked", func() bool { return parkedOn(e.srv) == 1 })
	// The read ends when the proxy closes the connection: the event itself.
	_ = rc.c.SetReadDeadline(time.Now().Add(4 * idle))
	if n, err := rc.br.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("the parked connection at its idle timeout: read %d, %v; want EOF", n, err)
	}
	took := time.Since(answered)
	// The response reached us a moment before the wait began; the parker checks in
	// park.Tick steps, and its queue may be up to h1IdleSlack out of order.
	if took < idle-100*time.Millisecond || took > idle+park.Tick+h1IdleSlack+time.Second {
		t.Errorf("closed %s after the response; the idle timeout is %s", took, idle)
	}
	testwait.Until(t, 5*time.Second, "the connection counted closed", func() bool { return e.openH1() == 0 && parkedOn(e.srv) == 0 })
}

// TestParkedCloseRace: requests that wake parked connections race with a Shutdown whose
// context has already ended (closeIdle, then closeAll): every parked connection is served
// or closed exactly once, the count of open connections ends at zero, and Serve returns.
// Run with -race: the parker, the serving goroutines and the closers share the
// connections.
func TestParkedCloseRace(t *testing.T) {
	skipUnlessParking(t)
	for round := range 3 {
		e := newEnv(t, func(c *Config) { c.IdleTimeout = 30 * time.Second })
		e.apply([]routeSpec{{host: h1Host, backends: []string{echoTarget(t).addr}}})
		const n = 32
		clients := make([]*rawClient, n)
		for i := range clients {
			clients[i] = newRawClient(t, e.http)
			clients[i].send(get1("/first"))
			if res, _ := clients[i].read("GET"); res.StatusCode != 200 {
				t.Fatalf("round %d connection %d: %d", round, i, res.StatusCode)
			}
		}
		waitFor(t, "every connection parked", func() bool { return parkedOn(e.srv) == n })
		var wg sync.WaitGroup
		for i, rc := range clients {
			wg.Go(func() {
				if i%2 == 0 {
					_, _ = io.WriteString(rc.c, get1("/racing"))
				}
				// A response or not, the connection must end: Shutdown closes it.
				_ = rc.c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := io.Copy(io.Discard, rc.br); err != nil && !isReset(err) {
					var ne interface{ Timeout() bool }
					if errors.As(err, &ne) && ne.Timeout() {
						t.Errorf("round %d connection %d still open after Shutdown", round, i)
					}
				}
			})
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = e.srv.Shutdown(ctx)
		wg.Wait()
		e.waitServedWithin(t, 5*time.Second)
		if got, p := e.openH1(), parkedOn(e.srv); got != 0 || p != 0 {
			t.Fatalf("round %d: %d HTTP/1.1 connections counted open, %d parked after Shutdown; want 0", round, got, p)
		}
	}
}
