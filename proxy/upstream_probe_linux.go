package proxy

import "syscall"

// peerClosed reports whether the target has closed an idle connection or sent something
// on it (a stray byte, a 408): one non-blocking MSG_PEEK, without waiting in the poller.
// A connection that cannot be probed counts as open (the retry rule covers it).
func peerClosed(rc syscall.RawConn) bool {
	if rc == nil {
		return false
	}
	var p probe
	return p.run(rc)
}

// probe is one peek; its method value is made once per connection (upConn.probe), so
// that the check before every reuse allocates nothing.
type probe struct {
	fn   func(fd uintptr)
	b    [1]byte
	dead bool
}

func (p *probe) peek(fd uintptr) {
	n, _, err := syscall.Recvfrom(int(fd), p.b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
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
