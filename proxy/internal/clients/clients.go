// Package clients holds what each client address has open at once (connections,
// requests in flight, tunnels), so that one address cannot take the ingress from
// everyone else (issue 25), and lets an abuse verdict end everything the address holds.
//
// # Shape and hot path
//
// A connection opens a [Hold] on its address's [Entry] once, at accept: one lookup in a
// sharded map under the shard's mutex, which also counts the connection against
// [Limits.Conns] and links the hold into the entry's list of live connections. The
// connection keeps the hold (embedded, no allocation of its own) and closes it once,
// when it ends; the entry is dropped from the map when its last connection is gone, so
// memory is bounded by the open connections, which the budget bounds per address.
//
// Per request there is no map and no lock: [Hold.StartRequest] and
// [Hold.StartTunnel] are one atomic add on the entry (and one more to undo it when over
// budget), [Hold.EndRequest] and [Hold.EndTunnel] one. A zero Hold (a trusted proxy's
// connection, or budgets off) admits everything without touching anything.
//
// [Table.Strike] (an abuse verdict, rare) ends every live connection of an address
// through its [Ender], outside the shard's lock.
//
// IPv6 addresses are keyed by their /64, like proxy/internal/penalty (an attacker has a
// whole /64 to rotate through); IPv4 addresses whole.
package clients

import (
	"hash/maphash"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/serve-zone/ingress/proxy/internal/penalty"
)

// Limits are the budgets of one address. A value of 0 or less means no limit.
type Limits struct {
	// Conns bounds the open connections (TCP and QUIC together).
	Conns int
	// Requests bounds the requests (HTTP/2 and HTTP/3 streams) in flight.
	Requests int
	// Tunnels bounds the open WebSocket tunnels.
	Tunnels int
}

// Ender is a connection as the table sees it: End ends it for abuse, from any goroutine,
// without waiting for it (its owner closes it and its hold afterwards).
type Ender interface{ End() }

// shardCount is the number of independently locked parts of the map.
const shardCount = 64

// Table is the set of addresses with open connections. The zero value is not usable:
// call New. All methods are safe for concurrent use.
type Table struct {
	lim    Limits
	seed   maphash.Seed
	shards [shardCount]shard
}

type shard struct {
	mu sync.Mutex
	m  map[netip.Addr]*Entry
	_  [40]byte // keeps neighbouring shards' locks off one cache line
}

// Entry is one address's budgets in use. Its connection count and list belong to its
// shard's lock; requests and tunnels are atomics, touched per request.
type Entry struct {
	t          *Table
	sh         *shard
	key        netip.Addr
	conns      int   // under sh.mu
	handshakes int   // conns whose handshake is in progress (OpenHandshake), under sh.mu
	live       *Hold // the first of the live connections' holds, under sh.mu
	requests   atomic.Int64
	tunnels    atomic.Int64
}

// Hold is one connection's share of its address's entry: embed it in the connection.
// The zero Hold admits every request and tunnel and counts nothing.
type Hold struct {
	e          *Entry
	end        Ender
	prev, next *Hold // the entry's list of live holds, under its shard's lock
	handshake  bool  // counted in the entry's handshakes, under its shard's lock
	closed     atomic.Bool
}

// New returns an empty table enforcing lim.
func New(lim Limits) *Table {
	t := &Table{lim: lim, seed: maphash.MakeSeed()}
	for i := range t.shards {
		t.shards[i].m = make(map[netip.Addr]*Entry)
	}
	return t
}

// Limits returns the budgets the table enforces.
func (t *Table) Limits() Limits { return t.lim }

// Key is what an address is counted under: what a penalty is keyed by (penalty.Key:
// IPv4, also IPv4-mapped IPv6, whole; IPv6 by its /64; no zone), so that a penalty's
// strike reaches every connection the penalty covers.
func Key(a netip.Addr) netip.Addr { return penalty.Key(a) }

func (t *Table) shard(k netip.Addr) *shard {
	b := k.As16()
	return &t.shards[maphash.Bytes(t.seed, b[:])%shardCount]
}

// Open counts a new connection from a against its address's budget and, when it fits,
// fills h (which must be zero) and links it to the address's live connections, so that
// Strike can end it through end. It reports false, leaving h zero, when the address
// already holds Limits.Conns connections.
func (t *Table) Open(h *Hold, a netip.Addr, end Ender) bool {
	return t.open(h, a, end, -1)
}

// OpenHandshake is Open for a connection whose handshake is in progress (a QUIC
// connection from its first packet): besides its place among the address's
// connections, it counts as one of the address's handshakes until Established or
// Close. It reports false, leaving h zero, when the address has Limits.Conns
// connections or maxHandshakes handshakes in progress (maxHandshakes <= 0: no limit).
func (t *Table) OpenHandshake(h *Hold, a netip.Addr, end Ender, maxHandshakes int) bool {
	return t.open(h, a, end, max(maxHandshakes, 0))
}

// open is Open, and OpenHandshake when maxHandshakes >= 0.
func (t *Table) open(h *Hold, a netip.Addr, end Ender, maxHandshakes int) bool {
	k := Key(a)
	sh := t.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[k]
	if e != nil && maxHandshakes > 0 && e.handshakes >= maxHandshakes {
		return false
	}
	if e == nil {
		e = &Entry{t: t, sh: sh, key: k}
		sh.m[k] = e
	} else if t.lim.Conns > 0 && e.conns >= t.lim.Conns {
		return false
	}
	e.conns++
	if maxHandshakes >= 0 {
		e.handshakes++
		h.handshake = true
	}
	h.e, h.end = e, end
	h.next = e.live
	if e.live != nil {
		e.live.prev = h
	}
	e.live = h
	return true
}

