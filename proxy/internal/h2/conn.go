package h2

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/serve-zone/ingress/proxy/internal/park"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Handler serves request streams. ServeH2 runs on a goroutine of its own per stream
// (reused for later streams); when it returns the response is complete (Close is
// implied if the head was written, a reset with INTERNAL_ERROR if nothing was), and the
// Stream must no longer be used, nor anything it returned.
type Handler interface {
	ServeH2(st *Stream)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(st *Stream)

// ServeH2 calls f(st).
func (f HandlerFunc) ServeH2(st *Stream) { f(st) }

// Conn is one HTTP/2 server connection. Create it with NewConn and run it with Serve;
// Shutdown and Close may be called from any goroutine.
type Conn struct {
	cfg Config
	nc  net.Conn
	h   Handler

	// The read loop's own state.
	in      arrivals
	br      *bufio.Reader
	budget  budgetReader
	fr      *http2.Framer
	hdec    *hpack.Decoder // emits into hb (headers.go)
	hb      headerBlock
	dlSetAt time.Time // when the read deadline was last armed (under mu)
	dlIdle  bool      // it was armed for an idle connection
	pingOut bool      // a PING of ours is unanswered
	resets  bucket
	junk    bucket

	// The writer's own state (writer.go).
	bw   *bufio.Writer
	wfr  *http2.Framer
	henc *hpack.Encoder
	hbuf bytes.Buffer
	// encLimit is the client's SETTINGS_HEADER_TABLE_SIZE, when it sent one
	// (encLimitSet): the bound of the encoder's table (newEncoder).
	encLimit    uint32
	encLimitSet bool
	items       []item
	batch       []*Stream // the streams with items in the batch being written (inBatch)
	wdlSetAt    time.Time
	maxFrame    uint32 // peerMaxFrame as of the batch being written

	// Shared state, under mu.
	mu      sync.Mutex
	wake    sync.Cond // the writer waits on it
	ctrl    []item    // control frames for the writer, in order
	ready   []*Stream // streams with something the writer can send
	blocked []*Stream // streams waiting for the connection's send window
	streams map[uint32]*Stream
	free    []*Stream // reusable streams (reuse.go)
	workers []*worker // parked stream goroutines (reuse.go)
	slots   int       // streams open or with a handler still running
	maxSeen uint32    // highest client stream id seen
	opened  uint32    // streams the client opened (Config.MaxStreams)
	// resetIDs are the streams reset last (lateframes.go), made on the first reset;
	// resetNext is where the next one goes.
	resetIDs  *[resetMemory]uint32
	resetNext int
	lastIdle  time.Time
	pace      park.Pace // the client's pace: the starts of its busy periods (startStream)
	// parkAfter is how long this idle period waits before the connection parks
	// (Config.ParkAfter, or ParkSoon when crowded: idleFrom).
	parkAfter time.Duration
	// goingAway: a GOAWAY was queued; streams above goawayID are ignored. closing: the
	// writer ends once its queue is written. dead: the socket is closed.
	goingAway, closing, dead bool
	goawayID                 uint32
	goawayCode               http2.ErrCode
	abused                   bool // the connection ends for abuse (connError.abusive)
	aborted                  bool // Abort was called (abort.go)
	abortTimer               *time.Timer
	sendWin                  int64 // connection send window
	peerInitWin              int64
	peerMaxFrame             uint32
	recvWin                  int32 // connection receive window left to the client
	recvUnacked              int32 // consumed, not yet given back
	connStall                *time.Timer
	// wuCredit is how many WINDOW_UPDATE frames the client may send for free: two per
	// DATA frame sent and per stream opened (capped at wuCreditMax); beyond it they are
	// charged as frames that do no work, which stops a WINDOW_UPDATE flood.
	wuCredit int
	writeErr error // why the writer failed

	// Parking (park.go). parking: the writer is asked to end (under mu); parked: the
	// connection has no goroutine of its own (under mu).
	parking, parked bool

	ctx        context.Context
	cancel     context.CancelFunc
	stopCtx    func() bool // stops ctx's AfterFunc (Close); none while parked
	handlers   sync.WaitGroup
	writerDone chan struct{} // closed when the writer goroutine of the time ends
}

// NewConn prepares to serve nc with h. nc's first bytes must be the client preface
// (replayed by nc itself if the caller already read them).
func NewConn(nc net.Conn, cfg Config, h Handler) *Conn {
	cfg.setDefaults()
	c := &Conn{cfg: cfg, nc: nc, h: h}
	c.wake.L = &c.mu
	c.streams = make(map[uint32]*Stream)
	c.peerInitWin = initialWindow
	c.sendWin = initialWindow
	c.peerMaxFrame = defaultMaxFrame
	c.recvWin = cfg.ConnWindow
	c.resets = newBucket(cfg.ResetBurst, cfg.ResetRate)
	c.junk = newBucket(cfg.JunkBurst, cfg.JunkRate)
	return c
}

// Serve serves the connection until it ends (the client closes it, a protocol error,
// a timeout, Shutdown's drain finishing, Close, or ctx being cancelled), then closes it
// and waits for every stream handler. It returns nil for a clean end, and ErrParked
// when the connection parked (Config.ParkAfter): see Resume.
func (c *Conn) Serve(ctx context.Context) error {
	c.ctx, c.cancel = context.WithCancel(ctx)
	c.stopCtx = context.AfterFunc(c.ctx, c.Close)

	c.in.r = c.nc
	c.takeReader()
	c.budget.clock = &c.in
	c.budget.cut = c.cutFrame
	c.budget.timeout = c.cfg.HeaderTimeout
	c.hdec = hpack.NewDecoder(4096, c.emitField)
	c.hdec.SetMaxStringLength(int(c.cfg.MaxHeaderBytes))
	c.henc = c.newEncoder(false)

	// Our SETTINGS and the connection window go first, before the client's preface is
	// even read (RFC 9113 §3.4 allows it), and before a GOAWAY that Shutdown or Abort,
	// called before Serve, queued already: SETTINGS must be the first frame we send.
	c.mu.Lock()
	c.idleFrom(time.Now())
	early := c.ctrl
	c.ctrl = append(make([]item, 0, len(early)+2), item{kind: itSettings})
	if d := c.cfg.ConnWindow - initialWindow; d > 0 {
		c.ctrl = append(c.ctrl, item{kind: itWindow, val: uint32(d)})
	}
	c.ctrl = append(c.ctrl, early...)
	c.startWriter()
	c.mu.Unlock()

	return c.run(c.readPreface())
}

// run carries on after a read loop returned err: it parks the connection when the loop
// asked to (errPark) and it is still quiet, else it reads on; any other err ends the
// connection (end).
func (c *Conn) run(err error) error {
	for err == errPark {
		if err = c.parkConn(); err == nil {
			return ErrParked
		}
		if err == errPark { // not quiet any more: read on
			err = c.readFrames()
		}
	}
	return c.end(err)
}

// end ends the connection after its read loop returned err: the writer writes what is
// queued (a GOAWAY), a draining connection's late bytes are read and dropped for a
// moment, then the socket closes and the handlers are waited for.
func (c *Conn) end(err error) error {
	defer c.cancel()
	defer c.stopCtx()
	c.mu.Lock()
	c.closing = true
	c.wake.Signal()
	// A client ended for abuse is not read any further: draining a flood would be doing
	// its work for it.
	drain := c.goingAway && !c.dead && !c.abused
	c.mu.Unlock()
	select {
	case <-c.writerDone:
	case <-time.After(c.cfg.WriteTimeout):
	}
	if drain {
		// Let the client read our GOAWAY before the socket goes: what it still sends
		// is read and dropped for a moment instead of answered with a TCP reset.
		c.drainReads()
	}
	c.Close()
	<-c.writerDone
	c.handlers.Wait()
	c.giveReader()
	c.mu.Lock()
	if c.abortTimer != nil {
		c.abortTimer.Stop()
	}
	c.mu.Unlock()
	c.mu.Lock()
	werr := c.writeErr
	c.mu.Unlock()
	if werr != nil {
		return werr // the read loop's error, if any, follows from it
	}
	if err == io.EOF || errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// readBufferSize is the read loop's buffer: many small frames per read; larger DATA
// payloads are read past it.
const readBufferSize = 4 << 10

// drainTime bounds how long a closing connection reads and drops the client's bytes.
const drainTime = time.Second

func (c *Conn) drainReads() {
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(drainTime))
	_, _ = io.Copy(io.Discard, io.LimitReader(c.br, drainBytes))
}

// drainBytes bounds what a closing connection reads and drops.
const drainBytes = 64 << 10

// Close closes the connection now: every stream is reset, every handler's Read and
// Write fail. Serve returns once the handlers have.
func (c *Conn) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closeLocked()
}

