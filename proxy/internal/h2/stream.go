package h2

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Stream is one request stream, handed to Handler.ServeH2. Its methods are for the
// handler's goroutine (Reset and Context for any goroutine). A Stream, its Request and
// its Context must not be used once ServeH2 has returned: the connection reuses the
// object for a later stream (Conn.newStream).
type Stream struct {
	c   *Conn
	id  uint32
	h   Handler // what the stream's goroutine serves
	req Request
	ctx *streamCtx
	// wake is signalled on every change a waiting Read or Write may care about.
	wake chan struct{}
	// rwake is Read's own wake-up, for a request with a body: a handler may wait in
	// Write (for the client's window) while one of its goroutines waits in Read (for
	// the body), and one channel would let either waiter take the other's wake-up.
	// Made with the stream, never changed.
	rwake  chan struct{}
	rtimer *time.Timer // BodyTimeout for Read waits, created on the first wait
	// bodyTimeout is Config.BodyTimeout unless SetBodyTimeout changed it; 0: none.
	bodyTimeout time.Duration

	// Under c.mu. Request side:
	in           inBuf // received body bytes not yet read
	inTotal      int64
	trailers     []hpack.HeaderField
	trailerBytes int64
	recvWin      int32
	recvUnacked  int32
	continued    bool // the 100 (Continue) was queued or is not needed
	readClosed   bool // CloseRead was called

	remoteDone  bool // END_STREAM received
	reset       bool // reset by either side, or the connection is gone
	resetErr    error
	closed      bool // removed from the open streams
	handlerDone bool

	// Response side (the writer takes from here, writer.go):
	info        []int // 1xx statuses to send before the head
	headPending bool
	status      int
	fields      []hpack.HeaderField
	out         []byte // response body bytes queued; out[outOff:] not yet taken
	outOff      int
	outEnd      bool // no more body: trailers (if any) then END_STREAM
	outTrailers []hpack.HeaderField
	wroteHead   bool // WriteHead was called
	endSent     bool // the frame with END_STREAM was handed to the writer
	rstAfterEnd bool // send RST_STREAM(NO_ERROR) after END_STREAM (body left unread)
	sendWin     int64
	queued      bool // in c.ready
	parked      bool // waiting for the stream's send window
	blocked     bool // in c.blocked, waiting for the connection's send window
	stall       *time.Timer
	stallAt     time.Time // when a parked stream is reset (the stall timer checks it)
	inBatch     bool      // in c.batch: the writer may still read its items

	// Kept when the object is reused for another stream (reuse.go).
	headFields []hpack.HeaderField
}

// ID returns the stream id.
func (st *Stream) ID() uint32 { return st.id }

// Request returns the validated request head. The handler may modify it; it is valid
// until ServeH2 returns.
func (st *Stream) Request() *Request { return &st.req }

// Context is cancelled when the stream is reset or the connection ends, and when the
// handler returns.
func (st *Stream) Context() context.Context { return st.ctx }

// signal wakes the handler if it waits, in Write or Read (c.mu held or not).
func (st *Stream) signal() {
	select {
	case st.wake <- struct{}{}:
	default:
	}
	if st.rwake != nil {
		select {
		case st.rwake <- struct{}{}:
		default:
		}
	}
}

// readWake is the channel Read waits on.
func (st *Stream) readWake() chan struct{} {
	if st.rwake != nil {
		return st.rwake
	}
	return st.wake // no body: Read does not wait (remoteDone), but stay safe
}

// resetLocked marks st reset (c.mu held): its Read and Write fail with err.
func (st *Stream) resetLocked(err error) {
	if st.reset {
		return
	}
	st.reset = true
	st.resetErr = err
	st.out, st.outOff = nil, 0
	st.ctx.cancel()
	st.signal()
}

// run serves the stream on the calling goroutine (a worker, reuse.go): the handler,
// then the end of the response. st is not touched after run returns.
func (st *Stream) run() {
	c, id := st.c, st.id
	defer func() {
		p := recover()
		c.mu.Lock()
		if p != nil && !st.reset {
			_ = c.streamErrorNoCharge(st, http2.ErrCodeInternal)
		}
		if st.rtimer != nil {
			st.rtimer.Stop()
		}
		st.ctx.cancel()
		st.finishLocked() // the stream may be reused from here on
		c.mu.Unlock()
		if p != nil {
			if c.cfg.OnPanic == nil {
				panic(fmt.Sprintf("h2: handler panic on stream %d: %v", id, p))
			}
			c.cfg.OnPanic(p, debug.Stack()) // the stream was reset; the connection goes on
		}
	}()
	st.h.ServeH2(st)
}