// Full reports whether a connection from a would be refused now (the QUIC handshake's
// early check, before any of the handshake's work).
func (t *Table) Full(a netip.Addr) bool {
	if t.lim.Conns <= 0 {
		return false
	}
	k := Key(a)
	sh := t.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[k]
	return e != nil && e.conns >= t.lim.Conns
}

// Handshakes returns how many handshakes a's address has in progress (OpenHandshake),
// and whether it has its budget of connections.
func (t *Table) Handshakes(a netip.Addr) (n int, full bool) {
	k := Key(a)
	sh := t.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[k]
	if e == nil {
		return 0, false
	}
	return e.handshakes, t.lim.Conns > 0 && e.conns >= t.lim.Conns
}

// Established ends the handshake h was opened in (OpenHandshake): its place stays, as an
// open connection's. Later calls, and calls on other holds, do nothing.
func (h *Hold) Established() {
	e := h.e
	if e == nil {
		return
	}
	e.sh.mu.Lock()
	defer e.sh.mu.Unlock()
	if h.handshake {
		h.handshake = false
		e.handshakes--
	}
}

// Close gives h's connection back to its address's budget; later calls, and calls on a
// zero Hold, do nothing. Requests and tunnels still counted on h end on its entry as
// usual.
func (h *Hold) Close() {
	e := h.e
	if e == nil || h.closed.Swap(true) {
		return
	}
	sh := e.sh
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if h.prev != nil {
		h.prev.next = h.next
	} else {
		e.live = h.next
	}
	if h.next != nil {
		h.next.prev = h.prev
	}
	h.prev, h.next = nil, nil
	if h.handshake {
		h.handshake = false
		e.handshakes--
	}
	e.conns--
	if e.conns == 0 {
		delete(sh.m, e.key)
	}
}

// Move hands h's place to to, which must be zero, and makes Strike end it through end
// from then on; h is left zero. A zero or closed h moves nothing (to stays zero). The
// place keeps its position in the address's list and counts: a connection that changes
// its form (proxy's idle HTTP/1.1 connections, compacted while parked and rebuilt when
// they wake) keeps its budget without giving it back and taking it again. Only h's owner
// may move it, with no request or tunnel of its own in flight.
func (h *Hold) Move(to *Hold, end Ender) {
	e := h.e
	if e == nil || h.closed.Load() {
		return
	}
	sh := e.sh
	sh.mu.Lock()
	defer sh.mu.Unlock()
	to.e, to.end, to.prev, to.next, to.handshake = e, end, h.prev, h.next, h.handshake
	if h.prev != nil {
		h.prev.next = to
	} else {
		e.live = to
	}
	if h.next != nil {
		h.next.prev = to
	}
	h.e, h.end, h.prev, h.next, h.handshake = nil, nil, nil, nil, false
}

// Addr is the address (its key: an IPv6 address's /64) h counts against; the zero Addr
// for a zero Hold.
func (h *Hold) Addr() netip.Addr {
	if h.e == nil {
		return netip.Addr{}
	}
	return h.e.key
}

// Held reports whether h counts a connection (it was opened and not closed).
func (h *Hold) Held() bool { return h.e != nil && !h.closed.Load() }

// StartRequest counts a request in flight on h's address and reports whether it fits
// the budget; when it does, EndRequest must follow once the request is over.
func (h *Hold) StartRequest() bool {
	e := h.e
	if e == nil {
		return true
	}
	return start(&e.requests, e.t.lim.Requests)
}

// EndRequest ends a request StartRequest admitted.
func (h *Hold) EndRequest() {
	if e := h.e; e != nil {
		e.requests.Add(-1)
	}
}

// StartTunnel counts an open tunnel on h's address and reports whether it fits the
// budget; when it does, EndTunnel must follow once the tunnel is over.
func (h *Hold) StartTunnel() bool {
	e := h.e
	if e == nil {
		return true
	}
	return start(&e.tunnels, e.t.lim.Tunnels)
}

// EndTunnel ends a tunnel StartTunnel admitted.
func (h *Hold) EndTunnel() {
	if e := h.e; e != nil {
		e.tunnels.Add(-1)
	}
}

// start adds one to n and reports whether it stays within limit (no limit when limit
// is 0 or less); over it, the add is undone.
func start(n *atomic.Int64, limit int) bool {
	v := n.Add(1)
	if limit > 0 && v > int64(limit) {
		n.Add(-1)
		return false
	}
	return true
}

// Strike ends every live connection of a's address (Ender.End, called outside the
// table's locks) and returns how many it ended.
func (t *Table) Strike(a netip.Addr) int {
	k := Key(a)
	sh := t.shard(k)
	var ends []Ender
	sh.mu.Lock()
	if e := sh.m[k]; e != nil {
		ends = make([]Ender, 0, e.conns)
		for h := e.live; h != nil; h = h.next {
			ends = append(ends, h.end)
		}
	}
	sh.mu.Unlock()
	for _, end := range ends {
		end.End()
	}
	return len(ends)
}

// Usage is what one address holds, for tests and diagnostics.
type Usage struct {
	Conns, Handshakes, Requests, Tunnels int
}

// Usage returns what a's address holds now.
func (t *Table) Usage(a netip.Addr) Usage {
	k := Key(a)
	sh := t.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[k]
	if e == nil {
		return Usage{}
	}
	return Usage{Conns: e.conns, Handshakes: e.handshakes, Requests: int(e.requests.Load()), Tunnels: int(e.tunnels.Load())}
}

// Len is the number of addresses with at least one open connection.
func (t *Table) Len() int {
	n := 0
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}
