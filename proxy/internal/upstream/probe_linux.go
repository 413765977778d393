package upstream

import (
	"syscall"

	"github.com/serve-zone/ingress/internal/rawnet"
)

// probe is one peek; its method value is made once per connection (Conn.probe), so
// that the check before every reuse allocates nothing.
type probe struct {
	fn   func(fd uintptr)
	b    [1]byte
	dead bool
}

func (p *probe) peek(fd uintptr) {
	n, err := rawnet.Peek(int(fd), p.b[:])
	switch {
	case err == syscall.EAGAIN || err == syscall.EINTR:
		p.dead = false
	case err != nil, n >= 0:
		p.dead = true
	}
}

// run peeks at rc. Control, not Read: the probe must not depend on a read deadline left
// behind by the connection's last exchange.
func (p *probe) run(rc syscall.RawConn) bool {
	if p.fn == nil {
		p.fn = p.peek
	}
	p.dead = false
	err := rc.Control(p.fn)
	return p.dead || err != nil
}
