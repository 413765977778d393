package h2

import (
	"bufio"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The writer: one goroutine per connection owns the socket's write side, the Framer
// that writes and the HPACK encoder. Streams and the read loop only queue (c.ctrl for
// control frames, c.ready for streams with something to send); the writer takes a batch
// under c.mu, encodes it outside the lock into the connection's buffered writer, and
// flushes only when nothing more is queued. A stream sends at most one DATA frame per
// batch, so streams take turns.

type itemKind uint8

const (
	itSettings itemKind = iota
	itSettingsAck
	itPing
	itPingAck
	itWindow
	itReset
	itGoAway
	itInfo    // 1xx HEADERS
	itHeaders // response HEADERS (status, fields)
	itData
	itTrailers
)

// item is one frame (or header block) for the writer.
type item struct {
	kind      itemKind
	end       bool // END_STREAM
	hasTable  bool
	id        uint32
	val       uint32 // window increment, 1xx status
	tableSize uint32
	code      http2.ErrCode
	ping      [8]byte
	status    int
	fields    []hpack.HeaderField
	data      []byte
}

// makeReady queues st for the writer unless it is queued or waiting for a window.
func (c *Conn) makeReady(st *Stream) {
	if st.queued || st.parked || st.blocked || st.reset {
		return
	}
	st.queued = true
	c.ready = append(c.ready, st)
	c.wake.Signal()
}

// unpark puts a stream whose window opened back in the queue.
func (c *Conn) unpark(st *Stream) {
	st.parked = false
	if st.stall != nil {
		st.stall.Stop()
	}
	c.makeReady(st)
}

// park sets st aside until its window opens; after WriteTimeout it is reset (a client
// that never opens the window must not hold the stream, its buffers and its target).
func (c *Conn) park(st *Stream) {
	st.parked = true
	st.stallAt = time.Now().Add(c.cfg.WriteTimeout)
	if st.stall == nil {
		st.stall = time.AfterFunc(c.cfg.WriteTimeout, func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			// A firing may come late (a reused stream, a stop that came too late):
			// only a stream parked since stallAt is stalled.
			if st.parked && !st.reset && !time.Now().Before(st.stallAt) {
				// INTERNAL_ERROR as net/http's server resets an aborted response.
				_ = c.resetStream(st, http2.ErrCodeInternal, ErrWriteStalled)
			}
		})
	} else {
		st.stall.Reset(c.cfg.WriteTimeout)
	}
}

// block sets st aside until the connection's window opens; the connection is closed
// if it stays shut for WriteTimeout.
func (c *Conn) block(st *Stream) {
	st.blocked = true
	c.blocked = append(c.blocked, st)
	if c.connStall == nil {
		c.connStall = time.AfterFunc(c.cfg.WriteTimeout, func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if len(c.blocked) > 0 {
				c.closeLocked()
			}
		})
	} else if len(c.blocked) == 1 {
		c.connStall.Reset(c.cfg.WriteTimeout)
	}
}

// writeFailed closes the connection after a failed write (c.mu held).
func (c *Conn) writeFailed(err error) {
	if c.writeErr == nil && !c.dead {
		c.writeErr = fmt.Errorf("h2: write: %w", err)
	}
	c.closeLocked()
}

func (c *Conn) hasWork() bool { return len(c.ctrl) > 0 || (len(c.ready) > 0 && !c.closing) }

// writeLoop is the writer goroutine.
func (c *Conn) writeLoop() {
	defer close(c.writerDone)
	c.mu.Lock()
	yielded := false // since the last flush
	for {
		for !c.hasWork() {
			if c.dead {
				c.mu.Unlock()
				return
			}
			if c.bw != nil && c.bw.Buffered() > 0 {
				if !yielded {
					// Before the write: let the goroutines ready to run (other streams
					// whose answers arrived with these) queue theirs, so that one write
					// carries them all.
					yielded = true
					c.mu.Unlock()
					runtime.Gosched()
					c.mu.Lock()
					continue
				}
				yielded = false
				c.mu.Unlock()
				err := c.flush()
				c.mu.Lock()
				if err != nil {
					c.writeFailed(err)
				}
				continue
			}
			if c.bw != nil && c.slots == 0 {
				// An idle connection keeps no write buffer; a busy one keeps its own.
				putWriter(c.bw)
				c.bw = nil
			}
			if c.closing || c.parking && c.bw == nil {
				// Ending, or the quiet connection parks (park.go): a writer is
				// started again when there is something to write.
				if c.bw != nil {
					putWriter(c.bw) // flushed above
					c.bw = nil
				}
				c.mu.Unlock()
				return
			}
			c.wake.Wait()
		}
		if c.dead {
			c.mu.Unlock()
			return
		}
		c.collect()
		c.mu.Unlock()
		err := c.writeItems()
		c.mu.Lock()
		if err != nil {
			c.writeFailed(err)
		}
		c.releaseBatch()
	}
}

