package proxy

import (
	"net"
	"testing"
	"time"
)

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-acc
	if s == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

func newWaiter(t *testing.T, c *net.TCPConn) *waiter {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	w := new(waiter)
	w.init(rc)
	return w
}

// TestWaiter: the wait wakes when data arrives, gives up at its deadline when none does,
// and when data came before the wait began (the readiness the poller may already have
// consumed) it never blocks longer than its deadline: the read after it finds the data.
func TestWaiter(t *testing.T) {
	if !waitFirst {
		t.Skip("INGRESS_NOWAIT is set")
	}
	t.Run("data arrives during the wait", func(t *testing.T) {
		c, s := tcpPair(t)
		w := newWaiter(t, s)
		go func() {
			time.Sleep(20 * time.Millisecond)
			c.Write([]byte("x"))
		}()
		start := time.Now()
		if !w.wait(s.SetReadDeadline, time.Now().Add(5*time.Second)) {
			t.Fatal("wait reported no data")
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("woke after %s", d)
		}
		_ = s.SetReadDeadline(time.Time{})
		var b [1]byte
		if n, err := s.Read(b[:]); n != 1 || err != nil {
			t.Fatalf("read after the wait: %d, %v", n, err)
		}
	})
	t.Run("no data", func(t *testing.T) {
		_, s := tcpPair(t)
		w := newWaiter(t, s)
		start := time.Now()
		if w.wait(s.SetReadDeadline, time.Now().Add(30*time.Millisecond)) {
			t.Fatal("wait reported data that never came")
		}
		if d := time.Since(start); d < 30*time.Millisecond {
			t.Fatalf("gave up after %s, before its deadline", d)
		}
	})
	t.Run("data before the wait", func(t *testing.T) {
		c, s := tcpPair(t)
		w := newWaiter(t, s)
		// Let the poller see the socket readable with nobody waiting.
		rc, _ := s.SyscallConn()
		_ = rc.Read(func(fd uintptr) bool { return true }) // registers interest, reads nothing
		c.Write([]byte("x"))
		time.Sleep(20 * time.Millisecond) // the scheduler polls meanwhile
		start := time.Now()
		w.wait(s.SetReadDeadline, time.Now().Add(50*time.Millisecond))
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("the wait hung for %s", d)
		}
		_ = s.SetReadDeadline(time.Now().Add(time.Second))
		var b [1]byte
		if n, err := s.Read(b[:]); n != 1 || err != nil {
			t.Fatalf("read after the wait: %d, %v", n, err)
		}
	})
	t.Run("peer closes", func(t *testing.T) {
		c, s := tcpPair(t)
		w := newWaiter(t, s)
		go func() {
			time.Sleep(20 * time.Millisecond)
			c.Close()
		}()
		if !w.wait(s.SetReadDeadline, time.Now().Add(5*time.Second)) {
			t.Fatal("a closed peer did not wake the wait")
		}
	})
	t.Run("no raw conn", func(t *testing.T) {
		var w waiter
		if w.enabled() || w.wait(func(time.Time) error { t.Fatal("deadline set"); return nil }, time.Now()) {
			t.Fatal("a waiter without a connection waited")
		}
	})
}