func (c *Conn) closeLocked() {
	if c.dead {
		return
	}
	c.dead = true
	c.closing = true
	_ = c.nc.Close()
	for _, st := range c.streams {
		st.resetLocked(ErrConnClosed)
		c.closeStream(st)
	}
	c.dropReuse()
	if c.connStall != nil {
		c.connStall.Stop()
	}
	c.wake.Broadcast()
}

// Shutdown starts a graceful stop: GOAWAY with the last stream id seen, new streams
// ignored, and the connection closed once the streams in progress are done. It does not
// wait; Serve returns when the drain is over (callers bound it with Close).
func (c *Conn) Shutdown() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.goAwayLocked(http2.ErrCodeNo)
	c.checkDrained()
}

// goAwayLocked queues a GOAWAY with the last stream id seen (once).
func (c *Conn) goAwayLocked(code http2.ErrCode) {
	if c.goingAway || c.dead {
		return
	}
	c.goingAway = true
	c.goawayID = c.maxSeen
	c.goawayCode = code
	c.ctrl = append(c.ctrl, item{kind: itGoAway, id: c.maxSeen, code: code})
	c.wake.Signal()
}

// checkDrained wakes the read loop (through its deadline) when a drain is over.
func (c *Conn) checkDrained() {
	if c.goingAway && c.slots == 0 {
		_ = c.nc.SetReadDeadline(time.Now())
	}
}

