package proxy

import (
	"net"
	"net/netip"

	"go.uber.org/zap"

	"github.com/serve-zone/ingress/proxy/internal/clients"
	"github.com/serve-zone/ingress/stats"
)

// Per-address budgets (issue 25: one client address cannot take the ingress from
// everyone else).
//
// What one client address (an IPv6 address by its /64, as for penalties) may hold at
// once, over all its connections and protocols, is bounded: open connections, TCP and
// QUIC together (Config.MaxConnsPerClient), requests in flight (MaxRequestsPerClient)
// and open WebSocket tunnels (MaxTunnelsPerClient). Trusted proxies
// (Config.TrustedProxies) are exempt: one of them carries many clients.
//
//   - A connection takes its place at accept (TCP: the listeners' Accept, before any TLS
//     or HTTP work; one over the budget is reset. QUIC: quic.Config.GetConfigForClient
//     refuses one over the budget with CONNECTION_REFUSED, and the connection takes its
//     place when the HTTP/3 server accepts it, http3.go). That is the one lookup per
//     connection (proxy/internal/clients: a sharded map under a mutex); the connection
//     keeps its clients.Hold and gives it back when it closes.
//   - A request is admitted by the forwarding core (decide), for every front-end in one
//     place, with one atomic add on the hold's entry: no map, no lock, no allocation. One
//     over the budget gets outcomeRequestBudget, which the HTTP/2 front-end renders as
//     REFUSED_STREAM (retryable, RFC 9113 §8.7) and the others as 503 with Retry-After: 1
//     (HTTP/3 included: net/http's handler writes it); a WebSocket over the tunnel
//     budget gets outcomeTunnelBudget (503 with Retry-After: 1). No target sees either.
//   - An abuse verdict against an address (penalize.go) ends everything it holds
//     (clients.Table.Strike): TCP connections are shut down in both directions and reset
//     (End), QUIC connections closed with H3_EXCESSIVE_LOAD.
//
// Refusals are counted by kind (stats.RefusalKind, ingress_refusals_total) and logged
// at most once every penaltyLogEvery, with the address and the kind.

const (
	defaultMaxConnsPerClient    = 512
	defaultMaxRequestsPerClient = 512
	defaultMaxTunnelsPerClient  = 256
)

// newClientTable is the budgets' table for cfg (0: the default; negative: no limit).
func newClientTable(cfg Config) *clients.Table {
	pick := func(v, def int) int {
		switch {
		case v == 0:
			return def
		case v < 0:
			return 0 // clients.Limits: no limit
		}
		return v
	}
	return clients.New(clients.Limits{
		Conns:    pick(cfg.MaxConnsPerClient, defaultMaxConnsPerClient),
		Requests: pick(cfg.MaxRequestsPerClient, defaultMaxRequestsPerClient),
		Tunnels:  pick(cfg.MaxTunnelsPerClient, defaultMaxTunnelsPerClient),
	})
}

// noHold is the hold of a request without a connection of ours (Handler used directly):
// a zero clients.Hold admits everything and counts nothing.
var noHold clients.Hold

// hold is the budget r's connection holds: its TCP connection's or its QUIC
// connection's, or noHold. A trusted proxy's connection holds a zero one.
func (r *request) hold() *clients.Hold {
	if r.cc != nil {
		return &r.cc.hold
	}
	if r.hr != nil {
		if hc, _ := r.hr.Context().Value(h3ConnKey{}).(*h3Conn); hc != nil {
			return &hc.hold
		}
	}
	return &noHold
}

// admit takes a request in flight (a tunnel when tunnel) from h's budget, and counts
// and logs a refusal when it is spent.
func (s *Server) admit(h *clients.Hold, tunnel bool) bool {
	if tunnel {
		if h.StartTunnel() {
			return true
		}
		s.refused(stats.RefusalTunnels, h.Addr())
		return false
	}
	if h.StartRequest() {
		return true
	}
	s.refused(stats.RefusalRequests, h.Addr())
	return false
}

// admitConn opens cc's hold on its client address a's budget at accept. Over it, raw
// (cc's TCP connection, nothing of which was read) is reset and false returned.
// Trusted proxies' connections get a zero hold.
func (s *Server) admitConn(cc *clientConn, raw net.Conn, a netip.Addr) bool {
	if !a.IsValid() || s.isTrustedAddr(a) || s.clients.Open(&cc.hold, a, cc) {
		return true
	}
	if tc, ok := raw.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // a reset, no TIME_WAIT kept
	}
	_ = raw.Close()
	s.refused(stats.RefusalConnections, a)
	return false
}

// refused counts a refusal of kind k to client address a and logs it, rate-limited.
func (s *Server) refused(k stats.RefusalKind, a netip.Addr) {
	s.totals.Refusal(k)
	if ok, unlogged := allowLog(&s.budgetLoggedAt, &s.budgetUnlogged, penaltyLogEvery); ok {
		lim := s.clients.Limits()
		s.log.Info("refused a client over its address's budget",
			zap.String("client", a.String()),
			zap.String("kind", k.String()),
			zap.Int("max_conns", lim.Conns),
			zap.Int("max_requests", lim.Requests),
			zap.Int("max_tunnels", lim.Tunnels),
			zap.Int64("unlogged", unlogged))
	}
}

// End ends the connection for abuse (clients.Ender, from any goroutine): its TCP
// connection is shut down both ways, so the client sees the end at once and whatever
// reads it (the fast path's loop, the parker, net/http, the HTTP/2 engine, a tunnel)
// gets EOF, and reset when its owner closes it (SO_LINGER 0). An in-flight HTTP/1.1
// request is not waited for: its response can no longer reach the client. Nothing
// here blocks or closes the descriptor, which a goroutine inside RawConn.Read may hold
// (h1Conn.closeConn).
func (c *clientConn) End() {
	nc := c.Conn
	if c.tc != nil {
		nc = c.tc.NetConn()
	}
	if tc, ok := nc.(interface {
		SetLinger(int) error
		CloseRead() error
		CloseWrite() error
	}); ok {
		_ = tc.SetLinger(0)
		_ = tc.CloseRead()
		_ = tc.CloseWrite()
		return
	}
	_ = nc.Close()
}

// Close closes the connection and gives its place in its address's budget back (once,
// whoever closes it: the fast path, the parker, net/http, a tunnel).
func (c *clientConn) Close() error {
	err := c.Conn.Close()
	c.hold.Close()
	return err
}