// outBufSize is the size of the pooled response buffers (Stream.out): a frame's worth,
// what a stream may always queue. A stream that queues more grows its own.
const outBufSize = minStreamBuffer

var outBufs = sync.Pool{New: func() any { return new([outBufSize]byte) }}

// outBuf returns an empty pooled response buffer.
func outBuf() []byte { return outBufs.Get().(*[outBufSize]byte)[:0] }

// releaseBatch ends the writer's hold on the streams of the batch just written (c.mu
// held): the response buffers of those whose END_STREAM went out go back to the pool,
// and the streams may be reused. Nothing refers to those buffers any more: the batch's
// DATA items were copied into the write buffer, the stream's Write and WriteHead refuse
// after its end, and a reset only drops the reference.
func (c *Conn) releaseBatch() {
	for i, st := range c.batch {
		if st.endSent && cap(st.out) == outBufSize {
			outBufs.Put((*[outBufSize]byte)(st.out[:outBufSize]))
			st.out, st.outOff = nil, 0
		}
		st.inBatch = false
		c.maybeReuse(st)
		c.batch[i] = nil
	}
	c.batch = c.batch[:0]
}

// collect moves the queued control frames and one turn of every ready stream into
// c.items (c.mu held).
func (c *Conn) collect() {
	c.items = append(c.items[:0], c.ctrl...)
	clear(c.ctrl)
	c.ctrl = c.ctrl[:0]
	c.maxFrame = c.peerMaxFrame
	if c.closing {
		return
	}
	n := len(c.ready)
	for i := 0; i < n; i++ {
		st := c.ready[i]
		st.queued = false
		if st.reset {
			c.maybeReuse(st)
			continue
		}
		if !st.inBatch {
			st.inBatch = true
			c.batch = append(c.batch, st)
		}
		if c.take(st) {
			st.queued = true
			c.ready = append(c.ready, st)
		}
	}
	rest := copy(c.ready, c.ready[n:])
	clear(c.ready[rest:])
	c.ready = c.ready[:rest]
}

// take adds st's next frames to the batch; it reports whether st has more to send now.
func (c *Conn) take(st *Stream) (more bool) {
	for _, s := range st.info {
		c.items = append(c.items, item{kind: itInfo, id: st.id, status: s})
	}
	st.info = st.info[:0]
	if !st.headPending && !st.wroteHead {
		return false
	}
	avail := len(st.out) - st.outOff
	if st.headPending {
		st.headPending = false
		end := st.outEnd && avail == 0 && st.outTrailers == nil
		c.items = append(c.items, item{kind: itHeaders, id: st.id, status: st.status, fields: st.fields, end: end})
		st.fields = nil
		if end {
			c.sentEnd(st)
			return false
		}
	}
	if avail > 0 {
		if st.outOff > 0 {
			// Earlier batches are written: their bytes may be overwritten.
			copy(st.out, st.out[st.outOff:])
			st.out, st.outOff = st.out[:avail], 0
		}
		k := int64(min(avail, int(c.maxFrame)))
		k = min(k, st.sendWin, c.sendWin)
		if k <= 0 {
			if st.sendWin <= 0 {
				c.park(st)
			} else {
				c.block(st)
			}
			return false
		}
		st.sendWin -= k
		c.sendWin -= k
		data := st.out[:k]
		st.outOff = int(k)
		avail -= int(k)
		end := st.outEnd && avail == 0 && st.outTrailers == nil
		c.items = append(c.items, item{kind: itData, id: st.id, data: data, end: end})
		c.earnWindowUpdates()
		st.signal() // room in the buffer
		if end {
			c.sentEnd(st)
			return false
		}
		if avail > 0 {
			return true
		}
	}
	if st.outEnd {
		if st.outTrailers != nil {
			c.items = append(c.items, item{kind: itTrailers, id: st.id, fields: st.outTrailers, end: true})
			st.outTrailers = nil
		} else {
			c.items = append(c.items, item{kind: itData, id: st.id, end: true})
		}
		c.sentEnd(st)
	}
	return false
}

// sentEnd records that st's END_STREAM is in the batch.
func (c *Conn) sentEnd(st *Stream) {
	st.endSent = true // its buffer goes back once the batch is written (releaseBatch)
	if st.rstAfterEnd {
		c.items = append(c.items, item{kind: itReset, id: st.id, code: http2.ErrCodeNo})
		c.noteReset(st.id) // the client's trailers may be on their way (lateframes.go)
		st.resetLocked(ErrStreamReset)
		c.closeStream(st)
		return
	}
	if st.remoteDone {
		c.closeStream(st)
	}
}

