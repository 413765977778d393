package h2

import (
	"errors"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// activeConn returns the server's one active connection.
func (ts *testServer) activeConn(t *testing.T) *Conn {
	t.Helper()
	var c *Conn
	waitFor(t, "the connection", func() bool {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		for k := range ts.active {
			c = k
		}
		return c != nil
	})
	return c
}

// TestAbort: Abort, called from another goroutine, ends a connection with streams at
// work at once: GOAWAY(ENHANCE_YOUR_CALM), the handlers' contexts cancelled, the socket
// closed, Serve returning errAborted without OnAbuse being told, and every goroutine
// gone.
func TestAbort(t *testing.T) {
	base := runtime.NumGoroutine()
	var log abuseLog
	var running atomic.Int64
	h := HandlerFunc(func(st *Stream) {
		running.Add(1)
		defer running.Add(-1)
		<-st.Context().Done()
	})
	ts := startServer(t, Config{OnAbuse: log.onAbuse}, h, false)
	p := newPeer(t, ts)
	for id := uint32(1); id <= 9; id += 2 {
		get(p, id, true)
	}
	waitFor(t, "5 handlers", func() bool { return running.Load() == 5 })
	c := ts.activeConn(t)
	start := time.Now()
	go c.Abort()
	if code := p.expectGoAway(); code != http2.ErrCodeEnhanceYourCalm {
		t.Fatalf("GOAWAY %v, want ENHANCE_YOUR_CALM", code)
	}
	p.expectClosed()
	if err := <-ts.served; !errors.Is(err, errAborted) {
		t.Fatalf("Serve: %v, want errAborted", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the connection took %s to end", d)
	}
	if n := running.Load(); n != 0 {
		t.Fatalf("%d handlers still running after Serve returned", n)
	}
	if got := log.get(); len(got) != 0 {
		t.Fatalf("OnAbuse told %q; the verdict was the caller's", got)
	}
	c.Abort() // after the end: nothing
	p.nc.Close()
	goroutinesBack(t, base)
}

// stuckWriter is a connection whose writes block until it is closed: a client that
// never reads, its socket's buffers full.
type stuckWriter struct {
	net.Conn
	once   sync.Once
	closed chan struct{}
}

func (w *stuckWriter) Write(p []byte) (int, error) {
	<-w.closed
	return 0, net.ErrClosed
}

func (w *stuckWriter) Close() error {
	w.once.Do(func() { close(w.closed) })
	return w.Conn.Close()
}

// TestAbortStuckWriter: an aborted connection whose writer cannot get the GOAWAY out
// (the client reads nothing) is closed after abortGrace all the same.
func TestAbortStuckWriter(t *testing.T) {
	var running atomic.Int64
	h := HandlerFunc(func(st *Stream) {
		running.Add(1)
		defer running.Add(-1)
		<-st.Context().Done()
	})
	ts := startServerWrapped(t, Config{}, h, false, func(nc net.Conn) net.Conn {
		return &stuckWriter{Conn: nc, closed: make(chan struct{})}
	})
	p := newPeer(t, ts)
	get(p, 1, true)
	waitFor(t, "the handler", func() bool { return running.Load() == 1 })
	c := ts.activeConn(t)
	start := time.Now()
	go c.Abort()
	p.expectClosed()
	if err := <-ts.served; err == nil {
		t.Fatal("Serve: nil, want an error")
	}
	if d := time.Since(start); d < abortGrace || d > abortGrace+2*time.Second {
		t.Fatalf("closed after %s, want about abortGrace (%s)", d, abortGrace)
	}
}
