package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

func skipUnlessRawLoop(t *testing.T) {
	if !canRawLoop {
		t.Skip("the raw loop is Linux-only") // the platform cannot; not a missing feature here
	}
}

// TestRawLoopPipelinedPromptly: a request that arrives while the previous one's answer
// is being written, or right behind it in the same write, is served at once: the raw
// loop waits for the client only after a read that emptied the socket, without losing
// the readiness of bytes that came after it (a lost wake-up would hold the request until
// the idle wait ends at h1ParkAfter and the connection parks).
func TestRawLoopPipelinedPromptly(t *testing.T) {
	skipUnlessRawLoop(t)
	e := newEnv(t, func(c *Config) { c.IdleTimeout = 30 * time.Second })
	e.apply([]routeSpec{{host: h1Host, backends: []string{echoTarget(t).addr}}})
	const rounds = 50
	const prompt = time.Second // well under h1ParkAfter
	rc := newRawClient(t, e.http)
	for i := range rounds {
		// Behind the first answer: sent once its first byte arrived.
		rc.send(get1("/a"))
		if _, err := rc.br.Peek(1); err != nil {
			t.Fatalf("round %d: waiting for the first answer: %v", i, err)
		}
		start := time.Now()
		rc.send(get1("/b"))
		for _, want := range []string{"/a", "/b"} {
			if res, body := rc.read("GET"); res.StatusCode != 200 || body != echoed("GET", want, "") {
				t.Fatalf("round %d: %d %q, want the answer to %s", i, res.StatusCode, body, want)
			}
		}
		if d := time.Since(start); d > prompt {
			t.Fatalf("round %d: the request sent behind an answer took %s", i, d)
		}
		// Both in one write.
		start = time.Now()
		rc.send(get1("/c") + get1("/d"))
		for _, want := range []string{"/c", "/d"} {
			if res, body := rc.read("GET"); res.StatusCode != 200 || body != echoed("GET", want, "") {
				t.Fatalf("round %d: %d %q, want the answer to %s", i, res.StatusCode, body, want)
			}
		}
		if d := time.Since(start); d > prompt {
			t.Fatalf("round %d: two pipelined requests took %s", i, d)
		}
	}
}

// TestRawLoopReadsOncePerRequest: a sequential keep-alive client costs one read of the
// client per request, not two (the request and then a read that finds nothing yet
// because the next request has not been sent).
func TestRawLoopReadsOncePerRequest(t *testing.T) {
	skipUnlessRawLoop(t)
	e := newEnv(t, func(c *Config) { c.IdleTimeout = 30 * time.Second })
	e.apply([]routeSpec{{host: h1Host, backends: []string{echoTarget(t).addr}}})
	countRawReads.Store(true)
	t.Cleanup(func() { countRawReads.Store(false) })
	rc := newRawClient(t, e.http)
	rc.send(get1("/warm")) // the connection's first read may find nothing yet
	rc.read("GET")
	const n = 200
	before := rawReads.Load()
	for i := range n {
		rc.send(get1("/seq"))
		if res, _ := rc.read("GET"); res.StatusCode != 200 {
			t.Fatalf("request %d: %d", i, res.StatusCode)
		}
	}
	// Slack for other tests' connections closing meanwhile and for a wake-up whose
	// bytes the previous read took already; the old loop made 2n.
	if reads := rawReads.Load() - before; reads > n+n/4 {
		t.Fatalf("%d raw reads of the client for %d sequential requests, want about one each", reads, n)
	}
	if reads := rawReads.Load() - before; reads < n {
		t.Fatalf("%d raw reads for %d requests: the raw loop did not serve them", reads, n)
	}
}

// TestRawLoopShutdownClosesBusyConnection: when Shutdown's time is up, a plain
// connection whose request waits for its target is closed at once, though its goroutine
// is inside RawConn.Read (where Close would wait for it to return).
func TestRawLoopShutdownClosesBusyConnection(t *testing.T) {
	skipUnlessRawLoop(t)
	e := newEnv(t)
	got := make(chan struct{}, 1)
	target := rawServer(t, func(c net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		got <- struct{}{}
		io.Copy(io.Discard, c) // never answers
	})
	e.apply([]routeSpec{{host: h1Host, backends: []string{target}}})
	rc := newRawClient(t, e.http)
	rc.send(get1("/slow"))
	<-got
	start := time.Now()
	shut := shutdownInBackground(t, e, 100*time.Millisecond)
	if b, err := io.ReadAll(rc.br); len(b) > 0 || err != nil && !isReset(err) {
		t.Fatalf("the busy connection after Shutdown's deadline: %q, %v; want it closed", b, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the busy connection closed %s after Shutdown began", d)
	}
	select {
	case <-shut:
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown did not return")
	}
}
