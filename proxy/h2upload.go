package proxy

import (
	"errors"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/serve-zone/ingress/proxy/internal/h1wire"
	"github.com/serve-zone/ingress/proxy/internal/h2"
	"github.com/serve-zone/ingress/proxy/internal/upstream"
	"golang.org/x/net/http2/hpack"
)

// uploader sends a request's body to the target while the byte-level exchange
// (exchange.go) waits for the answer: first what the core held of it before the target
// was chosen (holdBody, bodybuf.go: all of a body that ended within
// Config.RequestBuffer), then the rest as it comes, with the client's flow control (or
// TCP's) as the back-pressure (an HTTP/2 stream returns window only for bytes read),
// framed as the head said: as it is under Content-Length, or chunked, trailers included.
// It reads the body from a bodySource: the own HTTP/2 engine's stream (h2Body) or
// net/http's request body (httpBody, forward.go). It starts once the head is written
// (Server.roundTrip calls start) and runs on a goroutine of its own, owned by the
// forwarding goroutine, which waits for it (end) before the target connection is pooled,
// closed or tried again.
//
// With Expect: 100-continue and a body that was not held (holdBody says when), it reads
// nothing from the client until the target said 100, or a second passed (as net/http's
// transport waits); a final answer that comes first means the body is not sent at all.
// The stream sends the client its own 100 at the first Read.
type uploader struct {
	src     bodySource
	chunked bool
	expect  bool
	stopped atomic.Bool // end stopped the body's reading: a failed Read is no client error
	// length is the body's stated length (-1: unknown). endWrite is set as the write
	// that ends the body begins (the one that completes the stated length, or the last
	// chunk); end then waits for it instead of stopping it (for lastWriteWait at most):
	// a target that answers as the last byte reaches it (before the write has even
	// returned) leaves its connection reusable.
	length   int64
	sent     int64
	endWrite atomic.Bool
	// The body's start, read before a target was chosen (holdBody, bodybuf.go): heldN
	// bytes in held's buffers (holdRoom each, after chunkPre bytes of room), all of the
	// body when whole. They go out first, on every attempt.
	held    []*[copyBufSize]byte
	holdArr [4]*[copyBufSize]byte // held's first buffers, without an allocation
	heldN   int64
	whole   bool
	srv     *Server // whose bound of held bytes held's buffers count against

	uc   *upstream.Conn
	cont chan struct{} // closed when the body may go (expect); by the forwarding goroutine only
	skip atomic.Bool   // the final answer came first: send nothing
	done chan struct{} // closed when run returns
	took atomic.Bool   // a body byte was read from the client beyond what is held
	// Set before done closes:
	clientErr error // reading the client's body failed (not CloseRead)
	complete  bool  // the whole body, and its end, went out
}

// expectTimeout is how long a request with Expect: 100-continue waits for the target's
// 100 before its body is sent anyway (net/http's transport: ExpectContinueTimeout).
const expectTimeout = time.Second

// start runs the upload of this attempt over uc.
func (u *uploader) start(uc *upstream.Conn) {
	u.uc = uc
	u.cont = make(chan struct{})
	u.skip.Store(false)
	u.done = make(chan struct{})
	u.clientErr, u.complete = nil, false
	u.sent = 0
	u.endWrite.Store(false)
	go u.run()
}

// proceed tells a waiting upload to go on (a 100 came). Only the forwarding goroutine
// calls it (roundTrip, answered, end).
func (u *uploader) proceed() {
	select {
	case <-u.cont:
	default:
		close(u.cont)
	}
}

// answered tells the upload that the final answer's head came: a body still waiting
// for 100 is not sent.
func (u *uploader) answered() {
	if u.expect {
		u.skip.Store(true)
		u.proceed()
	}
}

// running reports an upload started and not ended.
func (u *uploader) running() bool {
	if u == nil || u.done == nil {
		return false
	}
	select {
	case <-u.done:
		return false
	default:
		return true
	}
}

// bodyOut reports that no body is going up (none, or ended) or that the write ending
// it has begun: end then returns within lastWriteWait without stopping it.
func (u *uploader) bodyOut() bool { return !u.running() || u.endWrite.Load() }

