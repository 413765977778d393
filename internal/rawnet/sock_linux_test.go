package rawnet

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// sockPair is a SockConn made from the server side of a loopback connection (its
// descriptor duplicated out of a *net.TCPConn, which is then closed) and the client side.
func sockPair(t *testing.T) (*SockConn, *net.TCPConn) {
	t.Helper()
	w, c := pair(t)
	var fd int
	var derr error
	if err := w.rc.Control(func(d uintptr) { fd, derr = syscall.Dup(int(d)) }); err != nil || derr != nil {
		t.Fatal(err, derr)
	}
	syscall.CloseOnExec(fd)
	_ = w.Close()
	sc, err := NewSockConn(fd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Close() })
	return sc, c
}

// TestSockConn: a SockConn reads, writes, names both ends, times out, half-closes,
// resets and closes as a *net.TCPConn does.
func TestSockConn(t *testing.T) {
	sc, c := sockPair(t)
	if sc.RemoteAddr().String() != c.LocalAddr().String() || sc.LocalAddr().String() != c.RemoteAddr().String() {
		t.Fatalf("addresses %v -> %v; want %v -> %v", sc.LocalAddr(), sc.RemoteAddr(), c.RemoteAddr(), c.LocalAddr())
	}
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 16)
	_ = sc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := io.ReadAtLeast(sc, b, 5); err != nil || string(b[:n]) != "hello" || sc.BytesRead() != 5 {
		t.Fatalf("read %q, %v (counted %d)", b[:n], err, sc.BytesRead())
	}
	if _, err := sc.Write([]byte("world")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := io.ReadAtLeast(c, b, 5); err != nil || string(b[:n]) != "world" {
		t.Fatalf("the peer read %q, %v", b[:n], err)
	}
	// A deadline: a net.Error that says Timeout, as net's.
	_ = sc.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := sc.Read(b)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v; want a timeout", err)
	}
	// CloseWrite: the peer reads the end.
	if err := sc.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(b); err != io.EOF {
		t.Fatalf("the peer after CloseWrite: %v, want EOF", err)
	}
	// The peer's end: EOF.
	_ = c.CloseWrite()
	_ = sc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := sc.Read(b); err != io.EOF {
		t.Fatalf("after the peer's end: %v, want EOF", err)
	}
	// Closed: net.ErrClosed, as net's.
	_ = sc.Close()
	if _, err := sc.Read(b); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after Close: %v, want net.ErrClosed", err)
	}
}

// TestSockConnReset: SetLinger(0) makes Close a reset.
func TestSockConnReset(t *testing.T) {
	sc, c := sockPair(t)
	if err := sc.SetLinger(0); err != nil {
		t.Fatal(err)
	}
	_ = sc.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the peer after a close with SetLinger(0): %v, want a reset", err)
	}
}

// TestNewSockConnClosesOnError: a descriptor that is not a connected socket is closed.
func TestNewSockConnClosesOnError(t *testing.T) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewSockConn(fd); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("an unconnected socket: %v, want ErrNotConnected", err)
	}
	if _, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFD, 0); errno != syscall.EBADF {
		t.Fatalf("the descriptor is still open (%v)", errno)
	}
}
