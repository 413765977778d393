package upstream

import (
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/serve-zone/ingress/internal/ascii"
)

// TimeoutError is a net.Error whose Timeout is true, so that the proxy maps it to 504 as
// it does http.Transport's own "timeout awaiting response headers".
type TimeoutError struct{ msg string }

func (e *TimeoutError) Error() string   { return e.msg }
func (e *TimeoutError) Timeout() bool   { return true }
func (e *TimeoutError) Temporary() bool { return true }

// The failures of an exchange that this package decides.
var (
	ErrHeaderTimeout     error = &TimeoutError{"proxy: timeout awaiting response headers"}
	ErrHeaderTooLong           = errors.New("proxy: target response header too large")
	ErrTooMany1xx              = errors.New("proxy: too many 1xx responses from target")
	ErrUnexpectedUpgrade       = errors.New("proxy: target switched protocols unasked")
)

// Interim is the one 1xx rule: it judges an answer with the given status, the n-th
// (from 1) non-final one when it is 1xx. interim means drop it and read on (100, 103
// Early Hints and the like, as http.Transport does); otherwise the answer is final (any
// status from 200 up, and 101 for a request that asked to upgrade), unless err says the
// exchange fails: 101 unasked, or more than Max1xx interim answers.
func (l *Limits) Interim(status, n int, upgrade bool) (interim bool, err error) {
	switch {
	case status >= 200 || status < 100:
		return false, nil
	case status == 101 && upgrade:
		return false, nil
	case status == 101:
		return false, ErrUnexpectedUpgrade
	case n > l.Max1xx:
		return false, ErrTooMany1xx
	}
	return true, nil
}

// Replayable reports whether a request may be sent again after a reused connection died
// under it, by itself (http.Transport's rule): no body that is gone (streamed: a body
// held whole in memory can be sent again, as http.Transport's with GetBody), and an
// idempotent method or an idempotency key (keyed: the request has Idempotency-Key or
// X-Idempotency-Key).
func Replayable(method string, streamedBody, keyed bool) bool {
	if streamedBody {
		return false
	}
	switch method {
	case "GET", "HEAD", "OPTIONS", "TRACE", "":
		return true
	}
	return keyed
}

// IdempotencyKey reports whether a field name is one of the idempotency keys, in any case.
func IdempotencyKey[T string | []byte](name T) bool {
	return ascii.EqualLower(name, "idempotency-key") || ascii.EqualLower(name, "x-idempotency-key")
}

// MayReplay is the one rule for sending a failed exchange again on a new connection:
// only once, only when c came from the pool (a fresh connection's failure is the
// target's), only when nothing of an answer arrived and the connection was lost (not a
// timeout or a parse error), only when no body bytes were taken from the client
// (bodyTaken; a body held in memory was not taken), and only when nothing was written
// or the request is replayable by itself.
func MayReplay(c *Conn, retried bool, err error, bodyTaken, replayable bool) bool {
	if !c.reused || retried || c.read > 0 || bodyTaken || !ConnLost(err) {
		return false
	}
	return c.wrote == 0 || replayable
}

// ConnLost reports whether err means the connection went away (as opposed to a timeout
// or an answer we refused).
func ConnLost(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, net.ErrClosed)
}