// end stops an upload still running (the exchange is over: the client's reading is
// closed and the target connection closed, which ends a Read or Write in progress) and
// waits for it; an upload whose last write is under way is given lastWriteWait to end
// by itself first. It reports whether the body went out whole over a connection it left
// open, so that the connection may be kept.
func (u *uploader) end(uc *upstream.Conn) bool {
	if u == nil || u.done == nil {
		return true
	}
	closed := false
	if u.running() && !(u.endWrite.Load() && u.ended(lastWriteWait)) {
		u.stopped.Store(true)
		u.src.stop()
		uc.Close()
		closed = true
		u.proceed()
	}
	<-u.done
	return u.complete && !closed
}

// lastWriteWait is how long end lets the write that ends a body finish by itself: the
// target answered, so it has normally taken the bytes already (a target that answers
// early and reads no more fills its socket's buffers, and the write is stopped).
const lastWriteWait = 100 * time.Millisecond

// ended reports whether the upload ends within d.
func (u *uploader) ended(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-u.done:
		return true
	case <-t.C:
		return false
	}
}

func (u *uploader) run() {
	defer close(u.done)
	if u.expect {
		t := time.NewTimer(expectTimeout)
		select {
		case <-u.cont:
		case <-t.C:
		}
		t.Stop()
		if u.skip.Load() {
			return
		}
	}
	// What was held before the target was chosen goes first.
	for i, b := range u.held {
		n := int(min(u.heldN-int64(i)*holdRoom, holdRoom))
		if n <= 0 {
			break // a buffer taken for a read that brought only the end
		}
		if !u.send(b[:], n) {
			return
		}
	}
	if u.whole {
		u.finish()
		return
	}
	for {
		// A body that waits for its client holds no buffer while it waits (issue 33:
		// 32 KiB per streaming request in flight): one is taken for each read.
		if w, ok := u.src.(dataWaiter); ok {
			w.waitData()
		}
		bp := bufPool.Get().(*[copyBufSize]byte)
		buf := bp[:]
		n, err := u.src.Read(buf[chunkPre : len(buf)-2])
		more := true
		if n > 0 {
			u.took.Store(true)
			more = u.send(buf, n)
		}
		bufPool.Put(bp)
		if !more {
			return
		}
		switch {
		case err == io.EOF:
			u.finish()
			return
		case err != nil && u.stopped.Load():
			return
		case err != nil:
			u.clientErr = err
			u.uc.Close() // the exchange cannot go on: the answer's wait ends at once
			return
		}
	}
}

// send writes the n body bytes at buf[chunkPre:] to the target, framed in place as a
// chunk when the body goes chunked. It reports whether the upload goes on: not when the
// target stopped taking it (the answer, if any, says why), nor once the stated length
// went out whole.
func (u *uploader) send(buf []byte, n int) bool {
	out := buf[chunkPre : chunkPre+n]
	if u.chunked {
		size := strconv.AppendInt(buf[:0:chunkPre], int64(n), 16)
		at := chunkPre - len(size) - 2
		copy(buf[at:], size)
		buf[chunkPre-2], buf[chunkPre-1] = '\r', '\n'
		buf[chunkPre+n], buf[chunkPre+n+1] = '\r', '\n'
		out = buf[at : chunkPre+n+2]
	}
	last := !u.chunked && u.length >= 0 && u.sent+int64(n) >= u.length
	if last {
		u.endWrite.Store(true)
	}
	if _, werr := u.uc.Write(out); werr != nil {
		return false
	}
	u.sent += int64(n)
	if last {
		u.complete = true // the whole body went out: nothing more to read
		return false
	}
	return true
}

