package rawnet

import (
	"errors"
	"net"
	"os"
	"syscall"
	"time"
)

// SockConn is a TCP connection held by an *os.File, made from a socket's descriptor as
// it is: where net.FileConn duplicates the descriptor (a second one for a moment, which
// a process at its descriptor limit does not have, and a dozen system calls), NewSockConn
// takes it over, registered with Go's poller like a socket of package net (deadlines,
// Close and waiting for readiness work the same). Read and Write are TCPConn's raw calls.
// Besides net.Conn it has what proxy's connections use of a *net.TCPConn: SyscallConn,
// CloseRead, CloseWrite and SetLinger.
type SockConn struct {
	f *os.File
	rawIO
	laddr, raddr net.Addr
}

// ErrNotConnected: the socket has no peer any more (it was reset).
var ErrNotConnected = errors.New("rawnet: the socket is not connected")

// NewSockConn makes a SockConn of the non-blocking TCP socket fd, which it takes over:
// on error it is closed. ErrNotConnected when the peer reset the connection.
func NewSockConn(fd int) (*SockConn, error) {
	raddr, err := syscall.Getpeername(fd)
	if err == nil {
		var laddr syscall.Sockaddr
		if laddr, err = syscall.Getsockname(fd); err == nil {
			f := os.NewFile(uintptr(fd), "tcp")
			// A file that Go's poller did not take (registration failed) would block:
			// refused. Only a pollable file has deadlines.
			if err := f.SetReadDeadline(time.Time{}); err != nil {
				_ = f.Close()
				return nil, err
			}
			rc, err := f.SyscallConn()
			if err != nil {
				_ = f.Close()
				return nil, err
			}
			c := &SockConn{f: f, laddr: tcpAddr(laddr), raddr: tcpAddr(raddr)}
			c.init(rc, c.LocalAddr, c.RemoteAddr)
			return c, nil
		}
	}
	_ = syscall.Close(fd)
	if err == syscall.ENOTCONN || err == syscall.EINVAL {
		return nil, ErrNotConnected
	}
	return nil, os.NewSyscallError("getpeername", err)
}

func tcpAddr(sa syscall.Sockaddr) net.Addr {
	switch a := sa.(type) {
	case *syscall.SockaddrInet4:
		return &net.TCPAddr{IP: net.IP(a.Addr[:]).To16(), Port: a.Port}
	case *syscall.SockaddrInet6:
		a6 := &net.TCPAddr{IP: append(net.IP(nil), a.Addr[:]...), Port: a.Port}
		if a.ZoneId != 0 {
			if ifi, err := net.InterfaceByIndex(int(a.ZoneId)); err == nil {
				a6.Zone = ifi.Name
			}
		}
		return a6
	}
	return &net.TCPAddr{}
}

func (c *SockConn) LocalAddr() net.Addr                { return c.laddr }
func (c *SockConn) RemoteAddr() net.Addr               { return c.raddr }
func (c *SockConn) Close() error                       { c.closed.Store(true); return c.f.Close() }
func (c *SockConn) SetDeadline(t time.Time) error      { return c.f.SetDeadline(t) }
func (c *SockConn) SetReadDeadline(t time.Time) error  { return c.f.SetReadDeadline(t) }
func (c *SockConn) SetWriteDeadline(t time.Time) error { return c.f.SetWriteDeadline(t) }

// SyscallConn is the socket's RawConn (the file's).
func (c *SockConn) SyscallConn() (syscall.RawConn, error) { return c.rc, nil }

// CloseRead shuts the reading side down, as net.TCPConn's.
func (c *SockConn) CloseRead() error { return c.shutdown(syscall.SHUT_RD) }

// CloseWrite shuts the writing side down, as net.TCPConn's.
func (c *SockConn) CloseWrite() error { return c.shutdown(syscall.SHUT_WR) }

func (c *SockConn) shutdown(how int) error {
	var err error
	if cerr := c.rc.Control(func(fd uintptr) { err = syscall.Shutdown(int(fd), how) }); cerr != nil {
		return c.opError("shutdown", cerr)
	}
	if err != nil {
		return c.opError("shutdown", err)
	}
	return nil
}

// SetLinger sets SO_LINGER as net.TCPConn's (0: the close resets the connection).
func (c *SockConn) SetLinger(sec int) error {
	l := syscall.Linger{}
	if sec >= 0 {
		l.Onoff, l.Linger = 1, int32(sec)
	}
	var err error
	if cerr := c.rc.Control(func(fd uintptr) { err = syscall.SetsockoptLinger(int(fd), syscall.SOL_SOCKET, syscall.SO_LINGER, &l) }); cerr != nil {
		return c.opError("set", cerr)
	}
	if err != nil {
		return c.opError("set", err)
	}
	return nil
}
