package h2

import (
	"context"
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

// TestEndBeforeServe: Abort or Shutdown called after NewConn but before Serve (the
// proxy registers a connection, where a penalty or a Shutdown may find it, before it
// calls Serve) still starts the connection with the server preface, SETTINGS first
// (RFC 9113 §3.4), then the GOAWAY, and ends it without waiting for an idle timeout.
func TestEndBeforeServe(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(*Conn)
		code http2.ErrCode
		err  error
	}{
		{"Abort", (*Conn).Abort, http2.ErrCodeEnhanceYourCalm, errAborted},
		{"Shutdown", (*Conn).Shutdown, http2.ErrCodeNo, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, client := unservedConn(t)
			tc.end(c)
			served := make(chan error, 1)
			go func() { served <- c.Serve(context.Background()) }()
			// The client's preface and SETTINGS may meet a socket the server already closed
			// (an aborted connection is not drained: its late bytes get a reset), so a
			// failed write is no failure; what the server sent before is read below.
			_, _ = client.Write([]byte(http2.ClientPreface))
			fr := http2.NewFramer(client, client)
			_ = fr.WriteSettings()
			_ = client.SetReadDeadline(time.Now().Add(10 * time.Second))
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := f.(*http2.SettingsFrame); !ok {
				t.Fatalf("the server's first frame is %v, want SETTINGS", f.Header().Type)
			}
			for {
				f, err := fr.ReadFrame()
				if err != nil {
					t.Fatalf("waiting for GOAWAY: %v", err)
				}
				if g, ok := f.(*http2.GoAwayFrame); ok {
					if g.ErrCode != tc.code {
						t.Fatalf("GOAWAY %v, want %v", g.ErrCode, tc.code)
					}
					break
				}
			}
			select {
			case err := <-served:
				if !errors.Is(err, tc.err) && err != tc.err {
					t.Fatalf("Serve: %v, want %v", err, tc.err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Serve still running 10 s after the GOAWAY")
			}
		})
	}
}

// TestAbortRaces: Abort called twice at once, together with Shutdown and with the
// client closing its end (Serve's own end), on connections with streams at work: every
// connection ends, Serve returns, no handler is left running and no goroutine behind
// (run with -race).
func TestAbortRaces(t *testing.T) {
	base := runtime.NumGoroutine()
	var running atomic.Int64
	h := HandlerFunc(func(st *Stream) {
		running.Add(1)
		defer running.Add(-1)
		<-st.Context().Done()
	})
	ts := startServer(t, Config{}, h, false)
	for i := range 40 {
		p := newPeer(t, ts)
		get(p, 1, true)
		get(p, 3, true)
		waitFor(t, "2 handlers", func() bool { return running.Load() == 2 })
		c := ts.activeConn(t)
		var wg sync.WaitGroup
		wg.Go(c.Abort)
		wg.Go(c.Abort)
		if i%2 == 0 {
			wg.Go(c.Shutdown)
		}
		if i%3 == 0 {
			wg.Go(func() { p.nc.Close() })
		}
		wg.Wait()
		select {
		case <-ts.served:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: Serve still running 10 s after Abort", i)
		}
		c.Abort() // after the end: nothing
		p.nc.Close()
		if n := running.Load(); n != 0 {
			t.Fatalf("round %d: %d handlers still running after Serve returned", i, n)
		}
	}
	goroutinesBack(t, base)
}

// TestAbortIdle: Abort on an idle connection (its last stream answered, the stream's
// worker parked for reuse, the read loop waiting with an idle deadline) ends it at once:
// GOAWAY ENHANCE_YOUR_CALM naming the last stream, closed, Serve returning errAborted,
// the parked worker gone.
func TestAbortIdle(t *testing.T) {
	base := runtime.NumGoroutine()
	ts := startServer(t, Config{IdleTimeout: time.Minute, ReadIdleTimeout: time.Minute}, echoHandler, false)
	p := newPeer(t, ts)
	p.get(1, "/")
	if st := p.expectResponse(1); st != "200" {
		t.Fatalf("status %s", st)
	}
	c := ts.activeConn(t)
	start := time.Now()
	go c.Abort()
	for {
		f, err := p.next()
		if err != nil {
			t.Fatalf("waiting for GOAWAY: %v", err)
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			if g.ErrCode != http2.ErrCodeEnhanceYourCalm || g.LastStreamID != 1 {
				t.Fatalf("GOAWAY %v last %d, want ENHANCE_YOUR_CALM last 1", g.ErrCode, g.LastStreamID)
			}
			break
		}
	}
	p.expectClosed()
	if err := <-ts.served; !errors.Is(err, errAborted) {
		t.Fatalf("Serve: %v, want errAborted", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the idle connection took %s to end", d)
	}
	p.nc.Close()
	goroutinesBack(t, base)
}
