package proxy

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/serve-zone/ingress/proxy/internal/h2"
	"github.com/serve-zone/ingress/stats"
)

// The HTTP/2 server, the ingress's own: connections that negotiated h2 by
// ALPN or opened with the prior-knowledge preface are served by proxy/internal/h2's
// engine on the fast path's connection goroutine, instead of being handed to net/http.
// The engine's streams are translated into the forwarding core in h2forward.go (and
// h2tunnel.go for RFC 8441 WebSockets).

// h2Set tracks the engine's connections for Shutdown (GOAWAY to each). It is touched
// once when a connection starts and once when it ends, not per request. (A penalty
// reaches an address's connections through the budgets' table, which every connection
// joined at accept: budgets.go.)
type h2Set struct {
	mu       sync.Mutex
	m        map[*h2.Conn]struct{}
	draining bool
}

func (set *h2Set) add(c *h2.Conn) {
	set.mu.Lock()
	defer set.mu.Unlock()
	if set.m == nil {
		set.m = make(map[*h2.Conn]struct{})
	}
	set.m[c] = struct{}{}
	if set.draining {
		c.Shutdown()
	}
}

func (set *h2Set) remove(c *h2.Conn) {
	set.mu.Lock()
	delete(set.m, c)
	set.mu.Unlock()
}

// shutdown sends GOAWAY on every connection, and on those that start later; each closes
// once its streams are done (the fast path's drain waits for them, shutdownH1).
func (set *h2Set) shutdown() {
	set.mu.Lock()
	defer set.mu.Unlock()
	set.draining = true
	for c := range set.m {
		c.Shutdown()
	}
}

// endH2ForAbuse ends one HTTP/2 connection now for abuse (h2.Conn.Abort): GOAWAY
// ENHANCE_YOUR_CALM, its streams cancelled (their target requests with them), the socket
// closed once the GOAWAY is out, within a quarter second at most. Any goroutine may call
// it, for a connection that may already have ended (then it does nothing). It is how a
// verdict reached elsewhere (a penalty of the client's address) acts on connections the
// client already holds; the engine's own verdicts end their connection themselves.
func (s *Server) endH2ForAbuse(c *h2.Conn) { c.Abort() }

// h2Config is the engine's configuration from the server's: today's net/http settings
// (128 streams, 1 MiB per stream and 4 MiB per connection of request body window, PING
// after 30 s of silence, 15 s for its answer), the client timeouts and the streams a
// connection serves in all.
func (s *Server) h2Config() h2.Config {
	return h2.Config{
		MaxConcurrentStreams:  maxConcurrentStreams,
		MaxHeaderBytes:        uint32(s.cfg.MaxHeaderBytes),
		StreamWindow:          1 << 20,
		ConnWindow:            4<<20 - 1,
		PrefaceTimeout:        s.cfg.ReadHeaderTimeout,
		HeaderTimeout:         s.cfg.ReadHeaderTimeout,
		IdleTimeout:           s.cfg.IdleTimeout,
		ReadIdleTimeout:       30 * time.Second,
		PingTimeout:           15 * time.Second,
		WriteTimeout:          s.cfg.ClientSendTimeout,
		BodyTimeout:           s.cfg.ClientBodyTimeout,
		EnableConnectProtocol: true,
		MaxStreams:            uint32(s.cfg.HTTP2MaxStreamsPerConn), // 0: the engine's 1000
		OnAbuse:               s.h2Abuse,
		OnPanic: func(v any, stack []byte) {
			s.log.Error("HTTP/2 stream handler panicked; stream reset", zap.Any("panic", v), zap.ByteString("stack", stack))
		},
	}
}

// serveH2 serves c's connection with the engine until it ends. The client's preface
// may already be in c.rbuf[c.r:c.w] (prior knowledge): it is replayed first.
func (c *tcpConn) serveH2() {
	s := c.s
	if !c.activate() {
		return // Shutdown closed it meanwhile
	}
	cc := c.cc
	if c.w > c.r {
		cc.pending = bytes.Clone(c.rbuf[c.r:c.w]) // the fast path's 8 KiB buffer is not kept
	}
	c.rbuf = nil
	_ = cc.SetDeadline(time.Time{})
	cc.setProto(stats.ProtoHTTP2)
	f := &h2Front{s: s, cc: cc, secure: c.secure, altSvc: c.secure && s.h3.altSvc != nil}
	f.ip = clientIP(cc.RemoteAddr().String())
	f.trusted = s.isTrusted(f.ip)
	f.remote = cc.RemoteAddr().String()
	cfg := s.h2Config()
	if pk := s.parker; pk != nil && s.cfg.IdleTimeout > h1ParkAfter && c.rawConn() != nil {
		// Without streams for h1ParkAfter, the connection parks (h1idle.go).
		c.pk, cfg.ParkAfter = pk, h1ParkAfter
		cfg.ParkSoon, cfg.Crowded = h1ParkSoon, s.crowded // as HTTP/1.1's (h1serve.go)
		cfg.AwakeMax = h1AwakeMax
	}
	conn := h2.NewConn(cc, cfg, f)
	s.h2.add(conn)
	c.h2c = conn
	cc.h2.Store(conn) // an abuse verdict ends it through the engine (clientConn.End)
	// A penalty that started after this connection was accepted (during its TLS
	// handshake, or before its preface came) is seen here too: the connection is ended
	// through the engine (GOAWAY ENHANCE_YOUR_CALM). Checked after the Store, so that a
	// verdict is either seen here or finds the engine's connection.
	if client := cc.clientKey(); !f.trusted && client.IsValid() {
		if hit, _ := s.penalties.Penalized(client); hit {
			s.endH2ForAbuse(conn)
		}
	}
	c.h2Ran(conn.Serve(context.Background()))
}

// h2Ran takes the engine's answer when Serve or Resume returned: parked, finish hands
// the connection to the parker (h2Parked); ended, it leaves the server's HTTP/2 set and
// finish closes it.
func (c *tcpConn) h2Ran(err error) {
	if errors.Is(err, h2.ErrParked) {
		c.h2Parked = true
		return
	}
	c.s.h2.remove(c.h2c)
	c.cc.h2.Store(nil)
	// HTTP/2 accounting is per stream (h2forward.go): no connection tail to attribute
	// when the fast path closes the connection (flushTail).
	cc := c.cc
	cc.acctRead, cc.acctWrite = cc.readN.Load(), cc.writeN.Load()
	if err != nil {
		c.s.log.Debug("HTTP/2 connection ended", zap.String("client", cc.RemoteAddr().String()), zap.Error(err))
	}
}

// resumeH2 serves a parked HTTP/2 connection on (the parker found it readable, or its
// claimer ends it through the engine), on a goroutine of the h1 wait group or its
// claimer's; finish parks it again or closes it.
func (c *tcpConn) resumeH2() {
	c.h2Ran(c.h2c.Resume())
	c.finish(false)
}

// endParkedH2 ends a parked HTTP/2 connection its caller claimed: graceful, with a
// GOAWAY that the engine, resumed on a goroutine of its own, writes before it closes
// (after its usual drain); otherwise closed at once (the engine's teardown runs here).
func (c *tcpConn) endParkedH2(graceful bool) {
	if graceful {
		c.h2c.Shutdown()
		c.s.conns.wg.Go(c.resumeH2)
		return
	}
	c.h2c.Close()
	c.resumeH2()
}
