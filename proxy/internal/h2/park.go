package h2

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Parking: an idle connection without a goroutine or a buffer.
//
// A connection with no stream (no handler running either) and nothing to write for
// Config.ParkAfter parks: its writer goroutine ends, its read buffer goes back to a pool,
// the Framers and scratch buffers are dropped, and Serve (or Resume) returns ErrParked
// with the connection quiet. What stays is the connection's state: settings, windows,
// budgets, both HPACK tables and the socket. The caller then waits for the socket to be
// readable without a goroutine (proxy: its epoll parker) and calls Resume, which takes
// a buffer, starts a writer and reads on from the next frame, on the calling goroutine.
//
// Before it parks the connection proves that nothing is buffered above the socket: its
// own read buffer is empty, no frame or header block is half read, and a read of the
// connection with an already expired deadline times out with nothing read. Over TLS
// that read is crypto/tls's: it decrypts any complete record it holds before it reads
// the socket, and treats the expired deadline as a temporary error; so a timeout means
// it holds no record the socket would not announce again. Bytes that arrive later are
// the socket's, and readiness reports them.
//
// While parked the connection belongs to the caller: nothing in the engine runs.
// Shutdown only queues the GOAWAY (Resume's writer sends it, and the read loop then
// ends the drained connection at once); Close closes the socket (Resume then ends the
// connection and returns). The context's cancellation is not watched while parked:
// Resume checks it. The caller must call Resume exactly once per park, also to end a
// parked connection (after Shutdown or Close), so that its teardown runs.

// ErrParked is what Serve and Resume return when the connection parked.
var ErrParked = errors.New("h2: connection parked")

// errPark: the read loop found the connection idle past ParkAfter.
var errPark = errors.New("h2: park")

// parkRetry is when an idle connection past ParkAfter that could not park (its writer
// still had frames to write) tries again.
const parkRetry = 250 * time.Millisecond

// readers pools the read loops' buffers while their connections are parked.
var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufferSize) }}

// takeReader gives the read loop a pooled buffer and a fresh Framer (its read buffer
// grows to the largest frame read, so a parked connection keeps none).
func (c *Conn) takeReader() {
	c.br = readers.Get().(*bufio.Reader)
	c.br.Reset(&c.in)
	c.budget.r = c.br
	// The Framer returns HEADERS and CONTINUATION frames as they are (ReadMetaHeaders
	// nil): their blocks are decoded in headers.go, without a MetaHeadersFrame per block.
	c.fr = http2.NewFramer(nil, &c.budget)
	c.fr.SetMaxReadFrameSize(defaultMaxFrame)
}

// giveReader puts the read buffer back (read loop only, once it reads no more).
func (c *Conn) giveReader() {
	if c.br == nil {
		return
	}
	c.br.Reset(nil)
	readers.Put(c.br)
	c.br, c.budget.r, c.fr = nil, nil, nil
}

// startWriter starts a writer goroutine with a fresh Framer (c.mu held).
func (c *Conn) startWriter() {
	c.wfr = http2.NewFramer(connWriter{c}, nil)
	c.writerDone = make(chan struct{})
	go c.writeLoop()
}

// idleFrom starts an idle period at now: its park delay is ParkAfter, or ParkSoon when
// the caller is crowded, or what the client's pace asks for (Config.AwakeMax) when that
// is longer (c.mu held).
func (c *Conn) idleFrom(now time.Time) {
	c.lastIdle, c.parkAfter = now, c.cfg.ParkAfter
	if s := c.cfg.ParkSoon; s > 0 && s < c.parkAfter && c.cfg.Crowded != nil && c.cfg.Crowded() {
		c.parkAfter = s
	}
	if c.cfg.AwakeMax > 0 {
		c.parkAfter = c.pace.Awake(c.parkAfter, c.cfg.ParkSoon, c.cfg.AwakeMax)
	}
}

