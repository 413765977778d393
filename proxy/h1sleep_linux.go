package proxy

import (
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/serve-zone/ingress/internal/rawnet"
	"github.com/serve-zone/ingress/proxy/internal/clients"
	"github.com/serve-zone/ingress/proxy/internal/park"
	"github.com/serve-zone/ingress/stats"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Plain HTTP/1.1 connections park in a compact form: they sleep.
//
// A plain HTTP/1.1 connection that parks holds nothing the next request needs but its
// socket, its client's place in the budgets and its accounting: no TLS state, no bytes
// (it parks only with nothing read and unanswered), no upstream. Its Go objects cost
// more than that: the h1Conn, the clientConn, rawnet's wrapper, net's TCPConn, netFD
// and addresses (1.1 KiB of heap), and the runtime's poll descriptor beside them (a
// quarter KiB the runtime never frees while the descriptor is open). So the parker holds
// an h1Sleeper instead (about 130 B with its places in the parker's tables):
//
//   - At the park (sleep), the socket's descriptor is duplicated and Go's connection is
//     closed; the duplicate keeps the socket open, so the client sees nothing. The
//     connection's place in its address's budgets moves to the sleeper
//     (clients.Hold.Move), its bytes are flushed to its last hostname, and it leaves
//     the fast path's set (Shutdown reaches sleepers through the parker: endSleepers).
//   - Readable again, the sleeper wakes on a goroutine the parker starts (the server's
//     h1 wait group): net.FileConn rebuilds the connection from the descriptor, the
//     budget's place moves back, and the fast path serves on as on any idle connection
//     (a dozen system calls, a few microseconds: paid once per wake of a connection that
//     was idle for at least h1ParkSoon).
//   - The idle timeout, a hang-up, Shutdown and the parker's stop close it like any
//     parked connection; an abuse verdict (clients.Table.Strike reaches it through its
//     place, or through the clientConn it had when the strike chose that before the
//     place moved: clientConn.End, h1Conn.asleep) resets it, whether it sleeps, is
//     being put to sleep or is waking.
//   - A client that reset the connection before it woke leaves a socket net.FileConn
//     cannot name the peer of: it is closed. At the descriptor limit the wake's
//     duplicate takes the parker's spare descriptor's room (wakeSpare).
//
// States (sl.state): h1Idle while its owner puts it to sleep or wakes it, h1Parked while
// the parker holds it, h1Closing once someone ended it, h1Active once it woke into a
// connection (woken), to which a late strike is passed on.

// h1Sleeper is a parked plain HTTP/1.1 connection in its compact form.
type h1Sleeper struct {
	pr    parkRec
	state atomic.Int32
	fd    int32 // the socket's duplicate descriptor, the sleeper's own
	// counted: the connection was counted under a hostname (connAttribution).
	counted bool
	// idleAt is when its idle wait began (h1Conn.dlSetAt), since the parker's epoch.
	idleAt   time.Duration
	hold     clients.Hold
	lastHost *stats.Host // the hostname its next unclaimed bytes go to (clientConn.lastHost)
	pace     park.Pace   // its client's pace (h1Conn.pace)
	via      *balanced   // its client as a balancer's PROXY header named it (clientConn.via)
	s        *Server
	// woken is the connection it became, for a strike that chose the sleeper before its
	// place moved on.
	woken atomic.Pointer[clientConn]
}

// canSleep: plain HTTP/1.1 connections sleep where they park.
const canSleep = true

// sleep parks c, an idle plain HTTP/1.1 connection with nothing read, as a sleeper. It
// reports whether the connection is not c's any more (asleep, ended, or served on as
// another connection); false when nothing changed: c is as it was and parks as an
// h1Conn or closes (Shutdown got to it first: state h1Closing).
func (c *h1Conn) sleep(pk *parker) bool {
	cc := c.cc
	if c.secure || c.h2c != nil || len(cc.pending) > 0 || c.r != c.w || c.ho != c.s.hoHTTP {
		return false
	}
	fd := -1
	if err := c.control(func(d uintptr) {
		r, _, e := unix.RawSyscall(unix.SYS_FCNTL, d, unix.F_DUPFD_CLOEXEC, 0)
		if e == 0 {
			fd = int(r)
		}
	}); err != nil || fd < 0 {
		return false
	}
	s := c.s
	sl := &h1Sleeper{fd: int32(fd), counted: cc.counted.Load(), idleAt: c.dlSetAt.Sub(pk.epoch),
		lastHost: cc.lastHost, pace: c.pace, via: cc.via, s: s}
	sl.pr = parkRec{state: &sl.state, awake: h1Idle}
	sl.state.Store(h1Idle)
	// Published by the CAS: a strike that collected cc before its place moved to the
	// sleeper, and calls cc.End once Go's connection is closed, passes on to it.
	c.asleep = sl
	if !c.state.CompareAndSwap(h1Idle, h1Asleep) {
		_ = unix.Close(fd) // Shutdown closed c meanwhile
		return false
	}
	cc.flushTail(s, true)
	cc.hold.Move(&sl.hold, sl)
	s.h1.remove(c)
	_ = cc.Conn.Close() // Go's descriptor and poll registration; the socket stays open
	if pk.park(sl) {
		return true
	}
	// Not parked: ended by a strike meanwhile, Shutdown, or the registration failed.
	switch {
	case sl.state.Load() == h1Closing:
		sl.close(true)
	case s.draining.Load():
		sl.state.Store(h1Closing)
		sl.close(false)
	default:
		sl.wake(false) // serve on, without parking again
	}
	return true
}

func (sl *h1Sleeper) parkRec() *parkRec { return &sl.pr }

// control runs f with the sleeper's descriptor, which only its claimer closes.
func (sl *h1Sleeper) control(f func(fd uintptr)) error {
	f(uintptr(sl.fd))
	return nil
}

func (sl *h1Sleeper) parkedDeadline() time.Time {
	return sl.s.parker.epoch.Add(sl.idleAt + sl.s.cfg.IdleTimeout)
}

// unparked wakes the readable sleeper on a goroutine the parker started.
func (sl *h1Sleeper) unparked() { sl.wake(true) }

// endParked closes the claimed sleeper: idle timeout, hang-up, Shutdown, stop.
func (sl *h1Sleeper) endParked(bool) { sl.close(false) }

// End ends the connection for abuse (clients.Ender, from any goroutine) without
// blocking: asleep, it is claimed and reset here; while its owner puts it to sleep or
// wakes it, the owner resets it; woken, the connection it became is ended.
func (sl *h1Sleeper) End() {
	for {
		switch sl.state.Load() {
		case h1Parked:
			if sl.s.parker.claim(sl) {
				sl.close(true)
				return
			}
		case h1Idle:
			if sl.state.CompareAndSwap(h1Idle, h1Closing) {
				return
			}
		case h1Active:
			if cc := sl.woken.Load(); cc != nil {
				cc.End()
			}
			return
		default:
			return
		}
	}
}

// close ends the sleeper's connection (reset: for abuse), gives its place back and
// counts it closed. Its caller owns it (claimed, or never parked).
func (sl *h1Sleeper) close(reset bool) {
	fd := int(sl.fd)
	if reset {
		_ = unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
	}
	_ = unix.Close(fd)
	sl.hold.Close()
	sl.s.totals.Conn(stats.ProtoHTTP1, -1)
}

// wake rebuilds the connection from the sleeper and serves it on the fast path (on a
// goroutine of the server's h1 wait group); parkable false: it does not park again.
func (sl *h1Sleeper) wake(parkable bool) {
	s := sl.s
	nc, err := s.parker.fileConn(os.NewFile(uintptr(sl.fd), "")) // its own duplicate
	if err != nil {
		s.log.Warn("a parked connection could not be woken; it is closed", zap.Error(err))
		sl.hold.Close()
		s.totals.Conn(stats.ProtoHTTP1, -1)
		return
	}
	if nc.RemoteAddr() == nil {
		// net.FileConn ignores getpeername's failure: the client reset the connection
		// since it became readable (a request and a reset at once). Without its
		// address the connection cannot be served (X-Forwarded-For, net/http).
		_ = nc.Close()
		sl.hold.Close()
		s.totals.Conn(stats.ProtoHTTP1, -1)
		return
	}
	cc := &clientConn{Conn: rawnet.Wrap(nc), s: s, lastHost: sl.lastHost, via: sl.via}
	cc.proto.Store(uint32(stats.ProtoHTTP1))
	cc.counted.Store(sl.counted)
	c := &h1Conn{s: s, cc: cc, ho: s.hoHTTP, started: time.Now(), served: 1, pace: sl.pace}
	c.state.Store(h1Idle)
	cc.h1.Store(c)
	sl.hold.Move(&cc.hold, cc)
	sl.woken.Store(cc)
	if !sl.state.CompareAndSwap(h1Idle, h1Active) {
		cc.resetOnClose() // struck while waking
		_ = cc.Close()
		s.totals.Conn(stats.ProtoHTTP1, -1)
		return
	}
	// This goroutine belongs to the h1 wait group (the parker's, or the one that put
	// the connection to sleep), as the set's members must.
	if !s.h1.add(c) {
		_ = cc.Close()
		s.totals.Conn(stats.ProtoHTTP1, -1)
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

// endSleepers claims and closes every sleeping connection (Shutdown's drain, closeNow):
// they are idle, and not in the fast path's set.
func (p *parker) endSleepers() {
	if p == nil {
		return
	}
	var left []*h1Sleeper
	p.mu.Lock()
	for _, c := range p.byFd {
		if sl, ok := c.(*h1Sleeper); ok && p.unregister(sl, h1Closing) {
			left = append(left, sl)
		}
	}
	p.mu.Unlock()
	for _, sl := range left {
		sl.close(false)
	}
}

// wakeSpare is a descriptor the parker keeps in reserve for wake: net.FileConn
// duplicates the sleeper's descriptor before wake closes it, so a wake holds two for a
// moment (a connection parked in full needs none to wake). At the descriptor limit
// (EMFILE, ENFILE) the spare is closed to make room for the duplicate and opened again
// once the sleeper's own descriptor is closed, so that a sleeper's request is not lost
// for want of a descriptor; wakes at the limit go one at a time. The zero value holds
// none (open is false: fd 0 is nobody's to close).
type wakeSpare struct {
	mu   sync.Mutex
	fd   int  // an eventfd, when open
	open bool // fd is the spare's
	off  bool // the parker's run ended: no spare is opened again
}

// fill opens the spare when there is none (under mu, or before the parker runs).
func (sp *wakeSpare) fill() {
	if sp.open || sp.off {
		return
	}
	if fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC); err == nil {
		sp.fd, sp.open = fd, true
	}
}

// drop closes the spare, if open (under mu).
func (sp *wakeSpare) drop() {
	if sp.open {
		_ = unix.Close(sp.fd)
		sp.fd, sp.open = 0, false
	}
}

// close closes the spare for good (the parker's run, as it ends).
func (sp *wakeSpare) close() {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.drop()
	sp.off = true
}

// fileConn is net.FileConn(f), retried in the spare descriptor's room at the
// descriptor limit; it closes f.
func (p *parker) fileConn(f *os.File) (net.Conn, error) {
	nc, err := net.FileConn(f)
	if err == nil || !errors.Is(err, unix.EMFILE) && !errors.Is(err, unix.ENFILE) {
		_ = f.Close()
		return nc, err
	}
	sp := &p.spare
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.drop()
	nc, err = net.FileConn(f)
	_ = f.Close() // the sleeper's descriptor: room for the spare again
	sp.fill()
	return nc, err
}