// finishLocked ends the response when the handler returned without doing so.
func (st *Stream) finishLocked() {
	c := st.c
	if !st.reset && !st.outEnd {
		if !st.wroteHead {
			_ = c.streamErrorNoCharge(st, http2.ErrCodeInternal)
		} else {
			st.outEnd = true
			c.makeReady(st)
		}
	}
	if !st.reset && !st.remoteDone {
		// The request body was not read to its end: once the response is out, the
		// client is told to stop sending it (RFC 9113 §8.1).
		if st.endSent {
			_ = c.streamErrorNoCharge(st, http2.ErrCodeNo)
		} else {
			st.rstAfterEnd = true
		}
	}
	// Done only now: a stream closed above must not release its slot twice, nor be
	// reused while this function still works on it.
	st.handlerDone = true
	if st.closed {
		c.releaseSlot()
	}
	c.maybeReuse(st)
}

// streamErrorNoCharge resets st without charging the client (the handler decided).
func (c *Conn) streamErrorNoCharge(st *Stream, code http2.ErrCode) error {
	return c.resetStream(st, code, ErrStreamReset)
}

// resetStream resets st with code; its Read and Write return err. st may be reused
// once this returns.
func (c *Conn) resetStream(st *Stream, code http2.ErrCode, err error) error {
	id := st.id
	if !st.reset {
		st.resetLocked(err)
		c.closeStream(st)
	}
	return c.queueReset(id, code)
}

// Read reads the request body; io.EOF at its end. It waits for the client, at most
// BodyTimeout at a time (then the stream is reset and ErrBodyTimeout returned). Bytes
// read give the client its flow-control window back, so a handler that stops reading
// stops the client.
func (st *Stream) Read(p []byte) (int, error) {
	c := st.c
	c.mu.Lock()
	for {
		if st.readClosed {
			c.mu.Unlock()
			return 0, ErrReadClosed
		}
		if st.in.n > 0 {
			n := st.in.read(p)
			c.consumed(st, int32(n))
			c.mu.Unlock()
			return n, nil
		}
		switch {
		case st.remoteDone:
			c.mu.Unlock()
			return 0, io.EOF
		case st.reset:
			err := st.resetErr
			c.mu.Unlock()
			return 0, err
		}
		if !st.continued {
			st.continued = true
			if v, _ := st.req.Get("expect"); equalFold(v, "100-continue") {
				st.info = append(st.info, 100)
				c.makeReady(st)
			}
		}
		c.mu.Unlock()
		if st.bodyTimeout <= 0 {
			<-st.readWake()
			c.mu.Lock()
			continue
		}
		if st.rtimer == nil {
			st.rtimer = time.NewTimer(st.bodyTimeout)
		} else {
			st.rtimer.Reset(st.bodyTimeout)
		}
		select {
		case <-st.readWake():
			c.mu.Lock()
		case <-st.rtimer.C:
			c.mu.Lock()
			if st.in.n == 0 && !st.remoteDone && !st.reset {
				_ = c.resetStream(st, http2.ErrCodeCancel, ErrBodyTimeout)
			}
		}
		st.rtimer.Stop()
	}
}

// CloseRead ends reading of the request body for the handler (any goroutine): a Read
// waiting or to come returns ErrReadClosed. A body not received to its end is then
// treated as when the handler returns without reading it: once the response is out,
// the client is told to stop sending it.
func (st *Stream) CloseRead() {
	c := st.c
	c.mu.Lock()
	st.readClosed = true
	st.signal()
	c.mu.Unlock()
}

// SetBodyTimeout changes how long Read waits for the client (0: as long as the stream
// lives; a tunnel's client may be silent). Call it from the handler before Read.
func (st *Stream) SetBodyTimeout(d time.Duration) { st.bodyTimeout = d }

// consumed gives n read bytes of window back to the stream and the connection.
func (c *Conn) consumed(st *Stream, n int32) {
	c.returnConn(n)
	if st.remoteDone {
		return
	}
	st.recvUnacked += n
	if st.recvUnacked >= c.cfg.StreamWindow/4 {
		if c.queueCtrl(item{kind: itWindow, id: st.id, val: uint32(st.recvUnacked)}) == nil {
			st.recvWin += st.recvUnacked
			st.recvUnacked = 0
		}
	}
}

// Trailers returns the request's trailer fields, once Read has returned io.EOF.
func (st *Stream) Trailers() []hpack.HeaderField {
	st.c.mu.Lock()
	defer st.c.mu.Unlock()
	return st.trailers
}

