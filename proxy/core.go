package proxy

import (
	"time"

	"go.uber.org/zap"

	"github.com/serve-zone/ingress/routetable"
	"github.com/serve-zone/ingress/stats"
)

// The forwarding core: the decisions every protocol front-end shares, made here once.
// Front-ends (the fast HTTP/1.1 path in h1serve.go and h1forward.go; net/http's handler
// for hand-offs, h2, h2c and HTTP/3 in handler.go and forward.go; WebSocket tunnels in
// websocket.go) translate their wire into these calls and back. Besides this file the
// core is: pick and passive health (targets.go); the mapping of failures to statuses and
// failure kinds, their counting and logging, the fixed answers and the HTTPS redirect
// (errors.go); the forwarding-field policy (headers.go, writeForwarding, with one sink
// per representation); the accounting rules (accounting.go: record, settle, attribute).
// Below it, two leaf packages: internal/upstream (the target pools, the replay rule, the
// 1xx rule, their limits) and internal/h1wire (the HTTP/1.1 parsers, the chunk scanner,
// the hop-by-hop list).

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
// logged (errors.go). It reports whether the request goes to another target: only after
// a connect failure, and only when again (nothing of the request was consumed).
func (w *targetWalk) missed(o outcome, err error, again bool) bool {
	w.b.State.InFlight.Add(-1)
	w.last = o
	if o == outcomeConnect {
		markDown(w.b)
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
