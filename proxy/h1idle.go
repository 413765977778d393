package proxy

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/serve-zone/ingress/proxy/internal/park"
	"github.com/serve-zone/ingress/proxy/internal/tlsbuf"
	"go.uber.org/zap"
)

// Idle connections without a read buffer or a goroutine.
//
// An HTTP/1.1 connection (plain or TLS) that waited h1ParkAfter (h1ParkSoon while many
// goroutines run) for its next request "parks": its serving goroutine puts the 8 KiB
// read buffer back into a pool, hands the connection to the server's parker and ends. On
// Linux the parker (park.Parker) is one goroutine per Server that waits on an epoll
// instance of its own for any parked connection to become readable; then it starts a
// serving goroutine for that connection, which takes a buffer and serves on exactly as
// before. The parker also closes parked connections idle past IdleTimeout, and Shutdown
// closes them at once like any idle connection. An idle connection then costs only its
// connection state (about 3.6 KiB over TLS; a plain one is compacted further, to an
// h1Sleeper of about 140 B: h1sleep_linux.go; bench/README.md, reliability/idle_test.go)
// instead of a buffer and a goroutine stack. Busy connections never park: the hot path
// is unchanged except for a pooled buffer instead of an allocated one. Elsewhere than
// Linux nothing parks (park.CanPark).
//
// HTTP/2 connections (plain or TLS) park too, through the same parker: the engine parks
// a connection without streams (proxy/internal/h2/park.go) and the fast path hands it to
// the parker as below (h2serve.go).
//
// HTTP/1.1 over TLS parks alike: crypto/tls may hold bytes that a poll of the socket
// cannot see, but the idle wait that ends in a park is itself the proof that it holds
// nothing to serve. A tls.Conn Read that times out returned no plaintext (it returns what
// it has decrypted first) and decrypted every complete record it had taken from the
// socket (it reads the socket only when it lacks the rest of a record): what may be left
// is part of one record, whose rest the socket announces when it comes. crypto/tls
// treats a timeout as temporary, so the connection reads on after the park as if the
// Read had never ended. A part of a record that came during the idle wait means a
// request is on its way: the connection does not park but waits for the rest under
// ReadHeaderTimeout (recordInPart), so a client cannot hold a connection for longer
// than the idle timeout by trickling a record a byte at a time. Whether crypto/tls holds
// part of a record is read from its record buffer (proxy/internal/tlsbuf). Should that
// not be known (a Go release without the field), the record bytes counted below crypto/tls
// (rawnet.TCPConn.BytesRead) since the idle wait began stand in; counting bytes rather
// than records, a complete record that carries no request (a TLS 1.3 KeyUpdate) during
// the idle wait then also counts as a request on its way, so such a connection closes at
// ReadHeaderTimeout after its park would have begun unless a request follows. At the
// park, crypto/tls's empty input buffers are dropped too (tlsbuf.Drop), on HTTP/1.1 and
// HTTP/2 connections alike.
//
// Ownership. A connection belongs to exactly one party at a time, and its state word
// (connLife, a park.State shared by every form the connection takes) says which: its
// serving goroutine (New, Idle, Active), the parker (Parked, Asleep), a goroutine that
// changes its form (Sleeping, Waking), or whoever ended it (Closing, Struck). Only a
// holder of the parker's lock moves a connection into or out of Parked and Asleep
// (park.Parker's Park, Claim), and it adds or removes the epoll registration in the
// same critical section. So whoever claims a parked connection (the parker on
// readiness, at its idle deadline or at a hang-up, Shutdown, closeNow, a strike) has
// removed its descriptor from the epoll set (EPOLL_CTL_DEL) before anyone can close it,
// and a descriptor number that the kernel hands to a later connection never meets a
// stale registration. Nobody closes a parked connection without claiming it first
// (connSet's closeIdle and closeAll, endSleepers and connLife.end claim parked ones
// instead of closing them).

// tcpConn is a park.Parkee: HTTP/1.1 over TLS, and the HTTP/2 engine's connections
// (h2serve.go), park whole; a plain HTTP/1.1 connection parks as an h1Sleeper
// (h1sleep_linux.go).
var _ park.Parkee = (*tcpConn)(nil)

