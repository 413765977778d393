package proxy

import (
	"syscall"

	"github.com/serve-zone/ingress/internal/rawnet"
)

// readableFn returns awaitIdle's RawConn.Read callback (made once per connection): done
// when the socket holds a byte, its end or an error, found with a non-blocking peek
// (RawConn.Read forgets the readiness the poller knew, so it must look before it waits).
func (c *tcpConn) readableFn() func(fd uintptr) bool {
	if c.readable == nil {
		var b [1]byte
		c.readable = func(fd uintptr) bool {
			for {
				_, err := rawnet.Peek(int(fd), b[:])
				if err != syscall.EINTR {
					return err != syscall.EAGAIN
				}
			}
		}
	}
	return c.readable
}
