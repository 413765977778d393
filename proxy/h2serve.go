package proxy

import (
	"bytes"
	"context"
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

// h2Set tracks the engine's connections for Shutdown (GOAWAY to each).
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

// h2Config is the engine's configuration from the server's: today's net/http settings
// (128 streams, 1 MiB per stream and 4 MiB per connection of request body window, PING
// after 30 s of silence, 15 s for its answer) and the client timeouts.
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
		OnAbuse:               s.h2Abuse,
		OnPanic: func(v any, stack []byte) {
			s.log.Error("HTTP/2 stream handler panicked; stream reset", zap.Any("panic", v), zap.ByteString("stack", stack))
		},
	}
}

// serveH2 serves c's connection with the engine until it ends. The client's preface
// may already be in c.rbuf[c.r:c.w] (prior knowledge): it is replayed first.
func (c *h1Conn) serveH2() {
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
	conn := h2.NewConn(cc, s.h2Config(), f)
	s.h2.add(conn)
	cc.h2.Store(conn) // an abuse verdict ends it through the engine (clientConn.End)
	err := conn.Serve(context.Background())
	cc.h2.Store(nil)
	s.h2.remove(conn)
	// HTTP/2 accounting is per stream (h2forward.go): no connection tail to attribute
	// when the fast path closes the connection (flushTail).
	cc.acctRead, cc.acctWrite = cc.readN.Load(), cc.writeN.Load()
	if err != nil {
		s.log.Debug("HTTP/2 connection ended", zap.String("client", f.remote), zap.Error(err))
	}
}
