package proxy

import "syscall"

// peerClosed reports whether the target has closed an idle connection or sent something
// on it (a stray byte, a 408): one non-blocking MSG_PEEK, without waiting in the poller.
// A connection that cannot be probed counts as open (the retry rule covers it).
func peerClosed(rc syscall.RawConn) bool {
	if rc == nil {
		return false
	}
	var b [1]byte
	dead := false
	// Control, not Read: the probe must not depend on a read deadline left behind by
	// the connection's last exchange.
	err := rc.Control(func(fd uintptr) {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == syscall.EAGAIN || err == syscall.EINTR:
		case err != nil, n >= 0:
			dead = true
		}
	})
	return dead || err != nil
}
