package h2

import (
	"time"

	"github.com/serve-zone/ingress/proxy/internal/park"
	"golang.org/x/net/http2"
)

// process handles one frame on the read loop, under c.mu. A non-nil error ends the
// connection (a connError says with which GOAWAY code).
func (c *Conn) process(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.HeadersFrame:
		return c.onHeadersFrame(f)
	case *http2.ContinuationFrame:
		return c.onContinuation(f)
	case *http2.DataFrame:
		return c.onData(f)
	case *http2.WindowUpdateFrame:
		return c.onWindowUpdate(f)
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		if err := c.spendJunk(); err != nil {
			return err
		}
		return c.onSettings(f)
	case *http2.PingFrame:
		if f.IsAck() {
			return nil
		}
		if err := c.spendJunk(); err != nil {
			return err
		}
		return c.queueCtrl(item{kind: itPingAck, ping: f.Data})
	case *http2.RSTStreamFrame:
		return c.onReset(f)
	case *http2.PriorityFrame:
		if err := c.spendJunk(); err != nil {
			return err
		}
		if f.StreamDep == f.StreamID {
			if st := c.streams[f.StreamID]; st != nil {
				return c.streamError(st, http2.ErrCodeProtocol)
			}
			return c.refuse(f.StreamID, http2.ErrCodeProtocol)
		}
		return nil
	case *http2.GoAwayFrame:
		return nil // the client closes when it is done
	case *http2.PushPromiseFrame:
		return connError{http2.ErrCodeProtocol, "PUSH_PROMISE from a client"}
	}
	if f.Header().Type == frameTypePriorityUpdate {
		// RFC 9218's PRIORITY_UPDATE (ignored): browsers send them with their requests,
		// so they share the WINDOW_UPDATE credit earned per stream.
		return c.spendCredit()
	}
	return c.spendJunk() // unknown frame types are ignored (RFC 9113 §5.5)
}

// onHeaders handles a complete header block, decoded and checked by headerFragment.
func (c *Conn) onHeaders(b *headerBlock) error {
	id := b.id
	if id%2 == 0 {
		return connError{http2.ErrCodeProtocol, "even stream id"}
	}
	if st := c.streams[id]; st != nil {
		return c.onTrailers(st, b)
	}
	if id <= c.maxSeen {
		// Trailers (or anything) in flight when we reset the stream, or on a stream
		// above our GOAWAY's last id, are ignored (lateframes.go); the block was
		// decoded all the same, the HPACK table is in step.
		if ignored, err := c.ignoreLate(id, true); ignored {
			return c.chargeHead(b, err)
		}
		return connError{http2.ErrCodeStreamClosed, "HEADERS on a closed stream"}
	}
	c.maxSeen = id
	if c.goingAway {
		// Above the GOAWAY's last stream id: ignored, which is refusing it silently,
		// and charged as a refused stream (the block was decoded), an oversized one as
		// a 431 would be.
		return c.chargeHead(b, c.spendReset())
	}
	if c.opened++; c.opened >= c.cfg.MaxStreams {
		// The connection's last stream: served, and announced as the last one
		// (Config.MaxStreams). Later ones are ignored, and the connection closes
		// once its streams are done.
		c.goAwayLocked(http2.ErrCodeNo)
	}
	if b.selfDep {
		return c.chargeHead(b, c.refuse(id, http2.ErrCodeProtocol))
	}
	if c.slots >= int(c.cfg.MaxConcurrentStreams) {
		return c.chargeHead(b, c.refuse(id, http2.ErrCodeRefusedStream))
	}
	h := c.h
	if b.truncated {
		h = serve431
	}
	st := c.newStream(id, h)
	st.remoteDone = b.endStream
	if !st.remoteDone && st.rwake == nil {
		st.rwake = make(chan struct{}, 1)
	}
	if b.truncated {
		// The head exceeds MaxHeaderBytes: 431, answered by the engine. It is charged
		// like oversizeHeadResets refused streams: a legitimate client rarely sends one,
		// while an HPACK bomb (a large value in the dynamic table, then requests that
		// name it again and again: megabytes decoded per kilobyte sent) is nothing but
		// them, and each cost us a header list's worth of decoding and validation.
		if err := c.spendResets(oversizeHeadResets); err != nil {
			return err
		}
		c.startStream(st)
		return nil
	}
	if err := parseRequest(b.fields, c.cfg.EnableConnectProtocol, &st.req); err != nil {
		c.discard(st)
		return c.refuse(id, http2.ErrCodeProtocol)
	}
	st.req.NoBody = st.remoteDone
	if st.remoteDone && st.req.ContentLength > 0 {
		c.discard(st)
		return c.refuse(id, http2.ErrCodeProtocol)
	}
	st.recvWin = c.cfg.StreamWindow
	c.startStream(st)
	return nil
}

