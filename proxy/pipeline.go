package proxy

import (
	"io"
	"net"
	"net/http"
	"time"

	"github.com/serve-zone/ingress/proxy/internal/upstream"
	"github.com/serve-zone/ingress/stats"
)

// The request pipeline: every front-end translates its wire into a pipe (the request's
// fields, its body, an answer sink, a watch on the client, its protocol) and calls serve,
// the one function that serves a request whatever its wire. Its steps, each decided once:
// the front-end's refusal of what its wire cannot carry or the ACME challenge, the
// verdict (decide), a fixed answer or the redirect, the forward (the head by appendHead,
// the body held by holdBody, the replay rule mayResend, the walk over the route's targets
// in try, the relay into the sink) or a tunnel's handshake and run, then the statistics
// (record) and the access-log line. What only a wire knows is asked of its frontEnd.

// frontEnd is a request's wire as the pipeline sees it: its front-end's work area
// implements it (h1Work, streamWork, httpWork).
type frontEnd interface {
	clientWatch // polled while a target thinks
	// challenge lets Config.HTTPChallenge answer an ACME HTTP-01 request; it reports
	// whether it did.
	challenge() bool
	// outgoing writes the request's head for its target into the pipe's upWork (writeHead,
	// outHead as the pipeline began it) and returns the uploader of its body (nil: none, or
	// the head carries it whole). An error refuses the request (errNoTakeover: 502 for a
	// tunnel the wire cannot carry, else 400).
	outgoing() (*uploader, error)
	// fail answers o (a fixed answer through writeFixed) or, when there is nothing to
	// answer, does what the wire does then.
	fail(o outcome)
	// relay relays the target's answer, its head parsed in the pipe's upWork, from uc into
	// the client's wire (relay.run into the sink, or the fast path's byte relay).
	relay(uc *upstream.Conn)
	// switchTunnel tells the client that the target switched protocols (accepted: its
	// 101's fields) and returns the client's side of the tunnel; nil when that failed
	// (then bc is closed).
	switchTunnel(accepted http.Header, bc net.Conn) tunnelClient
	// account sets the pipe's in and out by its wire's byte rule (accounting.go).
	account()
	// access is the access-log record's request fields (host, method, path, query,
	// client), copies the log may keep.
	access() accessRecord
}

// pipe is one request on its way through the pipeline. It lives in its front-end's
// pooled work area, which begins it for each request.
type pipe struct {
	s    *Server
	fe   frontEnd
	sink answerSink
	request
	method string
	target string // the request-target as received, for the redirect (but net/http's: uri)
	proto  stats.Proto
	head   bool // a HEAD request: answers carry no body
	altSvc bool // the answer announces HTTP/3 (TLS on TCP with HTTP/3 on)
	ip     string
	// trusted: the client is a trusted proxy (--trusted-proxies).
	trusted bool
	// refused: the front-end's reading of its wire refused the request: it is answered
	// refusal, before anything else.
	refused bool
	refusal outcome
	exchangeRecord
	start time.Time // when it began, for the access log
	w     *upWork
	oh    outHead   // the outgoing head, begun by the pipeline, finished by the front-end
	keyed bool      // writeHead found an idempotency key among the fields
	up    *uploader // the body's, when it is sent as it comes
	walk  targetWalk
	// abort: the answer is broken; the front-end ends the connection (or stream) after
	// the accounting.
	abort bool
	// upgraded: a tunnel's target switched protocols and the client was told.
	upgraded bool
	tun      liveTunnel
}

// liveTunnel is a tunnel whose target switched protocols, left for serve to run after
// the request's accounting; it holds the verdict's admission, its slot and its target.
type liveTunnel struct {
	v      verdict
	client tunnelClient
	bc     net.Conn
	br     io.Reader
}

// begin prepares p for a request on a front-end's work area.
func (p *pipe) begin(s *Server, fe frontEnd, sink answerSink, w *upWork) {
	*p = pipe{s: s, fe: fe, sink: sink, w: w}
}

