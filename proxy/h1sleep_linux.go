package proxy

import (
	"errors"
	"time"

	"github.com/serve-zone/ingress/internal/rawnet"
	"github.com/serve-zone/ingress/proxy/internal/clients"
	"github.com/serve-zone/ingress/proxy/internal/park"
	"github.com/serve-zone/ingress/stats"
	"go.uber.org/zap"
)

// Plain HTTP/1.1 connections park in a compact form: they sleep.
//
// A plain HTTP/1.1 connection that parks holds nothing the next request needs but its
// socket, its client's place in the budgets and its accounting: no TLS state, no bytes
// (it parks only with nothing read and unanswered), no upstream. Its Go objects cost
// more than that: the tcpConn, the clientConn, rawnet's wrapper, net's TCPConn, netFD
// and addresses (1.1 KiB of heap), and the runtime's poll descriptor beside them (a
// quarter KiB the runtime never frees while the descriptor is open). So the parker holds
// an h1Sleeper instead (112 B, and 24 B for its state word: connLife; 48 B more of
// places in the parker's tables):
//
//   - At the park (sleep), the socket's descriptor is duplicated (park.Dup) and Go's
//     connection is closed; the duplicate keeps the socket open, so the client sees
//     nothing. The connection's place in its address's budgets moves to the sleeper
//     (clients.Hold.Move), its bytes are flushed to its last hostname, and it leaves
//     the fast path's set (Shutdown reaches sleepers through the parker: endSleepers).
//   - Readable again, the sleeper wakes on a goroutine the parker starts (the server's
//     h1 wait group): its descriptor becomes the connection's as it is (park.FD.Wake:
//     no duplicate, so a process at its descriptor limit wakes its sleepers as it
//     serves its other connections), the budget's place moves back, and the fast path
//     serves on as on any idle connection (three system calls: paid once per wake of a
//     connection that was idle longer than its client's pace asks).
//   - The idle timeout, a hang-up, Shutdown and the parker's stop close it like any
//     parked connection; a strike resets it, whether it sleeps, is being put to sleep or
//     is waking: the state word it shares with the connection's other forms (connLife)
//     says which, and whoever changes its form finds the strike there.
//   - A client that reset the connection before it woke leaves a socket with no peer to
//     name: it is closed.
//
// States: Idle, then Sleeping while its goroutine puts it to sleep, Asleep while the
// parker holds it, Waking while a goroutine rebuilds it, Idle again once woken; Closing
// or Struck once someone ended it.

// h1Sleeper is a parked plain HTTP/1.1 connection in its compact form.
type h1Sleeper struct {
	life *connLife
	fd   park.FD // the socket's duplicate descriptor, the sleeper's own
	// counted: the connection was counted under a hostname (connAttribution).
	counted  bool
	hold     clients.Hold
	lastHost *stats.Host // the hostname its next unclaimed bytes go to (clientConn.lastHost)
	pace     park.Pace   // its client's pace (tcpConn.pace)
	via      *balanced   // its client as a balancer's PROXY header named it (clientConn.via)
	s        *Server
}

// canSleep: plain HTTP/1.1 connections sleep where they park.
const canSleep = true

// sleep parks c, an idle plain HTTP/1.1 connection with nothing read, as a sleeper. It
// reports whether the connection is not c's any more (asleep, ended, or served on as
// another connection); false when it is c's still: ended meanwhile (then finish closes
// it), or as it was (then it parks whole).
func (c *tcpConn) sleep(pk *park.Parker) bool {
	cc := c.cc
	if c.secure || c.h2c != nil || len(cc.pending) > 0 || c.r != c.w || c.ho != c.s.hoHTTP {
		return false
	}
	if !c.life.CompareAndSwap(park.Idle, park.Sleeping) {
		return false // ended meanwhile
	}
	fd, err := park.Dup(c.rawConn())
	if err != nil {
		// No descriptor to spare: it parks whole, unless it was struck meanwhile.
		c.life.CompareAndSwap(park.Sleeping, park.Idle)
		return false
	}
	s := c.s
	sl := &h1Sleeper{life: c.life, fd: fd, counted: cc.counted.Load(), lastHost: cc.lastHost, pace: c.pace, via: cc.via, s: s}
	cc.flushTail(s, true)
	cc.hold.Move(&sl.hold, sl)
	s.conns.remove(c)
	_ = cc.Conn.Close() // Go's descriptor and poll registration; the socket stays open
	c.life.cc = nil     // nothing of the awake form stays alive while it sleeps
	lifeStep(c.life, park.Sleeping)
	if pk.Park(sl, c.parkedDeadline()) {
		return true
	}
	// Not parked: the server drains, the registration failed, or a strike came.
	switch {
	case s.draining.Load() && c.life.CompareAndSwap(park.Sleeping, park.Closing):
		sl.close()
	case c.life.CompareAndSwap(park.Sleeping, park.Waking):
		sl.wake(false) // serve on, without parking again
	default:
		sl.close() // struck: reset
	}
	return true
}