// idleDeadline is when the read loop of an idle connection wakes up next: to park once
// ParkAfter is over, else at the end of IdleTimeout (c.mu held).
func (c *Conn) idleDeadline(now time.Time) time.Time {
	end := c.lastIdle.Add(c.cfg.IdleTimeout)
	if c.cfg.ParkAfter <= 0 || c.goingAway {
		return end
	}
	at := c.lastIdle.Add(c.parkAfter)
	if !at.After(now) {
		at = now.Add(parkRetry)
	}
	if at.Before(end) {
		return at
	}
	return end
}

// newEncoder makes the response encoder: its dynamic table is Config.EncoderTableSize
// at most, and the client's SETTINGS_HEADER_TABLE_SIZE. fresh makes its first header
// block start by emptying the client's copy of the table (a size update to 0, then to
// the size): a parked connection drops the encoder it had, and with it everything its
// table held, which is up to 11 KB of entries, maps and the strings they keep
// (TestEncoderTableCost); the answers after a park index their fields again, as on a
// new connection. (A block may start with two size updates, the smallest first: RFC
// 7541 §4.2.)
func (c *Conn) newEncoder(fresh bool) *hpack.Encoder {
	enc := hpack.NewEncoder(&c.hbuf)
	size := uint32(max(c.cfg.EncoderTableSize, 0))
	if c.encLimitSet {
		enc.SetMaxDynamicTableSizeLimit(c.encLimit)
		size = min(size, c.encLimit)
	}
	if fresh {
		enc.SetMaxDynamicTableSize(0)
	}
	if fresh || size < defaultEncoderTable {
		// Below the 4096 bytes RFC 7541 lets an encoder use without asking, or after
		// the 0: the first header block carries the size update.
		enc.SetMaxDynamicTableSize(size)
	}
	return enc
}

// cutFrame is the budget reader's cut: a read deadline expired inside a frame. When the
// connection is idle and its IdleTimeout not over, that deadline was only its wake-up to
// park (or to drop its reusable streams): the frame goes on, the deadline moves to the
// idle timeout's end, and the next frame boundary arms it afresh. A client that sends
// half a frame and waits is ended by IdleTimeout as before, not by the wake-up. A frame
// of a header block goes on until HeaderTimeout from the block's first byte, whatever
// the connection's state (extendForBlock).
func (c *Conn) cutFrame() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if c.goingAway || c.dead {
		return false
	}
	if c.inHeaderBlock() {
		return c.extendForBlock(now)
	}
	end := c.lastIdle.Add(c.cfg.IdleTimeout)
	if c.slots > 0 || !now.Before(end) {
		return false
	}
	_ = c.nc.SetReadDeadline(end)
	c.dlSetAt = time.Time{} // renewed at the next frame boundary (armRead)
	return true
}

// inHeaderBlock reports whether the read loop is inside a header block: between its
// frames, or inside its HEADERS or a CONTINUATION (read loop only).
func (c *Conn) inHeaderBlock() bool {
	return c.hb.open || c.budget.n > 3 && c.budget.typ == byte(http2.FrameHeaders)
}

// extendForBlock moves the read deadline to the end of the header block's
// HeaderTimeout, counted from its first byte, and reports whether that is still ahead
// of now (read loop only, c.mu held). The block's last frame re-arms the usual deadline
// (armRead, at the next frame boundary outside a block).
func (c *Conn) extendForBlock(now time.Time) bool {
	end := c.budget.started.Add(c.cfg.HeaderTimeout)
	if !now.Before(end) {
		return false
	}
	_ = c.nc.SetReadDeadline(end)
	c.dlSetAt = time.Time{}
	return true
}

// quiet reports whether the connection may park: no stream, nothing queued for the
// writer, no frame or header block half read, nothing buffered, not ending (c.mu held).
func (c *Conn) quiet() bool {
	return c.slots == 0 && len(c.streams) == 0 && len(c.ctrl) == 0 && len(c.ready) == 0 &&
		len(c.blocked) == 0 && !c.hasReuse() && !c.goingAway && !c.closing && !c.dead &&
		!c.hb.open && c.budget.n == 0 && c.br.Buffered() == 0
}