// chargeHead adds to what refusing or ignoring the head of block b cost (err, the
// verdict of that charge) the price of an oversized head (oversizeHeadResets), which is
// its price when it is answered 431: the block was decoded all the same, and an HPACK
// bomb must not become cheaper when the engine refuses it (MaxConcurrentStreams at work)
// or ignores it (above a GOAWAY's last stream id, on a stream the engine reset).
func (c *Conn) chargeHead(b *headerBlock, err error) error {
	if err != nil || !b.truncated {
		return err
	}
	return c.spendResets(oversizeHeadResets)
}

// oversizeHeadResets is what a request head over MaxHeaderBytes costs of the reset
// budget. With the defaults (a burst of 256, 100 a second) a client may send 16 of them
// back to back and about 6 a second after that. Charged as one reset each, an HPACK
// bomb got 256 heads decoded (64 KiB of header values validated each, 20-30 ms of CPU
// per connection) before its connection ended; TestH2Floods saw the legitimate p99
// reach 30x quiet at those bursts.
const oversizeHeadResets = 16

// discard gives back a stream that never started (c.mu held).
func (c *Conn) discard(st *Stream) {
	st.handlerDone, st.closed = true, true
	c.maybeReuse(st)
}

func (c *Conn) onTrailers(st *Stream, b *headerBlock) error {
	if st.remoteDone {
		return c.streamError(st, http2.ErrCodeStreamClosed)
	}
	if !b.endStream || b.truncated {
		return c.streamError(st, http2.ErrCodeProtocol)
	}
	tr, n, err := parseTrailers(b.fields)
	if err != nil {
		return c.streamError(st, http2.ErrCodeProtocol)
	}
	st.trailers, st.trailerBytes = tr, n
	return c.endRemote(st)
}

// endRemote records the end of the request body.
func (c *Conn) endRemote(st *Stream) error {
	if cl := st.req.ContentLength; cl >= 0 && st.inTotal != cl {
		return c.streamErrorFor(st, http2.ErrCodeProtocol, ErrMalformedBody)
	}
	st.remoteDone = true
	st.signal()
	if st.endSent {
		c.closeStream(st)
	}
	return nil
}

