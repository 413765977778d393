package proxy

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/serve-zone/ingress/proxy/internal/h1wire"
	"github.com/serve-zone/ingress/proxy/internal/h2"
	"github.com/serve-zone/ingress/proxy/internal/upstream"
)

// The HTTP/2 hot path: a stream whose request has no body (END_STREAM on its HEADERS,
// which is nearly every GET) is forwarded at the byte level, as the HTTP/1.1 fast path
// forwards: the request is written into bytes (buildRequest), sent by the shared
// exchange (exchange.go) and the response head parsed by h1wire; the body is relayed as
// DATA (a chunked one de-chunked by h1wire.ChunkScanner.Decode, its trailers sent as
// trailers). Requests with a body take the streaming path (h2forward.go), which sends
// it through net/http's request writer.
//
// Framing is derived from what is forwarded, never copied: the outgoing request has no
// body, so it carries no Content-Length except the "0" RFC 9110 §8.6 asks for on
// methods that define content (as net/http's writer does); the response to the client
// gets a content-length from the length the target's framing gave, nothing else.

// h2Work is a stream's work area for the byte-level exchange.
type h2Work struct {
	upWork
	lf     listFields
	kinds  [32]uint8 // lf's kinds, for requests with up to 32 fields
	target []byte    // the request-target, escaped as it goes
	fwd    bytesFwdSink[*listFields]
	body   uploader // the request body's, when it has one
}

