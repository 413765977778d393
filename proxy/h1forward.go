package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/serve-zone/ingress/proxy/internal/h1wire"
	"github.com/serve-zone/ingress/proxy/internal/upstream"
	"github.com/serve-zone/ingress/routetable"
	"github.com/serve-zone/ingress/stats"
)

// serveRequest answers the request whose head is rbuf[r:r+headLen] (its body, if any,
// follows it in rbuf) and does its accounting. It reports whether the connection stays
// open.
func (c *h1Conn) serveRequest(w *h1Work, headLen int) (keep bool) {
	s := c.s
	req := &w.req
	c.now = time.Now()
	c.pace.Note(c.now)
	c.served++
	consumed := headLen + int(req.ContentLength)
	body := c.rbuf[c.r+headLen : c.r+consumed]
	c.closing = req.ConnClose
	s.totals.InFlight(1)

	var (
		e      *routetable.Entry
		status int
		abort  bool
	)
	c.backend, c.err = nil, nil
	host := unsafe.String(unsafe.SliceData(req.Host), len(req.Host))
	v := s.decide(&request{host: host, secure: c.secure, cc: c.cc}) // upgrades and CONNECT were handed off
	defer v.done()
	e = v.entry
	switch v.kind {
	case answerFixed:
		status = c.answer(w, v.o)
	case answerRedirect:
		status = c.redirect(w)
	default:
		status, abort = c.forward(w, e, body)
	}

	// Accounting: exactly this request's bytes in, and what was written for it.
	in := int64(consumed)
	out := c.cc.settle(in, e)
	s.record(e, stats.ProtoHTTP1, status, in, out)
	s.totals.InFlight(-1)
	if s.accessLog != nil {
		c.logAccess(req, e, status, in, out)
	}
	c.r += consumed
	return !c.closing && !abort
}