// connError is a connection error (RFC 9113 §5.4.1): GOAWAY with code, then close.
type connError struct {
	code   http2.ErrCode
	reason string
}

func (e connError) Error() string { return "h2: connection error " + e.code.String() + ": " + e.reason }

// abusive reports whether e is a verdict of abuse (Config.OnAbuse): a budget exhausted
// (ENHANCE_YOUR_CALM), or a header block that went on after the framer had given up on
// it (answered PROTOCOL_ERROR, as RFC 9113 wants, but a CONTINUATION flood all the same).
func (e connError) abusive() bool {
	return e.code == http2.ErrCodeEnhanceYourCalm || e.reason == reasonHeaderBlockOverLimit
}

// reasonHeaderBlockOverLimit: a CONTINUATION of a header block that already went past
// MaxHeaderBytes, which the client was told (SETTINGS MAX_HEADER_LIST_SIZE), was refused
// (headerFragment): the first frame past the limit ends the connection. (A fragment more
// than twice what is left of the list is refused; a block of more than half the limit
// in encoded bytes is where that can happen without an HPACK trick.)
const reasonHeaderBlockOverLimit = "header block over the limit (CONTINUATION flood)"

// yieldEvery is how many frames the read loop handles back to back, without waiting for
// the socket, before it lets other goroutines run.
const yieldEvery = 64

