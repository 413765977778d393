package h2

import (
	"errors"
	"io"
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

// errFrameBudget: one ReadFrame call read more bytes than any legitimate frame or header
// block can take: a CONTINUATION flood (CVE-2023-45288), possibly of empty frames,
// which the Framer's header-list limit alone does not stop.
var errFrameBudget = errors.New("h2: header block too long (CONTINUATION flood)")

// errFrameTooSlow: a header block with its CONTINUATIONs took longer than
// Config.HeaderTimeout from its first byte (a header block dribbled out to hold a
// stream's slot, or the connection's reader, for ever).
var errFrameTooSlow = errors.New("h2: frame or header block too slow")

// budgetReader sits between the Framer and the buffered connection: one ReadFrame call
// may read at most left bytes (refill) and, when it reads a header block (HEADERS and
// its CONTINUATIONs), take at most timeout from the block's first byte. DATA frames are
// not timed here: a slow upload is the body timeout's business.
type budgetReader struct {
	r       io.Reader
	left    int
	n       int // bytes read since the refill
	timeout time.Duration
	started time.Time // when the first byte since the refill arrived
	typ     byte      // the type of the first frame since the refill, once known
}

func (b *budgetReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, errFrameBudget
	}
	if b.n > 3 && b.typ == byte(http2.FrameHeaders) && time.Since(b.started) > b.timeout {
		return 0, errFrameTooSlow
	}
	if len(p) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	if b.n == 0 && n > 0 {
		b.started = time.Now()
	}
	if b.n <= 3 && b.n+n > 3 {
		b.typ = p[3-b.n] // the frame header's type byte
	}
	b.left -= n
	b.n += n
	return n, err
}

func (b *budgetReader) refill(budget int) { b.left, b.n = budget, 0 }
