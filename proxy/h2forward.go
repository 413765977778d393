package proxy

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/serve-zone/ingress/proxy/internal/h1wire"
	"github.com/serve-zone/ingress/proxy/internal/h2"
	"github.com/serve-zone/ingress/stats"
)

// h2Front translates the engine's streams into the forwarding core: the same lookup,
// fixed answers, redirect, target walk, forwarding-field policy, hop-by-hop set,
// accounting and access log as the other front-ends (core.go), with no
// http.Request/ResponseWriter on the client side. The hot path starts at ServeH2, on
// the stream's goroutine; requests go to targets at the byte level (h2bytes.go).
type h2Front struct {
	s       *Server
	cc      *clientConn
	secure  bool
	altSvc  bool
	trusted bool
	ip      string
	remote  string
}

// h2Req is one stream's bookkeeping; it lives on the stream goroutine's stack.
type h2Req struct {
	f  *h2Front
	st *h2.Stream
	rq *h2.Request
	exchangeRecord
	start time.Time
	// upgraded: a tunnel did the request's accounting itself.
	upgraded bool
	up       *uploader // the request body's, sent to the target as it comes (h2upload.go)
}

// ServeH2 answers one stream and does its accounting.
func (f *h2Front) ServeH2(st *h2.Stream) {
	s := f.s
	x := h2Req{f: f, st: st, rq: st.Request()}
	if s.accessLog != nil {
		x.start = time.Now()
	}
	s.totals.InFlight(1)
	x.route()
	if !x.upgraded {
		body, tr := st.BodyBytes()
		x.in += x.rq.HeaderBytes + body + tr
		s.record(x.entry, stats.ProtoHTTP2, x.status, x.in, x.out)
	}
	s.totals.InFlight(-1)
	if s.accessLog != nil {
		host := x.rq.Authority
		if x.entry != nil {
			host = x.entry.Hostname
		}
		path, query, _ := strings.Cut(x.rq.Path, "?")
		s.logAccess(&accessRecord{host: host, method: x.rq.Method, path: path, query: query,
			status: x.status, in: x.in, out: x.out, start: x.start, client: f.remote,
			backend: x.backend, proto: stats.ProtoHTTP2, err: x.err})
	}
}

// route: 400 for what no request line may carry and 417 for an expectation other than
// 100-continue (this wire's checks), an ACME challenge, then the core's verdict
// (decide).
func (x *h2Req) route() {
	s, f, rq := x.f.s, x.f, x.rq
	_, query, _ := strings.Cut(rq.Path, "?")
	// The path is forwarded re-escaped (outgoing), as net/http's server does; the query
	// as it came, so it must not hold what would end the request line.
	if !isToken(rq.Method) || breaksRequestLine(query) || rq.Authority == "" || !h1wire.ValidHostPort(rq.Authority) {
		x.answer(outcomeBadRequest)
		return
	}
	if v, ok := rq.Get("expect"); ok && !strings.EqualFold(v, "100-continue") {
		x.answer(outcomeExpectation) // before routing, as net/http's servers answer it
		return
	}
	if x.challenge() {
		return // ACME HTTP-01, before routing and redirects (h2challenge.go)
	}
	ws := rq.Method == http.MethodConnect && rq.Protocol == "websocket" // RFC 8441
	v := s.decide(&request{host: rq.Authority, secure: f.secure, websocket: ws,
		connect: rq.Method == http.MethodConnect && !ws, cc: f.cc})
	defer v.done() // also when a handler panics (the engine resets the stream)
	x.entry = v.entry
	switch v.kind {
	case answerFixed:
		if v.o == outcomeRequestBudget {
			x.refuse() // REFUSED_STREAM: the client may retry it, no target saw it
			return
		}
		x.answer(v.o)
	case answerRedirect:
		x.redirect()
	case answerTunnel:
		x.tunnel() // h2tunnel.go
	default:
		x.forwardBytes() // h2bytes.go
	}
}

// refuse resets the stream with REFUSED_STREAM (RFC 9113 §8.7: not processed, safe to
// retry): the client address's budget of requests in flight is spent. It is recorded as
// the 503 the other front-ends answer.
func (x *h2Req) refuse() {
	x.st.Reset(http2.ErrCodeRefusedStream)
	x.status = outcomeRequestBudget.status()
}

// dateString is the Date value for now, made once per second.
func dateString(now time.Time) string {
	sec := now.Unix()
	if d := dateStrings.Load(); d != nil && d.sec == sec {
		return d.s
	}
	d := &dateStr{sec: sec, s: now.UTC().Format(http.TimeFormat)}
	dateStrings.Store(d)
	return d.s
}

type dateStr struct {
	sec int64
	s   string
}

var dateStrings atomic.Pointer[dateStr]

// answer writes o's fixed response (writeFixed).
func (x *h2Req) answer(o outcome) {
	x.f.s.writeFixed((*h2Sink)(x.st), &x.exchangeRecord, o, x.rq.Method == http.MethodHead, x.f.altSvc)
}

// redirect answers 308 to HTTPS (writeRedirect).
func (x *h2Req) redirect() {
	x.f.s.writeRedirect((*h2Sink)(x.st), &x.exchangeRecord, x.rq.Authority, x.rq.Path, x.f.altSvc)
}

// headBytes is a response head's decoded size: :status and the fields.
func headBytes(fields []hpack.HeaderField) int64 {
	n := len(":status") + 3
	for _, f := range fields {
		n += len(f.Name) + len(f.Value)
	}
	return int64(n)
}

// h2Sink is a stream as the relay's answerSink (relay.go).
type h2Sink h2.Stream

func (k *h2Sink) st() *h2.Stream { return (*h2.Stream)(k) }
func (k *h2Sink) head(status int, fields []hpack.HeaderField, body []byte, end bool) error {
	return k.st().WriteHead(status, fields, body, end)
}

func (k *h2Sink) data(b []byte) error {
	_, err := k.st().Write(b)
	return err
}

func (k *h2Sink) end(trailers []hpack.HeaderField) error { return k.st().Close(trailers) }
func (k *h2Sink) cut()                                   { k.st().Reset(http2.ErrCodeInternal) }
func (k *h2Sink) fields(n int) []hpack.HeaderField       { return k.st().HeadFields(n) }
func (k *h2Sink) context() context.Context               { return k.st().Context() }

// clientStopped records a response the client did not take (a tunnel's 200 it did not
// get): 499, not a backend failure.
func (x *h2Req) clientStopped(err error) {
	x.status = outcomeClientStalled.status()
	x.err = err
}

// lowerFieldName returns k (canonical) in lower case, without allocating for the
// common names.
func lowerFieldName(k string) string {
	if v, ok := lowerNames[k]; ok {
		return v
	}
	return strings.ToLower(k)
}

var lowerNames = func() map[string]string {
	m := make(map[string]string)
	for _, k := range []string{"Accept-Ranges", "Age", "Cache-Control", "Content-Disposition",
		"Content-Encoding", "Content-Language", "Content-Length", "Content-Location",
		"Content-Range", "Content-Security-Policy", "Content-Type", "Date", "Etag",
		"Expires", "Last-Modified", "Link", "Location", "Referrer-Policy", "Retry-After",
		"Server", "Set-Cookie", "Strict-Transport-Security", "Vary", "Www-Authenticate",
		"X-Content-Type-Options", "X-Frame-Options", "Access-Control-Allow-Origin",
		"Grpc-Status", "Grpc-Message", "Alt-Svc"} {
		m[k] = strings.ToLower(k)
	}
	return m
}()
