package proxy

import (
	"context"
	"net"
	"net/netip"
	"sync"
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
// share of CPU. So the verdict also penalises the client's address (newPenaltyTable): for
// a penalty window (1 s, doubling while the address keeps coming back abusive, at most
// 16 s) the listeners refuse its connections right after accept, before any TLS or HTTP
// work: held unread until the penalty ends (the tarpit below), then reset (no TIME_WAIT
// kept for them). The verdict also ends every connection the address still holds, on
// every protocol (strike, budgets.go): connections opened before it, many of them, would
// otherwise go on flooding. Only abuse verdicts count, never ordinary closes or errors; trusted
// proxies (Config.TrustedProxies) are never penalised, since one of them carries many
// clients.
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

// refusePenalized refuses a just-accepted raw connection whose client address is
// penalised, and reports whether it did: it is held in the tarpit until the penalty
// ends, or reset at once when the tarpit is full.
func (s *Server) refusePenalized(c net.Conn) bool { return s.refusePenalizedAs(c, remoteAddr(c)) }

// refusePenalizedAs is refusePenalized for a connection whose client is a. With c nil
// (a trusted balancer's connection, whose PROXY header named a: balancer.go) it only
// counts and logs the refusal, and the connection's goroutine resets it: held in the
// tarpit, it would keep one of the balancer's connections to us, which all its
// clients share, for the rest of the penalty.
func (s *Server) refusePenalizedAs(c net.Conn, a netip.Addr) bool {
	if !a.IsValid() {
		return false
	}
	hit, until := s.penalties.Penalized(a)
	if !hit {
		return false
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // a reset: nothing of the client's is read, no TIME_WAIT kept
		_ = tc.SetReadBuffer(tarpitReadBuffer)
	}
	if c != nil && !s.tarpit.hold(c, until) {
		_ = c.Close()
	}
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
// address struck (strike): the penalty refuses new connections, and the connections the
// address already holds, on every protocol, are ended, so that a flood spread over
// connections opened before it does not go on (issue 25).
func (s *Server) h2Abuse(nc net.Conn, reason string) {
	s.totals.ClientAbuse()
	s.strike(clientKey(nc), reason)
}

// strike acts on an abuse verdict against client address a (unless trusted): a is
// penalised (new connections refused at accept and at the QUIC handshake), and every
// connection it still holds, on every protocol, is ended now (clients.Table.Strike:
// clientConn.End, h3Conn.End), so that connections opened before the verdict stop being
// a lever (issue 25). Every verdict ends what is held, also one during a penalty: it
// is about a connection accepted before the penalty began.
func (s *Server) strike(a netip.Addr, reason string) {
	if !a.IsValid() || s.isTrustedAddr(a) {
		return
	}
	d, started := s.penalties.Strike(a)
	ended := s.clients.Strike(a)
	if !started {
		return
	}
	if ok, unlogged := allowLog(&s.abuseLoggedAt, &s.abuseUnlogged, penaltyLogEvery); ok {
		s.log.Info("client connection ended for abuse; its address is penalised",
			zap.String("client", a.String()),
			zap.String("reason", reason),
			zap.Duration("penalty", d),
			zap.Int("connections_ended", ended),
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

// The tarpit: a refused connection is not closed at once but held, unread, until its
// address's penalty ends (then reset). A flooder that redials as soon as it is cut off,
// as flood tools do, would otherwise turn the refusal into a loop of connects (and
// ClientHellos, or prefaces and the first frames of a flood), each costing us an accept
// and a close and it a dial; held, it waits for a ServerHello or a SETTINGS frame that
// never comes, or blocks writing once the held socket's buffers are full, and its CPU
// goes back to everybody else on the machine. Measured with TestH2Floods (attacker,
// binary and legitimate client on the same two cores): the legitimate p99 during the
// floods was 2-10x quiet with refusals reset at once (6,000-10,000 reconnects a
// second), 1-6x with them held (bench/README.md).
//
// Holding is bounded: at most tarpitMax connections in all, no goroutine of their own,
// each with a receive buffer cut to tarpitReadBuffer (what the kernel keeps of what the
// client sends: it drops the rest, the client's window closes). Past the bound a
// refused connection is reset at once. A legitimate client behind the penalised address
// (a shared NAT) sees a connection that does not answer for the rest of the penalty (16 s
// at most) instead of a reset: either way it is not served until the penalty ends.
const (
	tarpitMax        = 512
	tarpitReadBuffer = 4 << 10
)

type heldConn struct {
	c     net.Conn
	until time.Time
}

// tarpit holds refused connections until their penalty ends. hold is called by the
// accept loops; run, started by Serve, closes them when due and all of them when the
// listeners are gone.
type tarpit struct {
	mu     sync.Mutex
	held   []heldConn
	closed bool
	wake   chan struct{} // run's: a connection with an earlier end may have come
}

func newTarpit() *tarpit { return &tarpit{wake: make(chan struct{}, 1)} }

// hold keeps c until until; false when the tarpit is full or closed (c is the caller's
// to close).
func (tp *tarpit) hold(c net.Conn, until time.Time) bool {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if tp.closed || len(tp.held) >= tarpitMax {
		return false
	}
	tp.held = append(tp.held, heldConn{c, until})
	select {
	case tp.wake <- struct{}{}:
	default:
	}
	return true
}

// run closes held connections when their penalty ends, until ctx ends; then it closes
// the rest, and hold refuses from then on.
func (tp *tarpit) run(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		next := tp.release(time.Now())
		if next.IsZero() {
			t.Reset(time.Hour)
		} else {
			t.Reset(time.Until(next))
		}
		select {
		case <-ctx.Done():
			tp.mu.Lock()
			tp.closed = true
			held := tp.held
			tp.held = nil
			tp.mu.Unlock()
			for _, h := range held {
				_ = h.c.Close()
			}
			return
		case <-tp.wake:
		case <-t.C:
		}
	}
}

// release closes the connections due by now and returns the earliest end of the rest
// (zero when none is held).
func (tp *tarpit) release(now time.Time) (next time.Time) {
	var due []net.Conn
	tp.mu.Lock()
	kept := tp.held[:0]
	for _, h := range tp.held {
		if !now.Before(h.until) {
			due = append(due, h.c)
			continue
		}
		kept = append(kept, h)
		if next.IsZero() || h.until.Before(next) {
			next = h.until
		}
	}
	clear(tp.held[len(kept):])
	tp.held = kept
	tp.mu.Unlock()
	for _, c := range due {
		_ = c.Close()
	}
	return next
}