func (c *Conn) onData(f *http2.DataFrame) error {
	id, n := f.StreamID, int32(f.Length)
	if n > c.recvWin {
		return connError{http2.ErrCodeFlowControl, "connection window exceeded"}
	}
	c.recvWin -= n
	st := c.streams[id]
	if st == nil || st.remoteDone || st.reset {
		c.returnConn(n)
		if st == nil && id > c.maxSeen {
			return connError{http2.ErrCodeProtocol, "DATA on an idle stream"}
		}
		if st == nil {
			// A body in flight when we reset the stream is ignored (lateframes.go).
			if ignored, err := c.ignoreLate(id, false); ignored {
				return err
			}
			// On a stream the client ended, or one closed long ago: a stream error,
			// charged like any frame that does no work. The stream is then
			// remembered as reset: what else is in flight on it is ignored, not
			// answered with a RST_STREAM each.
			if err := c.spendJunk(); err != nil {
				return err
			}
			return c.queueReset(id, http2.ErrCodeStreamClosed)
		}
		if st.reset {
			return nil // in flight when we reset it
		}
		return c.streamError(st, http2.ErrCodeStreamClosed)
	}
	if n > st.recvWin {
		c.returnConn(n)
		return c.streamError(st, http2.ErrCodeFlowControl)
	}
	st.recvWin -= n
	data := f.Data()
	if pad := n - int32(len(data)); pad > 0 {
		st.recvWin += pad // padding is given back at once
		c.returnConn(pad)
		if err := c.queueCtrl(item{kind: itWindow, id: id, val: uint32(pad)}); err != nil {
			return err
		}
	}
	if len(data) == 0 && !f.StreamEnded() {
		if err := c.spendJunk(); err != nil {
			return err
		}
	}
	st.inTotal += int64(len(data))
	if cl := st.req.ContentLength; cl >= 0 && st.inTotal > cl {
		return c.streamErrorFor(st, http2.ErrCodeProtocol, ErrMalformedBody)
	}
	if len(data) > 0 {
		st.in.write(data)
		st.signal()
	}
	if f.StreamEnded() {
		return c.endRemote(st)
	}
	return nil
}

// returnConn gives n bytes of the connection's receive window back, in batches.
func (c *Conn) returnConn(n int32) {
	c.recvUnacked += n
	if c.recvUnacked >= c.cfg.ConnWindow/4 {
		// Best effort: a client that floods us out of control-queue room is cut anyway.
		if c.queueCtrl(item{kind: itWindow, val: uint32(c.recvUnacked)}) == nil {
			c.recvWin += c.recvUnacked
			c.recvUnacked = 0
		}
	}
}

// wuCreditMax caps the WINDOW_UPDATE credit (Conn.wuCredit).
const wuCreditMax = 1024

func (c *Conn) earnWindowUpdates() { c.wuCredit = min(c.wuCredit+2, wuCreditMax) }

// frameTypePriorityUpdate is RFC 9218's PRIORITY_UPDATE.
const frameTypePriorityUpdate http2.FrameType = 0x10

// spendCredit charges a WINDOW_UPDATE or PRIORITY_UPDATE: free while the credit lasts.
func (c *Conn) spendCredit() error {
	if c.wuCredit > 0 {
		c.wuCredit--
		return nil
	}
	return c.spendJunk()
}

func (c *Conn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	if err := c.spendCredit(); err != nil {
		return err
	}
	inc := int64(f.Increment)
	if f.StreamID == 0 {
		c.sendWin += inc
		if c.sendWin > maxWindow {
			return connError{http2.ErrCodeFlowControl, "connection window overflow"}
		}
		if c.sendWin > 0 && len(c.blocked) > 0 {
			for _, st := range c.blocked {
				st.blocked = false
				c.makeReady(st)
				c.maybeReuse(st) // reset while it waited
			}
			clear(c.blocked)
			c.blocked = c.blocked[:0]
			if c.connStall != nil {
				c.connStall.Stop()
			}
		}
		return nil
	}
	st := c.streams[f.StreamID]
	if st == nil {
		if f.StreamID > c.maxSeen {
			return connError{http2.ErrCodeProtocol, "WINDOW_UPDATE on an idle stream"}
		}
		return nil
	}
	st.sendWin += inc
	if st.sendWin > maxWindow {
		return c.streamError(st, http2.ErrCodeFlowControl)
	}
	if st.parked && st.sendWin > 0 {
		c.unpark(st)
	}
	return nil
}

