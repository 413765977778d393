package proxy

import (
	"bytes"
	"errors"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/serve-zone/ingress/proxy/internal/h1wire"
	"github.com/serve-zone/ingress/proxy/internal/h2"
	"github.com/serve-zone/ingress/proxy/internal/park"
	"github.com/serve-zone/ingress/stats"
	"go.uber.org/zap"
	"golang.org/x/net/http2/hpack"
)

// The fast HTTP/1.1 path.
//
// Every TCP connection (plain or TLS) starts here, on one goroutine that reads requests
// into its own buffer, parses them in place (proxy/internal/h1wire), forwards them to a target over
// the shared exchange's pooled connections and relays the answer (h1forward.go): no
// goroutine hand-off, no header maps, no background read per request, one write per
// response when it fits. This is what makes HTTP/1.1 keep-alive traffic cheap (see
// bench/README.md for the before and after).
//
// Whatever the fast path does not handle goes to net/http for the rest of the
// connection's life ("hand-off"): a TLS connection that negotiated h2, the h2c preface,
// HTTP/1.0, WebSocket and other upgrades, Expect, chunked or large request bodies, heads
// larger than the buffer, and anything its strict parser does not accept. The bytes
// already read are replayed to net/http first (clientConn.pending), so nothing is lost,
// and the byte counters carry on where they were.

const (
	// h1ReadBuf is the per-connection read buffer: a request head plus its body must fit
	// for the fast path (larger ones are handed off).
	h1ReadBuf = 8 << 10
	// h1Headroom is room before the upstream read buffer where the response head is
	// written so that head and first body bytes leave in one write.
	h1Headroom = 1 << 10
	// h1UpBuf is the upstream read buffer (response head and body chunks).
	h1UpBuf = 32 << 10
	// h1IdleSlack: the idle deadline is renewed only when it is at least this old, which
	// saves a timer update per request on busy connections.
	h1IdleSlack = time.Second
	// h1ParkAfter: an HTTP/1.1 connection (plain or TLS) idle for between
	// h1ParkAfter-h1IdleSlack and h1ParkAfter gives its read buffer back and waits without
	// a goroutine (h1idle.go).
	h1ParkAfter = 2 * time.Second
	// h1ParkSoon replaces h1ParkAfter while more than Server.parkCrowd goroutines run:
	// the runtime never frees a goroutine's record (about 400 B), so the most goroutines
	// that ever ran at once stay paid for; a burst of connections that all waited
	// h1ParkAfter on a goroutine each before parking would leave as many records behind
	// as there were connections. Connections that send their next request within
	// h1ParkSoon/2 never park (the idle deadline is renewed only once half its wait is
	// gone: idleDeadlineStale).
	h1ParkSoon = 50 * time.Millisecond
	// h1AwakeMax bounds the wait a client's pace asks for (park.Pace): beyond it a
	// connection parks whatever its pace (its goroutine's stack is worth more than the
	// wake it saves).
	h1AwakeMax = 10 * time.Second
	// h1ParkCrowd is Server.parkCrowd's default.
	h1ParkCrowd = 256
)

// h1NewGrace is how long Shutdown leaves a new connection that has sent nothing yet
// (net/http's rule): its first request may be on the way.
const h1NewGrace = 5 * time.Second

