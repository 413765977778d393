package proxy

import (
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/serve-zone/ingress/proxy/internal/clients"
	"github.com/serve-zone/ingress/routetable"
	"github.com/serve-zone/ingress/stats"
)

// The forwarding core: the decisions every protocol front-end shares, made here once.
// Front-ends (the fast HTTP/1.1 path in h1serve.go and h1forward.go; the own HTTP/2
// engine's in h2forward.go and h2bytes.go; net/http's handler for hand-offs and HTTP/3
// in handler.go and forward.go; WebSocket tunnels in xconnect.go) translate their wire
// into these calls and back. What a request gets is one verdict (decide, below); then:
// the target walk (targetWalk; pick and passive health in targets.go); the outgoing
// head and the forwarding-field table (outhead.go, headers.go's writeForwarding); the
// exchange with a target, its 1xx and replay rules (exchange.go over internal/upstream);
// the mapping of failures to statuses and failure kinds, their counting and logging,
// the fixed answers and the HTTPS redirect (errors.go); the accounting rules
// (accounting.go: record, settle, attribute). Below it, two leaf packages:
// internal/upstream (the target pools, the replay rule, the 1xx rule, their limits) and
// internal/h1wire (the HTTP/1.1 parsers, the chunk scanner, the hop-by-hop list).

// verdictKind is what a request gets.
type verdictKind uint8

const (
	answerFixed    verdictKind = iota // a fixed answer: verdict.o's (fixedAnswers)
	answerRedirect                    // 308 to HTTPS (appendLocation)
	answerTunnel                      // a WebSocket tunnel to one of the route's targets
	answerForward                     // a forward to one of the route's targets
)

// verdict is the core's decision on one request.
type verdict struct {
	kind  verdictKind
	o     outcome           // answerFixed's outcome
	entry *routetable.Entry // the route, when the host matched one
	// held is the budget the request was admitted under (budgets.go): a request in
	// flight, or a tunnel when tunnel; nil when it was refused. The front-end ends it
	// with done when the request (or tunnel) is over.
	held   *clients.Hold
	tunnel bool
	// bounded is the server whose bound of requests in flight the request was admitted
	// under (bounds.go); nil when it was refused.
	bounded *Server
}

// done gives back what the verdict's admission took of its address's budget and of the
// bound over all clients; the front-end calls it once, when the request or tunnel is
// over.
func (v *verdict) done() {
	switch {
	case v.held == nil:
	case v.tunnel:
		v.held.EndTunnel()
	default:
		v.held.EndRequest()
	}
	if v.bounded != nil {
		v.bounded.endRequest()
	}
}

// request is what decide needs to know of a request, whatever its wire.
type request struct {
	host      string // Host or :authority, as received
	secure    bool   // it came over TLS (or QUIC)
	websocket bool   // an HTTP/1.1 Upgrade to websocket, or an extended CONNECT for it
	connect   bool   // any other CONNECT
	// The client's connection, for the certificate's coverage and the counting of the
	// connection under the route it serves: cc, one of our TCP connections, or else the
	// request that came without one (HTTP/3, or Handler used directly: reqSide).
	cc *clientConn
	hr *http.Request
}

func (r *request) covers(s *Server) bool {
	if r.cc != nil {
		return r.cc.covers(r.host)
	}
	return reqSide{s, r.hr}.covers(r.host)
}

func (r *request) attribute(s *Server, h *stats.Host) {
	if r.cc != nil {
		r.cc.attribute(h)
		return
	}
	reqSide{s, r.hr}.attribute(h)
}

// decide is the one decision on a request, in this order: admission under the client
// address's budget, then under the bound of requests in flight over all clients (503
// with Retry-After: 1 for a request or tunnel over either, before anything else:
// budgets.go, bounds.go), 503 without a table, 421 for a host the connection's
// certificate does not cover, 404 for a host no route names, 308 to HTTPS on plain HTTP
// when the route asks for it, 405 for a CONNECT that is no WebSocket, then a tunnel or
// a forward. The connection is counted under the route it reaches (contract §5), and an
// unknown host in the totals. The front-end calls the verdict's done when the request is
// over.
func (s *Server) decide(r *request) verdict {
	h := s.holdOf(r)
	refused := !s.admit(h, r.websocket)
	if !refused && !s.startRequest(h.Addr()) {
		refused = true
		if r.websocket {
			h.EndTunnel()
		} else {
			h.EndRequest()
		}
	}
	if refused {
		if r.websocket {
			return verdict{o: outcomeTunnelBudget}
		}
		return verdict{o: outcomeRequestBudget}
	}
	v := s.verdictFor(r)
	v.held, v.tunnel, v.bounded = h, r.websocket, s
	return v
}

