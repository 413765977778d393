// Package penalty remembers client addresses whose connections were ended for abuse, so
// that the accept path can refuse their next connections cheaply for a while.
//
// # Why
//
// The HTTP/2 engine judges abuse per connection (a flood exhausts a budget and the
// connection ends with GOAWAY ENHANCE_YOUR_CALM), but an attacker simply reconnects: each
// new connection gets a fresh budget, its TLS handshake and its preface, and on a small
// machine a handful of reconnecting attackers keep the cores busy and the legitimate
// clients waiting. A penalty per client address turns "one budget per connection" into
// "one budget per address per penalty window": during the window a connection from the
// address is closed right after accept, before any TLS or HTTP work.
//
// # Bounds and hot path
//
// The table has a fixed number of slots (no map, nothing grows with the number of
// addresses): an address hashes (with a per-table random seed) to a set of [ways] slots,
// and a new entry takes a free or expired slot of its set, else evicts the one whose
// penalty ends first. Random source addresses can therefore evict penalties, never grow
// memory; keys are compared whole, so a collision never penalises an innocent address.
//
// [Table.Penalized] is on every accepted connection: it hashes the address and loads the
// set's slots (atomic pointer loads of one cache line); it reads the clock only when an
// entry for the address exists, and never allocates or locks. [Table.Strike] (an abuse
// verdict, rare) allocates one small immutable entry and publishes it with an atomic
// store.
//
// IPv6 addresses are keyed by their /64 (one subscriber's usual allocation: an attacker
// has a whole /64 to rotate through); IPv4 addresses whole.
package penalty

import (
	"hash/maphash"
	"net/netip"
	"sync/atomic"
	"time"
)

// ways is the number of slots in one set: a set is one 64-byte cache line of pointers.
const ways = 8

// Policy is how long penalties last.
type Policy struct {
	// Base is the first penalty of an address (default 1s).
	Base time.Duration
	// Max caps the penalty, which doubles with every strike while the address keeps
	// coming back abusive (default 16s).
	Max time.Duration
	// Forget: an address whose penalty has been over for this long starts again from
	// Base (default 1m).
	Forget time.Duration
}

func (p *Policy) setDefaults() {
	if p.Base <= 0 {
		p.Base = time.Second
	}
	if p.Max < p.Base {
		p.Max = max(16*time.Second, p.Base)
	}
	if p.Forget <= 0 {
		p.Forget = time.Minute
	}
}

// entry is one penalised address; immutable once published.
type entry struct {
	key     netip.Addr
	until   int64 // the penalty ends (Unix nanoseconds)
	strikes uint32
}

// Table is the set of penalised addresses. The zero value is not usable: call New.
// All methods are safe for concurrent use.
type Table struct {
	slots []atomic.Pointer[entry]
	mask  uint64 // sets - 1
	seed  maphash.Seed
	pol   Policy
	now   func() int64
}

// New returns a table of at least size slots (rounded up to a power of two, at least one
// set), penalising by pol. now is the clock (Unix nanoseconds); nil means time.Now.
func New(size int, pol Policy, now func() int64) *Table {
	pol.setDefaults()
	sets := 1
	for sets*ways < size {
		sets <<= 1
	}
	if now == nil {
		now = func() int64 { return time.Now().UnixNano() }
	}
	return &Table{
		slots: make([]atomic.Pointer[entry], sets*ways),
		mask:  uint64(sets - 1),
		seed:  maphash.MakeSeed(),
		pol:   pol,
		now:   now,
	}
}

// Size is the number of slots: the most addresses the table holds at once.
func (t *Table) Size() int { return len(t.slots) }

// Key is what address a is penalised under (key): two addresses with the same Key share
// a penalty, so whatever acts on a penalised address's connections matches by it.
func Key(a netip.Addr) netip.Addr { return key(a) }

// key is what an address is penalised under: IPv4 (also IPv4-mapped IPv6) whole, IPv6
// by its /64, without zone.
func key(a netip.Addr) netip.Addr {
	a = a.Unmap().WithZone("")
	if a.Is6() {
		b := a.As16()
		clear(b[8:])
		return netip.AddrFrom16(b)
	}
	return a
}

// set returns the slots of k's set.
func (t *Table) set(k netip.Addr) []atomic.Pointer[entry] {
	b := k.As16()
	i := int(maphash.Bytes(t.seed, b[:])&t.mask) * ways
	return t.slots[i : i+ways : i+ways]
}

// Penalized reports whether a connection from a must be refused now, and when its
// penalty ends.
func (t *Table) Penalized(a netip.Addr) (bool, time.Time) {
	k := key(a)
	set := t.set(k)
	for i := range set {
		if e := set[i].Load(); e != nil && e.key == k {
			if t.now() < e.until {
				return true, time.Unix(0, e.until)
			}
			return false, time.Time{}
		}
	}
	return false, time.Time{}
}

// Strike records an abuse verdict against a's connection and returns the penalty in
// force for a afterwards and whether this verdict started it. A verdict while a is
// already penalised neither grows nor extends the penalty: it is about a connection
// accepted before the penalty began (several flooding connections of one client are
// usually judged together). Otherwise the penalty is Base, doubled for every earlier
// strike whose penalty ended less than Forget ago, up to Max.
func (t *Table) Strike(a netip.Addr) (penalty time.Duration, started bool) {
	k := key(a)
	set := t.set(k)
	now := t.now()
	var victim *atomic.Pointer[entry]
	var victimUntil int64
	for i := range set {
		s := &set[i]
		e := s.Load()
		if e != nil && e.key == k {
			if now < e.until {
				return time.Duration(e.until - now), false
			}
			strikes := uint32(1)
			if now-e.until < int64(t.pol.Forget) {
				strikes = e.strikes + 1
			}
			d := t.penaltyFor(strikes)
			// A racing Strike for the same address may win; either result is a fresh
			// penalty of about the same length.
			s.CompareAndSwap(e, &entry{key: k, until: now + int64(d), strikes: strikes})
			return d, true
		}
		var until int64 // an empty slot counts as long expired
		if e != nil {
			until = e.until
			if now-until < int64(t.pol.Forget) {
				// An expired penalty still remembers its strikes for Forget: prefer
				// slots past that.
				until += int64(t.pol.Forget)
			} else {
				until = 0
			}
		}
		if victim == nil || until < victimUntil {
			victim, victimUntil = s, until
		}
	}
	d := t.penaltyFor(1)
	victim.Store(&entry{key: k, until: now + int64(d), strikes: 1})
	return d, true
}

// penaltyFor is the penalty of the n-th strike (n >= 1).
func (t *Table) penaltyFor(n uint32) time.Duration {
	d := t.pol.Base
	for i := uint32(1); i < n && d < t.pol.Max; i++ {
		d *= 2
	}
	return min(d, t.pol.Max)
}
