package proxy

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync/atomic"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/serve-zone/ingress/proxy/internal/clients"
	"github.com/serve-zone/ingress/stats"
)

// QUIC handshakes in progress (issue 33, item 2).
//
// A QUIC connection costs its handshake's work and memory from its first Initial packet,
// long before the handshake completes: a client that sent ClientHellos and dropped what
// followed held thousands of half-open connections (3,932 from one address, 1.24 GB),
// none of them in its address's budget, which a connection took only once its handshake
// completed. Now:
//
//   - A connection takes its place in its address's budget of connections at its first
//     Initial packet (quic.Transport.ConnContext, before any handshake work: startQUIC),
//     and counts as one of the address's handshakes in progress until its handshake
//     completes (admitQUIC) or it ends. So an address's QUIC connections, half-open ones
//     included, stay within --max-conns-per-client (TCP ones with them), and its
//     handshakes in progress within quicHandshakesPerAddr (32: a browser has one or two
//     at a time; a half-open one stays for up to twice HandshakeIdleTimeout, so 32 is
//     what a NAT's users could have in progress together with room to spare). One more
//     is refused with CONNECTION_REFUSED, counted as connections or handshakes.
//   - Over all addresses, handshakes in progress are bounded by h3Server.maxHandshakes
//     (defaultQUICHandshakes: a sixty-fourth of the machine's memory at
//     quicHandshakeCost each, at least 256) and refused beyond it, counted as handshakes.
//   - An Initial's source address may be spoofed, and a spoofer could spend a victim's
//     places. So an address that is not yet validated starts a handshake without proof
//     only while it has fewer than quicRetryPerAddr handshakes in progress and room in
//     its budget, and while fewer than quicRetryAll are in progress over all; otherwise
//     the server answers with a Retry (RFC 9000 §8.1.2, quic.Transport's
//     VerifySourceAddress: retryQUIC), whose token the client must send back from the
//     address it claims. A spoofer gets nothing more; an honest client pays one round
//     trip; a spoofer holds at most quicRetryPerAddr of a victim's places, for a
//     handshake's timeout.
//   - Trusted proxies' connections take no place in a budget (as on TCP) but count over
//     all.
//   - A handshake that ends without completing counts into the memory release's wave as
//     a completed one does (park.Parker.NoteHandshake): a flood of them leaves its
//     garbage, which an idle server would otherwise keep for minutes.
const (
	quicHandshakesPerAddr = 32
	quicRetryPerAddr      = 8
	quicRetryAll          = 128
	// quicHandshakeCost is about what a half-open handshake holds (its connection's
	// state and goroutines, the certificate's handshake messages), measured under the
	// half-open flood; defaultQUICHandshakes divides memory by it.
	quicHandshakeCost = 256 << 10
	minQUICHandshakes = 256
)

// defaultQUICHandshakes bounds the handshakes in progress over all addresses on a
// machine with mem bytes: a sixty-fourth of it at quicHandshakeCost each, at least
// minQUICHandshakes.
func defaultQUICHandshakes(mem uint64) int64 {
	return int64(max(mem/64/quicHandshakeCost, minQUICHandshakes))
}

// quicHandshake is a QUIC connection as its address's budget sees it, from its first
// packet: its place (hold) and whether its handshake is still in progress.
type quicHandshake struct {
	s     *Server
	hold  clients.Hold
	state atomic.Int32 // hsInProgress, then hsDone and/or hsEnded
	// conn is the connection once http3 accepted it (h3ConnContext); struck is set by an
	// abuse verdict that came before, which then ends it there.
	conn   atomic.Pointer[quic.Conn]
	struck atomic.Bool
}

const (
	hsInProgress int32 = iota
	hsDone             // the handshake completed
	hsEnded            // the connection ended
)

// quicHandshakeKey keys a connection's quicHandshake in its context.
type quicHandshakeKey struct{}

