package proxy

import (
	"net/http"
	"time"
	"unsafe"

	"github.com/serve-zone/ingress/proxy/internal/h1wire"
	"github.com/serve-zone/ingress/stats"
	"golang.org/x/net/http/httpguts"
)

// handler is the routing handler. The hot path starts at ServeHTTP.
type handler struct{ s *Server }

// reqState is one request's bookkeeping; it lives on the handler's stack.
type reqState struct {
	cc     *clientConn
	proto  stats.Proto
	h1     bool // HTTP/1.1 on one of our connections: bytes come from the conn counters
	secure bool
	head   bool // a HEAD request: fixed answers carry no body
	// The outcome; in and out by the HTTP/2 rule (decoded header fields plus body bytes)
	// unless h1.
	exchangeRecord
	upgraded bool // a WebSocket tunnel did its own request accounting
	altSvc   bool // TLS on TCP with HTTP/3 on: the response announces it (Alt-Svc)
	abort    bool // the response is broken: abort it after the accounting
	start    time.Time
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := h.s
	rs := reqState{cc: connOf(r), proto: protoOf(r), head: r.Method == http.MethodHead}
	if s.accessLog != nil {
		rs.start = time.Now()
	}
	if rs.cc != nil {
		rs.secure = rs.cc.isTLS()
		if rs.proto == stats.ProtoHTTP2 && stats.Proto(rs.cc.proto.Load()) != stats.ProtoHTTP2 {
			rs.cc.setProto(stats.ProtoHTTP2) // prior-knowledge h2c, learnt at its first request
		}
		if rs.secure && s.h3.altSvc != nil {
			rs.altSvc = true
			w.Header()["Alt-Svc"] = s.h3.altSvc
		}
	} else {
		rs.secure = r.TLS != nil
	}
	rs.h1 = rs.proto == stats.ProtoHTTP1 && rs.cc != nil
	if rs.h1 {
		// Response bytes net/http wrote after the previous handler returned (a chunked
		// terminator, trailers) belong to the previous request's hostname.
		rs.cc.flushTail(s, false)
	} else {
		rs.in = requestFieldBytes(r, rs.secure)
	}
	s.totals.InFlight(1)
	if malformed(r) {
		// The fast path refuses the same heads before they get here; these came on a
		// connection net/http already serves.
		if rs.proto == stats.ProtoHTTP1 {
			w.Header()["Connection"] = valClose
		}
		s.answer(w, &rs, outcomeBadRequest)
	} else {
		if rs.proto == stats.ProtoHTTP1 && (len(r.TransferEncoding) > 0 || r.ProtoMinor == 0) {
			// net/http reads Transfer-Encoding over a Content-Length, and ignores it in
			// HTTP/1.0, and hides both; RFC 9112 §6.1 then wants the connection closed.
			// It cannot tell, so every chunked or HTTP/1.0 request on this path ends its
			// connection (the fast path refuses both cases outright).
			w.Header()["Connection"] = valClose
		}
		s.route(w, r, &rs)
	}
	s.finish(w, r, &rs)
	s.totals.InFlight(-1)
	if rs.abort {
		panic(http.ErrAbortHandler)
	}
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
	if !isToken(r.Method) || breaksRequestLine(r.URL.RawQuery) {
		// HTTP/2 and HTTP/3 carry these as fields: a method with a space or a query
		// with one would become another request line at the target.
		return true
	}
	if r.ProtoMajor == 1 && r.URL.Scheme != "" && r.URL.Host == "" {
		return true // "http:///x": RFC 9110 §4.2.1 makes an empty authority invalid, and Host may not stand in for it
	}
	return !h1wire.ValidHostPort(r.Host) || !httpguts.ValidHostHeader(r.Host)
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

// route answers r by the core's verdict (decide): a fixed answer, the redirect to
// HTTPS, a tunnel (an HTTP/1.1 Upgrade, or an HTTP/3 extended CONNECT, to websocket) or a
// forward. ACME HTTP-01 challenges come first, before routing and redirects.
func (s *Server) route(w http.ResponseWriter, r *http.Request, rs *reqState) {
	if s.serveHTTPChallenge(w, r, rs) {
		return // challenge.go
	}
	h3ws := r.ProtoMajor == 3 && r.Method == http.MethodConnect && r.Proto == "websocket" // RFC 9220
	rq := request{host: r.Host, secure: rs.secure, websocket: h3ws || isWebSocketUpgrade(r),
		connect: r.Method == http.MethodConnect && !h3ws, cc: rs.cc, hr: r}
	v := s.decide(&rq)
	defer v.done() // also when the exchange panics (http.ErrAbortHandler)
	rs.entry = v.entry
	switch {
	case v.kind == answerFixed:
		s.answer(w, rs, v.o)
	case v.kind == answerRedirect:
		s.redirect(w, r, rs)
	case v.kind == answerTunnel && h3ws:
		s.serveWebSocketH3(w, r, rs) // h3tunnel.go
	case v.kind == answerTunnel:
		s.serveWebSocket(w, r, rs) // websocket.go
	default:
		s.forward(w, r, rs)
	}
}

// answer writes o's fixed response (writeFixed) and records it.
func (s *Server) answer(w http.ResponseWriter, rs *reqState, o outcome) {
	k := httpSink{w: w}
	s.writeFixed(&k, &rs.exchangeRecord, o, rs.head, rs.altSvc)
}

// redirect answers 308 to HTTPS (writeRedirect).
func (s *Server) redirect(w http.ResponseWriter, r *http.Request, rs *reqState) {
	k := httpSink{w: w, r: r}
	s.writeRedirect(&k, &rs.exchangeRecord, r.Host, r.URL.RequestURI(), rs.altSvc)
}

// finish does the request's accounting, once: the route's counters (when the host matched
// a route) and the totals (always), then the access log line.
func (s *Server) finish(w http.ResponseWriter, r *http.Request, rs *reqState) {
	if !rs.upgraded {
		var in, out int64
		if rs.h1 {
			cc := rs.cc
			// Read position before the final flush: once the client has the whole
			// response it may send its next request, whose bytes are not ours.
			rd := cc.readN.Load()
			if rs.status != 0 {
				if f, ok := w.(http.Flusher); ok {
					f.Flush()
				}
			}
			in = rd - cc.acctRead
			out = cc.settle(in, rs.entry)
		} else {
			in, out = rs.in, rs.out
		}
		s.record(rs.entry, rs.proto, rs.status, in, out)
		rs.in, rs.out = in, out
	}
	if s.accessLog != nil {
		a := accessOf(r, rs)
		s.logAccess(&a)
	}
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

// accessOf is r's access-log record.
func accessOf(r *http.Request, rs *reqState) accessRecord {
	host := r.Host // unknown hosts are logged as asked (zap escapes the value)
	if rs.entry != nil {
		host = rs.entry.Hostname
	}
	return accessRecord{host: host, method: r.Method, path: r.URL.Path, query: r.URL.RawQuery,
		status: rs.status, in: rs.in, out: rs.out, start: rs.start, client: r.RemoteAddr,
		backend: rs.backend, proto: rs.proto, err: rs.err}
}