func (c *Conn) onSettings(f *http2.SettingsFrame) error {
	ack := item{kind: itSettingsAck}
	err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return connError{http2.ErrCode(err.(http2.ConnectionError)), "invalid setting"}
		}
		switch s.ID {
		case http2.SettingHeaderTableSize:
			ack.tableSize, ack.hasTable = s.Val, true
		case http2.SettingInitialWindowSize:
			delta := int64(s.Val) - c.peerInitWin
			c.peerInitWin = int64(s.Val)
			for _, st := range c.streams {
				st.sendWin += delta
				if st.sendWin > maxWindow {
					return connError{http2.ErrCodeFlowControl, "stream window overflow"}
				}
				if st.parked && st.sendWin > 0 {
					c.unpark(st)
				}
			}
		case http2.SettingMaxFrameSize:
			c.peerMaxFrame = s.Val
		}
		return nil
	})
	if err != nil {
		return err
	}
	return c.queueCtrl(ack)
}

func (c *Conn) onReset(f *http2.RSTStreamFrame) error {
	st := c.streams[f.StreamID]
	if st == nil {
		if f.StreamID > c.maxSeen {
			return connError{http2.ErrCodeProtocol, "RST_STREAM on an idle stream"}
		}
		// A reset of a stream that is over: ignored, and charged (lateframes.go).
		if ignored, err := c.ignoreLate(f.StreamID, false); ignored {
			return err
		}
		return c.spendReset()
	}
	// Charged whether or not the handler still works: a reset once the answer is
	// complete is still one stream's work (the target's) thrown away.
	if err := c.spendReset(); err != nil {
		return err
	}
	st.resetLocked(ErrStreamReset)
	c.closeStream(st)
	return nil
}

// streamError resets st with code (RFC 9113 §5.4.2). Resets of streams whose handler
// still works are charged: a client must not be able to make us reset streams for
// free while their work goes on (CVE-2025-8671).
func (c *Conn) streamError(st *Stream, code http2.ErrCode) error {
	return c.streamErrorFor(st, code, ErrStreamReset)
}

// streamErrorFor is streamError whose Read and Write return err.
func (c *Conn) streamErrorFor(st *Stream, code http2.ErrCode, err error) error {
	charge := !st.handlerDone
	if err := c.resetStream(st, code, err); err != nil {
		return err
	}
	if charge {
		return c.spendReset()
	}
	return nil
}

// refuse resets a stream that never started, and charges it.
func (c *Conn) refuse(id uint32, code http2.ErrCode) error {
	if err := c.queueReset(id, code); err != nil {
		return err
	}
	return c.spendReset()
}

// queueReset queues RST_STREAM for id and remembers it, so that the frames the client
// sent before the reset reached it are ignored (lateframes.go).
func (c *Conn) queueReset(id uint32, code http2.ErrCode) error {
	c.noteReset(id)
	return c.queueCtrl(item{kind: itReset, id: id, code: code})
}

// closeStream removes st from the open streams; its slot is free once its handler
// has returned too.
func (c *Conn) closeStream(st *Stream) {
	if st.closed {
		return
	}
	st.closed = true
	delete(c.streams, st.id)
	if unread := st.in.n; unread > 0 {
		// Body bytes nobody will read: their connection window goes back, or a few
		// such streams would stall every later upload on the connection.
		c.returnConn(int32(unread))
		st.in.reset()
	}
	if st.stall != nil {
		st.stall.Stop()
	}
	if st.handlerDone {
		c.releaseSlot()
		c.maybeReuse(st)
	}
}

func (c *Conn) releaseSlot() {
	c.slots--
	if c.slots == 0 {
		now := time.Now()
		c.idleFrom(now)
		if c.goingAway {
			c.checkDrained()
			return
		}
		// The read loop may be blocked with a busy connection's deadline: the idle
		// timeout starts now.
		c.dlSetAt, c.dlIdle = now, true
		// Its free streams and parked workers (the last stream's worker parks right
		// after this) go after reuseIdle, or when it parks (park.go).
		d := min(c.cfg.IdleTimeout, c.cfg.ReadIdleTimeout, reuseIdle)
		if c.cfg.ParkAfter > 0 {
			d = min(d, c.parkAfter)
		}
		_ = c.nc.SetReadDeadline(park.Deadline(now, d))
	}
}
