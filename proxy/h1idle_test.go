package proxy

import (
	"context"
	"io"
	"runtime"
	"testing"
	"time"
)

// TestIdleConnectionParksServesAndShutsDown: a plain keep-alive connection idle past
// h1ParkAfter parks (its buffer pooled, a new goroutine waiting), serves its next request
// from there, parks again, and a Shutdown closes it at once like any idle connection.
func TestIdleConnectionParksServesAndShutsDown(t *testing.T) {
	if !canPark {
		t.Skip("parking is Linux-only") // the platform cannot; not a missing feature here
	}
	e := newEnv(t, func(c *Config) { c.IdleTimeout = 30 * time.Second })
	e.apply([]routeSpec{{host: h1Host, backends: []string{echoTarget(t).addr}}})
	rc := newRawClient(t, e.http)
	for i, path := range []string{"/first", "/after-park"} {
		parked := parkedTotal.Load()
		rc.send(get1(path))
		if res, _ := rc.read("GET"); res.StatusCode != 200 {
			t.Fatalf("request %d: %d", i, res.StatusCode)
		}
		waitFor(t, "the idle connection parked", func() bool { return parkedTotal.Load() > parked })
	}
	goroutines := runtime.NumGoroutine()
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
	waitFor(t, "the parked goroutine gone", func() bool { return runtime.NumGoroutine() < goroutines })
}
