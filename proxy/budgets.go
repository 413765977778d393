package proxy

import (
	"errors"
	"net"
	"net/netip"
	"time"

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
//     or HTTP work; one over the budget is reset). QUIC: quic.Config.GetConfigForClient,
//     asked at a connection's first Initial packet, refuses one from a penalised address
//     (issue 25's finding 2) or over the budget with CONNECTION_REFUSED before any
//     handshake work (refuseQUIC); then the transport's ConnContext takes the place,
//     still before any handshake work, and counts the connection among its address's
//     handshakes in progress until the handshake completes (quichs.go: startQUIC, with
//     a Retry to prove an address that has many in progress). That is the one lookup
//     per connection (proxy/internal/clients: a sharded map under a mutex); the
//     connection keeps its clients.Hold and gives it back when it closes.
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

// holdOf is the budget r's connection holds: its TCP connection's or its QUIC
// connection's, or noHold. A trusted proxy's connection holds a zero one.
func (s *Server) holdOf(r *request) *clients.Hold {
	if r.cc != nil {
		return &r.cc.hold
	}
	if r.hr != nil {
		if hc, _ := r.hr.Context().Value(h3ConnKey{}).(*h3Conn); hc != nil {
			return s.admitQUIC(hc)
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
// Trusted proxies' connections get a zero hold. The penalty is checked again once the
// hold is open: a strike between the accept's check (acceptUnpenalized) and the hold
// ends the connections its address holds in the budgets' table, which this one was not
// in yet; so a strike is seen either here or by the table's Strike, never by neither.
// Such a connection goes to the tarpit like any penalised one and its hold is given back.
// raw is nil for a trusted balancer's connection, admitted after its PROXY header
// (balancer.go): refused, it is its own goroutine's to reset.
func (s *Server) admitConn(cc *clientConn, raw net.Conn, a netip.Addr) bool {
	if !a.IsValid() || s.isTrustedAddr(a) {
		return true
	}
	if s.clients.Open(&cc.hold, a, cc) {
		if s.refusePenalizedAs(raw, a) {
			cc.hold.Close()
			return false
		}
		return true
	}
	s.refused(stats.RefusalConnections, a) // counted before the client can see the reset
	if tc, ok := raw.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // a reset, no TIME_WAIT kept
	}
	if raw != nil {
		_ = raw.Close()
	}
	return false
}

// refused counts a refusal of kind k to client address a and logs it, rate-limited.
func (s *Server) refused(k stats.RefusalKind, a netip.Addr) {
	s.totals.Refusal(k)
	if ok, unlogged := allowLog(&s.budgetLoggedAt, &s.budgetUnlogged, penaltyLogEvery); ok {
		lim := s.clients.Limits()
		s.log.Info("refused a client: its address is over a budget or penalised",
			zap.String("client", a.String()),
			zap.String("kind", k.String()),
			zap.Int("max_conns", lim.Conns),
			zap.Int("max_requests", lim.Requests),
			zap.Int("max_tunnels", lim.Tunnels),
			zap.Int64("unlogged", unlogged))
	}
}

// End ends the connection for abuse (clients.Ender, from any goroutine), without
// blocking, whatever form it has taken since the strike collected c (connLife.end).
func (c *clientConn) End() {
	if c.life == nil {
		c.endAwake() // not one of our listeners' (tests)
		return
	}
	c.life.end(c.s)
}

// endAwake ends c, an awake connection that nobody else may end or change the form of
// any more (connLife.end): served by the own HTTP/2 engine, it is aborted
// (endH2ForAbuse: GOAWAY ENHANCE_YOUR_CALM, its streams cancelled, closed within 250
// ms); otherwise its TCP connection is shut down both ways, so the client sees the end
// at once and whatever reads it (the fast path's loop, net/http, a tunnel) gets EOF,
// and it is reset when its owner closes it (SO_LINGER 0). An in-flight HTTP/1.1
// request is not waited for: its response can no longer reach the client. Nothing
// here closes the descriptor, which a goroutine inside RawConn.Read may hold
// (tcpConn.closeConn).
func (c *clientConn) endAwake() {
	if hc := c.h2.Load(); hc != nil {
		c.s.endH2ForAbuse(hc)
		return
	}
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

// errQUICRefused refuses a QUIC connection at its first packet (CONNECTION_REFUSED).
var errQUICRefused = errors.New("proxy: QUIC connection refused: the client address is penalised or has its budget of connections")

// refuseQUIC is quic.Config.GetConfigForClient's check on a new QUIC connection from
// remote, before any handshake work: an address penalised for abuse is refused
// (counted as http3-penalty), and so is one that has its budget of connections
// (counted as connections). The place itself is taken right after (startQUIC).
// Trusted proxies are neither penalised nor counted.
func (s *Server) refuseQUIC(remote net.Addr) error {
	ua, ok := remote.(*net.UDPAddr)
	if !ok {
		return nil
	}
	ap := ua.AddrPort()
	a := ap.Addr()
	if s.isTrustedAddr(a) {
		return nil
	}
	k := stats.RefusalHTTP3Penalty
	if hit, _ := s.penalties.Penalized(a); !hit {
		if !s.clients.Full(a) {
			return nil
		}
		k = stats.RefusalConnections
	}
	if s.newQUICRefusal(ap) {
		s.refused(k, a)
	}
	return errQUICRefused
}

// quicRefusal is the last QUIC connection attempt refused: its client's address and
// port, and when.
type quicRefusal struct {
	from netip.AddrPort
	at   int64 // Unix nanoseconds
}

// newQUICRefusal reports whether a refusal of an attempt from ap is a new one, to be
// counted: a client's ClientHello may span two Initial packets, and a client resends
// them, each asking GetConfigForClient again (no connection exists to remember them).
// Packets from the address and port of the last refused attempt within a second are
// the same attempt. A flood from many ports still counts each port once.
func (s *Server) newQUICRefusal(ap netip.AddrPort) bool {
	now := time.Now().UnixNano()
	if last := s.quicRefused.Load(); last != nil && last.from == ap && now-last.at < int64(time.Second) {
		return false
	}
	s.quicRefused.Store(&quicRefusal{from: ap, at: now})
	return true
}

// admitQUIC is hc's place in its client address's budget, which it took at its first
// packet (quichs.go: startQUIC), and marks its handshake completed, once: when the
// watcher saw it complete, or at the first request if that comes first. A trusted
// proxy's connection has a zero hold, and so has one that did not come through our
// transport.
func (s *Server) admitQUIC(hc *h3Conn) *clients.Hold {
	if hc.hs == nil {
		return &noHold
	}
	hc.hs.done()
	return &hc.hs.hold
}

// releaseQUIC gives hc's place back when the connection ended (its watcher); its
// context's end does the same (quicHandshake.ended), whichever comes first.
func (s *Server) releaseQUIC(hc *h3Conn) {
	if hc.hs != nil {
		hc.hs.ended()
	}
}