// udpClient is remote's address and port, when it is a UDP address.
func udpClient(remote net.Addr) (netip.AddrPort, bool) {
	ua, ok := remote.(*net.UDPAddr)
	if !ok {
		return netip.AddrPort{}, false
	}
	ap := ua.AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), ap.Addr().IsValid()
}

// retryQUIC is quic.Transport.VerifySourceAddress: whether a new connection from remote,
// not yet validated, must first prove its address with a Retry.
func (s *Server) retryQUIC(remote net.Addr) bool {
	if s.h3.handshakes.Load() >= quicRetryAll {
		return true
	}
	ap, ok := udpClient(remote)
	if !ok || s.isTrustedAddr(ap.Addr()) {
		return false
	}
	n, full := s.clients.Handshakes(ap.Addr())
	return n >= quicRetryPerAddr || full
}

// errQUICHandshakes refuses a connection over the bounds of handshakes in progress.
var errQUICHandshakes = errors.New("proxy: QUIC connection refused: too many handshakes in progress")

// startQUIC is quic.Transport.ConnContext, asked once per new connection before any of
// its handshake's work (after GetConfigForClient's penalty check): it counts the
// handshake over all, takes the connection's place in its address's budget, and refuses
// it (CONNECTION_REFUSED) over either bound. The place is given back when the
// connection's context ends (it closed, or its handshake failed).
func (s *Server) startQUIC(ctx context.Context, ci *quic.ClientInfo) (context.Context, error) {
	ap, ok := udpClient(ci.RemoteAddr)
	if s.h3.handshakes.Add(1) > s.h3.maxHandshakes {
		s.h3.handshakes.Add(-1)
		if ok && s.newQUICRefusal(ap) {
			s.refused(stats.RefusalHandshakes, ap.Addr())
		}
		return nil, errQUICHandshakes
	}
	hs := &quicHandshake{s: s}
	if ok && !s.isTrustedAddr(ap.Addr()) && !s.clients.OpenHandshake(&hs.hold, ap.Addr(), hs, quicHandshakesPerAddr) {
		s.h3.handshakes.Add(-1)
		if s.newQUICRefusal(ap) {
			k := stats.RefusalHandshakes
			if _, full := s.clients.Handshakes(ap.Addr()); full {
				k = stats.RefusalConnections
			}
			s.refused(k, ap.Addr())
		}
		return nil, errQUICRefused
	}
	context.AfterFunc(ctx, hs.ended)
	return context.WithValue(ctx, quicHandshakeKey{}, hs), nil
}

// done marks the handshake completed: it leaves the handshakes in progress, its place
// stays the connection's. Once; it does nothing after the connection ended.
func (hs *quicHandshake) done() {
	if hs.state.CompareAndSwap(hsInProgress, hsDone) {
		hs.s.h3.handshakes.Add(-1)
		hs.hold.Established()
	}
}

// ended gives the connection's place back when its context ended (once): a handshake
// still in progress leaves the count, and its garbage counts into the memory release.
func (hs *quicHandshake) ended() {
	switch hs.state.Swap(hsEnded) {
	case hsEnded:
		return
	case hsInProgress:
		hs.s.h3.handshakes.Add(-1)
		hs.s.parker.NoteHandshake()
	}
	hs.hold.Close()
}

// End ends the connection for abuse (clients.Ender): CONNECTION_CLOSE with
// H3_EXCESSIVE_LOAD, now if http3 has it, else as soon as it does (h3ConnContext).
func (hs *quicHandshake) End() {
	hs.struck.Store(true)
	if c := hs.conn.Load(); c != nil {
		_ = c.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeExcessiveLoad), "abuse from this address")
	}
}

// accepted links the connection http3 accepted to its handshake's record, and ends it
// at once when an abuse verdict came first.
func (hs *quicHandshake) accepted(c *quic.Conn) {
	hs.conn.Store(c)
	if hs.struck.Load() {
		hs.End()
	}
}
