package upstream

import (
	"io"
	"os"
	"syscall"

	"github.com/serve-zone/ingress/internal/rawnet"
)

// xfer is one WriteRead on the descriptor; its step method value is made once per
// connection, so that the exchange allocates nothing.
type xfer struct {
	fn    func(fd uintptr) bool
	req   []byte
	buf   []byte
	n     int
	err   error
	sent  bool
	wrote int
}

// step is the callback of syscall.RawConn.Read: the first call writes the request and
// asks to wait (false) without trying a read the answer cannot have reached yet; later
// calls, each after the poller said the descriptor is readable, read.
func (x *xfer) step(fd uintptr) bool {
	if !x.sent {
		for len(x.req) > 0 {
			n, err := rawnet.Write(int(fd), x.req)
			if n > 0 {
				x.wrote += n
				x.req = x.req[n:]
			}
			switch {
			case err == syscall.EINTR:
				continue
			case err == syscall.EAGAIN:
				return true // the send buffer is full: the caller finishes the usual way
			case err != nil:
				x.err = os.NewSyscallError("write", err)
				return true
			}
		}
		x.sent = true
		return false
	}
	for {
		n, err := rawnet.Read(int(fd), x.buf)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return false // a wake-up without bytes: wait again
		case err != nil:
			x.err = os.NewSyscallError("read", err)
		case n == 0:
			x.err = io.EOF
		default:
			x.n = n
		}
		return true
	}
}

// WriteRead writes req and reads the first bytes of the answer into buf, counting
// both. The read deadline set on the connection applies to the wait, never to the
// write: with the deadline past, req is written all the same and the read times out.
//
// Why: net.Conn.Read tries the read before it waits, and right after the request went
// out the answer is never there yet, so every exchange paid one read that fails with
// EAGAIN. Here the poller's readiness is armed (RawConn.Read resets it) before the
// request is written, so an answer that comes back at once is not missed, and the first
// read is made when the descriptor is readable.
func (uc *Conn) WriteRead(req, buf []byte) (int, error) {
	if uc.rc == nil || len(buf) == 0 {
		return uc.writeThenRead(req, buf)
	}
	x := &uc.xfer
	if x.fn == nil {
		x.fn = x.step
	}
	if int64(len(buf)) > uc.limit {
		buf = buf[:uc.limit]
	}
	x.req, x.buf, x.n, x.err, x.sent, x.wrote = req, buf, 0, nil, false, 0
	err := uc.rc.Read(x.fn)
	n, wrote, sent := x.n, x.wrote, x.sent
	rest := x.req
	x.req, x.buf = nil, nil
	uc.wrote += int64(wrote)
	if !sent && x.err == nil {
		// The rest of the request, then the answer: the send buffer filled (err nil),
		// or RawConn.Read failed before it called step (a read deadline already past:
		// step never ran, and a request must never be taken for sent).
		return uc.writeThenRead(rest, buf)
	}
	if x.err != nil {
		err = x.err
	}
	uc.limit -= int64(n)
	uc.read += int64(n)
	return n, err
}