// BodyBytes returns the request body bytes received so far and the trailers' decoded
// size, for accounting.
func (st *Stream) BodyBytes() (body, trailers int64) {
	st.c.mu.Lock()
	defer st.c.mu.Unlock()
	return st.inTotal, st.trailerBytes
}

// WriteInfo queues an informational (1xx) response.
func (st *Stream) WriteInfo(status int) error {
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := st.writableLocked(); err != nil {
		return err
	}
	if st.wroteHead {
		return ErrResponseDone
	}
	st.continued = true
	st.info = append(st.info, status)
	c.makeReady(st)
	return nil
}

// WriteHead queues the response head and the first body bytes (HEADERS and DATA leave
// in one write when they fit); end says the body is complete (no trailers). fields
// belong to the engine after the call: names lower case, no pseudo-headers, no
// connection-specific fields; their strings must never change afterwards (the HPACK
// encoder may keep them in its dynamic table). It waits only when body exceeds
// StreamBuffer.
func (st *Stream) WriteHead(status int, fields []hpack.HeaderField, body []byte, end bool) error {
	c := st.c
	c.mu.Lock()
	if err := st.writableLocked(); err != nil {
		c.mu.Unlock()
		return err
	}
	if st.wroteHead {
		c.mu.Unlock()
		return ErrResponseDone
	}
	st.wroteHead = true
	st.headPending = true
	st.status, st.fields = status, fields
	st.continued = true
	_, err := st.writeLocked(body)
	if err == nil && end {
		st.outEnd = true
	}
	c.makeReady(st)
	c.mu.Unlock()
	return err
}

// Write queues response body bytes. It waits while StreamBuffer bytes are queued
// (the client's window is the back-pressure); a stream whose window stays shut for
// WriteTimeout is reset and Write returns ErrWriteStalled.
func (st *Stream) Write(p []byte) (int, error) {
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := st.writableLocked(); err != nil {
		return 0, err
	}
	if !st.wroteHead {
		return 0, fmt.Errorf("h2: Write before WriteHead")
	}
	return st.writeLocked(p)
}

func (st *Stream) writableLocked() error {
	switch {
	case st.reset:
		return st.resetErr
	case st.c.dead:
		return ErrConnClosed
	case st.outEnd:
		return ErrResponseDone
	}
	return nil
}

// writeLocked appends p to the queued body, waiting for room (c.mu held; released while
// waiting).
func (st *Stream) writeLocked(p []byte) (int, error) {
	c := st.c
	n := 0
	for len(p) > 0 {
		if st.reset {
			return n, st.resetErr
		}
		// Queue what the client's window lets out soon, up to StreamBuffer, and at
		// least a frame's worth: a stream whose client keeps its window shut holds
		// 16 KiB, not StreamBuffer.
		limit := min(c.cfg.StreamBuffer, max(int(min(st.sendWin, c.sendWin)), minStreamBuffer))
		room := limit - (len(st.out) - st.outOff)
		if room <= 0 {
			c.makeReady(st)
			c.mu.Unlock()
			<-st.wake
			c.mu.Lock()
			continue
		}
		k := min(room, len(p))
		if st.out == nil {
			st.out = outBuf()
		}
		st.out = append(st.out, p[:k]...)
		p = p[k:]
		n += k
		c.makeReady(st)
	}
	return n, nil
}

// Close ends the response: trailers (may be nil) then END_STREAM. It does not wait.
func (st *Stream) Close(trailers []hpack.HeaderField) error {
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := st.writableLocked(); err != nil {
		return err
	}
	if !st.wroteHead {
		return fmt.Errorf("h2: Close before WriteHead")
	}
	st.outEnd = true
	st.outTrailers = trailers
	c.makeReady(st)
	return nil
}

// Reset resets the stream with code (CANCEL, INTERNAL_ERROR...): queued response bytes
// are dropped. After Close (or WriteHead with end) it does nothing.
func (st *Stream) Reset(code http2.ErrCode) {
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.reset || st.outEnd {
		return // a complete response is not taken back
	}
	_ = c.streamErrorNoCharge(st, code)
}

// minStreamBuffer is what a stream may always queue (one DATA frame of the default size).
const minStreamBuffer = defaultMaxFrame

// serve431 answers a request whose head exceeded MaxHeaderBytes.
var serve431 = HandlerFunc(func(st *Stream) {
	_ = st.WriteHead(431, []hpack.HeaderField{{Name: "content-length", Value: "0"}}, nil, true)
})

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