// Life is c's state word (park.Parkee).
func (c *tcpConn) Life() *park.Life { return &c.life.Life }

// Control runs f with c's descriptor (syscall.RawConn.Control; park.Parkee).
func (c *tcpConn) Control(f func(fd uintptr)) error { return c.rawConn().Control(f) }

// EndParked ends c, which its caller claimed from the parker (park.Parkee): graceful
// (Shutdown's drain, the idle timeout) tells the client first where the protocol can
// (an HTTP/2 GOAWAY); otherwise (the client hung up, closeNow, the parker stopping) it
// closes at once; Struck (a strike claimed it) aborts an HTTP/2 connection (GOAWAY
// ENHANCE_YOUR_CALM) and resets an HTTP/1.1 one. Over TLS it does so on a goroutine of
// the h1 wait group: crypto/tls's Close sends close_notify and may wait up to 5 s for
// room to (a client that stopped reading), never on the parker's goroutine.
func (c *tcpConn) EndParked(graceful bool) {
	if c.secure {
		c.s.conns.wg.Go(func() { c.endParkedNow(graceful) }) // as the parker's releases
		return
	}
	c.endParkedNow(graceful)
}

func (c *tcpConn) endParkedNow(graceful bool) {
	if c.h2c != nil {
		if c.life.State() == park.Struck {
			c.s.endH2ForAbuse(c.h2c) // the GOAWAY the engine, resumed, writes
			graceful = true
		}
		c.endParkedH2(graceful) // h2serve.go
		return
	}
	c.finish(false) // resets a struck connection
}

// dropTLSBuffers lets a parking TLS connection's crypto/tls input buffers go when they
// are empty (tlsbuf.Drop); the calling goroutine still owns the connection.
func (c *tcpConn) dropTLSBuffers() {
	if c.secure {
		tlsbuf.Drop(c.cc.tc)
	}
}

// newParker makes the server's parker: its goroutines belong to the h1 wait group, it
// refuses parks once the server drains, and it says what it did and what failed in the
// server's log.
func (s *Server) newParker() (*park.Parker, error) {
	return park.NewParker(park.Config{
		Go:                s.conns.wg.Go,
		Refuse:            s.draining.Load,
		ReleaseIdleMemory: s.cfg.ReleaseIdleMemory,
		Released: func(parked int, took time.Duration) {
			s.log.Debug(releaseMsg, zap.Int("parked", parked), zap.Duration("took", took))
		},
		Failed: func(err error) {
			if errors.Is(err, park.ErrRegister) {
				s.log.Warn("an idle connection cannot park; such connections keep their goroutine", zap.Error(err))
				return
			}
			s.log.Error("waiting for parked connections", zap.Error(err))
		},
	})
}

// releaseMsg is the log line of a memory release after a wave of parks
// (Config.ReleaseIdleMemory, at Debug); the reliability suite waits for it.
const releaseMsg = "returned idle connections' memory to the OS"

// endSleepers claims and closes every sleeping connection (Shutdown's drain, closeNow):
// they are idle, and not in the fast path's set. The parker refuses new sleepers once
// the server drains (park.Config.Refuse), so after draining is set one call finds them
// all.
func (s *Server) endSleepers() {
	for _, c := range s.parker.ClaimAll(park.Asleep, park.Closing) {
		c.EndParked(false)
	}
}

// parkedTotal counts parks (tests watch it).
var parkedTotal atomic.Int64

// h1ReadBufs pools the fast path's read buffers.
var h1ReadBufs = sync.Pool{New: func() any { return new([h1ReadBuf]byte) }}

func getReadBuf() []byte { return h1ReadBufs.Get().(*[h1ReadBuf]byte)[:] }

// putReadBuf returns b (nil: nothing) to the pool; the caller keeps no reference to it.
func putReadBuf(b []byte) {
	if len(b) == h1ReadBuf {
		h1ReadBufs.Put((*[h1ReadBuf]byte)(b))
	}
}

// shouldPark reports whether the read error err ended an idle wait at h1ParkAfter with
// nothing read (rather than the idle timeout, or a head in progress).
func (c *tcpConn) shouldPark(err error) bool {
	var ne net.Error
	return c.parkable && c.dlIdle && c.r == c.w && errors.As(err, &ne) && ne.Timeout() &&
		time.Since(c.dlSetAt) < c.s.cfg.IdleTimeout && !c.s.draining.Load()
}

