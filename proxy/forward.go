package proxy

import (
	"errors"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
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
//
// Once forward has set up progress, it also enforces Config.ClientBodyTimeout.
type trackedBody struct {
	rc      io.ReadCloser
	limit   int64 // the request's Content-Length; > 0
	n       atomic.Int64
	started atomic.Bool
	failed  atomic.Bool
	// timedOut: the body stalled (ClientBodyTimeout); failed is set too.
	timedOut atomic.Bool
	progress bodyProgress
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
	var t0 time.Time
	if b.progress.on() {
		t0 = b.progress.before()
	}
	n, err := b.rc.Read(p)
	if n > 0 {
		b.n.Add(int64(n))
	}
	if !t0.IsZero() {
		b.progress.after(t0, n, err)
	}
	if err != nil && err != io.EOF {
		// Only bodyProgress sets read deadlines on this path. net/http does not always
		// pass the deadline's error on (its chunked reader turns a failed trailer read
		// into one of its own), so a read that failed once the window's time was up
		// counts as timed out too.
		if !t0.IsZero() && (errors.Is(err, os.ErrDeadlineExceeded) || b.progress.expired()) {
			b.timedOut.Store(true)
		}
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
		if dl := deadlinesOf(w); dl != nil {
			body.progress.init(dl, r.ProtoMajor == 2, s.cfg.ClientBodyTimeout)
			// The transport may read the body until the exchange is over, and not
			// after the handler has returned.
			defer body.progress.finish()
		}
	}
	walk := newWalk(s, e)
	var res *http.Response
	for {
		b := walk.next()
		if b == nil {
			s.answer(w, rs, walk.last)
			return
		}
		o.url.Host = b.Addr
		rs.backend = b
		var err error
		res, err = s.rt.RoundTrip(&o.req)
		if err == nil {
			walk.took()
			break
		}
		rs.err = err
		oc := classify(err, r, body)
		if walk.missed(oc, err, body == nil || !body.started.Load()) {
			continue
		}
		if oc == outcomeClientGone {
			// Nothing to say, and never net/http's default 200 for a handler that wrote
			// nothing: should the client still listen, its connection or stream ends.
			rs.abort = true
		} else {
			s.answer(w, rs, oc)
		}
		return
	}
	rs.err = nil
	s.relayBody(w, r, res, rs, body)
	walk.done()
	if body != nil && !rs.h1 {
		rs.in += body.n.Load()
	}
}

// relay copies the target's response to the client: header, body (flushed as it comes
// for event streams and bodies of unknown length) and trailers. A body the target breaks
// off is counted as a request failure and the client's response aborted, so that the
// client never takes a truncated body for a complete one. Each write to the client must
// complete within ClientSendTimeout; a write that fails, for that or because the client
// left, aborts the response too (closing the target's connection with the body) and is
// recorded as a client disconnect (499).
func (s *Server) relay(w http.ResponseWriter, r *http.Request, res *http.Response, rs *reqState) {
	s.relayBody(w, r, res, rs, nil)
}

// relayBody is relay for a request whose body, if any, is body: a target failure caused
// by the client's body (it stalled or broke) is not counted as a backend failure.
func (s *Server) relayBody(w http.ResponseWriter, r *http.Request, res *http.Response, rs *reqState, body *trackedBody) {
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
	var sp sendProgress
	if dl := deadlinesOf(w); dl != nil {
		sp.init(dl, r.ProtoMajor == 2, s.cfg.ClientSendTimeout)
	}
	n, rerr, werr := copyBody(w, res.Body, flush, &sp)
	if !rs.h1 {
		rs.out += n
	}
	switch {
	case werr != nil:
		// The client left or stopped taking the response (ClientSendTimeout): nothing
		// more to say to it. (net/http has closed an HTTP/1.1 connection already.)
		rs.abort = true
		rs.status = outcomeClientStalled.status()
		rs.err = werr
		return
	case rerr != nil && r.Context().Err() != nil:
		// The client left (its context ended the target's read): 499, no failure.
		rs.abort = true
		rs.status, rs.err = 0, errClientGone
		return
	case rerr != nil:
		rs.err = rerr
		if body == nil || !body.failed.Load() {
			s.failed(outcomeRequest, rs.entry, rs.backend, rerr)
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
// is set, each write (and flush) under sp's deadline. rerr is a read (target) error, werr
// a write (client) error.
func copyBody(w http.ResponseWriter, src io.Reader, flush bool, sp *sendProgress) (n int64, rerr, werr error) {
	bp := bufPool.Get().(*[copyBufSize]byte)
	defer bufPool.Put(bp)
	buf := bp[:]
	fl, _ := w.(http.Flusher)
	defer func() { sp.finish(n > 0 && rerr == nil && werr == nil) }()
	for {
		nr, er := src.Read(buf)
		if nr > 0 {
			sp.before(er == io.EOF)
			nw, ew := w.Write(buf[:nr])
			n += int64(nw)
			if ew == nil && flush && fl != nil {
				fl.Flush()
			}
			sp.after()
			if ew != nil {
				return n, nil, ew
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

// Client progress deadlines (Config.ClientBodyTimeout and Config.ClientSendTimeout).
//
// They are set through the response writer's SetReadDeadline and SetWriteDeadline, the
// methods http.ResponseController calls (found the same way, through Unwrap):
//   - net/http's HTTP/1.1 writer sets them on the client connection: they fail a read or
//     write that is pending when they pass or starts after. net/http clears the write
//     deadline after each response and the read deadline when the body reaches EOF.
//   - quic-go's http3 writer (v0.65) sets them on the QUIC stream, with the same
//     semantics.
//   - net/http's HTTP/2 writer keeps a timer per stream that fails the stream's body
//     (read) or resets the stream (write) when it fires, whether a call is pending or
//     not, and every change of it is a message to the connection's serve loop.
//
// Deadlines of the first two kinds are moved forward lazily, at most every eighth of
// their timeout, so that a busy stream does not pay for a deadline per read or write. On
// HTTP/2 a streamWatch of ours times the calls instead (it acts only on a call that is
// still pending when its time is up, never while the target is being waited for), and
// the stream's own write deadline is set once, for what net/http writes after the
// handler has returned.

// deadlineSetter is implemented by the response writers of all three servers.
type deadlineSetter interface {
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
}

// deadlinesOf returns w's deadline methods, following Unwrap as http.ResponseController
// does; nil when w has none (Handler used directly).
func deadlinesOf(w http.ResponseWriter) deadlineSetter {
	for {
		switch t := w.(type) {
		case deadlineSetter:
			return t
		case interface{ Unwrap() http.ResponseWriter }:
			w = t.Unwrap()
		default:
			return nil
		}
	}
}

const (
	// bodyProgressBytes is what every ClientBodyTimeout window must deliver.
	bodyProgressBytes = 1 << 10
	// deadlineSlackDiv: a lazily moved deadline is set this fraction of its timeout
	// beyond what is due, so that it is moved again only after that much time.
	deadlineSlackDiv = 8
)

// longAgo is a deadline in the past: the pending call fails at once.
var longAgo = time.Unix(1, 0)

// clientDeadline is one direction's deadline on the client side of a request.
type clientDeadline struct {
	dl    deadlineSetter // nil: no deadlines
	write bool           // SetWriteDeadline, else SetReadDeadline
	at    time.Time      // the deadline set; zero when none is
}

func (d *clientDeadline) set(t time.Time) {
	if d.write {
		_ = d.dl.SetWriteDeadline(t)
	} else {
		_ = d.dl.SetReadDeadline(t)
	}
}

// cover makes the deadline at least due: when it is earlier (or none is set), it is set
// to due plus slack.
func (d *clientDeadline) cover(due time.Time, slack time.Duration) {
	if d.at.Before(due) {
		d.at = due.Add(slack)
		d.set(d.at)
	}
}

// streamWatch times the reads (or the writes) of one side of an HTTP/2 stream with a
// timer of its own: when a call is still pending at its due time, it sets the stream's
// deadline in the past, which net/http acts on at once (the body fails, or the stream is
// reset). The calling goroutine uses begin and end; the timer runs check; stop ends it
// before the handler returns, after which the response writer must not be touched.
type streamWatch struct {
	d     clientDeadline // only set is used, with longAgo
	mu    sync.Mutex     // guards done, fired and the creation of timer
	done  bool
	fired bool
	timer *time.Timer
	due   atomic.Int64 // UnixNano by which the pending call must end; 0: none pending
	idle  atomic.Bool  // the timer is stopped: begin restarts it
}

// begin marks a call pending until due.
func (w *streamWatch) begin(now, due time.Time) {
	w.due.Store(due.UnixNano())
	if w.timer == nil {
		w.mu.Lock()
		if !w.done {
			w.timer = time.AfterFunc(due.Sub(now), w.check)
		}
		w.mu.Unlock()
		return
	}
	if w.idle.Load() && w.idle.CompareAndSwap(true, false) {
		w.timer.Reset(due.Sub(now))
	}
}

// end marks the pending call done.
func (w *streamWatch) end() { w.due.Store(0) }

func (w *streamWatch) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done || w.fired {
		return
	}
	w.idle.Store(true)
	due := w.due.Load()
	if due == 0 || !w.idle.CompareAndSwap(true, false) {
		return // nothing pending (the next begin restarts the timer), or begin just did
	}
	if left := time.Until(time.Unix(0, due)); left > 0 {
		w.timer.Reset(left)
		return
	}
	w.fired = true
	w.d.set(longAgo)
}

// stop ends the watch for good.
func (w *streamWatch) stop() {
	w.mu.Lock()
	w.done = true
	if w.timer != nil {
		w.timer.Stop()
	}
	w.mu.Unlock()
}

// bodyProgress enforces ClientBodyTimeout on a request body: each window must deliver
// bodyProgressBytes (or the rest of the body: a read that ends it never times out), and a
// window's clock runs only while a read waits for the client. Its fields belong to the
// goroutine reading the body, but for done, which mu guards (and the watch's own): the
// transport may still read while the handler finishes, and the response writer must not
// be touched after that.
type bodyProgress struct {
	d       clientDeadline
	h2      bool // timed by watch
	watch   streamWatch
	timeout time.Duration
	bytes   int64         // delivered in the current window
	waited  time.Duration // spent waiting for the client in the current window
	eof     bool
	mu      sync.Mutex
	done    bool
}

func (p *bodyProgress) init(dl deadlineSetter, h2 bool, timeout time.Duration) {
	p.d = clientDeadline{dl: dl}
	p.h2 = h2
	p.watch.d = p.d
	p.timeout = timeout
}

func (p *bodyProgress) on() bool { return p.d.dl != nil && !p.eof }

// before makes sure the read starting now fails when the window's time is used up. It
// returns now.
func (p *bodyProgress) before() time.Time {
	now := time.Now()
	due := now.Add(p.timeout - p.waited)
	if p.h2 {
		p.watch.begin(now, due)
	} else if p.d.at.Before(due) {
		p.mu.Lock()
		if !p.done {
			p.d.cover(due, p.timeout/deadlineSlackDiv)
		}
		p.mu.Unlock()
	}
	return now
}

// after accounts a read that started at t0 and returned n bytes and err.
func (p *bodyProgress) after(t0 time.Time, n int, err error) {
	if p.h2 {
		p.watch.end()
	}
	if err == io.EOF {
		// Nothing more to wait for (net/http cleared a connection's read deadline).
		p.eof = true
		return
	}
	p.bytes += int64(n)
	p.waited += time.Since(t0)
	if p.bytes >= bodyProgressBytes {
		p.bytes, p.waited = 0, 0 // the next window starts
	}
}

// expired reports whether the current window's time is used up (after has accounted
// the read that just failed).
func (p *bodyProgress) expired() bool { return p.waited >= p.timeout }

// finish ends the deadline calls: the handler is about to return.
func (p *bodyProgress) finish() {
	p.mu.Lock()
	p.done = true
	p.mu.Unlock()
	if p.h2 {
		p.watch.stop()
	}
}

// sendProgress enforces ClientSendTimeout on the relay's writes to the client, on the
// handler's goroutine; zero, it does nothing. On HTTP/2 a write that is followed by more
// is timed by a streamWatch (made at the first such write); the stream's own deadline is
// set for the last write, and for what is still buffered when the handler returns.
type sendProgress struct {
	d       clientDeadline
	h2      bool
	watch   *streamWatch
	timeout time.Duration
}

func (p *sendProgress) init(dl deadlineSetter, h2 bool, timeout time.Duration) {
	p.d = clientDeadline{dl: dl, write: true}
	p.h2 = h2
	p.timeout = timeout
}

// before makes sure a write starting now fails if it has not completed within the
// timeout; last says whether more writes may follow.
func (p *sendProgress) before(last bool) {
	if p.d.dl == nil {
		return
	}
	now := time.Now()
	if p.h2 && !last {
		if p.watch == nil {
			p.watch = &streamWatch{d: p.d}
		}
		p.watch.begin(now, now.Add(p.timeout))
		return
	}
	p.d.cover(now.Add(p.timeout), p.timeout/deadlineSlackDiv)
}

// after ends a write begun with before(false).
func (p *sendProgress) after() {
	if p.watch != nil {
		p.watch.end()
	}
}

// finish covers what the server writes after the handler (buffered bytes, the end of the
// stream, trailers) when wrote, and ends the watch.
func (p *sendProgress) finish(wrote bool) {
	if p.d.dl == nil {
		return
	}
	if wrote {
		p.d.cover(time.Now().Add(p.timeout), p.timeout/deadlineSlackDiv)
	}
	if p.watch != nil {
		p.watch.stop()
	}
}