// tcpConn is one client TCP connection, plain or TLS, on the fast path (the raw loop
// that reads every connection's first bytes: HTTP/1.1 ones, and HTTP/2 ones until the
// engine takes them, h2serve.go). Its fields belong to its goroutine
// (or to the parker while it is parked), except life, its state word, which whoever
// ends it reads and swaps (life.go).
type tcpConn struct {
	s       *Server
	cc      *clientConn
	ho      *handoffListener
	rbuf    []byte
	r, w    int // rbuf[r:w] is read but not yet consumed
	scanned int // how far rbuf[r:w] was searched for the end of a head
	life    *connLife

	secure  bool
	altSvc  bool
	ip      string
	trusted bool
	raw     syscall.RawConn // the client's TCP connection, for peerHungUp; set lazily

	pace    park.Pace     // its client's pace: how long it waits awake before parking (setIdleDeadline)
	dlIdle  bool          // the read deadline set is the idle one, set at dlSetAt
	dlSetAt time.Time     // when the idle deadline was set
	dlWait  time.Duration // and for how long
	// wdlSetAt is when the write deadline (ClientSendTimeout) was last set (send).
	wdlSetAt time.Time
	served   int
	parkable bool         // on TCP (plain or TLS), and the server has a parker (h1idle.go)
	parking  bool         // run returned to park the idle connection
	pk       *park.Parker // the server's parker, when parkable (or an HTTP/2 one may park)
	h2c      *h2.Conn     // the HTTP/2 engine's connection, once it serves one (h2serve.go)
	h2Parked bool         // the engine returned parked: finish hands it to the parker
	tlsMark  int64        // TLS: record bytes taken from the socket when the idle wait began
	started  time.Time    // accepted at
	now      time.Time    // read once per request
	closing  bool         // the current response says Connection: close; then the conn closes

	// headerDeadline: the head readHead waits for has its ReadHeaderTimeout set.
	headerDeadline bool
	// work and headLen are the request step left to after (h1Refuse, h1Body).
	work    *h1Work
	headLen int
	// The raw loop (h1raw.go).
	rawFn    func(fd uintptr) bool // rawStep, made once
	readable func(fd uintptr) bool // awaitIdle's wait, made once (h1idle.go)
	inRaw    bool                  // inside rawStep: read raw on fd
	entered  bool                  // the current RawConn.Read has called rawStep
	fd       int                   // the client's descriptor, inside rawStep
	drained  bool                  // the last raw read left nothing to read: wait before the next
	headWait bool                  // readHead returned h1Wait: it goes on with its read
	next     int                   // what rawStep left to do (step's answer)
}

// h1Work is what one request needs beyond the connection: parsed heads, the outgoing
// buffer and the upstream read buffer, and its way through the pipeline (h1forward.go).
// It is pooled, so idle connections hold none.
type h1Work struct {
	upWork
	req       h1wire.Request
	reqFields [h1wire.MaxFields]h1wire.Field
	p         pipe
	c         *tcpConn
	body      []byte              // the request's body, in the read buffer
	consumed  int                 // bytes of the read buffer that are the request's
	list      []hpack.HeaderField // the fields of an answer made here, reused
}

var h1Works = sync.Pool{New: func() any {
	w := new(h1Work)
	w.init()
	return w
}}

func getWork() *h1Work { return h1Works.Get().(*h1Work) }

func putWork(w *h1Work) {
	w.req = h1wire.Request{}
	w.p, w.c, w.body = pipe{}, nil, nil
	clear(w.list[:cap(w.list)])
	w.reset()
	h1Works.Put(w)
}

// connSet tracks the fast path's connections for Shutdown. It is sharded by connection so
// that a mass of connections starting, parking and waking at once (thousands of sleepers
// woken by one burst of their clients) does not queue on one lock: issue 33 found 1,895
// goroutines waiting in add and 411 in remove on the single mutex it had.
type connSet struct {
	shards [connSetShards]connShard
	closed atomic.Bool // closeAll ran: new connections are closed at once
	wg     sync.WaitGroup
}

const connSetShards = 32

type connShard struct {
	mu sync.Mutex
	m  map[*tcpConn]struct{}
	_  [48]byte // a cache line each
}

func (set *connSet) shard(c *tcpConn) *connShard {
	h := uint64(uintptr(unsafe.Pointer(c))) * 0x9E3779B97F4A7C15
	return &set.shards[h>>(64-5)]
}

// add records c; false once closeAll ran (checked under c's shard's lock, which
// closeAll takes after setting closed: an add either sees closed or is seen by closeAll).
func (set *connSet) add(c *tcpConn) bool {
	sh := set.shard(c)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if set.closed.Load() {
		return false
	}
	if sh.m == nil {
		sh.m = make(map[*tcpConn]struct{})
	}
	sh.m[c] = struct{}{}
	return true
}

func (set *connSet) remove(c *tcpConn) {
	sh := set.shard(c)
	sh.mu.Lock()
	delete(sh.m, c)
	sh.mu.Unlock()
}

