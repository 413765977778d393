package proxy

import (
	"net"
	"net/http"
	"sync"
	"time"
	"unsafe"

	"github.com/serve-zone/ingress/proxy/internal/h1wire"
	"github.com/serve-zone/ingress/proxy/internal/upstream"
	"github.com/serve-zone/ingress/stats"
	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2/hpack"
)

// handler is the routing handler. The hot path starts at ServeHTTP.
type handler struct{ s *Server }

// httpWork is a request's work area on net/http's front-end (HTTP/1.1 hand-offs, HTTP/3):
// its way through the pipeline, its exchange's work area, its body and its answer sink.
// It is pooled.
type httpWork struct {
	p pipe
	listWork
	w    http.ResponseWriter
	r    *http.Request
	h1   bool                // HTTP/1.1 on one of our connections: bytes come from its counters
	hf   []hpack.HeaderField // the request's header, flattened
	tb   trackedBody
	hb   httpBody
	sink httpSink
	// held is what the reader of a WebSocket's hijacked connection held: tunnel
	// frames, not the request's.
	held int64
}

var httpWorks = sync.Pool{New: func() any {
	x := new(httpWork)
	x.init()
	return x
}}

// release puts x back in its pool, holding no request's header values.
func (x *httpWork) release() {
	x.listWork.release()
	clear(x.hf)
	x.hf = x.hf[:0]
	x.tb, x.hb = trackedBody{}, httpBody{}
	list := x.sink.list
	clear(list[:cap(list)])
	x.sink = httpSink{list: list[:0]}
	x.p, x.w, x.r, x.h1, x.held = pipe{}, nil, nil, false, 0
	httpWorks.Put(x)
}

// ServeHTTP serves one request through the pipeline (serve), after this wire's checks
// (malformed: 400), and aborts a broken answer once it is accounted.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	x := httpWorks.Get().(*httpWork)
	defer x.release()
	p := x.begin(h.s, w, r)
	if malformed(r) {
		// The fast path refuses the same heads before they get here; these came on a
		// connection net/http already serves.
		if p.proto == stats.ProtoHTTP1 {
			w.Header()["Connection"] = valClose
		}
		p.refuse(outcomeBadRequest)
	} else if p.proto == stats.ProtoHTTP1 && (len(r.TransferEncoding) > 0 || r.ProtoMinor == 0) {
		// net/http reads Transfer-Encoding over a Content-Length, and ignores it in
		// HTTP/1.0, and hides both; RFC 9112 §6.1 then wants the connection closed.
		// It cannot tell, so every chunked or HTTP/1.0 request on this path ends its
		// connection (the fast path refuses both cases outright).
		w.Header()["Connection"] = valClose
	}
	h.s.serve(p)
	if p.abort {
		panic(http.ErrAbortHandler)
	}
}

// begin prepares x's pipe for r: what it learns of the client from the *clientConn that
// ConnContext put into the request context, or from r itself when there is none (HTTP/3,
// Handler used directly).
func (x *httpWork) begin(s *Server, w http.ResponseWriter, r *http.Request) *pipe {
	p := &x.p
	p.begin(s, x, &x.sink, &x.upWork)
	x.w, x.r = w, r
	x.sink = httpSink{w: w, r: r, list: x.sink.list[:0]}
	cc := connOf(r)
	p.cc, p.hr, p.host, p.proto = cc, r, r.Host, protoOf(r)
	p.method, p.head = r.Method, r.Method == http.MethodHead
	if s.accessLog != nil {
		p.start = time.Now()
	}
	if cc != nil {
		p.secure = cc.isTLS()
		if p.proto == stats.ProtoHTTP2 && stats.Proto(cc.proto.Load()) != stats.ProtoHTTP2 {
			cc.setProto(stats.ProtoHTTP2) // prior-knowledge h2c, learnt at its first request
		}
		if p.secure && s.h3.altSvc != nil {
			p.altSvc = true
			w.Header()["Alt-Svc"] = s.h3.altSvc
		}
	} else {
		p.secure = r.TLS != nil
	}
	x.h1 = p.proto == stats.ProtoHTTP1 && cc != nil
	if x.h1 {
		// Response bytes net/http wrote after the previous handler returned (a chunked
		// terminator, trailers) belong to the previous request's hostname.
		cc.flushTail(s, false)
	} else {
		p.in = requestFieldBytes(r, p.secure)
	}
	h3ws := r.ProtoMajor == 3 && r.Method == http.MethodConnect && r.Proto == "websocket" // RFC 9220
	p.websocket = h3ws || isWebSocketUpgrade(r)
	p.connect = r.Method == http.MethodConnect && !h3ws
	p.ip = clientIP(r.RemoteAddr)
	p.trusted = s.isTrusted(p.ip)
	return p
}

// net/http's writer as the pipeline's frontEnd: httpWork's methods below and in
// httpforward.go, websocket.go and h3tunnel.go.

func (x *httpWork) clientGone() bool { return x.r.Context().Err() != nil }

func (x *httpWork) challenge() bool { return x.p.s.serveHTTPChallenge(x.w, x.r, &x.p) }

// outgoing writes the request for its target: a WebSocket upgrade (tunnelHead), or the
// forward's head (forwardHead).
func (x *httpWork) outgoing() (*uploader, error) {
	if x.p.websocket {
		return nil, x.tunnelHead()
	}
	return x.forwardHead()
}