// park gives the read buffer back and hands the idle connection to the parker. It
// reports whether the parker took it; then the calling goroutine must end without
// touching c again (the parker may already have started a new one for it). Otherwise
// the connection is the caller's still: ended meanwhile (Closing or Struck), or the
// parker could not take it (stopped, the server drains, or the registration failed).
func (c *tcpConn) park() bool {
	putReadBuf(c.rbuf)
	c.rbuf = nil
	if canSleep && c.sleep(c.pk) { // plain: parked in its compact form (h1sleep_linux.go)
		parkedTotal.Add(1)
		return true
	}
	c.dropTLSBuffers()
	if !c.pk.Park(c, c.parkedDeadline()) {
		return false
	}
	parkedTotal.Add(1)
	return true
}

// Unparked serves a parked connection that became readable (park.Parkee), on a
// goroutine the parker started (and the server's h1 wait group owns).
func (c *tcpConn) Unparked() {
	if c.h2c != nil {
		c.resumeH2() // h2serve.go
		return
	}
	c.rbuf = getReadBuf()
	c.dlIdle = false // the next wait sets its deadline afresh
	c.finish(c.loop())
}

// parkedDeadline is when a parked connection's idle timeout ends: IdleTimeout after its
// idle wait began, as if it had kept waiting on its goroutine. The parker ends it then
// or up to park.Tick later, plus however far park order is from deadline order
// (connections park h1ParkAfter after their dlSetAt, or h1ParkSoon in a crowd, give or
// take scheduling: one that parked after h1ParkAfter may wait behind one that parked
// after h1ParkSoon later, so up to h1ParkAfter-h1ParkSoon), never earlier.
func (c *tcpConn) parkedDeadline() time.Time {
	if c.h2c != nil {
		return c.h2c.IdleDeadline()
	}
	return c.dlSetAt.Add(c.s.cfg.IdleTimeout)
}

// awaitIdle waits, before an idle TLS connection that parks reads its next request,
// for the socket to be readable, with its read buffer and crypto/tls's input buffers
// given back meanwhile: a connection whose client keeps a pace of h1ParkSoon or more
// waits awake for long (park.Pace), and a Read inside crypto/tls would hold both for the
// whole wait. A faster client keeps them (crypto/tls would allocate its buffer again for
// every request). Nothing is waited for when crypto/tls holds anything (part of a
// record, or plaintext not read yet): the read goes on at once. The read deadline set
// applies; its error is the wait's.
func (c *tcpConn) awaitIdle() error {
	if !c.secure || !c.parkable || c.r != c.w || c.pace.Gap() < h1ParkSoon || !tlsbuf.Drop(c.cc.tc) {
		return nil
	}
	putReadBuf(c.rbuf)
	c.rbuf, c.r, c.w, c.scanned = nil, 0, 0, 0
	idleAwaits.Add(1)
	return c.rawConn().Read(c.readableFn())
}

// idleAwaits counts awaitIdle's waits without buffers (tests watch it).
var idleAwaits atomic.Int64

// canParkTLS reports whether the connection may park as far as TLS goes: plain ones may;
// TLS ones when the record bytes taken from the socket are counted (rawnet, Linux).
func (c *tcpConn) canParkTLS() bool {
	_, ok := c.cc.tlsIn()
	return !c.secure || ok
}

// markRecords notes, as an idle wait begins, how many record bytes crypto/tls has taken
// from the socket (TLS connections that park; recordInPart).
func (c *tcpConn) markRecords() {
	if c.secure && c.parkable {
		c.tlsMark, _ = c.cc.tlsIn()
	}
}

// recordInPart reports whether the idle wait of a parkable TLS connection ended (err, a
// timeout) with part of a record in crypto/tls: a request on its way.
func (c *tcpConn) recordInPart(err error) bool {
	if !c.secure || !c.parkable || !c.dlIdle {
		return false
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		return false
	}
	if held, ok := tlsbuf.Held(c.cc.tc); ok {
		return held
	}
	n, _ := c.cc.tlsIn() // record bytes taken since the wait began
	return n > c.tlsMark
}
