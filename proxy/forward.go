package proxy

import (
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"

	"github.com/serve-zone/ingress/routetable"
)

// outbound is everything one forwarded request needs beyond the inbound request, in one
// allocation: the outgoing request, its URL, the body tracker and the backing arrays of
// the forwarding headers. The inbound header map itself is cleaned and reused (net/http
// lets handlers mutate it).
type outbound struct {
	req  http.Request
	url  url.URL
	body trackedBody
	xff  [1]string
	xfh  [1]string
	fwd  [1]string
}

// trackedBody passes the client's request body to the transport. Its Close does nothing,
// so that a request whose dial failed can be sent again (the transport closes bodies even
// on errors; the server closes the real one after the handler). It records whether
// anything was read (then the request is never retried) and whether reading failed (a
// client fault, not a backend failure). The lean upstream reads it on the handler's
// goroutine, the fallback http.Transport on its own.
type trackedBody struct {
	rc      io.ReadCloser
	limit   int64 // the request's Content-Length; > 0
	n       atomic.Int64
	started atomic.Bool
	failed  atomic.Bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	if !b.started.Load() {
		b.started.Store(true)
	}
	// At Content-Length the body is whole: EOF without touching the server's body.
	// http.Transport reads once more after the last byte to see EOF; should the target
	// have answered by then, net/http's server may already have closed the body (it
	// does when the response head is written), and that read's error made the transport
	// drop the connection under a response still being relayed.
	left := b.limit - b.n.Load()
	if left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > left {
		p = p[:left]
	}
	n, err := b.rc.Read(p)
	if n > 0 {
		b.n.Add(int64(n))
	}
	if err != nil && err != io.EOF {
		b.failed.Store(true)
	}
	return n, err
}

func (b *trackedBody) Close() error { return nil }

// newOutbound prepares the request to the target from r: r's header map is stripped of
// hop-by-hop fields and given the forwarding fields.
func (s *Server) newOutbound(r *http.Request, rs *reqState, websocket bool) *outbound {
	o := new(outbound)
	o.req = *r
	o.url = *r.URL
	o.url.Scheme = "http"
	o.url.User = nil
	o.req.URL = &o.url
	o.req.RequestURI = ""
	o.req.Close = false
	o.req.TLS = nil
	o.req.Proto, o.req.ProtoMajor, o.req.ProtoMinor = "HTTP/1.1", 1, 1
	o.req.TransferEncoding = nil
	o.req.GetBody = nil
	o.req.Form, o.req.PostForm, o.req.MultipartForm = nil, nil, nil
	o.req.Response = nil
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 && !websocket {
		o.body.rc = r.Body
		o.body.limit = r.ContentLength
		if o.body.limit < 0 {
			o.body.limit = math.MaxInt64 // chunked or HTTP/2 without a length: to EOF
		}
		o.req.Body = &o.body
	} else {
		o.req.Body = nil
		o.req.ContentLength = 0
	}

	h := r.Header
	te := removeHopByHop(h)
	if te {
		h["Te"] = valTrailers
	}
	if websocket {
		h["Connection"] = valUpgrade
		h["Upgrade"] = valWebSocket
	}
	if _, ok := h["User-Agent"]; !ok {
		h["User-Agent"] = valEmpty // keeps net/http from adding its own
	}
	ip := clientIP(r.RemoteAddr)
	setForwarded(h, forwardedFor{clientIP: ip, host: r.Host, https: rs.secure, trusted: s.isTrusted(ip)}, o)
	o.req.Header = h
	return o
}