// writeItems encodes the batch into the buffered writer (which writes to the socket
// only when full).
func (c *Conn) writeItems() error {
	c.armWrite()
	for i := range c.items {
		it := &c.items[i]
		if err := c.writeItem(it); err != nil {
			return err
		}
		it.fields, it.data = nil, nil
	}
	return nil
}

func (c *Conn) writeItem(it *item) error {
	fr := c.wfr
	switch it.kind {
	case itSettings:
		s := []http2.Setting{
			{ID: http2.SettingMaxConcurrentStreams, Val: c.cfg.MaxConcurrentStreams},
			{ID: http2.SettingInitialWindowSize, Val: uint32(c.cfg.StreamWindow)},
			{ID: http2.SettingMaxHeaderListSize, Val: c.cfg.MaxHeaderBytes},
		}
		if c.cfg.EnableConnectProtocol {
			s = append(s, http2.Setting{ID: http2.SettingEnableConnectProtocol, Val: 1})
		}
		return fr.WriteSettings(s...)
	case itSettingsAck:
		if it.hasTable {
			c.encLimit, c.encLimitSet = it.tableSize, true
			c.henc.SetMaxDynamicTableSizeLimit(it.tableSize)
		}
		return fr.WriteSettingsAck()
	case itPing:
		return fr.WritePing(false, [8]byte{'i', 'n', 'g', 'r', 'e', 's', 's', 0})
	case itPingAck:
		return fr.WritePing(true, it.ping)
	case itWindow:
		return fr.WriteWindowUpdate(it.id, it.val)
	case itReset:
		return fr.WriteRSTStream(it.id, it.code)
	case itGoAway:
		return fr.WriteGoAway(it.id, it.code, nil)
	case itInfo, itHeaders:
		c.hbuf.Reset()
		_ = c.henc.WriteField(hpack.HeaderField{Name: ":status", Value: statusText(it.status)})
		for _, f := range it.fields {
			_ = c.henc.WriteField(f)
		}
		return c.writeBlock(it.id, it.end)
	case itTrailers:
		c.hbuf.Reset()
		for _, f := range it.fields {
			_ = c.henc.WriteField(f)
		}
		return c.writeBlock(it.id, true)
	case itData:
		return fr.WriteData(it.id, it.end, it.data)
	}
	return nil
}

// writeBlock writes the encoded header block in c.hbuf as HEADERS and CONTINUATION
// frames of at most the client's frame size.
func (c *Conn) writeBlock(id uint32, end bool) error {
	b := c.hbuf.Bytes()
	max := int(c.maxFrame)
	first := b[:min(len(b), max)]
	b = b[len(first):]
	err := c.wfr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndStream: end, EndHeaders: len(b) == 0})
	for err == nil && len(b) > 0 {
		frag := b[:min(len(b), max)]
		b = b[len(frag):]
		err = c.wfr.WriteContinuation(id, len(b) == 0, frag)
	}
	return err
}

// armWrite renews the write deadline when it is older than a quarter of WriteTimeout.
func (c *Conn) armWrite() {
	now := time.Now()
	if now.Sub(c.wdlSetAt) >= c.cfg.WriteTimeout/4 {
		c.wdlSetAt = now
		_ = c.nc.SetWriteDeadline(now.Add(c.cfg.WriteTimeout))
	}
}

func (c *Conn) flush() error {
	c.armWrite()
	return c.bw.Flush()
}

// connWriter is what the writer's Framer writes to: the connection's buffered writer,
// taken from a pool when the connection gets busy again (writer goroutine only).
type connWriter struct{ c *Conn }

func (w connWriter) Write(p []byte) (int, error) {
	c := w.c
	if c.bw == nil {
		c.bw = getWriter(c.nc, c.cfg.WriteBufferSize)
	}
	return c.bw.Write(p)
}

var writers sync.Pool // *bufio.Writer of defaultWriteBuffer bytes

const defaultWriteBuffer = 32 << 10

func getWriter(w io.Writer, size int) *bufio.Writer {
	if size == defaultWriteBuffer {
		if bw, ok := writers.Get().(*bufio.Writer); ok {
			bw.Reset(w)
			return bw
		}
	}
	return bufio.NewWriterSize(w, size)
}

func putWriter(bw *bufio.Writer) {
	if bw.Size() == defaultWriteBuffer {
		bw.Reset(nil)
		writers.Put(bw)
	}
}

var statusTexts = func() (t [600]string) {
	for i := 100; i < 600; i++ {
		t[i] = strconv.Itoa(i)
	}
	return t
}()

func statusText(code int) string {
	if code >= 100 && code < 600 {
		return statusTexts[code]
	}
	return strconv.Itoa(code)
}