// answer writes o's fixed response (fixedAnswers) and returns its status.
func (c *h1Conn) answer(w *h1Work, o outcome) int {
	fa := fixedAnswers[o]
	b := append(w.wb[:0], "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(fa.code), 10)
	b = append(b, ' ')
	b = append(b, http.StatusText(fa.code)...)
	b = append(b, "\r\n"...)
	for _, f := range fa.fields {
		b = append(b, f.name...)
		b = append(b, ": "...)
		b = append(b, f.val[0]...)
		b = append(b, "\r\n"...)
	}
	b = c.appendCommon(b, false)
	b = append(b, "\r\n"...)
	if string(w.req.Method()) != "HEAD" {
		b = append(b, fa.body...)
	}
	w.wb = b
	_, _ = c.send(b)
	return fa.code
}

// redirect answers 308 to HTTPS (appendLocation).
func (c *h1Conn) redirect(w *h1Work) int {
	b := append(w.wb[:0], "HTTP/1.1 308 Permanent Redirect\r\nLocation: "...)
	b = appendLocation(b, w.req.Host, c.s.httpsPort, w.req.Target())
	b = append(b, "\r\nContent-Length: 0\r\n"...)
	b = c.appendCommon(b, false)
	b = append(b, "\r\n"...)
	w.wb = b
	_, _ = c.send(b)
	return http.StatusPermanentRedirect
}

// appendCommon adds what every response on this connection carries: Date (unless the
// target sent one), Alt-Svc when HTTP/3 is announced, Connection: close when the client
// asked for it or a shutdown began (checked here, as late as possible: a drain that
// starts while the target works still closes the connection politely).
func (c *h1Conn) appendCommon(b []byte, hasDate bool) []byte {
	if !c.closing && c.s.draining.Load() {
		c.closing = true
	}
	if !hasDate {
		b = append(b, "Date: "...)
		b = appendDate(b, c.now)
		b = append(b, "\r\n"...)
	}
	if c.altSvc {
		b = append(b, "Alt-Svc: "...)
		b = append(b, c.s.h3.altSvc[0]...)
		b = append(b, "\r\n"...)
	}
	if c.closing {
		b = append(b, "Connection: close\r\n"...)
	}
	return b
}

// forward sends the request to one of the route's targets and relays the answer. A
// connect failure marks the target down and tries another one (the body is in memory,
// nothing was sent); nothing else is retried. abort means the response was broken off
// and the connection must close.
func (c *h1Conn) forward(w *h1Work, e *routetable.Entry, body []byte) (status int, abort bool) {
	s := c.s
	c.buildRequest(w, body)
	walk := newWalk(s, e)
	for {
		b := walk.next()
		if b == nil {
			return c.answer(w, walk.last), false
		}
		c.backend = b
		uc, err := c.exchange(w, e, b.Addr)
		if err == nil {
			walk.took()
			status, abort = c.relay(w, uc, e)
			walk.done()
			return status, abort
		}
		c.err = err
		o := classifyUpstream(err)
		if walk.missed(o, err, true) { // the body is in memory: nothing was consumed
			continue
		}
		if o == outcomeClientGone {
			return 0, true
		}
		return c.answer(w, o), false
	}
}

// h1ClientWatch is how often a client is checked while its target thinks.
const h1ClientWatch = time.Second

var errClientGone = errors.New("proxy: client went away")

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// rawConn returns the client's TCP connection for polling (nil if it has none).
func (c *h1Conn) rawConn() syscall.RawConn {
	if c.raw == nil {
		var nc net.Conn = c.cc.Conn
		if c.cc.tc != nil {
			nc = c.cc.tc.NetConn()
		}
		if sc, ok := nc.(syscall.Conn); ok {
			c.raw, _ = sc.SyscallConn()
		}
	}
	return c.raw
}

// buildRequest writes the outgoing request into w.wb: its head (appendHead, the body's
// length from the body forwarded), then the body.
func (c *h1Conn) buildRequest(w *h1Work, body []byte) {
	req := &w.req
	h := outHead{
		method: unsafe.String(unsafe.SliceData(req.Method()), len(req.Method())),
		target: unsafe.String(unsafe.SliceData(req.Target()), len(req.Target())),
		host:   unsafe.String(unsafe.SliceData(req.Host), len(req.Host)),
		body:   len(body) > 0, length: int64(len(body)), zeroLength: req.HasCL,
		te:  req.TETrailers,
		fwd: forwardedFor{clientIP: c.ip, host: unsafe.String(unsafe.SliceData(req.Host), len(req.Host)), https: c.secure, trusted: c.trusted},
	}
	b, _ := appendHead(w.wb[:0], h1Fields{req}, &h)
	w.wb = append(b, body...)
}

// exchange sends w.wb to addr (Server.exchange, exchange.go) and reads the response
// head into w.up.
func (c *h1Conn) exchange(w *h1Work, e *routetable.Entry, addr string) (*upstream.Conn, error) {
	// The body is in memory: nothing was taken from the client that a new connection
	// could not send again.
	return c.s.exchange(&w.upWork, attempt{route: e, addr: addr, watch: c, replayable: replayable(&w.req)})
}

// clientGone reports a client that closed or reset its connection while its target
// thinks (we read nothing from the client meanwhile, unlike net/http's background read).
func (c *h1Conn) clientGone() bool { return peerHungUp(c.rawConn()) }

// replayable applies upstream.Replayable to req. Its body, if any, is in the read
// buffer, whole: it is sent again from there, as a body held whole on the other paths
// (holdBody), so only the method and an idempotency key decide.
func replayable(req *h1wire.Request) bool {
	keyed := false
	for i := range req.Fields {
		if upstream.IdempotencyKey(req.Fields[i].Name(req.Head)) {
			keyed = true
			break
		}
	}
	return upstream.Replayable(string(req.Method()), false, keyed)
}

// responseFraming is how res's body is delimited (the answer to a HEAD request has
// none) and whether its framing lets the target connection be kept after it.
func responseFraming(res *h1wire.Response, head bool) (frame int, keepUp bool) {
	frame = frameClose
	switch {
	case head || res.Status == 204 || res.Status == 304:
		frame = frameNone
	case res.Chunked:
		frame = frameChunked
	case res.ContentLength >= 0:
		frame = frameLength
	}
	return frame, !res.ConnClose && frame != frameClose
}

// takeLength takes from chunk what is left of a body of known length: the body's bytes,
// what remains after them, and whether chunk held nothing beyond the body (bytes after
// it mean the target connection cannot be kept).
func takeLength(chunk []byte, remaining int64) (body []byte, left int64, clean bool) {
	k := min(int64(len(chunk)), remaining)
	return chunk[:k], remaining - k, int64(len(chunk)) <= remaining
}

// Body framing of a relayed response.
const (
	frameNone    = iota // no body (HEAD, 204, 304)
	frameLength         // Content-Length
	frameChunked        // chunked, passed through verbatim
	frameClose          // until the target closes: re-framed as chunked for the client
)

// relay writes the target's response to the client and copies its body, then hands uc
// back to its pool when the exchange ended cleanly.
func (c *h1Conn) relay(w *h1Work, uc *upstream.Conn, e *routetable.Entry) (status int, abort bool) {
	res := &w.res
	frame, keepUp := responseFraming(res, string(w.req.Method()) == "HEAD")

	// The head.
	head := res.Head
	b := append(w.wb[:0], "HTTP/1.1 "...)
	b = append(b, head[len("HTTP/1.1 "):res.ReasonE]...)
	b = append(b, "\r\n"...)
	for i := range res.Fields {
		f := &res.Fields[i]
		if !answerFieldGoesOn(f.Kind, c.altSvc) {
			continue // framing is written below, from what we relay
		}
		b = append(b, head[f.NS:f.VE]...)
		b = append(b, "\r\n"...)
	}
	switch {
	case frame == frameChunked || frame == frameClose:
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	case res.ContentLength >= 0:
		// The body's length (or, for HEAD and 304, the length the target states), in
		// canonical form.
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, res.ContentLength, 10)
		b = append(b, "\r\n"...)
	}
	b = c.appendCommon(b, res.HasDate)
	b = append(b, "\r\n"...)
	w.wb = b

	buf := w.up[h1Headroom:]
	start := w.resHead
	got := buf[start:w.filled] // body bytes that came with the head
	status = res.Status

	ab := newAnswerBody(frame, res.ContentLength, false) // chunks go on as they came
	var first []byte
	done := false
	switch frame {
	case frameNone:
		done = true
		keepUp = keepUp && len(got) == 0
	case frameLength, frameChunked:
		var err error
		first, done, err = ab.take(got)
		if err != nil {
			// Nothing reached the client yet: it gets a 502 instead of a broken body.
			uc.Close()
			c.err = err
			c.s.failed(outcomeRequest, e, c.backend, err)
			c.closing = true // the target's connection state is unknown; so is ours to it
			return c.answer(w, outcomeRequest), true
		}
		keepUp = keepUp && ab.clean
	case frameClose:
		if len(got) > 0 {
			// Re-framed below, after the head.
			b = appendChunk(b, got)
			w.wb = b
		}
	}

	// Head and first body bytes in one write: the head goes just before the body in
	// the headroom (the target's own head, which it replaces, is usually longer).
	var out []byte
	if len(first) > 0 && len(b) <= h1Headroom+start {
		at := h1Headroom + start - len(b)
		copy(w.up[at:], b)
		out = w.up[at : h1Headroom+start+len(first)]
	} else {
		out = append(b, first...)
		w.wb = out
	}
	if done {
		// The exchange with the target is over: its connection goes back to the pool
		// before the client has the answer, so that the client's next request (on this
		// connection or another) finds it there.
		c.s.up.Put(uc, keepUp, c.s.up.now())
		if _, err := c.send(out); err != nil {
			c.err = err
			return 0, true // the client left or stalled: recorded as 499
		}
		return status, false
	}
	if _, err := c.send(out); err != nil {
		uc.Close()
		c.err = err
		return 0, true // the client left or stalled: recorded as 499
	}

	// The rest of the body, as it comes (so event streams flow).
	_ = uc.SetReadDeadline(time.Time{})
	for {
		nr, rerr := uc.Read(buf)
		if nr > 0 {
			chunk, done, err := ab.take(buf[:nr])
			if err != nil {
				return c.brokenBody(uc, e, status, err)
			}
			if frame == frameClose {
				w.wb = appendChunk(w.wb[:0], chunk)
				chunk = w.wb
			}
			if done {
				c.s.up.Put(uc, keepUp && ab.clean, c.s.up.now()) // before the client has the end, as above
			}
			if _, err := c.send(chunk); err != nil {
				if !done {
					uc.Close()
				}
				c.err = err
				return 0, true // the client left or stalled: recorded as 499
			}
			if done {
				return status, false
			}
		}
		if rerr != nil {
			if frame == frameClose && rerr == io.EOF {
				uc.Close()
				if _, err := c.send(lastChunk); err != nil {
					return status, true
				}
				return status, false
			}
			return c.brokenBody(uc, e, status, rerr)
		}
	}
}

