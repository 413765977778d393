package h2

import (
	"errors"
	"io"
	"os"
	"time"

	"golang.org/x/net/http2"
)

// bucket is a token bucket: burst tokens, refilled at rate per second. It belongs to
// the read loop.
type bucket struct {
	tokens, burst, rate int
	last                time.Time
}

func newBucket(burst, rate int) bucket { return bucket{tokens: burst, burst: burst, rate: rate} }

// take spends one token; false when none is left.
func (b *bucket) take(now time.Time) bool { return b.takeN(now, 1) }

// takeN spends n tokens (n <= burst); false when fewer are left (then the bucket is
// empty: the connection ends anyway).
func (b *bucket) takeN(now time.Time, n int) bool {
	if b.tokens < b.burst {
		if add := int(now.Sub(b.last) * time.Duration(b.rate) / time.Second); add > 0 {
			b.tokens = min(b.burst, b.tokens+add)
			b.last = b.last.Add(time.Duration(add) * time.Second / time.Duration(b.rate))
		}
	}
	if b.tokens < n {
		b.tokens = 0
		return false
	}
	if b.tokens == b.burst {
		b.last = now // a full bucket does not bank time
	}
	b.tokens -= n
	return true
}

// errFrameBudget: a header block (HEADERS and its CONTINUATIONs), or any one frame,
// took more bytes than any legitimate one can: a CONTINUATION flood (CVE-2023-45288),
// possibly of empty frames, which the header-list limit alone does not stop.
var errFrameBudget = errors.New("h2: header block too long (CONTINUATION flood)")

// errFrameTooSlow: a header block with its CONTINUATIONs took longer than
// Config.HeaderTimeout from its first byte (a header block dribbled out to hold a
// stream's slot, or the connection's reader, for ever).
var errFrameTooSlow = errors.New("h2: frame or header block too slow")

// budgetReader sits between the Framer and the buffered connection. The read loop
// refills it before each ReadFrame call, which reads one frame: with a header block's
// frames each read on its own (headers.go), the limits below are the block's, carried
// from frame to frame. The call may read at most left bytes (what is left of the
// frame's or the block's budget) and, when it reads a frame of a header block, not go
// on past timeout from the block's first byte. DATA frames are not timed here: a slow
// upload is the body timeout's business.
type budgetReader struct {
	r       io.Reader
	clock   *arrivals // when the bytes read arrived
	left    int
	n       int // bytes read since the refill
	timeout time.Duration
	// started is when the header block's first byte arrived: this call's first byte,
	// unless inBlock.
	started time.Time
	typ     byte // the type of the frame since the refill, once known
	// inBlock: the frame continues a header block begun by an earlier call; started is
	// that block's and the frame is timed from the first byte.
	inBlock bool
	// cut, when set, is asked when a read deadline expired inside a frame (the Framer
	// would lose its place): true when that deadline was only the idle connection's
	// wake-up to park or to drop its reusable streams, now moved on (Conn.cutFrame),
	// and the read is tried again.
	cut func() bool
}

func (b *budgetReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, errFrameBudget
	}
	if (b.inBlock || b.n > 3 && b.typ == byte(http2.FrameHeaders)) && b.clock.last.Sub(b.started) > b.timeout {
		return 0, errFrameTooSlow
	}
	if len(p) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	for n == 0 && b.n > 0 && err != nil && b.cut != nil && errors.Is(err, os.ErrDeadlineExceeded) && b.cut() {
		n, err = b.r.Read(p)
	}
	if b.n == 0 && n > 0 && !b.inBlock {
		b.started = b.clock.last
	}
	if b.n <= 3 && b.n+n > 3 {
		b.typ = p[3-b.n] // the frame header's type byte
	}
	b.left -= n
	b.n += n
	return n, err
}

// refill readies the next ReadFrame call: budget bytes at most; inBlock when the frame
// to come continues a header block (then budget is what the block has left, and the
// block's start stands).
func (b *budgetReader) refill(budget int, inBlock bool) {
	b.left, b.n, b.inBlock = budget, 0, inBlock
}

// arrivals is what the read loop's buffer reads from: the connection, with the time of
// its last read that returned bytes. That is when the bytes being parsed arrived (at
// most a buffer's processing later), known without asking the clock once per frame.
type arrivals struct {
	r    io.Reader
	last time.Time
}

func (a *arrivals) Read(p []byte) (int, error) {
	n, err := a.r.Read(p)
	if n > 0 {
		a.last = time.Now()
	}
	return n, err
}