// verdictFor is decide's verdict on an admitted request.
func (s *Server) verdictFor(r *request) verdict {
	t := s.tables.Load()
	if t == nil {
		return verdict{o: outcomeNoTable}
	}
	if r.secure && !r.covers(s) {
		return verdict{o: outcomeMisdirected}
	}
	e := t.Lookup(r.host)
	if e == nil {
		s.totals.UnknownHost()
		return verdict{o: outcomeUnknownHost}
	}
	r.attribute(s, e.Stats)
	switch {
	case !r.secure && e.TLS != nil && e.TLS.RedirectHTTP:
		return verdict{kind: answerRedirect, entry: e}
	case r.websocket:
		return verdict{kind: answerTunnel, entry: e}
	case r.connect:
		return verdict{o: outcomeMethodNotAllowed, entry: e}
	}
	return verdict{kind: answerForward, entry: e}
}

// targetWalk is one request's walk over its route's targets: targets in pick order, the
// one being tried counted in flight, a connect failure marking it down (then counted and
// logged), and another target tried only after a connect failure, when the front-end
// says nothing of the request was consumed. It lives on the front-end's stack.
type targetWalk struct {
	s     *Server
	e     *routetable.Entry
	tried uint64
	b     *routetable.Backend // the target being tried, or the last one tried
	last  outcome             // the last failure; outcomeConnect before any
}

func newWalk(s *Server, e *routetable.Entry) targetWalk {
	return targetWalk{s: s, e: e, last: outcomeConnect}
}

// next picks an untried target and counts it in flight; nil when every target was tried
// (then w.last says what to answer).
func (w *targetWalk) next() *routetable.Backend {
	i := pick(w.e.Backends, w.tried)
	if i < 0 {
		return nil
	}
	w.tried |= 1 << i
	w.b = w.e.Backends[i]
	w.b.State.InFlight.Add(1)
	return w.b
}

// took records that the current target took the request: it is up, and stays counted in
// flight until done.
func (w *targetWalk) took() { markUp(w.b) }

// done ends the request on the target that took it.
func (w *targetWalk) done() { w.b.State.InFlight.Add(-1) }

// missed records the current target's failure o, caused by err: it leaves the target's
// count, a connect failure marks the target down, and a backend failure is counted and
// logged (errors.go); our own want of descriptors is counted and logged as such, and
// ends the walk (every other target would need one too). It reports whether the
// request goes to another target: only after a connect failure, and only when again
// (nothing of the request was consumed).
func (w *targetWalk) missed(o outcome, err error, again bool) bool {
	w.b.State.InFlight.Add(-1)
	w.last = o
	switch o {
	case outcomeConnect:
		markDown(w.b)
	case outcomeDescriptors:
		w.s.shortOfDescriptors(w.e, w.b, err)
	}
	w.s.failed(o, w.e, w.b, err)
	return o == outcomeConnect && again
}

// accessRecord is one request's access-log line, filled by a front-end and written by
// logAccess, whatever the protocol.
type accessRecord struct {
	host, method, path, query string
	status                    int // 0: the client went away (written as 499)
	in, out                   int64
	start                     time.Time
	client                    string
	backend                   *routetable.Backend // the target tried last; nil when none was
	proto                     stats.Proto
	err                       error // why the request failed; nil when it did not
}

// accessFieldMax bounds each client-chosen field of an access-log line: HPACK lets an
// HTTP/2 client repeat a long path for a few bytes a request, which would make the log
// grow a hundred times faster than the traffic.
const accessFieldMax = 1 << 10

// clip cuts s to accessFieldMax bytes, marking the cut.
func clip(s string) string {
	if len(s) <= accessFieldMax {
		return s
	}
	return s[:accessFieldMax] + "…"
}

// logAccess writes a's line to the access log (Config.AccessLog, which must be set).
func (s *Server) logAccess(a *accessRecord) {
	var lease, target, errText string
	if b := a.backend; b != nil {
		lease, target = b.LeaseID, b.Addr
	}
	if a.err != nil {
		errText = a.err.Error()
	}
	s.accessLog.Info("request",
		zap.String("host", clip(a.host)),
		zap.String("method", clip(a.method)),
		zap.String("path", clip(a.path)),
		zap.String("query", clip(a.query)),
		zap.Int("status", statusForTotals(a.status)),
		zap.Int64("bytesIn", a.in),
		zap.Int64("bytesOut", a.out),
		zap.Duration("duration", time.Since(a.start)),
		zap.String("client", a.client),
		zap.String("lease", lease),
		zap.String("target", target),
		zap.String("proto", a.proto.String()),
		zap.String("error", errText),
	)
}
