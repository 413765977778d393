package proxy

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/serve-zone/ingress/proxy/internal/proxyhdr"
	"github.com/serve-zone/ingress/stats"
)

// Behind a TCP load balancer (issue 36): the PROXY protocol.
//
// A balancer that passes TLS through cannot add X-Forwarded-For; without more, every
// connection's client would be one of the balancer's few addresses, and every
// per-client rule (the budgets, the penalty, the forwarding fields, the logs) would
// treat the whole site as one client. A balancer in Config.ProxyProtocolFrom sends a
// PROXY protocol header before the connection's first byte instead, and the header's
// source address becomes the connection's client, once:
//
//   - At accept, a connection from a balancer is neither checked against the penalty
//     nor given a place in any budget (acceptUnpenalized): its socket's peer is not its
//     client. The accept loop does not wait for the header.
//   - The connection's own goroutine reads the header first (takeProxyHeader, from
//     tcpConn.run), under Config.ProxyProtocolTimeout, exactly (proxy/internal/proxyhdr:
//     not a byte past its end, so the raw HTTP/1.1 loop, crypto/tls and net/http's
//     hand-off all read the rest as if the header had never been there), then decides
//     as the accept would have for a direct client: the header's client penalised: the
//     connection is reset (counted as a penalty refusal); over its budget: reset
//     (counted as a connections refusal); otherwise it takes its place in its client's
//     budget. A LOCAL command (version 1: UNKNOWN) is the balancer's own connection
//     (health checks): its client is the balancer, it takes no place in any budget and
//     is never penalised.
//   - clientConn.via holds the verdict and clientConn.RemoteAddr returns its client,
//     so every reader of the client (the fast path's X-Forwarded-For and access log,
//     the HTTP/2 front-end, net/http's r.RemoteAddr after a hand-off, tunnels, the TLS
//     handshake's failure line) sees the header's client; clientConn.clientKey is what
//     the budgets and the penalty key on. A sleeping connection keeps it
//     (h1Sleeper.via).
//   - A header that is malformed, truncated or late ends the connection (a reset),
//     counted as stats.RefusalProxyProtocol and logged with the balancer's address, at
//     most once every penaltyLogEvery. A balancer's connection that closes before its
//     first byte (a TCP health check) is no refusal.
//
// Connections from other addresses are served as before: a PROXY header from them is
// an HTTP/1.1 request line that fails (400) or a TLS handshake that fails, so no client
// can claim another's address. HTTP/3 is unaffected (balancers relay TCP).

// balanced is whom a trusted balancer's connection is for; immutable once set.
type balanced struct {
	client *net.TCPAddr // RemoteAddr: the header's source, or the balancer for its own
	key    netip.Addr   // the budgets' and the penalty's key; invalid for the balancer's own
}

// maskedPrefixes returns ps masked (a prefix written with host bits, 10.0.0.1/8, still
// covers its network).
func maskedPrefixes(ps []netip.Prefix) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.Masked())
	}
	return out
}

// fromBalancer reports whether the just-accepted c comes from a trusted balancer. With
// no balancer configured it costs a length check.
func (s *Server) fromBalancer(c net.Conn) bool {
	if len(s.balancers) == 0 {
		return false
	}
	a := remoteAddr(c).Unmap()
	for _, p := range s.balancers {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// RemoteAddr is the connection's client: the socket's peer, or whom a trusted
// balancer's PROXY header named (via). net/http's r.RemoteAddr is this.
func (c *clientConn) RemoteAddr() net.Addr {
	if b := c.via; b != nil {
		return b.client
	}
	return c.Conn.RemoteAddr()
}

// clientKey is the address the connection counts under in the budgets and the
// penalty: its client's, or none for a balancer's own connection.
func (c *clientConn) clientKey() netip.Addr {
	if b := c.via; b != nil {
		return b.key
	}
	return remoteAddr(c.Conn)
}

// clientKey is nc's client address for the budgets and the penalty (the HTTP/2
// engine's abuse verdicts come with the connection it was given: a *clientConn).
func clientKey(nc net.Conn) netip.Addr {
	if cc, ok := nc.(*clientConn); ok {
		return cc.clientKey()
	}
	return remoteAddr(nc)
}

// socket is the connection's TCP connection, under TLS if any.
func (c *clientConn) socket() net.Conn {
	if c.tc != nil {
		return c.tc.NetConn()
	}
	return c.Conn
}

// takeProxyHeader reads the PROXY header of cc, a trusted balancer's connection, on
// its own goroutine before anything else reads it, and decides its client: true when
// it is to be served. Refused, cc is set to reset when its caller closes it.
func (s *Server) takeProxyHeader(cc *clientConn) bool {
	sock := cc.socket()
	_ = sock.SetReadDeadline(time.Now().Add(s.cfg.ProxyProtocolTimeout))
	h, err := proxyhdr.Read(sock)
	_ = sock.SetReadDeadline(time.Time{})
	if err != nil {
		cc.resetOnClose()
		if !errors.Is(err, proxyhdr.ErrEmpty) && !s.draining.Load() {
			s.proxyHeaderRefused(sock.RemoteAddr(), err)
		}
		return false
	}
	peer, _ := sock.RemoteAddr().(*net.TCPAddr)
	b := &balanced{client: peer}
	if !h.Local {
		b.client = net.TCPAddrFromAddrPort(h.Source)
		b.key = h.Source.Addr()
	}
	cc.via = b
	if !b.key.IsValid() {
		return true // the balancer's own: no budget, no penalty
	}
	if s.refusePenalizedAs(nil, b.key) || !s.admitConn(cc, nil, b.key) {
		cc.resetOnClose()
		return false
	}
	return true
}

// proxyHeaderRefused counts a balancer's connection closed for its PROXY header and
// logs it, rate-limited, with the balancer's address (the only one known).
func (s *Server) proxyHeaderRefused(balancer net.Addr, err error) {
	s.totals.Refusal(stats.RefusalProxyProtocol)
	if ok, unlogged := allowLog(&s.ppLoggedAt, &s.ppUnlogged, penaltyLogEvery); ok {
		why := err.Error()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			why = "no PROXY protocol header within " + s.cfg.ProxyProtocolTimeout.String()
		}
		s.log.Warn("closed a load balancer's connection: its PROXY protocol header is missing or malformed",
			zap.Stringer("balancer", balancer),
			zap.String("error", why),
			zap.Int64("unlogged", unlogged))
	}
}
