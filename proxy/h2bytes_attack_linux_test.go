package proxy

import (
	"net"

	"golang.org/x/sys/unix"
)

// unacked reports the bytes c sent that its peer has not acknowledged yet (TCP_INFO):
// zero means they are in the peer's receive queue. ok is false when it cannot tell.
func unacked(c net.Conn) (n int, ok bool) {
	tc, isTCP := c.(*net.TCPConn)
	if !isTCP {
		return 0, false
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var info *unix.TCPInfo
	var serr error
	if err := rc.Control(func(fd uintptr) {
		info, serr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || serr != nil {
		return 0, false
	}
	return int(info.Unacked), true
}