// parkConn parks the quiet connection: nil when it did, errPark when it is not quiet any
// more (read on), another error when the probe read found the connection ended. Read
// loop only, c.mu not held.
func (c *Conn) parkConn() error {
	// The probe: a read with an expired deadline. Bytes (into c.br, for the read loop)
	// mean the connection is not idle; a timeout, that nothing is buffered above the
	// socket.
	_ = c.nc.SetReadDeadline(time.Unix(1, 0))
	_, err := c.br.Peek(1)
	if err == nil {
		return c.readOn()
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	if hook := testHookParkProbed.Load(); hook != nil {
		(*hook)(c)
	}
	c.mu.Lock()
	if !c.quiet() {
		c.mu.Unlock()
		return c.readOn()
	}
	c.parking = true
	c.wake.Broadcast()
	c.mu.Unlock()
	<-c.writerDone
	c.mu.Lock()
	c.parking = false
	if !c.quiet() {
		// Shutdown queued a GOAWAY meanwhile, or the writer failed: serve on.
		c.startWriter()
		c.mu.Unlock()
		return c.readOn()
	}
	c.parked = true
	// What a quiet connection needs no more goes; the next busy period grows it again.
	c.wfr = nil
	c.hbuf = bytes.Buffer{} // the encoder writes to &c.hbuf: same place, no buffer
	// The response encoder's table goes too (newEncoder): the next answer's block
	// empties the client's copy first.
	c.henc = c.newEncoder(true)
	c.items, c.batch, c.ctrl, c.ready, c.blocked = nil, nil, nil, nil, nil
	c.hb.fields = nil
	if c.streams != nil {
		c.streams = nil // a map does not shrink; Resume makes a new one
	}
	c.mu.Unlock()
	c.giveReader()
	c.stopCtx() // ctx is not watched while parked (Resume checks it)
	return nil
}

// testHookParkProbed, set by tests only, runs in parkConn once the probe found nothing
// to read: what lands then (a Shutdown) lands during a park attempt.
var testHookParkProbed atomic.Pointer[func(*Conn)]

// readOn is parkConn's way back when the connection did not park: the read deadline the
// probe expired is armed afresh (c.mu not held); errPark says read on.
func (c *Conn) readOn() error {
	c.mu.Lock()
	c.dlSetAt = time.Time{}
	c.armRead(time.Now())
	c.checkDrained() // a Shutdown during the attempt: its deadline was just overwritten
	c.mu.Unlock()
	return errPark
}

// Resume serves a parked connection on from its next frame, on the calling goroutine,
// until it ends or parks again; it returns as Serve does. The caller calls it when the
// socket became readable, or to end the connection after Shutdown or Close.
func (c *Conn) Resume() error {
	c.mu.Lock()
	if !c.parked {
		c.mu.Unlock()
		return errors.New("h2: Resume of a connection that is not parked")
	}
	c.parked = false
	if c.dead {
		// Closed while parked: only the teardown is left (the last writer has ended,
		// no buffer or goroutine is needed).
		c.mu.Unlock()
		return c.end(net.ErrClosed)
	}
	if c.streams == nil {
		c.streams = make(map[uint32]*Stream)
	}
	c.mu.Unlock()
	c.stopCtx = context.AfterFunc(c.ctx, c.Close) // at once if it was cancelled meanwhile
	c.takeReader()
	c.mu.Lock()
	c.startWriter()
	c.dlSetAt = time.Time{}
	c.armRead(time.Now())
	if c.goingAway {
		c.checkDrained() // Shutdown while parked: the read loop ends the drain at once
	}
	c.mu.Unlock()
	return c.run(c.readFrames())
}

// IdleDeadline is when an idle connection's IdleTimeout ends: a parked connection's
// caller ends it then (Shutdown, then Resume), as its read loop would have.
func (c *Conn) IdleDeadline() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastIdle.Add(c.cfg.IdleTimeout)
}