// finish ends the body: nothing more under Content-Length; the last chunk and the
// trailers (those a request may carry on to an HTTP/1.1 target) when chunked.
func (u *uploader) finish() {
	if !u.chunked {
		u.complete = true
		return
	}
	b := append(make([]byte, 0, 64), "0\r\n"...)
	for _, f := range u.src.trailers() {
		name := nameBytes(f.Name)
		if h1wire.IsHopByHop(name) || h1wire.RequestFieldKind(name) != h1wire.KindOther {
			continue
		}
		b = append(b, f.Name...)
		b = append(b, ": "...)
		b = append(b, f.Value...)
		b = append(b, "\r\n"...)
	}
	b = append(b, "\r\n"...)
	u.endWrite.Store(true)
	if _, err := u.uc.Write(b); err == nil {
		u.complete = true
	}
}

// outcome maps the failure of the client's body (clientErr) to what is answered.
func (u *uploader) outcome() (outcome, bool) {
	if u == nil || u.clientErr == nil {
		return 0, false
	}
	return u.src.failure(u.clientErr), true
}

// dataWaiter is a bodySource that can wait, without a buffer, until its next Read
// would not wait (bytes came, the body ended or failed).
type dataWaiter interface{ waitData() }

// bodySource is a request body as the uploader reads it.
type bodySource interface {
	Read(p []byte) (int, error)
	// stop makes a Read in progress, and every later one, fail at once: the exchange is
	// over.
	stop()
	// trailers are the body's trailers, once Read returned io.EOF.
	trailers() []hpack.HeaderField
	// failure maps a failed Read's error to what is answered.
	failure(err error) outcome
	// holding says the body is being held before a target is chosen (holdBody), or no
	// longer.
	holding(on bool)
}

// h2Body is the own HTTP/2 engine's stream as a bodySource. The engine bounds each wait
// for the client (its BodyTimeout, Config.ClientBodyTimeout); while the body is held
// (paced, holdBody), its reads go by ClientBodyTimeout's progress rule instead, as
// bodyProgress enforces it on net/http's front-end: every window must deliver
// bodyProgressBytes, counting only the time spent waiting for the client, so a body
// that trickles in is answered 408 after one window rather than held for as long as
// it keeps a byte coming.
type h2Body struct {
	st      *h2.Stream
	paced   bool
	timeout time.Duration // Config.ClientBodyTimeout
	bytes   int64         // delivered in the current window
	waited  time.Duration // spent waiting for the client in the current window
}

// holding turns the progress rule on (while the body is held) or off (the engine's own
// bound again, for the rest of the upload).
func (b *h2Body) holding(on bool) {
	b.paced, b.bytes, b.waited = on, 0, 0
	if !on {
		b.st.SetBodyTimeout(b.timeout)
	}
}

func (b *h2Body) Read(p []byte) (int, error) {
	if !b.paced {
		return b.st.Read(p)
	}
	left := b.timeout - b.waited
	if left <= 0 {
		return 0, h2.ErrBodyTimeout // the window ran out as the last read returned
	}
	b.st.SetBodyTimeout(left) // the engine resets the stream once it has waited that long
	t0 := time.Now()
	n, err := b.st.Read(p)
	b.waited += time.Since(t0)
	if b.bytes += int64(n); b.bytes >= bodyProgressBytes {
		b.bytes, b.waited = 0, 0 // the next window starts
	}
	return n, err
}

// waitData waits as Read would, reading nothing: the engine's Read with no room returns
// once bytes are there, or with the body's end or failure, which the next Read returns
// again. While the body is paced (held) it does nothing: holdBody reads into buffers it
// holds anyway.
func (b *h2Body) waitData() {
	if !b.paced {
		_, _ = b.st.Read(nil)
	}
}

func (b *h2Body) stop()                         { b.st.CloseRead() }
func (b *h2Body) trailers() []hpack.HeaderField { return b.st.Trailers() }
func (b *h2Body) failure(err error) outcome {
	switch {
	case errors.Is(err, h2.ErrBodyTimeout):
		return outcomeBodyTimeout
	case errors.Is(err, h2.ErrMalformedBody):
		return outcomeClientBody // the engine reset the stream (PROTOCOL_ERROR)
	case errors.Is(err, h2.ErrStreamReset), errors.Is(err, h2.ErrConnClosed):
		return outcomeClientGone
	}
	return outcomeClientBody
}
