package proxy

import (
	"io"
	"syscall"

	"golang.org/x/sys/unix"
)

// canPark: Linux can wait for a socket to become readable without a buffer.
const canPark = true

// waitReadable blocks until rc has bytes to read, without reading them: a one-byte
// MSG_PEEK whenever the runtime's poller says the socket is ready. The end of the stream
// is io.EOF; the read deadline set on the connection applies.
func waitReadable(rc syscall.RawConn) error {
	var b [1]byte
	var perr error
	err := rc.Read(func(fd uintptr) bool {
		for {
			n, _, e := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
			switch {
			case e == unix.EINTR:
				continue
			case e == unix.EAGAIN:
				return false // not yet: wait for the poller
			case e != nil:
				perr = e
			case n == 0:
				perr = io.EOF
			}
			return true
		}
	})
	if err != nil {
		return err
	}
	return perr
}