// refuse makes the pipeline answer o before anything else: what the request's wire
// cannot carry.
func (p *pipe) refuse(o outcome) { p.refused, p.refusal = true, o }

// uri is the request-target the redirect keeps: net/http's in origin form.
func (p *pipe) uri() string {
	if p.hr != nil {
		return p.hr.URL.RequestURI()
	}
	return p.target
}

// forwarded is what this hop's forwarding fields state about the request.
func (p *pipe) forwarded() forwardedFor {
	return forwardedFor{clientIP: p.ip, host: p.host, https: p.secure, trusted: p.trusted}
}

// serve is the pipeline: it answers the request (respond), does its accounting (the
// front-end's byte rule, then record), runs a tunnel the target switched to, and writes
// the access-log line. Every front-end calls it once per request.
func (s *Server) serve(p *pipe) {
	s.totals.InFlight(1)
	t := s.respond(p)
	p.fe.account()
	s.record(p.entry, p.proto, p.status, p.in, p.out)
	if t != nil {
		s.runLive(p, t)
	}
	if s.accessLog != nil {
		s.logRequest(p)
	}
	s.totals.InFlight(-1)
}

// respond answers the request: the front-end's refusal, the ACME challenge, then by the
// verdict (decide) a fixed answer, the redirect to HTTPS, a tunnel or a forward. A
// tunnel whose target switched protocols is returned to run, its admission with it.
func (s *Server) respond(p *pipe) *liveTunnel {
	if p.refused {
		p.fe.fail(p.refusal)
		return nil
	}
	if p.fe.challenge() {
		return nil // before routing and redirects (challenge.go)
	}
	v := s.decide(&p.request)
	defer v.done() // also when the front-end panics; a live tunnel takes it over
	p.entry = v.entry
	switch v.kind {
	case answerFixed:
		p.fe.fail(v.o)
	case answerRedirect:
		s.writeRedirect(p.sink, &p.exchangeRecord, p.host, p.uri(), p.altSvc)
	case answerTunnel:
		if s.openTunnel(p) {
			p.tun.v, v = v, verdict{}
			return &p.tun
		}
	default:
		s.forward(p)
	}
	return nil
}

// forward sends the request to one of its route's targets and relays the answer: the
// head written (the front-end's outgoing), a body held before the walk (holdBody: one
// that fails reaches no target), the replay rule, the walk (try), the relay into the
// sink.
func (s *Server) forward(p *pipe) {
	p.oh = outHead{method: p.method, host: p.host, fwd: p.forwarded()}
	up, err := p.fe.outgoing()
	if err != nil {
		p.err = err
		p.fe.fail(outcomeBadRequest)
		return
	}
	p.up = up
	if up != nil {
		up.src.holding(true)
		o, failed := s.holdBody(up)
		up.src.holding(false)
		if failed {
			p.err = up.clientErr
			p.fe.fail(o)
			return
		}
	}
	uc, o := s.try(p, attempt{route: p.entry, watch: p.fe, replayable: mayResend(p.method, up, p.keyed), up: up})
	if uc == nil {
		p.fe.fail(o)
		return
	}
	p.fe.relay(uc)
	up.end(uc) // an upload the answer did not wait for ends with it
	p.walk.done()
}

// mayResend is the one replay rule of a request (upstream.Replayable): by its method, an
// idempotency key among its fields (writeHead), and a body that is none or held whole
// (a body streamed from the client cannot be sent again).
func mayResend(method string, up *uploader, keyed bool) bool {
	return upstream.Replayable(method, !up.rewindable(), keyed)
}

