package proxy

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/serve-zone/ingress/internal/ascii"
	"github.com/serve-zone/ingress/proxy/internal/h2"
	"github.com/serve-zone/ingress/proxy/internal/upstream"
	"github.com/serve-zone/ingress/stats"
)

// h2Front translates the engine's streams into the request pipeline (pipeline.go), with
// no http.Request/ResponseWriter on the client side. The hot path starts at ServeH2, on
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

// streamWork is one stream's work area: its way through the pipeline and its
// byte-level exchange. It is pooled.
type streamWork struct {
	p pipe
	listWork
	f   *h2Front
	st  *h2.Stream
	rq  *h2.Request
	h2b h2Body // the stream as the body's source
}

var streamWorks = sync.Pool{New: func() any {
	x := new(streamWork)
	x.init()
	return x
}}

// release puts x back in its pool, holding no request's header values.
func (x *streamWork) release() {
	x.listWork.release()
	x.p, x.f, x.st, x.rq, x.h2b = pipe{}, nil, nil, nil, h2Body{}
	streamWorks.Put(x)
}

// ServeH2 serves one stream through the pipeline (serve), after this wire's checks: 400
// for what no request line may carry, 417 for an expectation other than 100-continue.
func (f *h2Front) ServeH2(st *h2.Stream) {
	s := f.s
	x := streamWorks.Get().(*streamWork)
	defer x.release() // also when a handler panics (the engine resets the stream)
	rq := st.Request()
	x.f, x.st, x.rq = f, st, rq
	p := &x.p
	p.begin(s, x, (*h2Sink)(st), &x.upWork)
	p.host, p.secure, p.cc = rq.Authority, f.secure, f.cc
	p.method, p.target, p.proto = rq.Method, rq.Path, stats.ProtoHTTP2
	p.head, p.altSvc, p.ip, p.trusted = rq.Method == http.MethodHead, f.altSvc, f.ip, f.trusted
	p.websocket = rq.Method == http.MethodConnect && rq.Protocol == "websocket" // RFC 8441
	p.connect = rq.Method == http.MethodConnect && !p.websocket
	if s.accessLog != nil {
		p.start = time.Now()
	}
	_, query, _ := strings.Cut(rq.Path, "?")
	// The path is forwarded re-escaped (appendTarget), as net/http's server does; the
	// query as it came, so it must not hold what would end the request line.
	if rq.Authority == "" || !targetFits(rq.Method, query, rq.Authority) {
		p.refuse(outcomeBadRequest)
	} else if v, ok := rq.Get("expect"); ok && !ascii.EqualLower(v, "100-continue") {
		p.refuse(outcomeExpectation) // before routing, as net/http's servers answer it
	}
	s.serve(p)
}

// The stream as the pipeline's frontEnd: streamWork's methods below and in h2bytes.go,
// h2tunnel.go and h2challenge.go.

// clientGone: the stream was reset or its connection ended.
func (x *streamWork) clientGone() bool { return x.st.Context().Err() != nil }

// fail answers o: nothing when the client went away (the stream is reset, if it was
// not already), REFUSED_STREAM when its address's budget of requests in flight is spent
// (RFC 9113 §8.7: not processed, safe to retry; recorded as the 503 the other
// front-ends answer), nothing either to a body the engine found malformed (it reset the
// stream with PROTOCOL_ERROR, RFC 9113 §8.1.1: recorded as the 400 it would have got).
func (x *streamWork) fail(o outcome) {
	p := &x.p
	switch {
	case o == outcomeClientGone:
		x.st.Reset(http2.ErrCodeCancel)
	case o == outcomeRequestBudget:
		x.st.Reset(http2.ErrCodeRefusedStream)
		p.status = o.status()
	case p.up != nil && errors.Is(p.up.clientErr, h2.ErrMalformedBody):
		p.status = o.status()
	default:
		p.s.writeFixed(p.sink, &p.exchangeRecord, o, p.head, p.altSvc)
	}
}

// relay relays the target's answer into the stream (relay.go).
func (x *streamWork) relay(uc *upstream.Conn) { x.p.s.relayList(&x.p, uc) }

// account: the decoded header fields, and the body's bytes but for a tunnel's (its
// stream carries the tunnel, counted as it runs).
func (x *streamWork) account() {
	p := &x.p
	p.in += x.rq.HeaderBytes
	if !p.upgraded {
		body, tr := x.st.BodyBytes()
		p.in += body + tr
	}
}

func (x *streamWork) access() accessRecord {
	path, query, _ := strings.Cut(x.rq.Path, "?")
	return accessRecord{host: x.rq.Authority, method: x.rq.Method, path: path, query: query, client: x.f.remote}
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
