package h2

import (
	"time"

	"golang.org/x/net/http2/hpack"
)

// Reuse: a busy connection serves its streams without allocating a Stream, its wake-up
// channels, its request field list and its response field list per request, nor a
// goroutine.
//
//   - A Stream object goes back to its connection's free list once nothing refers to it:
//     its handler returned (finishLocked), it left the open streams (closeStream), and
//     the writer holds it in no queue and no batch being written (queued, blocked,
//     inBatch). Whichever of those comes last calls maybeReuse, under c.mu.
//   - A stream's goroutine is a worker: when its handler returns it waits, parked on a
//     channel of its own, for the connection's next stream, instead of exiting.
//
// Both are released when the connection goes quiet (reuseIdle without streams) and
// when it ends, so an idle connection keeps neither.

// maxReuse bounds the free Stream objects and the parked workers of one connection.
const maxReuse = 32

// reuseIdle is how long a connection without streams keeps its free streams and
// parked workers.
const reuseIdle = 2 * time.Second

// Reusable field lists longer than this are dropped rather than kept for the next stream.
const maxReusedFields = 64

// worker is a parked stream goroutine, waiting for its next stream (nil: exit).
type worker struct{ next chan *Stream }

// newStream returns a Stream for id: a reused one when the connection has one (c.mu held).
func (c *Conn) newStream(id uint32, h Handler) *Stream {
	var st *Stream
	if n := len(c.free); n > 0 {
		st = c.free[n-1]
		c.free[n-1] = nil
		c.free = c.free[:n-1]
	} else {
		st = &Stream{c: c, wake: make(chan struct{}, 1), ctx: new(streamCtx)}
	}
	st.id, st.h = id, h
	st.bodyTimeout = c.cfg.BodyTimeout
	return st
}

// maybeReuse puts st on the free list once nothing refers to it any more (c.mu held).
func (c *Conn) maybeReuse(st *Stream) {
	if !st.handlerDone || !st.closed || st.queued || st.blocked || st.inBatch || c.dead {
		return
	}
	if len(c.free) >= maxReuse {
		return // left to the collector
	}
	st.reuse()
	c.free = append(c.free, st)
}

// reuse clears st for another stream, keeping its channels, timers and buffers.
func (st *Stream) reuse() {
	select {
	case <-st.wake:
	default:
	}
	if st.rwake != nil {
		select {
		case <-st.rwake:
		default:
		}
	}
	fields := st.req.Fields
	if cap(fields) > maxReusedFields {
		fields = nil
	}
	clear(fields[:cap(fields)])
	headFields := st.headFields
	if cap(headFields) > maxReusedFields {
		headFields = nil
	}
	clear(headFields[:cap(headFields)])
	ctx := st.ctx
	if !ctx.reusable() {
		ctx = new(streamCtx) // someone may still read the old one
	}
	info := st.info[:0]
	if cap(info) > 8 {
		info = nil
	}
	*st = Stream{
		c: st.c, wake: st.wake, rwake: st.rwake, rtimer: st.rtimer, stall: st.stall, ctx: ctx,
		req:        Request{Fields: fields[:0]},
		info:       info,
		headFields: headFields[:0],
	}
}

// HeadFields returns the stream's field list for its response head, empty, with room
// for at least n fields; it is reused for a later stream once this one's head is
// written. Appending past its room is allowed and allocates. The fields' strings are
// another matter: the connection's HPACK encoder may keep them in its dynamic table for
// the connection's life, so they must never change once WriteHead has them (no strings
// over a reused byte buffer).
func (st *Stream) HeadFields(n int) []hpack.HeaderField {
	if cap(st.headFields) < n {
		st.headFields = make([]hpack.HeaderField, 0, n)
	}
	return st.headFields[:0]
}

// startStream opens st and runs its handler on a parked worker, or a new goroutine.
func (c *Conn) startStream(st *Stream) {
	st.sendWin = c.peerInitWin
	// Not a child of the connection's context: registering each stream with it would
	// take its lock twice per stream. The connection cancels its streams itself (Close
	// resets every open one; a stream is cancelled when reset and when its handler ends).
	st.ctx.parent = c.ctx
	c.streams[st.id] = st
	if c.slots == 0 {
		c.pace.Note(time.Now()) // a busy period begins
	}
	c.slots++
	c.earnWindowUpdates()
	if n := len(c.workers); n > 0 {
		w := c.workers[n-1]
		c.workers[n-1] = nil
		c.workers = c.workers[:n-1]
		w.next <- st // buffered, and empty while the worker is parked
		return
	}
	c.handlers.Add(1)
	go c.work(st)
}

// work is a stream goroutine: it serves st, then parks for the connection's next
// stream while the connection has room for it.
func (c *Conn) work(st *Stream) {
	defer c.handlers.Done()
	var w *worker
	for {
		st.run()
		c.mu.Lock()
		if c.dead || len(c.workers) >= maxReuse {
			c.mu.Unlock()
			return
		}
		if w == nil {
			w = &worker{next: make(chan *Stream, 1)}
		}
		c.workers = append(c.workers, w)
		c.mu.Unlock()
		if st = <-w.next; st == nil {
			return
		}
	}
}

// dropReuse releases the parked workers and the free streams (c.mu held): the
// connection went quiet or ended.
func (c *Conn) dropReuse() {
	for i, w := range c.workers {
		w.next <- nil
		c.workers[i] = nil
	}
	c.workers = c.workers[:0]
	clear(c.free)
	c.free = c.free[:0]
}

// hasReuse reports whether the connection keeps free streams or parked workers.
func (c *Conn) hasReuse() bool { return len(c.workers) > 0 || len(c.free) > 0 }