// count is how many connections the set holds.
func (set *connSet) count() int {
	n := 0
	for i := range set.shards {
		sh := &set.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// closeIdle closes the connections that wait for a request and reports how many are
// left (busy ones finish their request and close, because the server is draining).
// Parked ones are claimed from the parker first and closed here, with their accounting,
// once the shard's lock is released.
func (set *connSet) closeIdle() int {
	var parked []*tcpConn
	n := 0
	for i := range set.shards {
		sh := &set.shards[i]
		sh.mu.Lock()
		for c := range sh.m {
			switch {
			case c.life.State() == park.Parked:
				if _, ok := c.pk.Claim(&c.life.Life, park.Closing); ok {
					parked = append(parked, c)
					if c.h2c == nil {
						delete(sh.m, c) // finish's remove finds it gone
					} // an HTTP/2 one counts until its GOAWAY is out (EndParked)
				}
			case c.life.CompareAndSwap(park.Idle, park.Closing) ||
				time.Since(c.started) >= h1NewGrace && c.life.CompareAndSwap(park.New, park.Closing):
				c.closeConn()
			}
		}
		n += len(sh.m)
		sh.mu.Unlock()
	}
	for _, c := range parked {
		c.EndParked(true)
	}
	return n
}

// closeAll closes every connection and refuses new ones. Parked connections are claimed
// from the parker (never closed under it); the others are marked Closing with a CAS,
// so that a connection that parks meanwhile is claimed on the next turn instead.
func (set *connSet) closeAll() {
	var parked []*tcpConn
	set.closed.Store(true)
	for i := range set.shards {
		sh := &set.shards[i]
		sh.mu.Lock()
		for c := range sh.m {
			for {
				st := c.life.State()
				if st == park.Parked {
					if _, ok := c.pk.Claim(&c.life.Life, park.Closing); ok {
						parked = append(parked, c)
						delete(sh.m, c)
						break
					}
					continue // unparked meanwhile: it has a goroutine again
				}
				if st == park.Sleeping {
					break // its goroutine ends it: the parker refuses a park while the server drains
				}
				if st.Ended() || c.life.CompareAndSwap(st, park.Closing) {
					c.closeConn()
					break
				}
			}
		}
		sh.mu.Unlock()
	}
	for _, c := range parked {
		c.EndParked(false)
	}
}

// closeConn closes c's client connection for Shutdown, from another goroutine than
// c's. A plain connection's goroutine may be inside RawConn.Read for as long as a
// request takes (loopRaw, h1raw.go), and Close waits until no call holds the
// descriptor: so such a connection is shut down in both directions at once (the client
// sees the end, a read ends, a write fails, as after a close) and closed without
// waiting, under the set's lock. The closing goroutine belongs to the set's wait group,
// which c's own goroutine still holds (so the Add is legal while Shutdown waits), and
// it ends once c's goroutine has left RawConn.Read.
func (c *tcpConn) closeConn() {
	sc, ok := c.cc.Conn.(interface {
		CloseRead() error
		CloseWrite() error
	})
	if !canRawLoop || c.secure || !ok {
		_ = c.cc.Conn.Close()
		return
	}
	_ = sc.CloseRead()
	_ = sc.CloseWrite()
	c.s.conns.wg.Go(func() { _ = c.cc.Conn.Close() })
}

// acceptLoop accepts connections on ln and serves each on the fast path; ho receives
// those handed to net/http. It returns nil when ln was closed by Shutdown or closeNow.
func (s *Server) acceptLoop(ln net.Listener, ho *handoffListener) error {
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.draining.Load() {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || isTemporaryAcceptError(err) {
				// Out of file descriptors and the like: back off as net/http does.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				s.log.Warn("accept failed; retrying", zap.Error(err))
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		cc := nc.(*clientConn)
		c := &tcpConn{s: s, cc: cc, life: cc.life, ho: ho, secure: cc.isTLS(), started: time.Now()}
		// Counted before it joins the set: a connection in the set always holds the wait
		// group, which closeConn relies on.
		s.conns.wg.Add(1)
		if !s.conns.add(c) {
			s.conns.wg.Done()
			_ = nc.Close()
			continue
		}
		go func() {
			defer s.conns.wg.Done()
			c.serve()
		}()
	}
}

// serve runs the connection until it closes, is handed off or parks.
func (c *tcpConn) serve() {
	c.s.totals.Conn(stats.ProtoHTTP1, 1)
	c.finish(c.run())
}

// finish ends a serving goroutine: it parks the idle connection (h1idle.go), hands it
// to net/http or closes it. It also closes a parked connection its claimer owns.
func (c *tcpConn) finish(handoff bool) {
	s := c.s
	for c.h2Parked {
		c.h2Parked = false
		c.dropTLSBuffers()
		if !s.draining.Load() && c.pk.Park(c, c.parkedDeadline()) {
			parkedTotal.Add(1)
			return // the parker owns it now
		}
		// The parker could not take it (Shutdown meanwhile, or it stopped): serve on;
		// the engine ends the connection itself if Shutdown or closeAll got to it.
		c.h2Ran(c.h2c.Resume())
	}
	for c.parking {
		c.parking = false
		if c.park() {
			return // the parker owns it now
		}
		if c.life.State().Ended() || s.draining.Load() {
			break // Shutdown or a strike ended it meanwhile
		}
		// The parker could not take it: serve on without parking.
		c.parkable = false
		c.rbuf = getReadBuf()
		c.dlIdle = false
		handoff = c.loop()
	}
	s.conns.remove(c)
	s.totals.Conn(stats.Proto(c.cc.proto.Load()), -1)
	st := c.life.State()
	if handoff && !st.Ended() && !s.draining.Load() {
		// net/http sets its own read deadlines, not write ones: ours must not outlive
		// the fast path.
		_ = c.cc.SetWriteDeadline(time.Time{})
		if c.w > c.r {
			c.cc.pending = bytes.Clone(c.rbuf[c.r:c.w]) // dropped once read (clientConn.Read)
		}
		putReadBuf(c.rbuf) // not kept for the handed-off connection's life (issue 33)
		c.rbuf = nil
		c.ho.handoff(c.cc)
		return
	}
	// Closed here: the word says it is ended (Closing), unless a strike said so first.
	for !st.Ended() && !c.life.CompareAndSwap(st, park.Closing) {
		st = c.life.State()
	}
	if st == park.Struck {
		c.cc.resetOnClose() // ended for abuse
	}
	c.cc.flushTail(s, true)
	_ = c.cc.Close()
	putReadBuf(c.rbuf)
	c.rbuf = nil
}

// run serves requests; it returns true to hand the connection to net/http.
func (c *tcpConn) run() (handoff bool) {
	s := c.s
	if c.cc.fromLB && !s.takeProxyHeader(c.cc) {
		return false // balancer.go
	}
	if s.h1Off {
		return true
	}
	if c.secure {
		_ = c.cc.SetReadDeadline(time.Now().Add(s.cfg.ReadHeaderTimeout))
		if err := c.cc.handshake(); err != nil {
			return false
		}
		switch p := c.cc.tc.ConnectionState().NegotiatedProtocol; {
		case p == "h2" && s.ownH2:
			c.serveH2() // h2serve.go
			return false
		case p == "h2":
			return true
		case p != "" && p != "http/1.1" && s.extraProto(p):
			return false // an ACME TLS-ALPN-01 validation: the handshake was all of it
		}
		c.altSvc = s.h3.altSvc != nil
	}
	c.ip = clientIP(c.cc.RemoteAddr().String())
	c.trusted = s.isTrusted(c.ip)
	c.setParkable()
	c.rbuf = getReadBuf()
	return c.loop()
}

// setParkable makes c park when idle, where the server parks and c can.
func (c *tcpConn) setParkable() {
	if pk := c.s.parker; pk != nil && c.s.cfg.IdleTimeout > h1ParkAfter && c.rawConn() != nil && c.canParkTLS() {
		c.parkable, c.pk = true, pk
	}
}

// loop serves requests until the connection closes, is handed off (true) or parks.
func (c *tcpConn) loop() (handoff bool) {
	if rc := c.rawLoopConn(); rc != nil {
		return c.loopRaw(rc) // h1raw.go
	}
	for {
		if done, handoff := c.after(c.step(c.readHead())); done {
			return handoff
		}
	}
}

// What the loop does after step (loopRaw: once its RawConn.Read callback has returned,
// because all of these but the first two read the client through c.cc).
const (
	h1Next    = iota // read and serve the next request
	h1End            // close the connection
	h1Give           // hand it to net/http
	h1ToPark         // park it
	h1Refuse         // refuse c.work's head (nil: none was parsed) as malformed
	h1ServeH2        // serve prior-knowledge h2c
	h1Body           // read the rest of c.work's body, then serve it
)

// step acts on readHead's answer n: it serves a request whose body is in the buffer
// already and says what is left to do (c.work and c.headLen hold the request it is
// about). It reads nothing from the client.
func (c *tcpConn) step(n int) int {
	s := c.s
	switch n {
	case h1BadReq:
		return h1Refuse
	case h1Park:
		return h1ToPark
	case h1Close:
		return h1End
	case h1HandOff:
		return h1Give
	}
	w := getWork()
	switch h1wire.ParseRequest(&w.req, c.rbuf[c.r:c.r+n], w.reqFields[:]) {
	case h1wire.Fast:
		if !c.secure && s.cfg.HTTPChallenge != nil && isACMEChallenge(w.req.Target()) {
			putWork(w)
			return h1Give // Config.HTTPChallenge is asked on net/http's path (handler.go)
		}
	case h1wire.Other:
		if (c.secure || c.served > 0) && bytes.HasPrefix(c.rbuf[c.r:c.w], []byte(h2PrefacePrefix)) {
			// Prior-knowledge HTTP/2 starts a plain connection or nothing: not the
			// middle of an HTTP/1.1 one, nor TLS that did not negotiate h2.
			c.work = w
			return h1Refuse
		}
		if s.ownH2 && bytes.HasPrefix(c.rbuf[c.r:c.w], []byte(h2PrefacePrefix)) {
			putWork(w)
			return h1ServeH2 // prior-knowledge h2c on a fresh plain connection (h2serve.go)
		}
		if !c.secure && c.w-c.r < len(h2PrefacePrefix) {
			// net/http would wait for more bytes to rule out the h2c preface; no
			// request this short is well-formed.
			c.work = w
			return h1Refuse
		}
		putWork(w)
		return h1Give
	default:
		c.work = w
		return h1Refuse
	}
	if cl := w.req.ContentLength; cl > 0 {
		if int64(n)+cl > int64(len(c.rbuf)) {
			putWork(w)
			return h1Give // a larger body streams through net/http
		}
		if c.r+n+int(cl) > len(c.rbuf) {
			c.compact()
			h1wire.ParseRequest(&w.req, c.rbuf[:n], w.reqFields[:])
		}
		if c.w < c.r+n+int(cl) {
			c.work, c.headLen = w, n
			return h1Body
		}
	}
	return c.serveOne(w, n)
}

// serveOne serves the request in w, whose head is n bytes long and whose body is read.
func (c *tcpConn) serveOne(w *h1Work, n int) int {
	keep := c.serveRequest(w, n)
	putWork(w)
	if !keep {
		return h1End
	}
	return h1Next
}

// after does what step left to do (next); done: the loop ends, handing the connection
// off or not.
func (c *tcpConn) after(next int) (done, handoff bool) {
	w := c.work
	c.work = nil
	switch next {
	case h1Next:
		return false, false
	case h1Give:
		return true, true
	case h1ToPark:
		c.parking = true
	case h1Refuse:
		c.refuse(w, outcomeBadRequest, errMalformedHead)
		if w != nil {
			putWork(w)
		}
	case h1ServeH2:
		c.serveH2() // h2serve.go
	case h1Body:
		n := c.headLen
		if err := c.readBody(c.r + n + int(w.req.ContentLength)); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				c.refuse(w, outcomeBodyTimeout, err)
			}
			putWork(w)
			return true, false
		}
		return c.serveOne(w, n) == h1End, false
	}
	return true, false
}

const (
	h1Close   = -1
	h1HandOff = -2
	h1BadReq  = -3 // what was read cannot be the start of a well-formed head
	h1Park    = -4 // idle past h1ParkAfter: give the buffer back and wait without it
	h1Wait    = -5 // inside loopRaw's callback: wait for the client (h1raw.go)
)

// h2PrefacePrefix is what net/http reads of a plain connection before it decides that
// it is not prior-knowledge HTTP/2.
const h2PrefacePrefix = "PRI * HTTP/2.0"

// errMalformedHead is the access log's reason for a refused head.
var errMalformedHead = errors.New("proxy: malformed or ambiguous request head")

// refuse answers o (400 for a malformed head, 408 for a body that did not arrive in
// time) to the request in w (nil when none was parsed), records it in the totals and the
// access log with err as the reason, and ends the connection: its write side is closed
// and what the client still sends is read and dropped for a moment, so that the answer
// is not lost to a reset (net/http's rule).
func (c *tcpConn) refuse(w *h1Work, o outcome, err error) {
	s := c.s
	if w == nil {
		w = getWork()
		defer putWork(w)
	}
	c.now = time.Now()
	c.closing = true
	p := w.begin(c, c.w-c.r)
	p.refuse(o)
	p.err = err
	s.serve(p)
	cc := c.cc
	c.r = c.w
	_ = cc.CloseWrite()
	_ = cc.SetReadDeadline(time.Now().Add(h1RefuseLinger))
	for {
		if _, err := cc.Read(c.rbuf); err != nil {
			return
		}
	}
}

// h1RefuseLinger is how long a refused connection's remaining input is drained.
const h1RefuseLinger = 500 * time.Millisecond

// readHead waits until rbuf[r:] starts with a complete request head and returns its
// length, or h1Close or h1HandOff. Deadlines: the first request and a head that arrives
// in pieces get ReadHeaderTimeout (slowloris), the wait between requests IdleTimeout.
// Inside loopRaw's callback it may also return h1Wait; called again after the wait, it
// goes on with the read it waited for.
func (c *tcpConn) readHead() int {
	s := c.s
	if !c.headWait {
		if c.r == c.w {
			c.r, c.w, c.scanned = 0, 0, 0
		}
		c.headerDeadline = false
		if c.served == 0 && !c.secure {
			_ = c.cc.SetReadDeadline(time.Now().Add(s.cfg.ReadHeaderTimeout))
			c.headerDeadline, c.dlIdle = true, false
		}
	}
	for {
		if c.headWait {
			// Back from a wait: what follows was done before it, as before a blocked Read.
			c.headWait = false
		} else if c.w > c.r {
			if n := h1wire.HeadEnd(c.rbuf[c.r:c.w], c.scanned); n >= 0 {
				c.scanned = 0
				return n
			}
			if headGarbled(c.rbuf[c.r:c.w], c.scanned) {
				return h1BadReq // a bare CR or LF, or a control byte: refused at once
			}
			c.scanned = c.w - c.r
			if c.w == len(c.rbuf) {
				if c.r == 0 {
					return h1HandOff // net/http applies MaxHeaderBytes
				}
				c.compact()
			}
			if !c.headerDeadline {
				_ = c.cc.SetReadDeadline(time.Now().Add(s.cfg.ReadHeaderTimeout))
				c.headerDeadline, c.dlIdle = true, false
			}
		} else if c.served > 0 && !c.headerDeadline {
			if !c.toIdle() || s.draining.Load() {
				return h1Close
			}
			if c.idleDeadlineStale() {
				c.setIdleDeadline()
			}
			c.markRecords()
			if err := c.awaitIdle(); err != nil {
				return c.readFailed(err) // TLS: the idle wait ended without a byte (h1idle.go)
			}
		}
		if c.rbuf == nil {
			c.rbuf = getReadBuf() // given back for the last wait (below)
		}
		nr, err := c.read(c.rbuf[c.w:])
		if err == errRawWait {
			c.headWait = true
			if c.r == c.w {
				// Nothing of a request is buffered: the buffer goes back to the pool
				// while the connection waits in the poller (an awake idle connection
				// keeps none: park.Pace).
				putReadBuf(c.rbuf)
				c.rbuf, c.r, c.w, c.scanned = nil, 0, 0, 0
			}
			return h1Wait
		}
		if nr > 0 && !c.activate() {
			return h1Close
		}
		c.w += nr
		if err != nil {
			if nr > 0 && c.w > c.r {
				// Data and an error together: serve what is complete, then stop.
				if h1wire.HeadEnd(c.rbuf[c.r:c.w], 0) >= 0 {
					continue
				}
			}
			if c.recordInPart(err) {
				// Part of a TLS record came during the idle wait: a request is on its
				// way (busy, as when a plain head has begun), under ReadHeaderTimeout
				// from now (h1idle.go).
				if !c.activate() {
					return h1Close
				}
				_ = c.cc.SetReadDeadline(time.Now().Add(s.cfg.ReadHeaderTimeout))
				c.headerDeadline, c.dlIdle = true, false
				continue
			}
			return c.readFailed(err)
		}
	}
}

// readFailed is readHead's answer to a read error err that left no complete head.
func (c *tcpConn) readFailed(err error) int {
	if c.shouldPark(err) {
		return h1Park
	}
	return h1Close
}

// headGarbled reports whether b[from:], the part of an incomplete head not yet looked at,
// holds what no well-formed head holds before its end: a bare LF or CR (a trailing CR
// may still get its LF), or a control byte other than HTAB. Such a head would otherwise
// wait for a CRLF CRLF that may never come.
func headGarbled(b []byte, from int) bool {
	from = max(from-1, 0) // a CR that ended the last look may have got a wrong follower
	if from > 0 && b[from] == '\n' && b[from-1] == '\r' {
		from++
	}
	b = b[from:]
	if h1wire.HasBareLineEnd(b) {
		return true
	}
	for _, c := range b {
		if c != '\r' && c != '\n' && h1wire.BadValueByte[c] {
			return true
		}
	}
	return false
}

// setIdleDeadline sets the deadline of the wait for the next request: the idle timeout,
// or, for a connection that parks, h1ParkAfter (h1ParkSoon in a crowd) or what its
// client's pace asks for (park.Pace, up to h1AwakeMax); the idle timeout then applies
// to the park.
func (c *tcpConn) setIdleDeadline() {
	c.dlSetAt = time.Now()
	d := c.s.cfg.IdleTimeout
	if c.parkable {
		d = h1ParkAfter
		if c.s.crowded() {
			d = h1ParkSoon
		}
		d = min(c.pace.Awake(d, h1ParkSoon, h1AwakeMax), c.s.cfg.IdleTimeout)
	}
	c.dlWait = d
	_ = c.cc.SetReadDeadline(park.Deadline(c.dlSetAt, d)) // one wake-up moves many (park.Coarse)
	c.dlIdle = true
}

// crowded reports whether more than parkCrowd goroutines run: idle connections then
// park after h1ParkSoon.
func (s *Server) crowded() bool { return runtime.NumGoroutine() > s.parkCrowd }

// idleDeadlineStale reports whether the idle deadline set last is old enough to be
// renewed: after h1IdleSlack, or half its wait when that is shorter (h1ParkSoon), so a
// connection busy for longer than its wait is not taken for idle.
func (c *tcpConn) idleDeadlineStale() bool {
	return !c.dlIdle || time.Since(c.dlSetAt) >= min(h1IdleSlack, c.dlWait/2)
}

// activate marks the connection busy; false when it was ended meanwhile (Shutdown, a
// strike).
func (c *tcpConn) activate() bool {
	for {
		switch st := c.life.State(); st {
		case park.Active:
			return true
		case park.New, park.Idle:
			if c.life.CompareAndSwap(st, park.Active) {
				return true
			}
		default:
			return false
		}
	}
}

// toIdle marks the connection idle between requests; false when it was ended
// meanwhile.
func (c *tcpConn) toIdle() bool {
	return c.life.CompareAndSwap(park.Active, park.Idle) || c.life.State() == park.Idle
}

// readBody reads until rbuf holds end bytes (a body of at most the buffer's size). What
// is still missing must arrive within ClientBodyTimeout; a read error (a timeout, the
// client gone) is returned.
func (c *tcpConn) readBody(end int) error {
	if c.w >= end {
		return nil
	}
	_ = c.cc.SetReadDeadline(time.Now().Add(c.s.cfg.ClientBodyTimeout))
	c.dlIdle = false // readHead sets its own deadline again
	for c.w < end {
		nr, err := c.cc.Read(c.rbuf[c.w:])
		c.w += nr
		if err != nil && c.w < end {
			return err
		}
	}
	return nil
}

func (c *tcpConn) compact() {
	n := copy(c.rbuf, c.rbuf[c.r:c.w])
	c.r, c.w = 0, n
}

// handoffListener is the net.Listener net/http serves handed-off connections from.
type handoffListener struct {
	addr net.Addr
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newHandoffListener(addr net.Addr) *handoffListener {
	return &handoffListener{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *handoffListener) Addr() net.Addr { return l.addr }

// handoff gives c to net/http, or closes it when net/http has stopped.
func (l *handoffListener) handoff(c net.Conn) {
	select {
	case l.ch <- c:
	case <-l.done:
		_ = c.Close()
	}
}

// serveHandoffs runs srv on ho (owned by Serve).
func serveHandoffs(srv *http.Server, ho *handoffListener) error {
	err := srv.Serve(ho)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// isTemporaryAcceptError: accept failures that pass (descriptor limits, a connection
// aborted before it was accepted).
func isTemporaryAcceptError(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.ENOBUFS) ||
		errors.Is(err, syscall.ENOMEM)
}
