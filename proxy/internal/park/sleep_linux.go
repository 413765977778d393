package park

import (
	"syscall"

	"github.com/serve-zone/ingress/internal/rawnet"
	"golang.org/x/sys/unix"
)

// FD is a sleeping connection's descriptor: a duplicate of its socket's, made when it
// went to sleep (Dup), which keeps the socket open while the Go connection it came from
// is closed (its poll registration, buffers and wrappers gone). The Parker watches it
// (Control), and the connection wakes from it (Wake) or ends with it (Close). Its owner
// is whoever holds the sleeping connection: its goroutine, the Parker, its claimer.
type FD int32

// Dup duplicates rc's descriptor (close-on-exec) for a connection about to sleep.
func Dup(rc syscall.RawConn) (FD, error) {
	fd, errno := -1, syscall.Errno(0)
	if err := rc.Control(func(d uintptr) {
		r, _, e := unix.RawSyscall(unix.SYS_FCNTL, d, unix.F_DUPFD_CLOEXEC, 0)
		fd, errno = int(r), e
	}); err != nil {
		return -1, err
	}
	if errno != 0 {
		return -1, errno
	}
	return FD(fd), nil
}

// Control runs f with the descriptor (Parkee's Control for a sleeping connection; only
// its owner closes it).
func (fd FD) Control(f func(fd uintptr)) error {
	f(uintptr(fd))
	return nil
}

// Wake makes the descriptor a Go connection again, as it is (rawnet.NewSockConn: no
// duplicate, so a process at its descriptor limit wakes its sleepers as it serves its
// other connections; three system calls). It takes the descriptor over, also when it
// fails: rawnet.ErrNotConnected when the client reset the connection meanwhile (a
// socket with no peer to name).
func (fd FD) Wake() (*rawnet.SockConn, error) { return rawnet.NewSockConn(int(fd)) }

// Close closes the descriptor, and with it the connection; reset drops what is queued
// and resets it (SO_LINGER 0).
func (fd FD) Close(reset bool) {
	if reset {
		_ = unix.SetsockoptLinger(int(fd), unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
	}
	_ = unix.Close(int(fd))
}
