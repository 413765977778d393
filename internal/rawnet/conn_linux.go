package rawnet

import (
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
)

// TCPConn is a *net.TCPConn whose Read and Write make raw system calls. Everything else
// (deadlines, Close, CloseWrite, SetLinger, SyscallConn, addresses) is the embedded
// connection's. Reads must not overlap other reads, nor writes other writes (as with
// crypto/tls and net/http, which serialize them); a read and a write may overlap.
type TCPConn struct {
	*net.TCPConn
	rawIO
}

// rawIO is Read and Write as raw calls inside a syscall.RawConn's callbacks, for
// TCPConn and SockConn; their step method values are made once per connection.
type rawIO struct {
	rc syscall.RawConn
	// local and remote name the connection in errors.
	local, remote func() net.Addr

	rfn  func(fd uintptr) bool
	rb   []byte
	rn   int
	rerr error
	// got is how many bytes Read returned in all (BytesRead).
	got int64

	wfn  func(fd uintptr) bool
	wb   []byte
	wn   int
	werr error

	// closed: a SockConn's Close ran (its file's errors then say "use of closed file",
	// which is net.ErrClosed to callers).
	closed atomic.Bool
}

func (c *rawIO) init(rc syscall.RawConn, local, remote func() net.Addr) {
	c.rc, c.local, c.remote = rc, local, remote
	c.rfn, c.wfn = c.readStep, c.writeStep
}

// Wrap returns c as a *TCPConn when it is a *net.TCPConn, and c itself otherwise.
func Wrap(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	r := &TCPConn{TCPConn: tc}
	r.init(rc, tc.LocalAddr, tc.RemoteAddr)
	return r
}

// Read reads like net.TCPConn.Read: io.EOF at the end, *net.OpError otherwise.
func (c *rawIO) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	c.rb, c.rn, c.rerr = b, 0, nil
	err := c.rc.Read(c.rfn)
	n, rerr := c.rn, c.rerr
	c.rb, c.rerr = nil, nil
	c.got += int64(n)
	if rerr != nil {
		err = rerr
	}
	if err == nil || err == io.EOF {
		return n, err
	}
	return n, c.opError("read", err)
}

// BytesRead is how many bytes Read returned in all: under crypto/tls, the record bytes
// taken from the socket, which tells whether a record is part-way in (proxy's idle TLS
// connections). Like Read, it belongs to the one goroutine that reads.
func (c *rawIO) BytesRead() int64 { return c.got }

// Write writes all of b like net.TCPConn.Write, waiting for room as often as needed.
func (c *rawIO) Write(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	c.wb, c.wn, c.werr = b, 0, nil
	err := c.rc.Write(c.wfn)
	n, werr := c.wn, c.werr
	c.wb, c.werr = nil, nil
	if werr != nil {
		err = werr
	}
	if err == nil {
		return n, nil
	}
	return n, c.opError("write", err)
}

func (c *rawIO) readStep(fd uintptr) bool {
	for {
		n, err := Read(int(fd), c.rb)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return false // wait for readability
		case err != nil:
			c.rerr = err
		case n == 0:
			c.rerr = io.EOF
		default:
			c.rn = n
		}
		return true
	}
}

func (c *rawIO) writeStep(fd uintptr) bool {
	for c.wn < len(c.wb) {
		n, err := Write(int(fd), c.wb[c.wn:])
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return false // wait for room
		case err != nil:
			c.werr = err
			return true
		}
		c.wn += n
	}
	return true
}

// opError shapes err as net.TCPConn's Read and Write do: a *net.OpError around the cause
// (os.ErrDeadlineExceeded, net.ErrClosed or an *os.SyscallError), not around the
// RawConn's own "raw-read" error. A closed SockConn's errors read as net.ErrClosed.
func (c *rawIO) opError(op string, err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) {
		err = oe.Err
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	if c.closed.Load() {
		err = net.ErrClosed
	}
	if errno, ok := err.(syscall.Errno); ok {
		err = os.NewSyscallError(op, errno)
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.local(), Addr: c.remote(), Err: err}
}
