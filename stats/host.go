// Package stats keeps the per-UTC-day, per-hostname traffic counters of contract §5,
// answers the paged statistics query, persists snapshots and exposes the Prometheus
// collectors that read the counters at scrape time.
//
// The hot path starts at [Host]: the proxy holds a *Host for every routed hostname (the
// compiled route table points at it) and records a request with a handful of atomic adds
// into the slot of the current day. The current day is an atomic published by the
// [Registry] when it rolls over, so the hot path never calls time.Now, takes no lock,
// touches no map and allocates nothing.
//
// Everything else is cold and goes through the Registry's mutex: Registry.Host (route
// table compilation), Roll (each UTC midnight, from Run), Query/QueryRaw/Handler (the
// paged statistics of contract §5, with HMAC-bound cursors), Flush/Load (the snapshot in
// the state directory) and NewCollector (Prometheus series read at scrape time).
//
// stats is a leaf package: it knows nothing of routes or sessions; its only HTTP is the
// admin Handler.
package stats

import (
	"sync/atomic"
)

// ringSize is how many days each Host keeps live in its slots. A slot's day moves to the
// registry's history when the slot is reused, ringSize days later. It is a power of two so the slot index is a mask.
// Four live days leave ample room for increments that raced a rollover: a request that
// loaded "yesterday" just before midnight still lands in yesterday's slot, which is not
// reused until three more days have passed.
const ringSize = 4

// FailureKind names a backend failure as contract §5 classifies it.
type FailureKind uint8

const (
	// FailureConnect: a dial to a target failed or timed out.
	FailureConnect FailureKind = iota
	// FailureHandshake: the target accepted the connection but the protocol handshake
	// (a WebSocket upgrade) failed or was refused without a response.
	FailureHandshake
	// FailureRequest: the request reached the target and no complete response came back.
	FailureRequest
	numFailureKinds
)

// String returns the contract's name of the kind.
func (k FailureKind) String() string {
	switch k {
	case FailureConnect:
		return "connect"
	case FailureHandshake:
		return "handshake"
	case FailureRequest:
		return "request"
	}
	return "unknown"
}

// slot holds one day of one hostname. It is exactly one cache line so that slots of
// different hostnames (and days) never share a line.
type slot struct {
	day         atomic.Uint32 // Day+1; 0 means the slot is unused
	_           uint32
	requests    atomic.Uint64
	bytesIn     atomic.Uint64
	bytesOut    atomic.Uint64
	connections atomic.Uint64
	failures    [numFailureKinds]atomic.Uint64
}

// Counters is a plain copy of one day's counters of one hostname.
type Counters struct {
	Requests          uint64
	BytesIn           uint64
	BytesOut          uint64
	Connections       uint64
	ConnectFailures   uint64
	HandshakeFailures uint64
	RequestFailures   uint64
}

// IsZero reports whether nothing was counted.
func (c Counters) IsZero() bool { return c == Counters{} }

// Add returns the sum of c and o.
func (c Counters) Add(o Counters) Counters {
	return Counters{
		Requests:          c.Requests + o.Requests,
		BytesIn:           c.BytesIn + o.BytesIn,
		BytesOut:          c.BytesOut + o.BytesOut,
		Connections:       c.Connections + o.Connections,
		ConnectFailures:   c.ConnectFailures + o.ConnectFailures,
		HandshakeFailures: c.HandshakeFailures + o.HandshakeFailures,
		RequestFailures:   c.RequestFailures + o.RequestFailures,
	}
}

// Host is the counters of one hostname, as the route table names it ("*.example.test"
// for a wildcard route). A Host is created by [Registry.Host] and lives as long as the
// registry: a hostname removed from the route table keeps its past days.
//
// All recording methods are safe for concurrent use, lock-free and allocation-free.
// A nil *Host records nothing, so callers need no branch for unmatched traffic.
//
// Layout: a read-only header line (name, today) followed by one cache line per slot, 320
// bytes in all. 320 is a Go allocator size class and a multiple of 64, and size-class
// objects start at multiples of their size inside page-aligned spans, so every slot sits
// on its own cache line: the hot slots of two hosts never share one, and the header that
// every core reads is never written (TestHostSlotsCacheLineAligned checks this).
type Host struct {
	name  string
	today *atomic.Uint32 // the registry's current day+1
	_     [64 - 16 - 8]byte
	slots [ringSize]slot
}

// Name returns the hostname the counters belong to.
func (h *Host) Name() string { return h.name }

func (h *Host) cur() *slot {
	d := h.today.Load()
	return &h.slots[d&(ringSize-1)]
}

// Request records one request with the bytes received from and sent to the client for it.
// Negative byte counts are treated as zero.
func (h *Host) Request(bytesIn, bytesOut int64) {
	if h == nil {
		return
	}
	s := h.cur()
	s.requests.Add(1)
	if bytesIn > 0 {
		s.bytesIn.Add(uint64(bytesIn))
	}
	if bytesOut > 0 {
		s.bytesOut.Add(uint64(bytesOut))
	}
}

// Bytes adds bytes that belong to this hostname without counting a request, such as the
// tail of a response flushed after its handler returned or WebSocket frames relayed after
// the upgrade. Negative counts are treated as zero.
func (h *Host) Bytes(bytesIn, bytesOut int64) {
	if h == nil {
		return
	}
	s := h.cur()
	if bytesIn > 0 {
		s.bytesIn.Add(uint64(bytesIn))
	}
	if bytesOut > 0 {
		s.bytesOut.Add(uint64(bytesOut))
	}
}

// Connection records one client connection attributed to this hostname.
func (h *Host) Connection() {
	if h == nil {
		return
	}
	h.cur().connections.Add(1)
}

// BackendFailure records one backend failure of the given kind.
func (h *Host) BackendFailure(k FailureKind) {
	if h == nil || k >= numFailureKinds {
		return
	}
	h.cur().failures[k].Add(1)
}

// load copies the counters of slot s. It is safe to call while the slot is being written;
// the copy may then miss increments that happen during it.
func (s *slot) load() Counters {
	return Counters{
		Requests:          s.requests.Load(),
		BytesIn:           s.bytesIn.Load(),
		BytesOut:          s.bytesOut.Load(),
		Connections:       s.connections.Load(),
		ConnectFailures:   s.failures[FailureConnect].Load(),
		HandshakeFailures: s.failures[FailureHandshake].Load(),
		RequestFailures:   s.failures[FailureRequest].Load(),
	}
}

// take empties slot s and returns what it held. Each counter is swapped atomically, so an
// increment racing it is either in the returned copy or stays in the slot: never lost.
func (s *slot) take() Counters {
	return Counters{
		Requests:          s.requests.Swap(0),
		BytesIn:           s.bytesIn.Swap(0),
		BytesOut:          s.bytesOut.Swap(0),
		Connections:       s.connections.Swap(0),
		ConnectFailures:   s.failures[FailureConnect].Swap(0),
		HandshakeFailures: s.failures[FailureHandshake].Swap(0),
		RequestFailures:   s.failures[FailureRequest].Swap(0),
	}
}
