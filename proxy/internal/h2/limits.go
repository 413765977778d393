package h2

import (
	"errors"
	"io"
	"time"
)

// bucket is a token bucket: burst tokens, refilled at rate per second. It belongs to
// the read loop.
type bucket struct {
	tokens, burst, rate int
	last                time.Time
}

func newBucket(burst, rate int) bucket { return bucket{tokens: burst, burst: burst, rate: rate} }

// take spends one token; false when none is left.
func (b *bucket) take(now time.Time) bool {
	if b.tokens < b.burst {
		if add := int(now.Sub(b.last) * time.Duration(b.rate) / time.Second); add > 0 {
			b.tokens = min(b.burst, b.tokens+add)
			b.last = b.last.Add(time.Duration(add) * time.Second / time.Duration(b.rate))
		}
	}
	if b.tokens == 0 {
		return false
	}
	if b.tokens == b.burst {
		b.last = now // a full bucket does not bank time
	}
	b.tokens--
	return true
}

// errFrameBudget: one ReadFrame call read more bytes than any legitimate frame or header
// block can take: a CONTINUATION flood (CVE-2023-45288), possibly of empty frames,
// which the Framer's header-list limit alone does not stop.
var errFrameBudget = errors.New("h2: header block too long (CONTINUATION flood)")

// budgetReader sits between the Framer and the buffered connection and fails a read
// once left bytes have been read since the read loop last refilled it.
type budgetReader struct {
	r    io.Reader
	left int
	n    int // bytes read since the refill
}

func (b *budgetReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, errFrameBudget
	}
	if len(p) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= n
	b.n += n
	return n, err
}

func (b *budgetReader) refill(budget int) { b.left, b.n = budget, 0 }
