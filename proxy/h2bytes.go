package proxy

import (
	"net/http"
	"net/url"
	"unsafe"

	"github.com/serve-zone/ingress/proxy/internal/h1wire"
)

// The HTTP/2 forward: every stream's request goes to a target at the byte level, as the
// HTTP/1.1 fast path's does: its head written by appendHead (forwardHead), sent by the
// pipeline's walk (pipeline.go), a body streamed as its DATA arrives (h2upload.go), the
// answer's head parsed by h1wire and relayed by relay.run into the stream (relay.go: a
// chunked body de-chunked, its trailers sent as trailers).
//
// Framing is derived from what is forwarded, never copied: a body goes under the
// content-length the client stated (and the engine enforced) or chunked; a bodiless
// request carries no Content-Length except the "0" RFC 9110 §8.6 asks for on methods
// that define content (as net/http's writer does); the answer gets a content-length from
// the length the target's framing gave, nothing else.

// listWork is the exchange's work area of a request whose fields come as a list (the
// own HTTP/2 engine's, net/http's), inside its front-end's (streamWork, httpWork).
type listWork struct {
	upWork
	lf     listFields
	kinds  [32]uint8 // lf's kinds, for requests with up to 32 fields
	target []byte    // the request-target, escaped as it goes
	body   uploader  // the request body's, when it has one
}

// release readies w for its front-end's pool, holding no request's header values.
func (w *listWork) release() {
	w.body.release()
	w.reset()
}

// outgoing writes the stream's request for its target: a WebSocket upgrade for an
// extended CONNECT (tunnelHead), else the forward's head (forwardHead).
func (x *streamWork) outgoing() (*uploader, error) {
	if x.p.websocket {
		return nil, x.tunnelHead()
	}
	return x.forwardHead()
}

// nameBytes is a field name as bytes, without copying (never written to).
func nameBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// forwardHead writes the outgoing HTTP/1.1 request head into wb (writeHead): Host
// from :authority, the body framed as it will be sent (Content-Length when the client
// stated one and announced no trailers, chunked otherwise; "Content-Length: 0" on a
// method that defines content and has none, RFC 9110 §8.6, as net/http's writer does). A
// request with a body gets an uploader (x.body) to send it.
func (x *streamWork) forwardHead() (*uploader, error) {
	rq, h := x.rq, &x.p.oh
	target, err := appendTarget(x.target[:0], rq.Path)
	if err != nil {
		return nil, err
	}
	x.target = target
	var up *uploader
	if !rq.NoBody && rq.ContentLength != 0 {
		up = &x.body
		x.h2b = h2Body{st: x.st, timeout: x.p.s.cfg.ClientBodyTimeout}
		*up = uploader{src: &x.h2b, length: rq.ContentLength}
	}
	x.lf.fields = rq.Fields
	x.lf.classify(x.kinds[:])
	h.target = unsafe.String(unsafe.SliceData(target), len(target))
	h.body, h.length, h.trailers = up != nil, rq.ContentLength, up != nil
	h.zeroLength = up == nil && (rq.Method == http.MethodPost || rq.Method == http.MethodPut || rq.Method == http.MethodPatch)
	h.te = x.lf.hasKind(h1wire.KindTE) // the engine admits "trailers" only
	plan := writeHead(&x.p, &x.lf)
	x.lf = listFields{}
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
