package proxy

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// pollRDHUP is Linux's POLLRDHUP: the peer shut down its writing side.
const pollRDHUP = 0x2000

// peerHungUp reports whether the client closed or reset its connection, even when
// unread bytes (a pipelined request, a TLS close_notify) sit before the FIN: one poll
// with a zero timeout. A connection that cannot be polled counts as open.
func peerHungUp(rc syscall.RawConn) bool {
	if rc == nil {
		return false
	}
	gone := false
	err := rc.Control(func(fd uintptr) {
		fds := [1]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | pollRDHUP}}
		n, err := unix.Poll(fds[:], 0)
		gone = err == nil && n > 0 && fds[0].Revents&(pollRDHUP|unix.POLLHUP|unix.POLLERR) != 0
	})
	return gone && err == nil
}
