package proxy

import (
	"net"
	"net/netip"
	"time"

	"go.uber.org/zap"

	"github.com/serve-zone/ingress/proxy/internal/penalty"
)

// Penalties for abusive clients (issue 16: legitimate latency during HTTP/2 floods).
//
// The HTTP/2 engine ends a flooding connection once it exhausts a budget (GOAWAY
// ENHANCE_YOUR_CALM) and reports the verdict (h2.Config.OnAbuse). An attacker that
// reconnects at once gets a fresh budget, a TLS handshake and a preface every time, and a
// few of them keep a small machine's cores busy: the budgets bounded memory, not the
// share of CPU. So the verdict also penalises the client's address (penaltyTable): for
// a penalty window (1 s, doubling while the address keeps coming back abusive, at most
// 16 s) the listeners close its connections right after accept, before any TLS or HTTP
// work, with a reset (no TIME_WAIT kept for it). Only abuse verdicts count, never
// ordinary closes or errors; trusted proxies (Config.TrustedProxies) are never
// penalised, since one of them carries many clients.
//
// The cost for everybody else is one check per accepted connection: a hash and the
// atomic loads of one table set (proxy/internal/penalty), no lock, no allocation.

// penaltySlots bounds the addresses penalised at once (the table's fixed size: 16 K
// slots, 128 KiB of pointers). Random source addresses evict each other's penalties
// instead of growing it.
const penaltySlots = 16 << 10

// penaltyLogEvery is the least time between two lines about penalties, and between two
// about refused connections.
const penaltyLogEvery = 5 * time.Second

func newPenaltyTable() *penalty.Table {
	return penalty.New(penaltySlots, penalty.Policy{Base: time.Second, Max: 16 * time.Second, Forget: time.Minute}, nil)
}

// remoteAddr is c's peer address without allocating (the zero Addr when it is not TCP).
func remoteAddr(c net.Conn) netip.Addr {
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return ta.AddrPort().Addr()
	}
	return netip.Addr{}
}

// refusePenalized closes a just-accepted raw connection whose client address is
// penalised, and reports whether it did.
func (s *Server) refusePenalized(c net.Conn) bool {
	a := remoteAddr(c)
	if !a.IsValid() {
		return false
	}
	hit, until := s.penalties.Penalized(a)
	if !hit {
		return false
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // a reset: nothing of the client's is read, no TIME_WAIT kept
	}
	_ = c.Close()
	s.totals.PenalizedRefusal()
	if ok, unlogged := allowLog(&s.refusedLoggedAt, &s.refusedUnlogged, penaltyLogEvery); ok {
		s.log.Info("refused a connection from a client penalised for abuse",
			zap.String("client", a.String()),
			zap.Duration("penalty_left", time.Until(until).Round(time.Millisecond)),
			zap.Int64("unlogged", unlogged))
	}
	return true
}

// h2Abuse is the engine's verdict on nc (h2.Config.OnAbuse): counted, and nc's client
// address penalised.
func (s *Server) h2Abuse(nc net.Conn, reason string) {
	s.totals.ClientAbuse()
	a := remoteAddr(nc)
	if !a.IsValid() || s.isTrustedAddr(a) {
		return
	}
	d, started := s.penalties.Strike(a)
	if !started {
		return
	}
	if ok, unlogged := allowLog(&s.abuseLoggedAt, &s.abuseUnlogged, penaltyLogEvery); ok {
		s.log.Info("client connection ended for abuse; its address is penalised",
			zap.String("client", a.String()),
			zap.String("reason", reason),
			zap.Duration("penalty", d),
			zap.Int64("unlogged", unlogged))
	}
}

// isTrustedAddr is isTrusted for a parsed address.
func (s *Server) isTrustedAddr(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range s.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