// forward sends r to one of the route's targets and relays the answer. A connect failure
// marks the target down and tries another target not yet tried, as long as no body byte
// was consumed; nothing else is retried.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, rs *reqState) {
	e := rs.entry
	o := s.newOutbound(r, rs, false)
	var body *trackedBody
	if o.req.Body != nil {
		body = &o.body
	}
	var (
		tried uint64
		b     *routetable.Backend
		res   *http.Response
		last  = outcomeConnect
	)
	for {
		i := pick(e.Backends, tried)
		if i < 0 {
			s.answer(w, rs, last)
			return
		}
		tried |= 1 << i
		b = e.Backends[i]
		o.url.Host = b.Addr
		b.State.InFlight.Add(1)
		var err error
		res, err = s.rt.RoundTrip(&o.req)
		if err == nil {
			markUp(b)
			break
		}
		b.State.InFlight.Add(-1)
		last = classify(err, r, body)
		if last == outcomeConnect {
			markDown(b)
		}
		s.countFailure(last, e.Stats)
		if last == outcomeConnect && (body == nil || !body.started.Load()) {
			continue
		}
		if last != outcomeClientGone {
			s.answer(w, rs, last)
		}
		return
	}
	rs.lease = b.LeaseID
	s.relay(w, r, res, rs)
	b.State.InFlight.Add(-1)
	if body != nil && !rs.h1 {
		rs.in += body.n.Load()
	}
}

// relay copies the target's response to the client: header, body (flushed as it comes
// for event streams and bodies of unknown length) and trailers. A body the target breaks
// off is counted as a request failure and the client's response aborted, so that the
// client never takes a truncated body for a complete one.
func (s *Server) relay(w http.ResponseWriter, r *http.Request, res *http.Response, rs *reqState) {
	defer res.Body.Close()
	removeHopByHop(res.Header)
	dst := w.Header()
	for k, vv := range res.Header {
		dst[k] = vv
	}
	if rs.altSvc {
		dst["Alt-Svc"] = s.h3.altSvc // we are the origin the client talks to, not the target
	}
	if _, ok := dst["Content-Type"]; !ok {
		// Present without a value: net/http then guesses no type for a body the target
		// sent untyped (a proxy relays, it does not sniff), and writes no field.
		dst["Content-Type"] = nil
	}
	announced := len(res.Trailer)
	if announced > 0 {
		keys := make([]string, 0, announced)
		for k := range res.Trailer {
			keys = append(keys, k)
		}
		dst["Trailer"] = []string{strings.Join(keys, ", ")}
	}
	if !rs.h1 {
		rs.out += responseFieldBytes(dst)
	}
	w.WriteHeader(res.StatusCode)
	rs.status = res.StatusCode

	flush := res.ContentLength < 0 || isEventStream(res.Header)
	n, rerr, werr := copyBody(w, res.Body, flush)
	if !rs.h1 {
		rs.out += n
	}
	switch {
	case werr != nil:
		rs.abort = true // the client is gone or stuck; nothing more to say to it
		return
	case rerr != nil:
		if r.Context().Err() == nil {
			s.countFailure(outcomeRequest, rs.entry.Stats)
		}
		rs.abort = true
		return
	}
	if len(res.Trailer) > 0 {
		if announced == 0 {
			if f, ok := w.(http.Flusher); ok {
				f.Flush() // trailers need a chunked (or HTTP/2) response
			}
		}
		for k, vv := range res.Trailer {
			if announced == 0 {
				k = http.TrailerPrefix + k
			}
			dst[k] = vv
			if !rs.h1 {
				for _, v := range vv {
					rs.out += int64(len(k) + len(v))
				}
			}
		}
	}
}

func isEventStream(h http.Header) bool {
	ct := h["Content-Type"]
	return len(ct) > 0 && len(ct[0]) >= len("text/event-stream") &&
		strings.EqualFold(ct[0][:len("text/event-stream")], "text/event-stream")
}

// copyBody copies src to w with a pooled buffer, flushing after every write when flush
// is set. rerr is a read (target) error, werr a write (client) error.
func copyBody(w http.ResponseWriter, src io.Reader, flush bool) (n int64, rerr, werr error) {
	bp := bufPool.Get().(*[copyBufSize]byte)
	defer bufPool.Put(bp)
	buf := bp[:]
	fl, _ := w.(http.Flusher)
	for {
		nr, er := src.Read(buf)
		if nr > 0 {
			nw, ew := w.Write(buf[:nr])
			n += int64(nw)
			if ew != nil {
				return n, nil, ew
			}
			if flush && fl != nil {
				fl.Flush()
			}
		}
		if er == io.EOF {
			return n, nil, nil
		}
		if er != nil {
			return n, er, nil
		}
	}
}
