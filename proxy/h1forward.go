package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"github.com/serve-zone/ingress/proxy/internal/h1wire"
	"github.com/serve-zone/ingress/proxy/internal/upstream"
	"github.com/serve-zone/ingress/stats"
	"golang.org/x/net/http2/hpack"
)

// serveRequest serves the request whose head is rbuf[r:r+headLen] (its body, if any,
// follows it in rbuf) through the pipeline (serve). It reports whether the connection
// stays open.
func (c *tcpConn) serveRequest(w *h1Work, headLen int) (keep bool) {
	req := &w.req
	c.now = time.Now()
	c.pace.Note(c.now)
	c.served++
	consumed := headLen + int(req.ContentLength)
	c.closing = req.ConnClose
	p := w.begin(c, consumed) // upgrades and CONNECT were handed off
	w.body = c.rbuf[c.r+headLen : c.r+consumed]
	c.s.serve(p)
	c.r += consumed
	return !c.closing && !p.abort
}

// begin prepares w's pipe for the request in w.req, consumed bytes of the buffer.
func (w *h1Work) begin(c *tcpConn, consumed int) *pipe {
	req := &w.req
	p := &w.p
	p.begin(c.s, w, w, &w.upWork)
	w.c, w.consumed, w.body = c, consumed, nil
	p.host, p.secure, p.cc = unsafe.String(unsafe.SliceData(req.Host), len(req.Host)), c.secure, c.cc
	p.method = unsafe.String(unsafe.SliceData(req.Method()), len(req.Method()))
	p.target = unsafe.String(unsafe.SliceData(req.Target()), len(req.Target()))
	p.proto, p.head, p.altSvc = stats.ProtoHTTP1, p.method == http.MethodHead, c.altSvc
	p.ip, p.trusted, p.start = c.ip, c.trusted, c.now
	return p
}

// The fast path as the pipeline's frontEnd and answerSink: h1Work's methods below.

func (w *h1Work) clientGone() bool { return w.c.clientGone() }
func (w *h1Work) challenge() bool  { return false } // HTTP-01 requests go to net/http (h1serve.go)

// outgoing writes the outgoing request into wb: its head (the body's length from the
// body forwarded), then the body, which is whole in the read buffer.
func (w *h1Work) outgoing() (*uploader, error) {
	req, h := &w.req, &w.p.oh
	h.target = w.p.target
	h.body, h.length, h.zeroLength = len(w.body) > 0, int64(len(w.body)), req.HasCL
	h.te = req.TETrailers
	writeHead(&w.p, h1Fields{req})
	w.wb = append(w.wb, w.body...)
	return nil, nil
}

// fail answers o; to a client that went away, nothing (the connection closes).
func (w *h1Work) fail(o outcome) {
	p := &w.p
	if o == outcomeClientGone {
		p.status, p.abort = 0, true
		return
	}
	p.s.writeFixed(w, &p.exchangeRecord, o, p.head, p.altSvc)
}

func (w *h1Work) relay(uc *upstream.Conn) { w.p.status, w.p.abort = w.relayBytes(uc) }

func (w *h1Work) switchTunnel(_ http.Header, bc net.Conn) tunnelClient {
	bc.Close() // never asked: upgrades leave the fast path for net/http
	return nil
}

// account: exactly this request's bytes in, and what was written for it.
func (w *h1Work) account() {
	p := &w.p
	p.in = int64(w.consumed)
	p.out = w.c.cc.settle(p.in, p.entry)
}

// access copies the request's fields: they are the connection's buffer, which the next
// request overwrites, and the log may keep them past the call.
func (w *h1Work) access() accessRecord {
	req := &w.req
	path, query, _ := bytes.Cut(req.Target(), []byte{'?'})
	return accessRecord{host: string(req.Host), method: string(req.Method()), path: string(path),
		query: string(query), client: w.c.cc.RemoteAddr().String()}
}

