package proxy

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Idle connections without a read buffer or a grown stack.
//
// A plain HTTP/1.1 connection that waited h1ParkAfter for its next request "parks": its
// serving goroutine puts the 8 KiB read buffer back into a pool and ends, and a new
// goroutine (starting with the runtime's smallest stack) waits until the socket is
// readable without reading anything (waitReadable: a MSG_PEEK poll), then takes a buffer
// and serves on. 10,000 idle keep-alive connections hold about 4 KiB each of Go memory
// instead of 13 KiB (bench/README.md, reliability/idle_test.go). Busy connections never park: the hot path is unchanged
// except for a pooled buffer instead of an allocated one. TLS connections do not park
// (crypto/tls may hold decrypted bytes that a poll of the socket cannot see).

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
func (c *h1Conn) shouldPark(err error) bool {
	var ne net.Error
	return c.parkable && c.dlIdle && c.r == c.w && errors.As(err, &ne) && ne.Timeout() &&
		time.Since(c.dlSetAt) < c.s.cfg.IdleTimeout && !c.s.draining.Load()
}

// h1Renew is how often a parked connection's goroutine is replaced by a new one: the
// runtime starts goroutines with the average stack its last collection saw, so the
// goroutines that parked while the serving ones were many start larger (4 KiB) than
// those that park once idle ones are (2 KiB); stacks never shrink below 4 KiB.
const h1Renew = 10 * time.Second

// park ends the serving goroutine of an idle connection and waits for its next request
// on a new one, owned like the first by the server's h1 wait group. The connection stays
// in the h1 set in state h1Idle, so Shutdown closes it like any idle one.
func (c *h1Conn) park() {
	c.parking = false
	parkedTotal.Add(1)
	putReadBuf(c.rbuf)
	c.rbuf = nil
	c.spawnParked()
}

func (c *h1Conn) spawnParked() {
	c.s.h1.wg.Add(1)
	go func() {
		defer c.s.h1.wg.Done()
		c.parked()
	}()
}

// parked waits for the socket to become readable until the idle timeout, then serves on;
// every h1Renew it hands the wait to a new goroutine.
func (c *h1Conn) parked() {
	idleEnd := c.dlSetAt.Add(c.s.cfg.IdleTimeout)
	renew := time.Now().Add(h1Renew)
	_ = c.cc.SetReadDeadline(earliest(idleEnd, renew))
	err := waitReadable(c.rawConn())
	if err != nil && time.Now().Before(idleEnd) && c.state.Load() != h1Closing && !c.s.draining.Load() {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			c.spawnParked()
			return
		}
	}
	if err != nil || c.state.Load() == h1Closing || c.s.draining.Load() {
		c.finish(false) // timed out, closed by Shutdown, or gone
		return
	}
	c.rbuf = getReadBuf()
	c.dlIdle = false // the next wait sets its deadline afresh
	c.finish(c.loop())
}
