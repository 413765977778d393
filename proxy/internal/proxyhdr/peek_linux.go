package proxyhdr

import (
	"syscall"

	"github.com/serve-zone/ingress/internal/rawnet"
)

// canPeek: Read peeks at the socket (MSG_PEEK) before it takes the header's bytes.
const canPeek = true

// readPeek reads the header from rc's descriptor inside one RawConn.Read: it peeks at
// what is queued, takes exactly the header when it is all there, and otherwise takes
// what is queued (every byte of it is the header's, Frame says) and waits for the rest.
// Two system calls for a header that came in one segment.
func readPeek(rc syscall.RawConn) (Header, error) {
	p := peeker{buf: make([]byte, 128)} // a version 1 line, a version 2 header with a few TLVs
	err := rc.Read(p.step)
	if err == nil {
		err = p.err
	}
	if err != nil {
		return Header{}, err
	}
	return Parse(p.buf[:p.have])
}

type peeker struct {
	buf  []byte
	have int // buf[:have] was taken from the socket
	err  error
}

func (p *peeker) step(fd uintptr) bool {
	for {
		n, err := rawnet.Peek(int(fd), p.buf[p.have:])
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return false // wait for the rest
		case err != nil:
			p.err = err
			return true
		case n == 0 && p.have == 0:
			p.err = ErrEmpty
			return true
		case n == 0:
			p.err = ErrTruncated
			return true
		}
		hl, need, err := Frame(p.buf[:p.have+n])
		if err != nil {
			p.err = err
			return true
		}
		take := hl - p.have // the header ends within what is queued
		if hl == 0 {
			take = n // all of it is the header's
		}
		if p.err = p.take(int(fd), take); p.err != nil || hl > 0 {
			return true
		}
		if p.have == len(p.buf) {
			p.buf = append(p.buf, make([]byte, need)...) // a version 2 header longer than 128 bytes
		}
	}
}

// take reads n bytes that a peek found queued.
func (p *peeker) take(fd, n int) error {
	for end := p.have + n; p.have < end; {
		m, err := rawnet.Read(fd, p.buf[p.have:end])
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return err
		case m == 0:
			return ErrTruncated
		}
		p.have += m
	}
	return nil
}