// head writes an answer made here (writeFixed, writeRedirect) in one write: the status
// line, the fields in canonical case, Connection: close when the connection closes after
// it (appendClose), and the body.
func (w *h1Work) head(status int, fields []hpack.HeaderField, body []byte, _ bool) error {
	b := append(w.wb[:0], "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, ' ')
	b = append(b, http.StatusText(status)...)
	b = append(b, "\r\n"...)
	for _, f := range fields {
		b = append(b, canonicalName(f.Name)...)
		b = append(b, ": "...)
		b = append(b, f.Value...)
		b = append(b, "\r\n"...)
	}
	b = w.c.appendClose(b)
	b = append(b, "\r\n"...)
	b = append(b, body...)
	w.wb = b
	_, err := w.c.send(b)
	return err
}

func (w *h1Work) data(b []byte) error {
	_, err := w.c.send(b)
	return err
}

func (w *h1Work) end([]hpack.HeaderField) error { return nil }
func (w *h1Work) cut()                          { w.p.abort = true }
func (w *h1Work) context() context.Context      { return context.Background() }

func (w *h1Work) fields(n int) []hpack.HeaderField {
	if cap(w.list) < n {
		w.list = make([]hpack.HeaderField, 0, n)
	}
	return w.list[:0]
}

// appendCommon adds what the fast path's relayed answers carry besides the target's
// fields: Date (unless the target sent one) and Alt-Svc by commonValues, then
// appendClose's.
func (c *tcpConn) appendCommon(b []byte, hasDate bool) []byte {
	date, altSvc := c.s.commonValues(c.now, hasDate, c.altSvc)
	if date != "" {
		b = append(b, "Date: "...)
		b = append(b, date...)
		b = append(b, "\r\n"...)
	}
	if altSvc != "" {
		b = append(b, "Alt-Svc: "...)
		b = append(b, altSvc...)
		b = append(b, "\r\n"...)
	}
	return c.appendClose(b)
}

// appendClose adds Connection: close when the client asked for it or a shutdown began
// (checked here, as late as possible: a drain that starts while the target works still
// closes the connection politely).
func (c *tcpConn) appendClose(b []byte) []byte {
	if !c.closing && c.s.draining.Load() {
		c.closing = true
	}
	if c.closing {
		b = append(b, "Connection: close\r\n"...)
	}
	return b
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
func (c *tcpConn) rawConn() syscall.RawConn {
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

// clientGone reports a client that closed or reset its connection while its target
// thinks (we read nothing from the client meanwhile, unlike net/http's background read).
func (c *tcpConn) clientGone() bool { return peerHungUp(c.rawConn()) }

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

// relayBytes is the fast path's relay: it writes the target's response to the client
// with its fields as they came and copies its body, chunks included, then hands uc back
// to its pool when the exchange ended cleanly. abort means the response was broken off
// and the connection must close.
func (w *h1Work) relayBytes(uc *upstream.Conn) (status int, abort bool) {
	c, p, res := w.c, &w.p, &w.res
	frame, keepUp := responseFraming(res, p.head)

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
			p.err = err
			c.s.failed(outcomeRequest, p.entry, p.backend, err)
			c.closing = true // the target's connection state is unknown; so is ours to it
			c.s.writeFixed(w, &p.exchangeRecord, outcomeRequest, p.head, p.altSvc)
			return p.status, true
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
			p.err = err
			return 0, true // the client left or stalled: recorded as 499
		}
		return status, false
	}
	if _, err := c.send(out); err != nil {
		uc.Close()
		p.err = err
		return 0, true // the client left or stalled: recorded as 499
	}

	// The rest of the body, as it comes (so event streams flow).
	_ = uc.SetReadDeadline(time.Time{})
	for {
		nr, rerr := uc.Read(buf)
		if nr > 0 {
			chunk, done, err := ab.take(buf[:nr])
			if err != nil {
				return w.brokenBody(uc, status, err)
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
				p.err = err
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
			return w.brokenBody(uc, status, rerr)
		}
	}
}

var (
	lastChunk = []byte("0\r\n\r\n")
	lflf      = []byte("\n\n")
)

// brokenBody ends a response whose body the target broke off: a request failure, and
// the client's connection closes so that it never takes the truncated body for whole.
func (w *h1Work) brokenBody(uc *upstream.Conn, status int, err error) (int, bool) {
	p := &w.p
	uc.Close()
	p.err = err
	p.s.failed(outcomeRequest, p.entry, p.backend, err)
	return status, true
}

// send writes b to the client under Config.ClientSendTimeout: a client that stops
// reading (or a window that never opens) fails the write instead of holding the
// connection, its target connection and our goroutine. The deadline is renewed only when
// it is older than h1IdleSlack (a quarter of the timeout if that is less), which saves a
// timer update per small response; a write gets at least three quarters of the timeout.
func (c *tcpConn) send(b []byte) (int, error) {
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
