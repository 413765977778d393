package rawnet

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// pair returns a wrapped server side and the plain client side of a loopback TCP
// connection.
func pair(t *testing.T) (*TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	cc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sc, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	w, ok := Wrap(sc).(*TCPConn)
	if !ok {
		t.Fatalf("Wrap(%T) did not return a *TCPConn", sc)
	}
	t.Cleanup(func() { w.Close(); cc.Close() })
	return w, cc.(*net.TCPConn)
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// One MiB each way, through small socket buffers and small reads: the writes must wait
// for room (EAGAIN) and every byte must arrive in order.
func TestBulkBothWays(t *testing.T) {
	w, c := pair(t)
	for _, s := range []interface{ SetWriteBuffer(int) error }{w, c} {
		if err := s.SetWriteBuffer(16 << 10); err != nil {
			t.Fatal(err)
		}
	}
	out, in := randomBytes(1<<20), randomBytes(1<<20)
	in[0] ^= 0xff // a different stream from out
	errc := make(chan error, 2)
	go func() { // wrapped side writes out
		n, err := w.Write(out)
		if err == nil && n != len(out) {
			err = io.ErrShortWrite
		}
		errc <- err
	}()
	go func() { // plain side writes in
		_, err := c.Write(in)
		errc <- err
	}()
	got := make([]byte, 0, len(in))
	buf := make([]byte, 1000)
	for len(got) < len(in) {
		n, err := w.Read(buf)
		if err != nil {
			t.Fatalf("wrapped Read after %d bytes: %v", len(got), err)
		}
		got = append(got, buf[:n]...)
	}
	peer, err := io.ReadAll(io.LimitReader(c, int64(len(out))))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got, in) {
		t.Error("the wrapped side read other bytes than the peer wrote")
	}
	if !bytes.Equal(peer, out) {
		t.Error("the peer read other bytes than the wrapped side wrote")
	}
}

// A read and a write may overlap (the HTTP/2 server's reader and writer do).
func TestConcurrentReadAndWrite(t *testing.T) {
	w, c := pair(t)
	go func() { _, _ = io.Copy(c, c) }() // the peer echoes
	msg := randomBytes(256 << 10)
	done := make(chan error, 1)
	go func() {
		_, err := w.Write(msg)
		done <- err
	}()
	got, err := io.ReadAll(io.LimitReader(w, int64(len(msg))))
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, msg) {
		t.Error("echo differs")
	}
}

func TestEOF(t *testing.T) {
	w, c := pair(t)
	if _, err := c.Write([]byte("ab")); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(w)
	if err != nil || string(got) != "ab" {
		t.Fatalf("ReadAll = %q, %v; want \"ab\", nil", got, err)
	}
	if n, err := w.Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Fatalf("Read after the end = %d, %v; want 0, io.EOF (unwrapped)", n, err)
	}
}

func TestErrorsLikeNetTCPConn(t *testing.T) {
	t.Run("deadline", func(t *testing.T) {
		w, _ := pair(t)
		if err := w.SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
			t.Fatal(err)
		}
		_, err := w.Read(make([]byte, 8))
		var oe *net.OpError
		if !errors.As(err, &oe) || oe.Op != "read" || oe.Net != "tcp" {
			t.Fatalf("err = %#v; want a *net.OpError for read on tcp", err)
		}
		var ne net.Error
		if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("err = %v; want a timeout (os.ErrDeadlineExceeded)", err)
		}
		if err := w.SetWriteDeadline(time.Now().Add(-time.Second)); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte("x")); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("Write past its deadline: %v", err)
		}
	})
	t.Run("closed", func(t *testing.T) {
		w, _ := pair(t)
		w.Close()
		if _, err := w.Read(make([]byte, 8)); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Read after Close: %v; want net.ErrClosed", err)
		}
		if _, err := w.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Write after Close: %v; want net.ErrClosed", err)
		}
	})
	t.Run("reset", func(t *testing.T) {
		w, c := pair(t)
		if err := c.SetLinger(0); err != nil {
			t.Fatal(err)
		}
		c.Close()
		_, err := w.Read(make([]byte, 8))
		var se *os.SyscallError
		if !errors.Is(err, syscall.ECONNRESET) || !errors.As(err, &se) || se.Syscall != "read" {
			t.Fatalf("Read after the peer's reset: %#v; want an *os.SyscallError read: ECONNRESET", err)
		}
	})
	t.Run("close while reading", func(t *testing.T) {
		w, _ := pair(t)
		errc := make(chan error, 1)
		go func() {
			_, err := w.Read(make([]byte, 8))
			errc <- err
		}()
		// Close wakes a Read that waits for readability; a Read that has not started yet
		// finds the connection closed. Either way: net.ErrClosed.
		w.Close()
		if err := <-errc; !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Read woken by Close: %v", err)
		}
	})
}