var _ park.Parkee = (*h1Sleeper)(nil)

// Life is the sleeper's state word, its connection's (park.Parkee).
func (sl *h1Sleeper) Life() *park.Life { return &sl.life.Life }

// Control runs f with the sleeper's descriptor, which only its owner closes.
func (sl *h1Sleeper) Control(f func(fd uintptr)) error { return sl.fd.Control(f) }

// Unparked wakes the readable sleeper on a goroutine the parker started.
func (sl *h1Sleeper) Unparked() { sl.wake(true) }

// EndParked closes the claimed sleeper: idle timeout, hang-up, Shutdown, stop, strike.
func (sl *h1Sleeper) EndParked(bool) { sl.close() }

// End ends the connection for abuse (clients.Ender, from any goroutine) without
// blocking, whatever form it has taken since (connLife.end).
func (sl *h1Sleeper) End() { sl.life.end(sl.s) }

// close ends the sleeper's connection (reset when it was struck), gives its place back
// and counts it closed. Its caller owns it (claimed, or never parked).
func (sl *h1Sleeper) close() {
	sl.fd.Close(sl.life.State() == park.Struck)
	sl.hold.Close()
	sl.s.totals.Conn(stats.ProtoHTTP1, -1)
}

// wake rebuilds the connection from the sleeper, in state Waking, and serves it on the
// fast path (on a goroutine of the server's h1 wait group); parkable false: it does not
// park again.
func (sl *h1Sleeper) wake(parkable bool) {
	s := sl.s
	nc, err := sl.fd.Wake()
	if err != nil {
		// ErrNotConnected: the client reset the connection since it became readable (a
		// request and a reset at once); without its address it cannot be served
		// (X-Forwarded-For, net/http), and nobody is there to answer.
		if !errors.Is(err, rawnet.ErrNotConnected) {
			s.log.Warn("a parked connection could not be woken; it is closed", zap.Error(err))
		}
		sl.life.CompareAndSwap(park.Waking, park.Closing)
		sl.hold.Close()
		s.totals.Conn(stats.ProtoHTTP1, -1)
		return
	}
	cc := &clientConn{Conn: nc, s: s, lastHost: sl.lastHost, via: sl.via, life: sl.life}
	cc.proto.Store(uint32(stats.ProtoHTTP1))
	cc.counted.Store(sl.counted)
	c := &tcpConn{s: s, cc: cc, life: sl.life, ho: s.hoHTTP, started: time.Now(), served: 1, pace: sl.pace}
	sl.hold.Move(&cc.hold, cc)
	sl.life.cc = cc // its awake form, for whoever ends it once it is Idle (connLife)
	lifeStep(sl.life, park.Waking)
	if !sl.life.CompareAndSwap(park.Waking, park.Idle) {
		cc.resetOnClose() // struck while waking
		_ = cc.Close()
		s.totals.Conn(stats.ProtoHTTP1, -1)
		return
	}
	// This goroutine belongs to the h1 wait group (the parker's, or the one that put
	// the connection to sleep), as the set's members must.
	if !s.conns.add(c) {
		c.life.CompareAndSwap(park.Idle, park.Closing) // closeAll ran
		c.finishClosed()
		return
	}
	c.ip = clientIP(cc.RemoteAddr().String())
	c.trusted = s.isTrusted(c.ip)
	if parkable {
		c.setParkable()
	}
	c.rbuf = getReadBuf()
	c.finish(c.loop())
}

// finishClosed closes a woken connection that never joined the fast path's set.
func (c *tcpConn) finishClosed() {
	if c.life.State() == park.Struck {
		c.cc.resetOnClose()
	}
	_ = c.cc.Close()
	c.s.totals.Conn(stats.ProtoHTTP1, -1)
}
