package stats

import "sync/atomic"

// Proto is the client-side protocol of a request or connection.
type Proto uint8

const (
	ProtoHTTP1 Proto = iota
	ProtoHTTP2
	ProtoHTTP3
	numProtos
)

// String returns the protocol's metric label.
func (p Proto) String() string {
	switch p {
	case ProtoHTTP1:
		return "http1"
	case ProtoHTTP2:
		return "http2"
	case ProtoHTTP3:
		return "http3"
	}
	return "unknown"
}

// numStatusClasses covers 1xx…5xx plus index 0 for anything else.
const numStatusClasses = 6

func statusClass(status int) int {
	if c := status / 100; c >= 1 && c <= 5 {
		return c
	}
	return 0
}

// Totals are the process-wide counters behind the Prometheus metrics: they count all
// traffic, including requests for unknown hosts, which per-hostname statistics never see.
// The zero value is ready to use; all methods are lock-free, allocation-free and safe for
// concurrent use. Collectors read them at scrape time, so nothing is incremented twice.
type Totals struct {
	requests    [numProtos][numStatusClasses]atomic.Uint64
	bytesIn     [numProtos]atomic.Uint64
	bytesOut    [numProtos]atomic.Uint64
	unknownHost atomic.Uint64
	failures    [numFailureKinds]atomic.Uint64
	inFlight    atomic.Int64
	conns       [numProtos]atomic.Int64
	websockets  atomic.Int64
	tlsFailures atomic.Uint64
	abuse       atomic.Uint64
	refusals    [numRefusalKinds]atomic.Uint64 // refusals[RefusalPenalty] is also ingress_penalized_connections_total
	tunnelIdle  atomic.Uint64
}

// Request counts one finished request of protocol p with its response status and bytes.
// Requests for unknown hosts are counted here too.
func (t *Totals) Request(p Proto, status int, bytesIn, bytesOut int64) {
	if p >= numProtos {
		return
	}
	t.requests[p][statusClass(status)].Add(1)
	if bytesIn > 0 {
		t.bytesIn[p].Add(uint64(bytesIn))
	}
	if bytesOut > 0 {
		t.bytesOut[p].Add(uint64(bytesOut))
	}
}

// Bytes adds bytes of protocol p that belong to no single request's accounting: response
// tails flushed after a handler returned, and WebSocket frames relayed after an upgrade.
func (t *Totals) Bytes(p Proto, bytesIn, bytesOut int64) {
	if p >= numProtos {
		return
	}
	if bytesIn > 0 {
		t.bytesIn[p].Add(uint64(bytesIn))
	}
	if bytesOut > 0 {
		t.bytesOut[p].Add(uint64(bytesOut))
	}
}

// UnknownHost counts one request whose Host matched no route.
func (t *Totals) UnknownHost() { t.unknownHost.Add(1) }

// BackendFailure counts one backend failure of kind k.
func (t *Totals) BackendFailure(k FailureKind) {
	if k < numFailureKinds {
		t.failures[k].Add(1)
	}
}

// InFlight adds delta (+1 at start, -1 at end) to the requests in flight.
func (t *Totals) InFlight(delta int64) { t.inFlight.Add(delta) }

// Conn adds delta (+1 when opened, -1 when closed) to the open client connections of p.
func (t *Totals) Conn(p Proto, delta int64) {
	if p < numProtos {
		t.conns[p].Add(delta)
	}
}

// WebSocket adds delta to the open WebSocket tunnels.
func (t *Totals) WebSocket(delta int64) { t.websockets.Add(delta) }

// TLSHandshakeFailure counts one failed client TLS handshake.
func (t *Totals) TLSHandshakeFailure() { t.tlsFailures.Add(1) }

// ClientAbuse counts one client connection ended for abuse (an HTTP/2 flood: GOAWAY
// ENHANCE_YOUR_CALM).
func (t *Totals) ClientAbuse() { t.abuse.Add(1) }

// PenalizedRefusal counts one client connection closed at accept because its address is
// penalised for abuse.
// It is Refusal(RefusalPenalty).
func (t *Totals) PenalizedRefusal() { t.Refusal(RefusalPenalty) }

// TunnelClosedIdle counts one tunnel closed because no byte passed through it, either
// way, for the tunnel idle timeout.
func (t *Totals) TunnelClosedIdle() { t.tunnelIdle.Add(1) }

// TotalsSnapshot is a plain copy of Totals, for tests and diagnostics.
type TotalsSnapshot struct {
	// Requests[p][c] counts finished requests of protocol p whose status class is c
	// (1…5 for 1xx…5xx, 0 for anything else).
	Requests             [numProtos][numStatusClasses]uint64
	BytesIn, BytesOut    [numProtos]uint64
	UnknownHost          uint64
	BackendFailures      [numFailureKinds]uint64
	InFlight             int64
	Conns                [numProtos]int64
	WebSockets           int64
	TLSHandshakeFailures uint64
	ClientAbuse          uint64
	PenalizedRefusals    uint64
	// Refusals[k] counts refusals of RefusalKind k.
	Refusals          [numRefusalKinds]uint64
	TunnelsClosedIdle uint64
}

// Snapshot copies the counters. Each is read atomically; the set is not one instant.
func (t *Totals) Snapshot() TotalsSnapshot {
	var s TotalsSnapshot
	for p := range numProtos {
		for c := range numStatusClasses {
			s.Requests[p][c] = t.requests[p][c].Load()
		}
		s.BytesIn[p] = t.bytesIn[p].Load()
		s.BytesOut[p] = t.bytesOut[p].Load()
		s.Conns[p] = t.conns[p].Load()
	}
	s.UnknownHost = t.unknownHost.Load()
	for k := range numFailureKinds {
		s.BackendFailures[k] = t.failures[k].Load()
	}
	s.InFlight = t.inFlight.Load()
	s.WebSockets = t.websockets.Load()
	s.TLSHandshakeFailures = t.tlsFailures.Load()
	s.ClientAbuse = t.abuse.Load()
	for k := range numRefusalKinds {
		s.Refusals[k] = t.refusals[k].Load()
	}
	s.PenalizedRefusals = s.Refusals[RefusalPenalty]
	s.TunnelsClosedIdle = t.tunnelIdle.Load()
	return s
}
