package upstream

import (
	"math"
	"net"
	"syscall"
	"time"

	"github.com/serve-zone/ingress/internal/rawnet"
)

// Conn is one connection to a target. Its Read and Write count the bytes of the current
// exchange (MayReplay needs them) and Read stops at the limit set by Begin. It
// deliberately has no ReadFrom, so that bodies are copied through the caller's pooled
// buffers rather than a fresh 32 KiB buffer per request.
type Conn struct {
	c      net.Conn
	rc     syscall.RawConn // nil when c has none; used to probe idle connections
	probe  probe
	xfer   xfer
	pool   *pool
	abort  func() // closes c; made once, for context.AfterFunc per exchange
	idleAt time.Time
	rdl    time.Time // the read deadline last set
	limit  int64
	read   int64
	wrote  int64
	reused bool
}

func newConn(c net.Conn, p *pool) *Conn {
	c = rawnet.Wrap(c)
	uc := &Conn{c: c, pool: p, limit: math.MaxInt64}
	if sc, ok := c.(syscall.Conn); ok {
		uc.rc, _ = sc.SyscallConn()
	}
	uc.abort = func() { _ = c.Close() }
	return uc
}

// Begin starts an exchange: the byte counts restart and Read returns ErrHeaderTooLong
// once limit bytes were read (math.MaxInt64: no limit).
func (uc *Conn) Begin(limit int64) {
	uc.read, uc.wrote, uc.limit = 0, 0, limit
}

// Unlimit lifts the read limit (the head has been read; a body may be of any size).
func (uc *Conn) Unlimit() { uc.limit = math.MaxInt64 }

// Reused reports whether the connection came from the pool.
func (uc *Conn) Reused() bool { return uc.reused }

// Read reads from the target, counting and limiting.
func (uc *Conn) Read(p []byte) (int, error) {
	if uc.limit <= 0 {
		return 0, ErrHeaderTooLong
	}
	if int64(len(p)) > uc.limit {
		p = p[:uc.limit]
	}
	n, err := uc.c.Read(p)
	uc.limit -= int64(n)
	uc.read += int64(n)
	return n, err
}

// Write writes to the target, counting.
func (uc *Conn) Write(p []byte) (int, error) {
	n, err := uc.c.Write(p)
	uc.wrote += int64(n)
	return n, err
}

// writeThenRead is WriteRead with Write and Read.
func (uc *Conn) writeThenRead(req, buf []byte) (int, error) {
	if len(req) > 0 {
		if _, err := uc.Write(req); err != nil {
			return 0, err
		}
	}
	return uc.Read(buf)
}

// SetReadDeadline sets the read deadline of the underlying connection.
func (uc *Conn) SetReadDeadline(t time.Time) error {
	uc.rdl = t
	return uc.c.SetReadDeadline(t)
}

// ReadDeadlineBy makes sure the read deadline is no later than t, and no earlier than
// t-slack: a deadline set by the connection's previous exchange that is within slack of
// t stands (resetting it costs a timer update per exchange). For callers that treat a
// deadline that comes early as a wake-up to check and re-arm.
func (uc *Conn) ReadDeadlineBy(t time.Time, slack time.Duration) error {
	if !uc.rdl.IsZero() && !uc.rdl.After(t) && t.Sub(uc.rdl) <= slack {
		return nil
	}
	return uc.SetReadDeadline(t)
}

// Abort returns a func that closes the connection (the same func every time: it is
// made once, so registering it with context.AfterFunc allocates nothing more). It may be
// called from any goroutine, at any time.
func (uc *Conn) Abort() func() { return uc.abort }

// Close closes the connection.
func (uc *Conn) Close() { _ = uc.c.Close() }

// Detach hands the connection over for good (a tunnel's, once the target switched
// protocols): it is the caller's to read, write and close, and never goes to a pool.
func (uc *Conn) Detach() net.Conn {
	uc.pool = nil
	return uc.c
}
