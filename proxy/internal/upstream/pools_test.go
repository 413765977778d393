package upstream

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/testwait"
)

// listen returns a loopback target whose accepted connections are sent on the channel.
func listen(t *testing.T) (string, <-chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(ch)
				return
			}
			ch <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for c := range ch {
			c.Close()
		}
	})
	return ln.Addr().String(), ch
}

func newPools(t *testing.T) *Pools {
	var d net.Dialer
	ps := New(DefaultLimits(time.Second), d.DialContext)
	t.Cleanup(ps.CloseIdle)
	return ps
}

func dial(t *testing.T, ps *Pools, addr string, accepted <-chan net.Conn) (*Conn, net.Conn) {
	t.Helper()
	uc, err := ps.Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	return uc, <-accepted
}

func TestGetIsLIFOAndMarksReuse(t *testing.T) {
	ps := newPools(t)
	addr, accepted := listen(t)
	a, _ := dial(t, ps, addr, accepted)
	b, _ := dial(t, ps, addr, accepted)
	if a.Reused() || b.Reused() {
		t.Fatal("a dialled connection reports reuse")
	}
	now := time.Now()
	ps.Put(a, true, now)
	ps.Put(b, true, now)
	if n := ps.Idle(addr); n != 2 {
		t.Fatalf("%d idle, want 2", n)
	}
	if got := ps.Get(addr, now); got != b || !got.Reused() {
		t.Fatal("Get did not return the warmest connection marked as reused")
	}
	ps.Put(b, false, now) // not clean: closed, not kept
	if n := ps.Idle(addr); n != 1 {
		t.Fatalf("%d idle after a put that was not clean, want 1", n)
	}
}

// TestGetSkipsConnectionsThePeerClosed: a connection the target closed (or wrote to)
// while it was idle is never handed out, however young.
func TestGetSkipsConnectionsThePeerClosed(t *testing.T) {
	for _, what := range []string{"closed", "wrote a stray byte"} {
		t.Run(what, func(t *testing.T) {
			ps := newPools(t)
			addr, accepted := listen(t)
			uc, peer := dial(t, ps, addr, accepted)
			ps.Put(uc, true, time.Now())
			if what == "closed" {
				peer.Close()
			} else {
				peer.Write([]byte("x"))
			}
			// Wait until the connection shows what the peer did (a blocking read on our
			// side would consume it): the probe is the observable.
			testwait.Until(t, 5*time.Second, "the probe to see the peer's action", func() bool { return uc.probe.run(uc.rc) })
			if got := ps.Get(addr, time.Now()); got != nil {
				t.Fatal("Get returned a connection the peer had closed or written to")
			}
			if n := ps.Idle(addr); n != 0 {
				t.Fatalf("%d idle, want 0", n)
			}
		})
	}
}

func TestIdleExpiryAndSweep(t *testing.T) {
	ps := newPools(t)
	addr, accepted := listen(t)
	t0 := time.Now()
	uc, _ := dial(t, ps, addr, accepted)
	ps.Put(uc, true, t0)
	// Lazy expiry at checkout.
	if got := ps.Get(addr, t0.Add(ps.IdleTimeout)); got != nil {
		t.Fatal("Get returned an expired connection")
	}
	uc, _ = dial(t, ps, addr, accepted)
	ps.Put(uc, true, t0)
	ps.Sweep(t0.Add(ps.IdleTimeout / 2))
	if ps.Idle(addr) != 1 {
		t.Fatal("a fresh idle connection was swept")
	}
	ps.Sweep(t0.Add(ps.IdleTimeout))
	if ps.Idle(addr) != 0 {
		t.Fatal("an expired idle connection was kept")
	}
	// An empty pool is forgotten after the second empty sweep; a put into a forgotten
	// pool closes the connection.
	uc, _ = dial(t, ps, addr, accepted)
	ps.Sweep(t0)
	if _, ok := ps.pools.Load(addr); ok {
		t.Fatal("empty pool kept after two sweeps")
	}
	ps.Put(uc, true, t0)
	if ps.Idle(addr) != 0 {
		t.Error("a connection went into a forgotten pool")
	}
}

func TestCloseIdle(t *testing.T) {
	ps := newPools(t)
	addr, accepted := listen(t)
	a, _ := dial(t, ps, addr, accepted)
	b, _ := dial(t, ps, addr, accepted)
	ps.Put(a, true, time.Now())
	ps.CloseIdle()
	if ps.Idle(addr) != 0 || !ps.Closed() {
		t.Fatal("CloseIdle left idle connections")
	}
	ps.Put(b, true, time.Now())
	if ps.Idle(addr) != 0 {
		t.Error("a connection went idle after CloseIdle")
	}
}

func TestGetAndPutAllocateNothing(t *testing.T) {
	ps := newPools(t)
	addr, accepted := listen(t)
	uc, _ := dial(t, ps, addr, accepted)
	now := time.Now()
	ps.Put(uc, true, now)
	allocs := testing.AllocsPerRun(100, func() {
		c := ps.Get(addr, now)
		ps.Put(c, true, now)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per Get and Put, want 0", allocs)
	}
}
