package proxy

import (
	"errors"
	"net/http"
	"net/url"
	"sync"
	"unsafe"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/serve-zone/ingress/proxy/internal/h1wire"
	"github.com/serve-zone/ingress/proxy/internal/h2"
	"github.com/serve-zone/ingress/proxy/internal/upstream"
)

// The HTTP/2 forward: every stream's request goes to a target at the byte level, as the
// HTTP/1.1 fast path's does: its head written by appendHead (buildRequest), sent by the
// shared exchange (exchange.go), a body streamed as its DATA arrives (h2upload.go), the
// answer's head parsed by h1wire and relayed by relay.run into the stream (relay.go: a
// chunked body de-chunked, its trailers sent as trailers).
//
// Framing is derived from what is forwarded, never copied: a body goes under the
// content-length the client stated (and the engine enforced) or chunked; a bodiless
// request carries no Content-Length except the "0" RFC 9110 §8.6 asks for on methods
// that define content (as net/http's writer does); the answer gets a content-length from
// the length the target's framing gave, nothing else.

// listWork is the work area of a request whose fields come as a list (the own HTTP/2
// engine's, net/http's) for the byte-level exchange.
type listWork struct {
	upWork
	lf     listFields
	kinds  [32]uint8 // lf's kinds, for requests with up to 32 fields
	target []byte    // the request-target, escaped as it goes
	body   uploader  // the request body's, when it has one
	h2b    h2Body    // the own engine's stream as body's source
	// net/http's front-ends only (forward.go):
	hf   []hpack.HeaderField // the request's header, flattened
	tb   trackedBody
	hb   httpBody
	sink httpSink
}

// release puts w back in its pool, holding no request's header values.
func (w *listWork) release() {
	w.body.release()
	w.h2b = h2Body{}
	w.reset()
	clear(w.hf)
	w.hf = w.hf[:0]
	listWorks.Put(w)
}

var listWorks = sync.Pool{New: func() any {
	w := new(listWork)
	w.init()
	return w
}}

// h2Watch is the stream as Server.exchange's clientWatch: the client went away when
// the stream was reset or its connection ended.
type h2Watch h2.Stream

func (w *h2Watch) clientGone() bool { return (*h2.Stream)(w).Context().Err() != nil }

// forwardBytes forwards the request and relays the answer. A connect failure marks the
// target down and tries another target, as long as no body byte was taken from the
// client; nothing else is retried.
func (x *h2Req) forwardBytes() {
	s := x.f.s
	w := listWorks.Get().(*listWork)
	defer w.release()
	up, err := x.buildRequest(w)
	if err != nil {
		x.err = err
		x.answer(outcomeBadRequest)
		return
	}
	x.up = up
	if up != nil {
		w.h2b.pace(true)
	}
	o, failed := s.holdBody(up)
	if up != nil {
		w.h2b.pace(false)
	}
	if failed {
		// The body failed before any target saw the request (bodybuf.go).
		x.err = up.clientErr
		x.fail(o)
		return
	}
	replay := x.replayable(!up.rewindable())
	walk := newWalk(s, x.entry)
	for {
		b := walk.next()
		if b == nil {
			x.answer(walk.last)
			return
		}
		x.backend = b
		uc, err := s.exchange(&w.upWork, attempt{route: x.entry, addr: b.Addr, watch: (*h2Watch)(x.st), replayable: replay, up: up})
		if err == nil {
			walk.took()
			x.err = nil
			x.relayBytes(w, uc)
			up.end(uc) // an upload the answer did not wait for ends with it
			walk.done()
			return
		}
		x.err = err
		o, client := up.outcome()
		if !client {
			o = classifyUpstream(err)
		}
		if walk.missed(o, err, !up.taken()) {
			continue
		}
		x.fail(o)
		return
	}
}

// fail answers o to a request that failed without an answer from its target:
// nothing when the client went away (the stream is reset, if it was not already), nor
// to a body the engine found malformed (it reset the stream with PROTOCOL_ERROR, RFC
// 9113 §8.1.1): that one is recorded as the 400 it would have got.
func (x *h2Req) fail(o outcome) {
	switch {
	case o == outcomeClientGone:
		x.st.Reset(http2.ErrCodeCancel)
	case x.up != nil && errors.Is(x.up.clientErr, h2.ErrMalformedBody):
		x.status = o.status()
	default:
		x.answer(o)
	}
}

// replayable applies upstream.Replayable to the request.
func (x *h2Req) replayable(streamed bool) bool {
	keyed := false
	for i := range x.rq.Fields {
		if upstream.IdempotencyKey(x.rq.Fields[i].Name) {
			keyed = true
			break
		}
	}
	return upstream.Replayable(x.rq.Method, streamed, keyed)
}