var (
	lastChunk = []byte("0\r\n\r\n")
	lflf      = []byte("\n\n")
)

// brokenBody ends a response whose body the target broke off: a request failure, and
// the client's connection closes so that it never takes the truncated body for whole.
func (c *h1Conn) brokenBody(uc *upstream.Conn, e *routetable.Entry, status int, err error) (int, bool) {
	uc.Close()
	c.err = err
	c.s.failed(outcomeRequest, e, c.backend, err)
	return status, true
}

// send writes b to the client under Config.ClientSendTimeout: a client that stops
// reading (or a window that never opens) fails the write instead of holding the
// connection, its target connection and our goroutine. The deadline is renewed only when
// it is older than h1IdleSlack (a quarter of the timeout if that is less), which saves a
// timer update per small response; a write gets at least three quarters of the timeout.
func (c *h1Conn) send(b []byte) (int, error) {
	d := c.s.cfg.ClientSendTimeout
	if now := time.Now(); now.Sub(c.wdlSetAt) >= min(h1IdleSlack, d/4) {
		c.wdlSetAt = now
		_ = c.cc.SetWriteDeadline(now.Add(d))
	}
	return c.cc.Write(b)
}

func appendChunk(b, data []byte) []byte {
	b = strconv.AppendInt(b, int64(len(data)), 16)
	b = append(b, "\r\n"...)
	b = append(b, data...)
	return append(b, "\r\n"...)
}

// logAccess writes the request's access-log line. The strings are copies: the bytes are
// the connection's buffer, which the next request overwrites, and a core may keep fields
// past the call.
func (c *h1Conn) logAccess(req *h1wire.Request, e *routetable.Entry, status int, in, out int64) {
	host := string(req.Host)
	if e != nil {
		host = e.Hostname
	}
	path, query, _ := bytes.Cut(req.Target(), []byte{'?'})
	c.s.logAccess(&accessRecord{host: host, method: string(req.Method()), path: string(path), query: string(query),
		status: status, in: in, out: out, start: c.now, client: c.cc.RemoteAddr().String(),
		backend: c.backend, proto: stats.ProtoHTTP1, err: c.err})
}

// The Date header value, formatted once per second.
type dateValue struct {
	sec int64
	b   []byte
}

var dateCache atomic.Pointer[dateValue]

func appendDate(b []byte, now time.Time) []byte {
	sec := now.Unix()
	if d := dateCache.Load(); d != nil && d.sec == sec {
		return append(b, d.b...)
	}
	d := &dateValue{sec: sec, b: now.UTC().AppendFormat(nil, http.TimeFormat)}
	dateCache.Store(d)
	return append(b, d.b...)
}