// readPreface reads the client preface and its SETTINGS, then frames (readFrames); it
// returns why it stopped.
func (c *Conn) readPreface() error {
	c.mu.Lock()
	aborted := c.aborted
	c.mu.Unlock()
	if aborted {
		return errAborted // Abort before Serve: nothing the client sends is handled
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(c.cfg.PrefaceTimeout))
	var pre [len(http2.ClientPreface)]byte
	if _, err := io.ReadFull(c.br, pre[:]); err != nil {
		return err
	}
	if string(pre[:]) != http2.ClientPreface {
		return c.fail(connError{http2.ErrCodeProtocol, "invalid preface"})
	}
	c.budget.refill(defaultMaxFrame+9, false)
	f, err := c.fr.ReadFrame()
	if err != nil {
		return c.readFailed(err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		return c.fail(connError{http2.ErrCodeProtocol, "first frame is not SETTINGS"})
	}
	c.mu.Lock()
	err = c.onSettings(sf)
	c.dlSetAt = time.Time{}
	c.armRead(time.Now())
	// A Shutdown before Serve set a deadline that the preface's replaced: a drained
	// connection ends now, not at its idle timeout.
	c.checkDrained()
	c.mu.Unlock()
	if err != nil {
		return c.fail(err)
	}
	return c.readFrames()
}

// readFrames reads and handles frames until the connection ends or parks (errPark); it
// returns why.
func (c *Conn) readFrames() error {
	// A header block may take MaxHeaderBytes and, empty CONTINUATION frames aside,
	// headerFragment refuses fragments more than twice what is left of the list. The
	// budget is the whole block's, its frames read one ReadFrame call each.
	frameBudget := 4*int(c.cfg.MaxHeaderBytes) + 2*(defaultMaxFrame+9)
	for n := 0; ; n++ {
		if n%yieldEvery == yieldEvery-1 && c.br.Buffered() > 0 {
			// A client that keeps the buffer full (a flood, or just a busy
			// connection) would otherwise keep the processor for a whole scheduler
			// slice (10 ms): the other connections' goroutines get their turn.
			runtime.Gosched()
		}
		c.budget.refill(frameBudget-c.hb.bytes, c.hb.open)
		f, err := c.fr.ReadFrame()
		c.mu.Lock()
		if err != nil {
			err = c.readErrorLocked(err)
			c.mu.Unlock()
			if err == nil {
				continue
			}
			return c.fail(err)
		}
		if c.aborted {
			c.mu.Unlock()
			return errAborted // what was read is not handled (abort.go)
		}
		c.pingOut = false
		err = c.process(f)
		// In the middle of a header block the connection carries on as when the
		// Framer read the block in one call: no drain ends it there, and the read
		// deadline is not renewed (HeaderTimeout bounds the block anyway).
		if err == nil && !c.hb.open {
			if c.goingAway && c.slots == 0 {
				err = io.EOF // drained
			} else {
				c.armRead(c.in.last) // when the frame's bytes arrived
			}
		}
		c.mu.Unlock()
		if err != nil {
			return c.fail(err)
		}
	}
}

// readFailed handles an error of the first ReadFrame.
func (c *Conn) readFailed(err error) error {
	c.mu.Lock()
	err = c.readErrorLocked(err)
	c.mu.Unlock()
	if err == nil {
		err = connError{http2.ErrCodeProtocol, "bad first frame"}
	}
	return c.fail(err)
}

// readErrorLocked turns a ReadFrame error into nil (carry on) or the error that ends the
// connection.
func (c *Conn) readErrorLocked(err error) error {
	var se http2.StreamError
	var ce http2.ConnectionError
	switch {
	case errors.As(err, &se):
		// An invalid frame on one stream.
		return c.headerStreamError(se.StreamID, se.Code)
	case errors.As(err, &ce):
		if http2.ErrCode(ce) == http2.ErrCodeProtocol {
			// The Framer refused a frame of a header block (a CONTINUATION missing, or
			// on another stream; a malformed HEADERS): judged by the block's bytes so
			// far, as headerFragment's own refusals are.
			if c.hb.open {
				c.hb.open = false
				return c.protocolError(c.hb.bytes + c.budget.n)
			}
			if c.budget.typ == byte(http2.FrameHeaders) {
				return c.protocolError(c.budget.n)
			}
		}
		return connError{http2.ErrCode(ce), "framer"}
	case errors.Is(err, http2.ErrFrameTooLarge):
		return connError{http2.ErrCodeFrameSize, "frame too large"}
	case errors.Is(err, errFrameBudget):
		return connError{http2.ErrCodeEnhanceYourCalm, "CONTINUATION flood"}
	case errors.Is(err, errFrameTooSlow):
		return connError{http2.ErrCodeEnhanceYourCalm, "header block too slow"}
	case errors.Is(err, os.ErrDeadlineExceeded):
		return c.readTimeout()
	}
	return err
}

// readTimeout handles an expired read deadline: the end of a drain or of an idle
// connection, a PING to send, or the PING's answer overdue.
func (c *Conn) readTimeout() error {
	if c.dead {
		return net.ErrClosed
	}
	if c.aborted {
		return errAborted
	}
	if c.goingAway && c.slots == 0 {
		return io.EOF
	}
	if c.inHeaderBlock() {
		// A header block is bounded by HeaderTimeout from its first byte, whatever
		// deadline was armed when it began (the idle connection's wake-up to park, a
		// PING's): between its frames the wait goes on until then; past it, or inside
		// a frame (cutFrame found it past), the block is too slow.
		if c.budget.n == 0 && c.extendForBlock(time.Now()) {
			return nil
		}
		return connError{http2.ErrCodeEnhanceYourCalm, "header block too slow"}
	}
	if c.budget.n > 0 {
		// The deadline cut a frame: the framer's position is lost.
		return errors.New("h2: read timeout inside a frame")
	}
	now := time.Now()
	if c.slots == 0 {
		// Idle: no PING, the idle timeout alone decides.
		if now.Sub(c.lastIdle) >= c.cfg.IdleTimeout {
			c.goAwayLocked(http2.ErrCodeNo)
			return io.EOF
		}
		c.pingOut = false
		c.dropReuse() // quiet: no parked workers or free streams kept
		if c.cfg.ParkAfter > 0 && now.Sub(c.lastIdle) >= c.parkAfter && c.quiet() {
			return errPark // park.go
		}
		c.dlSetAt, c.dlIdle = now, true
		_ = c.nc.SetReadDeadline(park.Deadline(now, c.idleDeadline(now).Sub(now)))
		return nil
	}
	if c.pingOut {
		return errors.New("h2: PING timeout")
	}
	c.pingOut = true
	if err := c.queueCtrl(item{kind: itPing}); err != nil {
		return err
	}
	_ = c.nc.SetReadDeadline(now.Add(c.cfg.PingTimeout))
	c.dlSetAt, c.dlIdle = now, false
	return nil
}

// armRead renews the read deadline: at once when the connection went from idle to busy
// (or back), else at most once per second. Busy, it is ReadIdleTimeout (then a PING);
// idle, what is left of IdleTimeout.
func (c *Conn) armRead(now time.Time) {
	idle := c.slots == 0
	if c.pingOut && !idle {
		return // the PING's deadline stands
	}
	if c.dlIdle == idle && now.Sub(c.dlSetAt) < time.Second {
		return
	}
	c.dlSetAt, c.dlIdle = now, idle
	d := c.cfg.ReadIdleTimeout
	if idle {
		d = min(d, c.idleDeadline(now).Sub(now))
		if c.hasReuse() {
			d = min(d, reuseIdle)
		}
	}
	_ = c.nc.SetReadDeadline(park.Deadline(now, max(d, 0)))
}

// fail ends the connection for err: a connection error queues a GOAWAY with its code.
func (c *Conn) fail(err error) error {
	if err == io.EOF {
		return err
	}
	var ce connError
	if errors.As(err, &ce) {
		c.mu.Lock()
		if !c.goingAway {
			c.goAwayLocked(ce.code)
		} else if ce.code != http2.ErrCodeNo {
			// A second GOAWAY may lower nothing but may carry the error.
			c.ctrl = append(c.ctrl, item{kind: itGoAway, id: c.goawayID, code: ce.code})
			c.goawayCode = ce.code
			c.wake.Signal()
		}
		abused := ce.abusive()
		c.abused = c.abused || abused
		c.mu.Unlock()
		if abused && c.cfg.OnAbuse != nil {
			// fail runs once per connection, on the read loop: told once.
			c.cfg.OnAbuse(c.nc, ce.reason)
		}
	}
	return err
}

// queueCtrl queues a control frame for the writer. A client that provokes more of them
// than the writer gets out (it does not read its socket) is cut off.
func (c *Conn) queueCtrl(it item) error {
	if len(c.ctrl) >= c.cfg.MaxQueuedControl {
		c.closeLocked()
		return connError{http2.ErrCodeEnhanceYourCalm, "too many queued control frames"}
	}
	c.ctrl = append(c.ctrl, it)
	c.wake.Signal()
	return nil
}

// spendJunk charges a frame that does no work.
func (c *Conn) spendJunk() error {
	if !c.junk.take(time.Now()) {
		return connError{http2.ErrCodeEnhanceYourCalm, "too many control frames"}
	}
	return nil
}

// spendReset charges a reset, sent or received, or a refused stream.
func (c *Conn) spendReset() error { return c.spendResets(1) }

// spendResets charges n resets at once (an oversized request head, onHeaders).
func (c *Conn) spendResets(n int) error {
	if !c.resets.takeN(time.Now(), min(n, c.resets.burst)) {
		return connError{http2.ErrCodeEnhanceYourCalm, "too many stream resets"}
	}
	return nil
}
