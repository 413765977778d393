package proxy

import (
	"errors"
	"io"
	"sync/atomic"
	"syscall"
)

// The raw loop: plain connections served inside one syscall.RawConn.Read.
//
// A Read on a Go connection starts by forgetting what the poller knew about the
// descriptor's readiness (internal/poll's prepareRead), so it must try a read before it
// can wait: after each keep-alive response, that read finds nothing yet (EAGAIN), one
// wasted system call per request. Waiting first instead would lose a readiness edge the
// poller took between the last read and the reset: a pipelined request would then sit
// until the connection parks.
//
// So a plain connection's requests are served inside one RawConn.Read, whose callback
// (rawStep) reads the client with raw reads on the descriptor, and which never resets
// readiness between calls of its callback. After a read that returned less than it was
// given room for, the socket was empty: when more bytes are needed, the callback
// returns false and RawRead waits, with no second read. Bytes that arrived after that
// read raised an edge the wait sees, however long ago (nothing is lost). The callback
// parses and serves whatever needs no Read of the client through c.cc (step: forwarding,
// writing the answer through RawConn.Write, deadlines, polling the client); the rest
// (a body still on its way, a refusal that drains, h2c, hand-off, parking) happens after
// RawConn.Read returned (after), and the next request gets a new RawConn.Read.
//
// A connection that TLS wraps is not read raw (crypto/tls reads records), nor one with
// replayed bytes (c.cc.pending, only ever set at hand-off).

// errRawWait is readRaw's answer when the client has nothing to read (yet).
var errRawWait = errors.New("proxy: wait for the client")

// rawLoopConn returns the client's connection for the raw loop, or nil when the
// connection is not served that way.
func (c *tcpConn) rawLoopConn() syscall.RawConn {
	if !canRawLoop || c.secure || len(c.cc.pending) > 0 {
		return nil
	}
	return c.rawConn()
}

// loopRaw is loop for a plain connection (rc is its RawConn).
func (c *tcpConn) loopRaw(rc syscall.RawConn) (handoff bool) {
	if c.rawFn == nil {
		c.rawFn = c.rawStep
	}
	for {
		c.next, c.entered = h1Next, false
		if err := rc.Read(c.rawFn); err != nil {
			c.inRaw = false
			if c.entered {
				// The wait in readHead ended (a deadline passed, the connection was
				// closed): as a Read with that error.
				c.headWait = false
				c.next = c.step(c.readFailed(err))
			} else {
				// Refused before any read (closed, or a deadline that passed while
				// the last request was served outside, or while parked): readHead
				// sets its deadlines, then reads through c.cc as without the raw loop.
				c.next = c.step(c.readHead())
			}
		}
		if done, handoff := c.after(c.next); done {
			return handoff
		}
	}
}

// rawStep is loopRaw's RawConn.Read callback: it serves requests until one needs more
// than step does (true) or the client has to be waited for (false).
func (c *tcpConn) rawStep(fd uintptr) bool {
	c.inRaw, c.entered, c.fd, c.drained = true, true, int(fd), false
	for {
		n := c.readHead()
		if n == h1Wait {
			c.inRaw = false
			return false
		}
		if c.next = c.step(n); c.next != h1Next {
			c.inRaw = false
			return true
		}
	}
}

// read reads the client for readHead: raw inside rawStep, through c.cc otherwise.
func (c *tcpConn) read(b []byte) (int, error) {
	if c.inRaw {
		return c.readRaw(b)
	}
	return c.cc.Read(b)
}

// readRaw reads the client on its descriptor as clientConn.Read would (counting what it
// read), or answers errRawWait when there is nothing to read or the last read emptied
// the socket. Other errors only need to say whether they are timeouts (shouldPark).
func (c *tcpConn) readRaw(b []byte) (int, error) {
	if c.drained {
		return 0, errRawWait
	}
	for {
		n, err := sysRead(c.fd, b)
		if countRawReads.Load() {
			rawReads.Add(1)
		}
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return 0, errRawWait
		case err != nil:
			return 0, err
		case n == 0:
			return 0, io.EOF
		}
		c.cc.readN.Add(int64(n))
		c.drained = n < len(b)
		return n, nil
	}
}

// rawReads counts readRaw's system calls while countRawReads is set (tests set it): a
// counter every connection added to would be one contended cache line on many cores.
var (
	countRawReads atomic.Bool
	rawReads      atomic.Int64
)