func TestWrapKeepsTheConnection(t *testing.T) {
	w, c := pair(t)
	if err := w.SetLinger(0); err != nil {
		t.Fatal(err)
	}
	if _, err := w.SyscallConn(); err != nil {
		t.Fatal(err)
	}
	if w.RemoteAddr().String() != c.LocalAddr().String() {
		t.Errorf("RemoteAddr %v, peer's LocalAddr %v", w.RemoteAddr(), c.LocalAddr())
	}
	if err := w.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("peer Read after CloseWrite = %d, %v", n, err)
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if Wrap(a) != a {
		t.Error("Wrap changed a connection that is not a *net.TCPConn")
	}
	if n, err := Read(-1, nil); n != 0 || err != nil {
		t.Errorf("Read of nothing = %d, %v", n, err)
	}
}

func TestPeek(t *testing.T) {
	w, c := pair(t)
	rc, err := w.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	peek := func() (n int, err error) {
		b := make([]byte, 4)
		if cerr := rc.Control(func(fd uintptr) { n, err = Peek(int(fd), b) }); cerr != nil {
			t.Fatal(cerr)
		}
		return n, err
	}
	if _, err := peek(); err != syscall.EAGAIN {
		t.Fatalf("Peek on an empty socket: %v; want EAGAIN", err)
	}
	if _, err := c.Write([]byte("xyz")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 3)
	if _, err := io.ReadFull(w, b[:0]); err != nil {
		t.Fatal(err)
	}
	// The bytes arrive on loopback at once; a peek leaves them queued for Read.
	var n int
	for n == 0 {
		if n, err = peek(); err != nil && err != syscall.EAGAIN {
			t.Fatal(err)
		}
	}
	if _, err := io.ReadFull(w, b); err != nil || string(b) != "xyz" {
		t.Fatalf("Read after Peek = %q, %v", b, err)
	}
	c.Close()
	for {
		n, err := peek()
		if err == syscall.EAGAIN {
			continue
		}
		if n != 0 || err != nil {
			t.Fatalf("Peek at the end = %d, %v; want 0, nil", n, err)
		}
		break
	}
}

func TestNoAllocations(t *testing.T) {
	if raceBuild {
		t.Skip("the race detector's build allocates in its annotations")
	}
	w, c := pair(t)
	msg := []byte("0123456789abcdef")
	buf := make([]byte, 64)
	peer := make([]byte, 64)
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := w.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, peer[:len(msg)]); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(w, buf[:len(msg)]); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per write and read, want 0", allocs)
	}
}

// The raw calls and the syscall package's agree, whichever of them this build's Read,
// Write and Peek use (the race detector's build uses the latter; CI runs it).
func TestRawAndStdCallsAgree(t *testing.T) {
	type calls struct {
		name              string
		read, write, peek func(int, []byte) (int, error)
	}
	for _, k := range []calls{{"raw", rawRead, rawWrite, rawPeek}, {"std", stdRead, stdWrite, stdPeek}} {
		t.Run(k.name, func(t *testing.T) {
			w, c := pair(t)
			rc, err := w.SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			do := func(f func(fd int) (int, error)) (n int, err error) {
				if cerr := rc.Control(func(fd uintptr) { n, err = f(int(fd)) }); cerr != nil {
					t.Fatal(cerr)
				}
				return n, err
			}
			b := make([]byte, 8)
			if n, err := do(func(fd int) (int, error) { return k.read(fd, b) }); n != 0 || err != syscall.EAGAIN {
				t.Fatalf("read on an empty socket = %d, %v; want 0, EAGAIN", n, err)
			}
			if n, err := do(func(fd int) (int, error) { return k.write(fd, []byte("hello")) }); n != 5 || err != nil {
				t.Fatalf("write = %d, %v", n, err)
			}
			got := make([]byte, 5)
			if _, err := io.ReadFull(c, got); err != nil || string(got) != "hello" {
				t.Fatalf("peer read %q, %v", got, err)
			}
			if _, err := c.Write([]byte("abc")); err != nil {
				t.Fatal(err)
			}
			for { // loopback delivers at once, but the peer's write may still be in flight
				n, err := do(func(fd int) (int, error) { return k.peek(fd, b) })
				if err == syscall.EAGAIN {
					continue
				}
				if n != 3 || err != nil || string(b[:3]) != "abc" {
					t.Fatalf("peek = %d %q, %v", n, b[:n], err)
				}
				break
			}
			if n, err := do(func(fd int) (int, error) { return k.read(fd, b) }); n != 3 || err != nil || string(b[:3]) != "abc" {
				t.Fatalf("read after peek = %d %q, %v", n, b[:n], err)
			}
			if n, err := do(func(fd int) (int, error) { return k.read(fd, nil) }); n != 0 || err != nil {
				t.Fatalf("read of nothing = %d, %v", n, err)
			}
			c.Close()
			for {
				n, err := do(func(fd int) (int, error) { return k.read(fd, b) })
				if err == syscall.EAGAIN {
					continue
				}
				if n != 0 || err != nil {
					t.Fatalf("read at the end = %d, %v; want 0, nil", n, err)
				}
				break
			}
			if _, err := do(func(fd int) (int, error) { return k.read(-1, b) }); err != syscall.EBADF {
				t.Fatalf("read on a bad descriptor: %v; want EBADF", err)
			}
		})
	}
}
