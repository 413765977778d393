package penalty

import (
	"encoding/binary"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// clock is an injectable clock for the table.
type clock struct{ ns atomic.Int64 }

func (c *clock) now() int64              { return c.ns.Load() }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

func newTable(size int) (*Table, *clock) {
	c := &clock{}
	c.ns.Store(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return New(size, Policy{Base: time.Second, Max: 8 * time.Second, Forget: time.Minute}, c.now), c
}

func v4(i uint32) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], i)
	return netip.AddrFrom4(b)
}

func TestStrikeExpiresAndGrows(t *testing.T) {
	tab, clk := newTable(64)
	a := netip.MustParseAddr("192.0.2.7")
	if ok, _ := tab.Penalized(a); ok {
		t.Fatal("penalised before any strike")
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second}
	for i, w := range want {
		d, started := tab.Strike(a)
		if d != w || !started {
			t.Fatalf("strike %d: penalty %s (started %v), want %s started", i+1, d, started, w)
		}
		// Verdicts on connections accepted before the penalty began change nothing.
		clk.advance(d / 2)
		if d2, started := tab.Strike(a); started || d2 != d-d/2 {
			t.Fatalf("strike during the penalty: %s started %v, want the %s left, not started", d2, started, d-d/2)
		}
		if ok, until := tab.Penalized(a); !ok || until.UnixNano() != clk.now()+int64(d-d/2) {
			t.Fatalf("strike %d: not penalised half way (until %s)", i+1, until)
		}
		if ok, _ := tab.Penalized(netip.MustParseAddr("192.0.2.8")); ok {
			t.Fatal("a neighbouring address is penalised")
		}
		clk.advance(d - d/2)
		if ok, _ := tab.Penalized(a); ok {
			t.Fatalf("strike %d: still penalised when its %s are over", i+1, d)
		}
	}
	// Quiet for Forget: the next penalty starts from Base again.
	clk.advance(time.Minute)
	if d, _ := tab.Strike(a); d != time.Second {
		t.Fatalf("after a quiet minute the penalty is %s, want 1s", d)
	}
}

func TestKeys(t *testing.T) {
	tab, _ := newTable(64)
	tab.Strike(netip.MustParseAddr("2001:db8:1:2:aaaa::1"))
	for addr, want := range map[string]bool{
		"2001:db8:1:2:ffff::9": true, // same /64
		"2001:db8:1:3::1":      false,
		"2001:db8:1:2::1%eth0": true, // zones do not matter
	} {
		a := netip.MustParseAddr(addr)
		if ok, _ := tab.Penalized(a); ok != want {
			t.Errorf("%s penalised %v, want %v", addr, ok, want)
		}
	}
	tab.Strike(netip.MustParseAddr("198.51.100.1"))
	if ok, _ := tab.Penalized(netip.MustParseAddr("::ffff:198.51.100.1")); !ok {
		t.Error("the IPv4-mapped form of a penalised IPv4 address is not penalised")
	}
	if ok, _ := tab.Penalized(netip.MustParseAddr("198.51.100.2")); ok {
		t.Error("IPv4 addresses are keyed whole, yet a neighbour is penalised")
	}
}

// TestBounded: a million distinct addresses fill no more than the table's fixed slots,
// and the latest strikes are still remembered (they evict what expires first).
func TestBounded(t *testing.T) {
	tab, clk := newTable(1024)
	if tab.Size() != 1024 {
		t.Fatalf("size %d, want 1024", tab.Size())
	}
	const n = 1_000_000
	for i := range uint32(n) {
		tab.Strike(v4(0x0a000000 + i))
		clk.advance(time.Microsecond)
	}
	held := 0
	for i := range tab.slots {
		if tab.slots[i].Load() != nil {
			held++
		}
	}
	if held > tab.Size() {
		t.Fatalf("%d entries in %d slots", held, tab.Size())
	}
	// The most recent strikes evicted older, earlier-ending ones: nearly all of the
	// last 100 are there (a set may have taken more than its share of them).
	remembered := 0
	for i := uint32(n - 100); i < n; i++ {
		if ok, _ := tab.Penalized(v4(0x0a000000 + i)); ok {
			remembered++
		}
	}
	if remembered < 95 {
		t.Fatalf("%d of the last 100 struck addresses remembered", remembered)
	}
	// And all of them expire.
	clk.advance(8 * time.Second)
	for i := uint32(n - 100); i < n; i++ {
		if ok, _ := tab.Penalized(v4(0x0a000000 + i)); ok {
			t.Fatalf("%s still penalised after Max", v4(0x0a000000+i))
		}
	}
}

// TestPenalizedAllocs: the accept path's check allocates nothing, hit or miss.
func TestPenalizedAllocs(t *testing.T) {
	tab, _ := newTable(256)
	hit, miss := netip.MustParseAddr("203.0.113.5"), netip.MustParseAddr("2001:db8::5")
	tab.Strike(hit)
	if n := testing.AllocsPerRun(1000, func() {
		tab.Penalized(hit)
		tab.Penalized(miss)
	}); n != 0 {
		t.Fatalf("Penalized allocates %.1f times per call pair", n)
	}
}

// TestConcurrent is for the race detector: strikes and checks from many goroutines.
func TestConcurrent(t *testing.T) {
	tab, clk := newTable(64)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range uint32(2000) {
				a := v4(uint32(g)<<8 | i%16)
				if i%3 == 0 {
					tab.Strike(a)
				} else {
					tab.Penalized(a)
				}
				if i%100 == 0 {
					clk.advance(100 * time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
}

func BenchmarkPenalizedMiss(b *testing.B) {
	tab, _ := newTable(4096)
	for i := range uint32(1000) {
		tab.Strike(v4(i))
	}
	a := netip.MustParseAddr("203.0.113.77")
	for b.Loop() {
		tab.Penalized(a)
	}
}
