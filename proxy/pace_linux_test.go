package proxy

import (
	"fmt"
	"io"
	"testing"
	"time"
)

// TestPaceKeepsConnectionAwake: in a crowd (connections park h1ParkSoon after their
// answer), a client that sends a request every 150 ms keeps its connection awake once
// its pace is known (two requests): it parks at most once, before that (issue 32: it
// parked, slept and woke for every request, a dozen system calls and a new goroutine
// each). When the client stops, the connection parks after about two gaps.
func TestPaceKeepsConnectionAwake(t *testing.T) {
	skipUnlessParking(t)
	e := sleepEnv(t)
	e.apply([]routeSpec{{host: h1Host, backends: []string{echoTarget(t).addr}}})
	rc := newRawClient(t, e.http)
	_ = rc.c.SetDeadline(time.Now().Add(60 * time.Second))
	const n, gap = 12, 150 * time.Millisecond
	parks := parkedTotal.Load()
	next := time.Now()
	for i := range n {
		time.Sleep(time.Until(next))
		next = time.Now().Add(gap)
		path := fmt.Sprintf("/pace/%d", i)
		rc.send(get1(path))
		if res, body := rc.read("GET"); res.StatusCode != 200 || body != echoed("GET", path, "") {
			t.Fatalf("GET %s: %d %q", path, res.StatusCode, body)
		}
	}
	// One park is the first gap's (no pace yet); a loaded machine may stall the client
	// once beyond its window.
	if p := parkedTotal.Load() - parks; p > 2 {
		t.Fatalf("%d requests %v apart: the connection parked %d times", n, gap, p)
	}
	waitFor(t, "asleep once the client stopped", func() bool { return sleepers(e.srv) == 1 })
}

// TestTLSPaceWaitsWithoutBuffers: over TLS too, a client with a pace keeps its
// connection awake (at most the first gap parks), and the connection waits for each
// next request with its read buffer and crypto/tls's buffers given back (awaitIdle).
func TestTLSPaceWaitsWithoutBuffers(t *testing.T) {
	skipUnlessParking(t)
	e := tlsParkEnv(t)
	e.srv.parkCrowd = 0
	pc := newTLSParkClient(t, e)
	const n, gap = 12, 150 * time.Millisecond
	parks, awaits := parkedTotal.Load(), idleAwaits.Load()
	next := time.Now()
	for i := range n {
		time.Sleep(time.Until(next))
		next = time.Now().Add(gap)
		path := fmt.Sprintf("/pace/%d", i)
		if _, err := io.WriteString(pc.tc, get1(path)); err != nil {
			t.Fatal(err)
		}
		if err := pc.check(path); err != nil {
			t.Fatal(err)
		}
	}
	if p := parkedTotal.Load() - parks; p > 2 {
		t.Fatalf("%d requests %v apart over TLS: the connection parked %d times", n, gap, p)
	}
	if a := idleAwaits.Load() - awaits; a < n-3 {
		t.Fatalf("%d requests %v apart over TLS: %d waits without buffers, want one per gap", n, gap, a)
	}
}
