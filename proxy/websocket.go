package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/serve-zone/ingress/stats"
)

var errNoUpgrade = errors.New("proxy: target answered 101 without Upgrade: websocket")

// An HTTP/1.1 WebSocket upgrade goes to its target as every tunnel's (openTunnel,
// pipeline.go): the same pick, retry and passive health as a forward, on a plain TCP
// connection of its own that the tunnel can half-close. A target that answers anything
// but 101 has that answer relayed; one that breaks or refuses the handshake without an
// answer is a 502 counted as a handshake failure. After 101 the client connection is
// hijacked and bytes are copied both ways until both directions end (runTunnel); the
// target's InFlight is held for the tunnel's life and no route-table swap touches it.

// switchWebSocket takes the client's connection over once the target switched
// protocols, sends the client the target's 101, and returns the connection as the
// client's side of the tunnel.
func (x *httpWork) switchWebSocket(accepted http.Header, bc net.Conn) tunnelClient {
	p := &x.p
	cconn, brw, err := x.w.(http.Hijacker).Hijack() // tunnelHead checked that it can
	if err != nil {
		bc.Close()
		return nil
	}
	p.upgraded, p.status = true, http.StatusSwitchingProtocols
	_ = cconn.SetDeadline(time.Time{})
	removeHopByHop(accepted)
	accepted["Connection"] = valUpgrade
	accepted["Upgrade"] = valWebSocket
	head := countingWriter{w: brw.Writer}
	_, _ = io.WriteString(&head, "HTTP/1.1 101 Switching Protocols\r\n")
	_ = accepted.Write(&head)
	_, _ = io.WriteString(&head, "\r\n")
	ferr := brw.Flush()
	// The upgrade request and its 101 are one request of the route (account).
	if x.h1 {
		p.cc.hijacked.Store(true)
		x.held = int64(brw.Reader.Buffered()) // buffered bytes are frames
	} else {
		p.out += head.n
	}
	c := &hijackedConn{Conn: cconn, r: brw.Reader, s: p.s, ours: p.cc != nil}
	if ferr != nil {
		c.Close()
		bc.Close()
		return nil
	}
	return c
}

// hijackedConn is an HTTP/1.1 connection net/http gave up (Hijack) as the client's side
// of a tunnel: it reads through what net/http had buffered.
type hijackedConn struct {
	net.Conn
	r *bufio.Reader
	s *Server
	// ours: one of our connections, which net/http no longer reports closed: Close
	// takes it out of Totals.Conn.
	ours bool
	once sync.Once
}

func (c *hijackedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
func (c *hijackedConn) closeWrite()                { closeWrite(c.Conn) }
func (c *hijackedConn) Close() error {
	c.once.Do(func() {
		_ = c.Conn.Close()
		if c.ours {
			c.s.totals.Conn(stats.ProtoHTTP1, -1)
		}
	})
	return nil
}

// pipe copies src to dst, counting each chunk into the route (and the totals when they
// take bytes alone) as it passes, so long tunnels land on the right day, and stamping t's
// last activity (sweepIdle). in says which direction: client to target (true) or target
// to client.
func (s *Server) pipe(dst io.Writer, src io.Reader, h *stats.Host, p stats.Proto, in bool, t *tunnel) (int64, error) {
	bp := bufPool.Get().(*[copyBufSize]byte)
	defer bufPool.Put(bp)
	buf := bp[:]
	var total int64
	for {
		nr, er := src.Read(buf)
		if nr > 0 {
			t.touch()
			nw, ew := dst.Write(buf[:nr])
			t.touch()
			total += int64(nw)
			if nw > 0 {
				n := int64(nw)
				if in {
					h.Bytes(n, 0)
					s.totals.Bytes(p, n, 0)
				} else {
					h.Bytes(0, n)
					s.totals.Bytes(p, 0, n)
				}
			}
			if ew != nil {
				return total, ew
			}
		}
		if er == io.EOF {
			return total, nil
		}
		if er != nil {
			return total, er
		}
	}
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// tunnel is one hijacked WebSocket: its two connections.
type tunnel struct {
	once            sync.Once
	client, backend net.Conn
	// last is when a byte last passed either way (nanoseconds on the monotonic clock
	// since tunnelEpoch, so that no wall-clock step closes or keeps tunnels): pipe stamps
	// it after each read and write, and sweepIdle closes the tunnel once it is older than
	// Config.TunnelIdleTimeout. One atomic store per chunk, no timer.
	last atomic.Int64
}

// tunnelEpoch is the origin of tunnel.last's clock.
var tunnelEpoch = time.Now()

// touch records that bytes just passed.
func (t *tunnel) touch() { t.last.Store(int64(time.Since(tunnelEpoch))) }

func (t *tunnel) close() {
	t.once.Do(func() {
		_ = t.client.Close()
		_ = t.backend.Close()
	})
}

// tunnelSet tracks WebSocket handlers (acquire/release, from before the dial to the end
// of the tunnel) and open tunnels (add/remove), so that Serve can wait for the goroutines
// net/http no longer tracks after a hijack and Shutdown can close what is left. It is
// touched once or twice per WebSocket, never per request.
type tunnelSet struct {
	mu     sync.Mutex
	m      map[*tunnel]struct{}
	closed bool // no new WebSockets (Shutdown began)
	wg     sync.WaitGroup
	active int
}

func (ts *tunnelSet) acquire() bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.closed {
		return false
	}
	ts.active++
	ts.wg.Add(1)
	return true
}

func (ts *tunnelSet) release() {
	ts.mu.Lock()
	ts.active--
	ts.mu.Unlock()
	ts.wg.Done()
}

// add registers an open tunnel, idle from now; false means the set was closed meanwhile.
func (ts *tunnelSet) add(t *tunnel) bool {
	t.touch()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.m == nil {
		return false
	}
	ts.m[t] = struct{}{}
	return true
}

// sweepIdle closes every open tunnel through which no byte passed, either way, for
// timeout, looking every timeout/8 (so a tunnel is closed at most an eighth late, never
// early) until ctx ends; closed is called once per tunnel it closes. Serve runs it: one
// goroutine for all tunnels, instead of a timer per tunnel or a deadline per read.
func (ts *tunnelSet) sweepIdle(ctx context.Context, timeout time.Duration, closed func()) {
	tick := time.NewTicker(max(timeout/8, time.Millisecond))
	defer tick.Stop()
	var idle []*tunnel
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			before := int64(now.Sub(tunnelEpoch) - timeout)
			idle = idle[:0]
			ts.mu.Lock()
			for t := range ts.m {
				if t.last.Load() <= before {
					idle = append(idle, t)
					delete(ts.m, t) // its runTunnel's remove finds it gone
				}
			}
			ts.mu.Unlock()
			for _, t := range idle {
				t.close()
				closed()
			}
			clear(idle)
		}
	}
}

func (ts *tunnelSet) remove(t *tunnel) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	delete(ts.m, t)
}

func (ts *tunnelSet) refuseNew() {
	ts.mu.Lock()
	ts.closed = true
	ts.mu.Unlock()
}

// closeAll refuses new tunnels and closes every open one.
func (ts *tunnelSet) closeAll() {
	ts.mu.Lock()
	ts.closed = true
	m := ts.m
	ts.m = nil
	ts.mu.Unlock()
	for t := range m {
		t.close()
	}
}

// wait returns nil once no WebSocket handler is active, or ctx.Err().
func (ts *tunnelSet) wait(ctx context.Context) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		ts.mu.Lock()
		n := ts.active
		ts.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