// fail answers o; to a client that went away nothing, and never net/http's default 200
// for a handler that wrote nothing: should the client still listen, its connection or
// stream ends (abort).
func (x *httpWork) fail(o outcome) {
	p := &x.p
	switch {
	case o == outcomeClientGone:
		p.abort = true
		return
	case (o == outcomeClientBody || o == outcomeBodyTimeout) && x.r.ProtoMajor == 1:
		// The rest of the body, if any, cannot be told from a next request.
		x.w.Header()["Connection"] = valClose
	}
	p.s.writeFixed(p.sink, &p.exchangeRecord, o, p.head, p.altSvc)
}

// relay relays the target's answer into the writer (relay.go, httpSink), each write
// under ClientSendTimeout (sendProgress).
func (x *httpWork) relay(uc *upstream.Conn) {
	p, k := &x.p, &x.sink
	if dl := deadlinesOf(x.w); dl != nil {
		k.sp.init(dl, x.r.ProtoMajor == 2, p.s.cfg.ClientSendTimeout)
	}
	p.s.relayList(p, uc)
	p.abort = p.abort || k.cutOff
	k.sp.finish(k.wrote && !p.abort && p.status != 0)
	if p.status == 0 {
		p.abort = true // the client left or stalled: nothing more to say to it
	}
}

// switchTunnel: an HTTP/3 extended CONNECT's stream (h3tunnel.go), or the HTTP/1.1
// connection, hijacked (websocket.go).
func (x *httpWork) switchTunnel(accepted http.Header, bc net.Conn) tunnelClient {
	if x.r.ProtoMajor == 3 {
		return x.switchH3(accepted, bc)
	}
	return x.switchWebSocket(accepted, bc)
}

// account: on one of our HTTP/1.1 connections, the bytes its counters saw for the
// request (read before the final flush: once the client has the whole response it may
// send its next request, whose bytes are not ours; a hijacked WebSocket's up to its 101);
// elsewhere the decoded fields and what was taken of the body (accounting.go).
func (x *httpWork) account() {
	p := &x.p
	x.tb.progress.finish() // the upload is over: the body's deadlines are done with
	switch {
	case x.h1 && p.upgraded:
		cc := p.cc
		rd, wr := cc.readN.Load(), cc.writeN.Load()
		p.in = rd - cc.acctRead - x.held
		p.out = wr - cc.acctWrite
		cc.acctRead, cc.acctWrite = rd, wr
	case x.h1:
		cc := p.cc
		rd := cc.readN.Load()
		if p.status != 0 {
			if f, ok := x.w.(http.Flusher); ok {
				f.Flush()
			}
		}
		p.in = rd - cc.acctRead
		p.out = cc.settle(p.in, p.entry)
	default:
		p.in += x.tb.n.Load()
	}
}

func (x *httpWork) access() accessRecord {
	r := x.r
	return accessRecord{host: r.Host, method: r.Method, path: r.URL.Path, query: r.URL.RawQuery, client: r.RemoteAddr}
}

var valClose = []string{"close"}

// breaksRequestLine reports a byte that cannot stand in an HTTP/1.1 request-target as
// forwarded: a space, a control byte or DEL.
func breaksRequestLine(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == 0x7f {
			return true
		}
	}
	return false
}

// targetFits is the one check of a request's method, query and authority on the
// front-ends that get them decoded (the own HTTP/2 engine's, net/http's; h1wire's parser
// applies the same rules to the fast path's request line): a method that is a token
// and a query without a byte no request line may hold (HTTP/2 and HTTP/3 carry them as
// fields, and either would become another request line at the target: the query is
// forwarded as it came), an authority whose port is a number.
func targetFits(method, query, authority string) bool {
	return isToken(method) && !breaksRequestLine(query) && h1wire.ValidHostPort(authority)
}

// malformed reports a request that is refused with 400 whatever its route: a method that
// is not a token, a query holding a byte no request line may hold, a Connection
// option naming a framing field or Host (RFC 9110 §7.6.1 forbids it, and honouring it
// would forward a head framed or routed otherwise than it was read), an absolute-form
// target with an empty authority, or a Host whose port is not a number. The fast path's parser (proxy/internal/h1wire) applies the same rules.
func malformed(r *http.Request) bool {
	for _, v := range r.Header["Connection"] {
		if h1wire.NamesProtectedField(unsafe.Slice(unsafe.StringData(v), len(v))) {
			return true
		}
	}
	if r.ProtoMajor == 1 && r.URL.Scheme != "" && r.URL.Host == "" {
		return true // "http:///x": RFC 9110 §4.2.1 makes an empty authority invalid, and Host may not stand in for it
	}
	return !targetFits(r.Method, r.URL.RawQuery, r.Host) || !httpguts.ValidHostHeader(r.Host)
}

func protoOf(r *http.Request) stats.Proto {
	switch r.ProtoMajor {
	case 2:
		return stats.ProtoHTTP2
	case 3:
		return stats.ProtoHTTP3
	}
	return stats.ProtoHTTP1
}

// statusClientClosed is recorded for requests whose client went away before an answer
// (nginx's 499): it only appears in the totals and the access log.
const statusClientClosed = 499

func statusForTotals(st int) int {
	if st == 0 {
		return statusClientClosed
	}
	return st
}
