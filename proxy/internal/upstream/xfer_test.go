package upstream

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// echoPeer answers each request it reads (one read each) with the same bytes at once,
// as fast as the loopback allows: the case in which an answer arriving between the
// request's write and the wait would be missed if the poller were armed too late.
func echoPeer(c net.Conn) {
	b := make([]byte, 4096)
	for {
		n, err := c.Read(b)
		if err != nil {
			return
		}
		if _, err := c.Write(b[:n]); err != nil {
			return
		}
	}
}

// TestWriteReadAnswersAtOnce: ten thousand exchanges with a peer that answers at once
// each get their answer (none waits for the deadline), and the counts add up.
func TestWriteReadAnswersAtOnce(t *testing.T) {
	ps := newPools(t)
	addr, accepted := listen(t)
	uc, peer := dial(t, ps, addr, accepted)
	go echoPeer(peer)
	req := []byte("ping")
	buf := make([]byte, 16)
	const rounds = 10000
	start := time.Now()
	for i := range rounds {
		uc.Begin(1 << 20)
		_ = uc.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := uc.WriteRead(req, buf)
		if err != nil || string(buf[:n]) != "ping" {
			t.Fatalf("exchange %d: %q, %v", i, buf[:n], err)
		}
		if uc.wrote != 4 || uc.read != 4 || uc.limit != 1<<20-4 {
			t.Fatalf("exchange %d: counted %d written, %d read, limit %d", i, uc.wrote, uc.read, uc.limit)
		}
	}
	t.Logf("%d exchanges in %v", rounds, time.Since(start))
}

// TestWriteReadLargeRequest: a request larger than the socket's send buffer is written
// whole (the rest the usual way, once the buffer filled) before the answer is read.
func TestWriteReadLargeRequest(t *testing.T) {
	ps := newPools(t)
	addr, accepted := listen(t)
	uc, peer := dial(t, ps, addr, accepted)
	req := bytes.Repeat([]byte("x"), 16<<20)
	got := make(chan int64, 1)
	go func() {
		n, _ := io.CopyN(io.Discard, peer, int64(len(req)))
		got <- n
		_, _ = peer.Write([]byte("done"))
	}()
	uc.Begin(1 << 20)
	_ = uc.SetReadDeadline(time.Now().Add(20 * time.Second))
	buf := make([]byte, 16)
	n, err := uc.WriteRead(req, buf)
	if err != nil || string(buf[:n]) != "done" {
		t.Fatalf("%q, %v", buf[:n], err)
	}
	if m := <-got; m != int64(len(req)) || uc.wrote != int64(len(req)) {
		t.Fatalf("peer read %d, counted %d written, want %d", m, uc.wrote, len(req))
	}
}

// TestWriteReadDeadlineAndLoss: a peer that never answers ends the wait at the read
// deadline with a timeout (the request counted as written); a peer that closed gives
// an error ConnLost recognizes.
func TestWriteReadDeadlineAndLoss(t *testing.T) {
	ps := newPools(t)
	addr, accepted := listen(t)
	uc, _ := dial(t, ps, addr, accepted)
	uc.Begin(1 << 20)
	_ = uc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err := uc.WriteRead([]byte("hello"), make([]byte, 16))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || uc.wrote != 5 {
		t.Fatalf("silent peer: %v (wrote %d), want a timeout after writing 5 bytes", err, uc.wrote)
	}

	uc2, peer := dial(t, ps, addr, accepted)
	peer.Close()
	uc2.Begin(1 << 20)
	_ = uc2.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = uc2.WriteRead([]byte("hello"), make([]byte, 16))
	if err == nil || !ConnLost(err) {
		t.Fatalf("closed peer: %v, want an error ConnLost recognizes", err)
	}
}

// TestWriteReadAllocatesNothing: the exchange's callback is made once per connection.
func TestWriteReadAllocatesNothing(t *testing.T) {
	ps := newPools(t)
	addr, accepted := listen(t)
	uc, peer := dial(t, ps, addr, accepted)
	go echoPeer(peer)
	req, buf := []byte("ping"), make([]byte, 16)
	_ = uc.SetReadDeadline(time.Time{})
	allocs := testing.AllocsPerRun(200, func() {
		uc.Begin(1 << 20)
		if _, err := uc.WriteRead(req, buf); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per WriteRead, want 0", allocs)
	}
}

// TestWriteReadDeadlinePassed: with the read deadline already past when WriteRead is
// called (RawConn.Read then fails before its callback runs), the request is written all
// the same and counted, and the read times out: a caller that waits on for the answer
// waits for a request that went out (issue 33: it used to wait 60 s for one never sent).
func TestWriteReadDeadlinePassed(t *testing.T) {
	ps := newPools(t)
	addr, accepted := listen(t)
	uc, peer := dial(t, ps, addr, accepted)
	uc.Begin(1 << 20)
	_ = uc.SetReadDeadline(time.Now().Add(-time.Second))
	buf := make([]byte, 16)
	n, err := uc.WriteRead([]byte("ping"), buf)
	var ne net.Error
	if n != 0 || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("WriteRead past the deadline: %d bytes, %v; want a timeout", n, err)
	}
	if uc.wrote != 4 {
		t.Fatalf("counted %d bytes written, want 4", uc.wrote)
	}
	_ = peer.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, 4)
	if _, err := io.ReadFull(peer, got); err != nil || string(got) != "ping" {
		t.Fatalf("the peer read %q, %v; want the request", got, err)
	}
	// The wait goes on with a new deadline and gets the answer.
	_, _ = peer.Write([]byte("pong"))
	_ = uc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := uc.Read(buf); err != nil || string(buf[:n]) != "pong" {
		t.Fatalf("the answer: %q, %v", buf[:n], err)
	}
}