var h2Works = sync.Pool{New: func() any {
	w := new(h2Work)
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
	w := h2Works.Get().(*h2Work)
	defer func() {
		w.reset()
		h2Works.Put(w)
	}()
	up, err := x.buildRequest(w)
	if err != nil {
		x.err = err
		x.answer(outcomeBadRequest)
		return
	}
	x.up = up
	start := x.start
	if start.IsZero() {
		start = time.Now()
	}
	replay := x.replayable(up != nil)
	walk := newWalk(s, x.entry)
	for {
		b := walk.next()
		if b == nil {
			x.answer(walk.last)
			return
		}
		x.backend = b
		uc, err := s.exchange(&w.upWork, b.Addr, start, (*h2Watch)(x.st), replay, up, false)
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
		if walk.missed(o, err, up == nil || !up.took.Load()) {
			continue
		}
		if o == outcomeClientGone {
			x.st.Reset(http2.ErrCodeCancel)
		} else {
			x.answer(o)
		}
		return
	}
}

// putUp ends the exchange on uc: the connection goes back to its pool when keep says
// the answer ended cleanly and the request's body, if any, went out whole (an upload
// the answer did not wait for is stopped first).
func (x *h2Req) putUp(uc *upstream.Conn, keep bool) {
	if x.up != nil && !x.up.end(uc) {
		keep = false
	}
	x.f.s.up.Put(uc, keep, x.f.s.up.now())
}

// replayable applies upstream.Replayable to the request.
func (x *h2Req) replayable(hasBody bool) bool {
	keyed := false
	for i := range x.rq.Fields {
		if upstream.IdempotencyKey(x.rq.Fields[i].Name) {
			keyed = true
			break
		}
	}
	return upstream.Replayable(x.rq.Method, hasBody, keyed)
}

// nameBytes is a field name as bytes, without copying (never written to).
func nameBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// buildRequest writes the outgoing HTTP/1.1 request head into w.wb (appendHead): Host
// from :authority, the body framed as it will be sent (Content-Length when the client
// stated one and announced no trailers, chunked otherwise; "Content-Length: 0" on a
// method that defines content and has none, RFC 9110 §8.6, as net/http's writer does). A
// request with a body gets an uploader (w.body) to send it.
func (x *h2Req) buildRequest(w *h2Work) (*uploader, error) {
	rq, f := x.rq, x.f
	target, err := appendTarget(w.target[:0], rq.Path)
	if err != nil {
		return nil, err
	}
	w.target = target
	var up *uploader
	if !rq.NoBody && rq.ContentLength != 0 {
		up = &w.body
		*up = uploader{st: x.st}
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
	b, plan := appendHead(w.wb[:0], &w.lf, &h, &w.fwd)
	w.wb = b
	w.lf = listFields{}
	if up != nil {
		up.chunked, up.expect = plan.chunked, plan.expect
	}
	return up, nil
}

// appendTarget appends the request-target for :path. A path made only of what a URL
// path may hold unescaped (and valid %-escapes) goes as it came, query included; any
// other is re-escaped as net/http's request writer would (url.URL.RequestURI), so that
// both HTTP/2 paths forward the same target.
func appendTarget(b []byte, p string) ([]byte, error) {
	if p == "*" {
		return append(b, '*'), nil
	}
	path := p
	for i := 0; i < len(p); i++ {
		if p[i] == '?' {
			path = p[:i]
			break
		}
	}
	if pathVerbatim(path) {
		return append(b, p...), nil
	}
	u, err := url.ParseRequestURI(p)
	if err != nil {
		return b, err
	}
	return append(b, u.RequestURI()...), nil
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

// relayBytes writes the target's response (w.res, its head in w.up) to the stream and
// relays its body, then hands uc back to its pool when the exchange ended cleanly.
func (x *h2Req) relayBytes(w *h2Work, uc *upstream.Conn) {
	res := &w.res
	frame, keepUp := responseFraming(res, x.rq.Method == http.MethodHead)
	fields := x.responseFields(res, frame)
	x.out += headBytes(fields)
	x.status = res.Status

	buf := w.up[h1Headroom:]
	got := buf[w.resHead:w.filled] // body bytes that came with the head
	switch frame {
	case frameNone:
		if err := x.st.WriteHead(res.Status, fields, nil, true); err != nil {
			x.clientStopped(err)
		}
		x.putUp(uc, keepUp && len(got) == 0)
		return
	case frameLength:
		if res.ContentLength > int64(len(got)) && res.ContentLength <= int64(len(buf)) {
			// A body that fits the buffer is read whole before the head goes out, so
			// that HEADERS and DATA leave together and a broken one becomes a 502.
			copy(buf, got)
			n := len(got)
			stop := context.AfterFunc(x.st.Context(), uc.Abort()) // a client that leaves stops the wait
			_ = uc.SetReadDeadline(time.Time{})
			for int64(n) < res.ContentLength {
				k, err := uc.Read(buf[n:])
				n += k
				if err != nil && int64(n) < res.ContentLength {
					stop()
					uc.Close()
					x.badAnswer(err)
					return
				}
			}
			stop()
			got = buf[:n]
		}
		k := min(int64(len(got)), res.ContentLength)
		keepUp = keepUp && int64(len(got)) <= res.ContentLength
		if k == res.ContentLength {
			x.out += k
			if err := x.st.WriteHead(res.Status, fields, got[:k], true); err != nil {
				x.clientStopped(err)
			}
			x.putUp(uc, keepUp)
			return
		}
		if err := x.st.WriteHead(res.Status, fields, got, false); err != nil {
			uc.Close()
			x.clientStopped(err)
			return
		}
		x.out += int64(len(got))
		x.relayRest(w, uc, frame, res.ContentLength-int64(len(got)), nil)
	case frameChunked:
		var sc h1wire.ChunkScanner
		n, d, fin, err := sc.Decode(got)
		if err != nil {
			uc.Close()
			x.badAnswer(err)
			return
		}
		if fin && len(sc.Trailer) == 0 {
			x.out += int64(d)
			if err := x.st.WriteHead(res.Status, fields, got[:d], true); err != nil {
				x.clientStopped(err)
			}
			x.putUp(uc, keepUp && n == len(got))
			return
		}
		if err := x.st.WriteHead(res.Status, fields, got[:d], false); err != nil {
			uc.Close()
			x.clientStopped(err)
			return
		}
		x.out += int64(d)
		if fin {
			x.endChunked(&sc, uc, keepUp && n == len(got))
			return
		}
		x.relayRest(w, uc, frame, 0, &sc)
	default: // frameClose
		if err := x.st.WriteHead(res.Status, fields, got, false); err != nil {
			uc.Close()
			x.clientStopped(err)
			return
		}
		x.out += int64(len(got))
		x.relayRest(w, uc, frame, 0, nil)
	}
}

// relayRest relays the body after the first bytes, as it comes (event streams flow): a
// length's remaining bytes, chunks (sc) or everything until the target closes. A stream
// that the client resets closes the target connection at once.
func (x *h2Req) relayRest(w *h2Work, uc *upstream.Conn, frame int, remaining int64, sc *h1wire.ChunkScanner) {
	stop := context.AfterFunc(x.st.Context(), uc.Abort())
	defer stop()
	_ = uc.SetReadDeadline(time.Time{})
	buf := w.up[h1Headroom:]
	keepUp := true
	for {
		nr, rerr := uc.Read(buf)
		if nr > 0 {
			chunk, done := buf[:nr], false
			switch frame {
			case frameLength:
				var clean bool
				chunk, remaining, clean = takeLength(chunk, remaining)
				keepUp = keepUp && clean
				done = remaining == 0
			case frameChunked:
				n, d, fin, err := sc.Decode(chunk)
				if err != nil {
					x.brokenBody(uc, err)
					return
				}
				keepUp = keepUp && (!fin || n == nr)
				chunk, done = chunk[:d], fin
			}
			if len(chunk) > 0 {
				if _, err := x.st.Write(chunk); err != nil {
					uc.Close()
					x.clientStopped(err)
					return
				}
				x.out += int64(len(chunk))
			}
			if done {
				if frame == frameChunked {
					x.endChunked(sc, uc, keepUp)
					return
				}
				if err := x.st.Close(nil); err != nil {
					x.clientStopped(err)
				}
				x.putUp(uc, keepUp)
				return
			}
		}
		if rerr != nil {
			if frame == frameClose && rerr == io.EOF {
				uc.Close()
				if err := x.st.Close(nil); err != nil {
					x.clientStopped(err)
				}
				return
			}
			x.brokenBody(uc, rerr)
			return
		}
	}
}

// endChunked ends a chunked body: its trailers (fields that may be trailers) then
// END_STREAM.
func (x *h2Req) endChunked(sc *h1wire.ChunkScanner, uc *upstream.Conn, keepUp bool) {
	var tr []hpack.HeaderField
	if len(sc.Trailer) > 0 {
		arena := make([]byte, 0, len(sc.Trailer))
		h1wire.EachTrailer(sc.Trailer, func(name, value []byte) {
			if h1wire.IsHopByHop(name) || h1wire.RequestFieldKind(name) != h1wire.KindOther {
				return // connection-specific or framing: not a field HTTP/2 may carry
			}
			at := len(arena)
			arena = appendLower(arena, name)
			n := unsafe.String(&arena[at], len(name))
			at = len(arena)
			arena = append(arena, value...)
			tr = append(tr, hpack.HeaderField{Name: n, Value: unsafe.String(unsafe.SliceData(arena[at:]), len(value))})
			x.out += int64(len(name) + len(value))
		})
	}
	if err := x.st.Close(tr); err != nil {
		x.clientStopped(err)
	}
	x.putUp(uc, keepUp)
}

// badAnswer answers 502 for a response that broke before anything of it reached the
// client.
func (x *h2Req) badAnswer(err error) {
	x.out = 0
	x.err = err
	if x.st.Context().Err() == nil {
		x.f.s.failed(outcomeRequest, x.entry, x.backend, err)
	}
	x.answer(outcomeRequest)
}

// brokenBody ends a response whose body the target broke off: a request failure, and
// the stream is reset so that the client never takes the truncated body for whole.
// A client that reset the stream (or lost its connection) closed the target connection
// itself: that is the client leaving (499), whatever the read then said.
func (x *h2Req) brokenBody(uc *upstream.Conn, err error) {
	uc.Close()
	if x.st.Context().Err() != nil {
		x.status, x.err = 0, errClientGone
		return
	}
	x.err = err
	x.f.s.failed(outcomeRequest, x.entry, x.backend, err)
	x.st.Reset(http2.ErrCodeInternal)
}

// responseFields is the response head for the client: the target's fields without
// hop-by-hop and framing ones, names in lower case, copied into one allocation (the
// engine's writer encodes them after the work area is reused, and its HPACK table may
// keep them); content-length from the target's framing; trailer when the chunked body
// may carry trailers; Date and Alt-Svc.
func (x *h2Req) responseFields(res *h1wire.Response, frame int) []hpack.HeaderField {
	head := res.Head
	n, size := 2, 40
	for i := range res.Fields {
		f := &res.Fields[i]
		n++
		size += int(f.VE - f.NS)
	}
	// The field list is the stream's, reused for its connection's later streams. The
	// arena is not: the connection's HPACK encoder may keep the strings that point into
	// it for as long as the connection lives. It is sized not to grow.
	fields := x.st.HeadFields(n + 2)
	arena := make([]byte, 0, size)
	str := func(at int) string { return unsafe.String(&arena[at], len(arena)-at) }
	for i := range res.Fields {
		f := &res.Fields[i]
		switch f.Kind {
		case h1wire.KindConnection, h1wire.KindKeepAlive, h1wire.KindTransferEncoding, h1wire.KindContentLength:
			continue
		case h1wire.KindDrop:
			if frame != frameChunked || !eqFoldBytes(f.Name(head), "trailer") {
				continue
			}
			// A chunked body's announced trailers are relayed: the announcement too.
		case h1wire.KindAltSvc:
			if x.f.altSvc {
				continue // we are the origin the client talks to
			}
		}
		value := f.Value(head)
		if len(value) == 0 && f.Kind == h1wire.KindDrop {
			continue
		}
		at := len(arena)
		arena = appendLower(arena, f.Name(head))
		name := str(at)
		var v string
		if len(value) > 0 {
			at = len(arena)
			arena = append(arena, value...)
			v = str(at)
		}
		fields = append(fields, hpack.HeaderField{Name: name, Value: v})
	}
	// A 304's stated length describes a representation it does not carry; sent over
	// HTTP/2, Go's client waits for that many DATA bytes.
	if res.ContentLength >= 0 && (frame == frameLength || frame == frameNone && res.Status != 304 && res.Status != 204) {
		at := len(arena)
		arena = strconv.AppendInt(arena, res.ContentLength, 10)
		fields = append(fields, hpack.HeaderField{Name: "content-length", Value: str(at)})
	}
	return x.commonFields(fields, res.HasDate)
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