// try is the one walk over the request's route's targets: the targets in pick order,
// each tried by the exchange (Server.exchange, with a's replay rule), until one takes the
// request; a connect failure marks its target down and another one is tried, as long as
// nothing of the request was taken from the client (targetWalk). It returns the
// connection of the target that took it (its answer's head in p.w; p.walk.done ends
// it), or the outcome to answer. A tunnel's handshake (a.upgrade) that breaks, times out
// or gets a 101 without Upgrade: websocket is a handshake failure.
func (s *Server) try(p *pipe, a attempt) (*upstream.Conn, outcome) {
	p.walk = newWalk(s, p.entry)
	w := &p.walk
	for {
		b := w.next()
		if b == nil {
			return nil, w.last
		}
		p.backend, a.addr = b, b.Addr
		uc, err := s.exchange(p.w, a)
		if err == nil && a.upgrade && p.w.res.Status == http.StatusSwitchingProtocols && !upgradesToWebSocket(&p.w.res) {
			uc.Close()
			err = errNoUpgrade
		}
		if err == nil {
			w.took()
			p.err = nil
			return uc, 0
		}
		p.err = err
		o, client := p.up.outcome()
		if !client {
			o = classifyUpstream(err)
			if p.sink.context().Err() != nil {
				o = outcomeClientGone
			}
		}
		if a.upgrade && o != outcomeConnect && o != outcomeClientGone && o != outcomeDescriptors {
			o = outcomeHandshake
		}
		if w.missed(o, err, !p.up.taken()) {
			continue
		}
		return nil, o
	}
}

// openTunnel starts a WebSocket tunnel, whatever the client's protocol (an HTTP/1.1
// Upgrade, an extended CONNECT over HTTP/2 or HTTP/3): a tunnel slot, an HTTP/1.1
// WebSocket upgrade to a target by the walk (a new connection, the 1xx rule with 101 as
// the final answer), any other answer relayed. It reports whether the target switched
// and the client was told (p.tun then holds the tunnel, its slot and its target).
func (s *Server) openTunnel(p *pipe) bool {
	p.oh = outHead{method: http.MethodGet, host: p.host, upgrade: true, fwd: p.forwarded()}
	if _, err := p.fe.outgoing(); err != nil {
		o := outcomeBadRequest
		if err == errNoTakeover {
			o, err = outcomeHandshake, nil
		}
		p.err = err
		p.fe.fail(o)
		return false
	}
	if !s.tunnels.acquire() {
		p.fe.fail(outcomeUnavailable)
		return false
	}
	uc, o := s.try(p, attempt{route: p.entry, watch: p.fe, upgrade: true})
	switch {
	case uc == nil:
		s.tunnels.release()
		p.fe.fail(o)
		return false
	case p.w.res.Status != http.StatusSwitchingProtocols:
		p.fe.relay(uc) // the target's refusal, relayed as any answer
		p.walk.done()
		s.tunnels.release()
		return false
	}
	bc, br := tunnelConn(uc, p.w)
	client := p.fe.switchTunnel(responseHeader(&p.w.res), bc)
	if client == nil {
		p.walk.done()
		s.tunnels.release()
		return false
	}
	p.tun = liveTunnel{client: client, bc: bc, br: br}
	return true
}

// runLive runs a live tunnel until both directions end (runTunnel), adds its bytes to
// the request's, and gives back its target, its slot and its admission.
func (s *Server) runLive(p *pipe, t *liveTunnel) {
	up, down := s.runTunnel(p.entry, p.proto, t.client, t.bc, t.br)
	p.in, p.out = p.in+up, p.out+down
	p.walk.done()
	s.tunnels.release()
	t.v.done()
	*t = liveTunnel{}
}

// logRequest writes the request's access-log line (Config.AccessLog, which must be set).
func (s *Server) logRequest(p *pipe) {
	a := p.fe.access()
	if p.entry != nil {
		a.host = p.entry.Hostname // unknown hosts are logged as asked (zap escapes the value)
	}
	a.status, a.in, a.out, a.start = p.status, p.in, p.out, p.start
	a.backend, a.proto, a.err = p.backend, p.proto, p.err
	s.logAccess(&a)
}
