package proxy

import (
	"net/netip"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/serve-zone/ingress/stats"
)

// Bounds over all clients together (issue 33, item 3).
//
// The per-address budgets (budgets.go) bound what one client holds; nothing bounded the
// sum, and a few dozen addresses (an IPv6 /56 is 256 "clients") holding request bodies
// took gigabytes. Two bounds cover every client, trusted proxies included:
//
//   - Requests in flight (Config.MaxRequests, --max-requests): requests and WebSocket
//     tunnels together, over every protocol, as nginx's worker_connections bounds what
//     one worker serves. Each one may need a target connection (a descriptor) and
//     buffers; one more is refused as a request over its address's budget is
//     (REFUSED_STREAM on HTTP/2, 503 with Retry-After: 1 elsewhere), before any target
//     sees it, and counted as ingress_refusals_total{kind="max-requests"}. Admission is
//     one atomic add (decide), its end one more (verdict.done). HTTP/2 and HTTP/3
//     streams are requests: the bound is theirs too.
//   - Bytes of request bodies held before a target is chosen (Config.RequestBufferTotal,
//     --request-buffer-total), in holdBody's pooled buffers, one atomic add per buffer.
//     Past it a body holds no more: it streams to its target as one larger than
//     --request-buffer does (what it held goes first). Streaming rather than refusing
//     keeps every request served (only the early check of a short body's framing and the
//     resend of a whole body on a stale pooled connection are lost), and it costs less
//     than holding: a streaming body takes a buffer only for each read (h2upload.go),
//     and what it costs besides (its target connection, the answer's read buffer) the
//     request bound bounds.
//
// Both defaults derive from the machine (machineMemory: the physical memory, or the
// cgroup's limit when lower): a 128th of it for held bodies (32 MiB, 500 bodies of 64
// KiB, on a 4 GiB machine), and a request in flight per 4 MiB of it (1,024 on a 4 GiB
// machine, 4,096 on 16 GiB), at most half the descriptors the process may open (the
// other half for its clients' connections). 4 MiB is what one request may come to at
// worst: its HTTP/2 stream's receive window (1 MiB) and held body (--request-buffer and
// a buffer more), its target's answer buffer, with the collector's headroom (the
// binary's GOGC of 200 lets the heap reach three times what is live). A held body costs
// its bytes and about 25 KB besides (goroutines, stream or net/http connection, work
// area), against nginx's 9 KB; with these shares the ingress took no more memory than
// nginx holding bodies in memory as it does (client_body_buffer_size 64k) for the same
// clients, within the runs' spread, and far less over HTTP/2 (bench/README.md).

const (
	// minMaxRequests and minRequestBufferTotal are the least the defaults give, on the
	// smallest machines.
	minMaxRequests        = 1024
	minRequestBufferTotal = 16 << 20
	// requestCost is the memory the default of MaxRequests allows per request in
	// flight.
	requestCost = 4 << 20
	// heldShare: the default of RequestBufferTotal is the machine's memory divided by it.
	heldShare = 128
)

// serverBounds are the bounds over all clients and what they count now.
type serverBounds struct {
	requests    atomic.Int64 // requests and tunnels in flight
	maxRequests int64        // 0: no bound
	held        atomic.Int64 // bytes of held bodies' buffers
	maxHeld     int64        // 0: no bound
}

// init sets b from cfg's bounds: 0 derives them from the machine, a negative value
// turns the bound off.
func (b *serverBounds) init(cfg Config) {
	mem := machineMemory()
	switch {
	case cfg.MaxRequests > 0:
		b.maxRequests = int64(cfg.MaxRequests)
	case cfg.MaxRequests == 0:
		b.maxRequests = defaultMaxRequests(mem, descriptorLimit())
	}
	switch {
	case cfg.RequestBufferTotal > 0:
		b.maxHeld = cfg.RequestBufferTotal
	case cfg.RequestBufferTotal == 0:
		b.maxHeld = defaultRequestBufferTotal(mem)
	}
}

// DefaultMaxRequests is Config.MaxRequests's default on this machine (bounds.go).
func DefaultMaxRequests() int { return int(defaultMaxRequests(machineMemory(), descriptorLimit())) }

// DefaultRequestBufferTotal is Config.RequestBufferTotal's default on this machine.
func DefaultRequestBufferTotal() int64 { return defaultRequestBufferTotal(machineMemory()) }

// defaultMaxRequests is a request in flight per requestCost of mem, at most half of
// nofile descriptors (0: unknown), at least minMaxRequests.
func defaultMaxRequests(mem, nofile uint64) int64 {
	n := mem / requestCost
	if nofile > 0 {
		n = min(n, nofile/2)
	}
	return int64(max(n, minMaxRequests))
}

// defaultRequestBufferTotal is mem/heldShare, at least minRequestBufferTotal.
func defaultRequestBufferTotal(mem uint64) int64 {
	return int64(max(mem/heldShare, minRequestBufferTotal))
}

// startRequest counts one request or tunnel in flight, from client address a, and
// reports whether it fits the bound; when it does, endRequest must follow. A refusal is
// counted and logged (rate-limited).
func (s *Server) startRequest(a netip.Addr) bool {
	if s.bounds.maxRequests <= 0 {
		return true
	}
	if s.bounds.requests.Add(1) > s.bounds.maxRequests {
		s.bounds.requests.Add(-1)
		s.totals.Refusal(stats.RefusalMaxRequests)
		if ok, unlogged := allowLog(&s.budgetLoggedAt, &s.budgetUnlogged, penaltyLogEvery); ok {
			s.log.Warn("refused a request: the ingress has its bound of requests in flight over all clients",
				zap.String("client", a.String()),
				zap.Int64("max_requests", s.bounds.maxRequests),
				zap.Int64("unlogged", unlogged))
		}
		return false
	}
	return true
}

// endRequest ends a request startRequest admitted.
func (s *Server) endRequest() {
	if s.bounds.maxRequests > 0 {
		s.bounds.requests.Add(-1)
	}
}

// takeHeld reserves n bytes of held bodies and reports whether they fit the bound; when
// they do, giveHeld must follow.
func (s *Server) takeHeld(n int64) bool {
	if s.bounds.maxHeld <= 0 {
		return true
	}
	if s.bounds.held.Add(n) > s.bounds.maxHeld {
		s.bounds.held.Add(-n)
		return false
	}
	return true
}

// giveHeld gives back n bytes takeHeld reserved.
func (s *Server) giveHeld(n int64) {
	if s.bounds.maxHeld > 0 {
		s.bounds.held.Add(-n)
	}
}