// nameBytes is a field name as bytes, without copying (never written to).
func nameBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// buildRequest writes the outgoing HTTP/1.1 request head into w.wb (appendHead): Host
// from :authority, the body framed as it will be sent (Content-Length when the client
// stated one and announced no trailers, chunked otherwise; "Content-Length: 0" on a
// method that defines content and has none, RFC 9110 §8.6, as net/http's writer does). A
// request with a body gets an uploader (w.body) to send it.
func (x *h2Req) buildRequest(w *listWork) (*uploader, error) {
	rq, f := x.rq, x.f
	target, err := appendTarget(w.target[:0], rq.Path)
	if err != nil {
		return nil, err
	}
	w.target = target
	var up *uploader
	if !rq.NoBody && rq.ContentLength != 0 {
		up = &w.body
		w.h2b = h2Body{st: x.st, timeout: x.f.s.cfg.ClientBodyTimeout}
		*up = uploader{src: &w.h2b, length: rq.ContentLength}
	}
	w.lf.fields = rq.Fields
	w.lf.classify(w.kinds[:])
	h := outHead{
		method: rq.Method, target: unsafe.String(unsafe.SliceData(target), len(target)), host: rq.Authority,
		body: up != nil, length: rq.ContentLength, trailers: up != nil,
		zeroLength: up == nil && (rq.Method == http.MethodPost || rq.Method == http.MethodPut || rq.Method == http.MethodPatch),
		te:         w.lf.hasKind(h1wire.KindTE), // the engine admits "trailers" only
		fwd:        forwardedFor{clientIP: f.ip, host: rq.Authority, https: f.secure, trusted: f.trusted},
	}
	b, plan := appendHead(w.wb[:0], &w.lf, &h)
	w.wb = b
	w.lf = listFields{}
	if up != nil {
		up.chunked, up.expect = plan.chunked, plan.expect
	}
	return up, nil
}

// appendTarget appends the request-target for :path. A path made only of what a URL
// path may hold unescaped (and valid %-escapes) goes as it came; any other is re-escaped
// as net/http's request writer would (url.URL.RequestURI), so that both HTTP/2 paths
// forward the same target. The query keeps every byte a request-target's query may hold
// (RFC 3986 §3.4, valid %-escapes included) and has any other percent-encoded (bytes of
// 0x80 and above, space, '"', '#', '<', '>', '\\', '^', '`', '{', '|', '}', a '%' that
// starts no escape): an HTTP/2 or HTTP/3 :path may carry raw bytes an HTTP/1.1 request
// line's targets do not expect. Control bytes never get here (the front-ends refuse them).
func appendTarget(b []byte, p string) ([]byte, error) { return appendTargetQuery(b, p, false) }

// appendTargetQuery is appendTarget; rawQuery appends the query as it came, for an
// HTTP/1.1 request on net/http's front-end, whose request line already was a target (the
// fast path forwards it so too).
func appendTargetQuery(b []byte, p string, rawQuery bool) ([]byte, error) {
	if p == "*" {
		return append(b, '*'), nil
	}
	path, query, hasQuery := p, "", false
	for i := 0; i < len(p); i++ {
		if p[i] == '?' {
			path, query, hasQuery = p[:i], p[i+1:], true
			break
		}
	}
	switch {
	case path == "": // no origin-form target is empty
		b = append(b, '/')
	case pathVerbatim(path):
		b = append(b, path...)
	default:
		u, err := url.ParseRequestURI(path)
		if err != nil {
			return b, err
		}
		b = append(b, u.EscapedPath()...)
	}
	switch {
	case !hasQuery:
	case rawQuery:
		b = append(append(b, '?'), query...)
	default:
		b = appendQuery(append(b, '?'), query)
	}
	return b, nil
}

// appendQuery appends q with every byte a query may not hold percent-encoded (upper-case
// hex, as url.QueryEscape writes it). A query that needs none is appended in one copy.
func appendQuery(b []byte, q string) []byte {
	i := 0
	for i < len(q) && queryByte(q, i) {
		i++
	}
	if i == len(q) {
		return append(b, q...)
	}
	b = append(b, q[:i]...)
	for ; i < len(q); i++ {
		if queryByte(q, i) {
			b = append(b, q[i])
		} else {
			b = append(b, '%', upperHex[q[i]>>4], upperHex[q[i]&15])
		}
	}
	return b
}

const upperHex = "0123456789ABCDEF"

// queryByte reports whether q[i] may stand in a query as it is: pchar, '/' or '?', and
// '%' only when it starts a %-escape of two hex digits.
func queryByte(q string, i int) bool {
	c := q[i]
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	case c == '-' || c == '_' || c == '.' || c == '~' || c == '/' || c == '?' || c == ':' || c == '@':
		return true
	case c == '!' || c == '$' || c == '&' || c == '\'' || c == '(' || c == ')' || c == '*' ||
		c == '+' || c == ',' || c == ';' || c == '=':
		return true
	case c == '%':
		return i+2 < len(q) && isHex(q[i+1]) && isHex(q[i+2])
	}
	return false
}

// pathVerbatim reports a path that url.URL.EscapedPath gives back unchanged: unreserved
// bytes, sub-delims, ':', '@', '/', '[', ']' and %-escapes of two hex digits.
func pathVerbatim(p string) bool {
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-' || c == '_' || c == '.' || c == '~' || c == '/':
		case c == '!' || c == '$' || c == '&' || c == '\'' || c == '(' || c == ')' || c == '*' ||
			c == '+' || c == ',' || c == ';' || c == '=' || c == ':' || c == '@' || c == '[' || c == ']':
		case c == '%':
			if i+2 >= len(p) || !isHex(p[i+1]) || !isHex(p[i+2]) {
				return false
			}
			i += 2
		default:
			return false
		}
	}
	return true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// relayBytes relays the target's answer (w.res, its body from uc) to the stream
// (relay.go).
func (x *h2Req) relayBytes(w *listWork, uc *upstream.Conn) {
	r := relay{s: x.f.s, sink: (*h2Sink)(x.st), rec: x.exchangeRecord, up: x.up, w: &w.upWork, uc: uc,
		head: x.rq.Method == http.MethodHead, altSvc: x.f.altSvc}
	r.run()
	x.exchangeRecord = r.rec
}

func appendLower(b, s []byte) []byte {
	for _, c := range s {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b = append(b, c)
	}
	return b
}

func eqFoldBytes(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}
