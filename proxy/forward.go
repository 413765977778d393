package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/serve-zone/ingress/proxy/internal/upstream"
	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2/hpack"
)

// trackedBody is net/http's request body as the uploader reads it (httpBody): it counts
// what was read, stops at the request's length without touching net/http's body again,
// records whether reading failed (a client fault, not a backend failure) and, once forward
// has set up progress, enforces Config.ClientBodyTimeout.
type trackedBody struct {
	rc     io.Reader
	limit  int64 // the request's Content-Length; > 0
	n      atomic.Int64
	failed atomic.Bool
	// ended: the body was read to its end (no read of it is pending or will be, but
	// readEnd's while it is held, when nothing stops it).
	ended atomic.Bool
	// timedOut: the body stalled (ClientBodyTimeout); failed is set too.
	timedOut atomic.Bool
	progress bodyProgress
	// checkEnd: the body is being held (holdBody), before any target saw the request:
	// at Content-Length the client's body is read once more, for its end (readEnd).
	checkEnd bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	// At Content-Length the body is whole: EOF without touching the server's body.
	// http.Transport reads once more after the last byte to see EOF; should the target
	// have answered by then, net/http's server may already have closed the body (it
	// does when the response head is written), and that read's error made the transport
	// drop the connection under a response still being relayed.
	left := b.limit - b.n.Load()
	if left <= 0 {
		if b.checkEnd {
			return b.readEnd()
		}
		b.ended.Store(true)
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
	if err == io.EOF || int64(n) == left {
		b.ended.Store(true) // no read of the client's body is pending or will be
	}
	if h3TooMuchData(err) {
		err = errBodyTooLong
	}
	return n, b.readDone(t0, n, err)
}

// errBodyTooLong: a body went on past its Content-Length.
var errBodyTooLong = errors.New("proxy: request body longer than its Content-Length")

// readEnd reads the client's body once more at its Content-Length, while it is held
// (checkEnd): the end of the body, or what says it is longer than stated. quic-go checks
// an HTTP/3 body's DATA against its content-length only when it is read (a longer one
// fails the read and resets the stream with H3_MESSAGE_ERROR, RFC 9114 §4.1.2); net/http's
// HTTP/1.1 body ends at its length; an HTTP/2 body ends with its stream. A read that
// brings no byte and no end (an HTTP/3 trailer section, an empty DATA frame) is
// repeated, under ClientBodyTimeout's rule.
func (b *trackedBody) readEnd() (int, error) {
	var one [1]byte
	for {
		var t0 time.Time
		if b.progress.on() {
			t0 = b.progress.before()
		}
		n, err := b.rc.Read(one[:])
		switch {
		case n > 0:
			b.n.Add(int64(n))
			err = errBodyTooLong
		case h3TooMuchData(err):
			err = errBodyTooLong // not the client's going away, though the stream's context ends
		case err == io.EOF:
			b.ended.Store(true)
		}
		if err = b.readDone(t0, 0, err); err != nil {
			return 0, err
		}
	}
}

// readDone accounts a read of the client's body that started at t0 (zero: untimed) and
// brought n bytes and err, which it returns.
func (b *trackedBody) readDone(t0 time.Time, n int, err error) error {
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
	return err
}

func (b *trackedBody) Close() error { return nil }

// The forward of net/http's front-ends (HTTP/1.1 hand-offs, HTTP/3, and net/http's HTTP/2
// server where tests use it as the oracle): the request goes to a target by the same
// exchange as the own front-ends' (appendHead, Server.exchange, the uploader for its
// body) and the answer comes back through the same relay (relay.go) into httpSink, the
// response writer as an answerSink.

// forward sends r to one of the route's targets and relays the answer. A connect failure
// marks the target down and tries another target not yet tried, as long as no body byte
// was taken from the client; nothing else is retried.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, rs *reqState) {
	fw := h2Works.Get().(*h2Work)
	defer fw.release()
	target, err := httpTarget(fw.target[:0], r)
	if err != nil {
		rs.err = err
		s.answer(w, rs, outcomeBadRequest)
		return
	}
	fw.target = target
	te := removeHopByHop(r.Header)
	fw.hf = appendHeaderFields(fw.hf[:0], r.Header)
	if !validFields(fw.hf) {
		// Written into an HTTP/1.1 head as they are: a name that is no token or a value
		// with a line end would be another field, or another request, at the target.
		rs.err = errBadField
		s.answer(w, rs, outcomeBadRequest)
		return
	}
	hasBody := r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
	var body io.Reader = r.Body
	if hasBody && r.ContentLength < 0 && methodUsuallyLacksBody(r.Method) {
		body, hasBody = probeBody(r, deadlinesOf(w))
	}
	if hasBody && len(r.Trailer) > 0 {
		fw.hf = append(fw.hf, hpack.HeaderField{Name: "Trailer", Value: trailerNames(r.Trailer)})
	}
	fw.lf.fields = fw.hf
	fw.lf.classify(fw.kinds[:])
	ip := clientIP(r.RemoteAddr)
	h := outHead{
		method: r.Method, target: unsafe.String(unsafe.SliceData(target), len(target)), host: r.Host,
		body: hasBody, length: r.ContentLength, trailers: hasBody,
		zeroLength: !hasBody && (r.Method == http.MethodPost || r.Method == http.MethodPut || r.Method == http.MethodPatch),
		te:         te,
		fwd:        forwardedFor{clientIP: ip, host: r.Host, https: rs.secure, trusted: s.isTrusted(ip)},
	}
	b, plan := appendHead(fw.wb[:0], &fw.lf, &h)
	fw.wb = b
	fw.lf = listFields{}

	var up *uploader
	dl := deadlinesOf(w)
	if hasBody {
		tb := &fw.tb
		*tb = trackedBody{rc: body, limit: r.ContentLength}
		if tb.limit < 0 {
			tb.limit = math.MaxInt64 // chunked, or HTTP/2 and HTTP/3 without a length: to EOF
		}
		if dl != nil {
			tb.progress.init(dl, r.ProtoMajor == 2, s.cfg.ClientBodyTimeout)
		}
		fw.hb = httpBody{tb: tb, r: r, dl: dl}
		up = &fw.body
		*up = uploader{src: &fw.hb, chunked: plan.chunked, expect: plan.expect, length: r.ContentLength}
		// The upload may read the body until the exchange is over, and not after the
		// handler has returned.
		defer tb.progress.finish()
	}
	if hasBody && !rs.h1 {
		// What was taken of the body counts, whatever the exchange came to.
		defer func() { rs.in += fw.tb.n.Load() }()
	}
	fw.tb.checkEnd = hasBody && r.ContentLength > 0
	o, failed := s.holdBody(up)
	fw.tb.checkEnd = false // from here on, Content-Length is the body's end (Read)
	if failed {
		// The body failed before any target saw the request (bodybuf.go).
		rs.err = up.clientErr
		s.unanswered(w, r, rs, o)
		return
	}
	keyed := len(r.Header["Idempotency-Key"]) > 0 || len(r.Header["X-Idempotency-Key"]) > 0
	replay := upstream.Replayable(r.Method, !up.rewindable(), keyed)
	walk := newWalk(s, rs.entry)
	for {
		tgt := walk.next()
		if tgt == nil {
			s.answer(w, rs, walk.last)
			return
		}
		rs.backend = tgt
		uc, err := s.exchange(&fw.upWork, attempt{route: rs.entry, addr: tgt.Addr, watch: reqWatch{r}, replayable: replay, up: up})
		if err == nil {
			walk.took()
			rs.err = nil
			s.relayHTTP(w, r, rs, fw, uc, up)
			up.end(uc) // an upload the answer did not wait for ends with it
			walk.done()
			return
		}
		rs.err = err
		o, client := up.outcome()
		if !client {
			o = classifyUpstream(err)
			if r.Context().Err() != nil {
				o = outcomeClientGone
			}
		}
		if walk.missed(o, err, !up.taken()) {
			continue
		}
		s.unanswered(w, r, rs, o)
		return
	}
}

// unanswered answers o to a request that failed without an answer from its target.
func (s *Server) unanswered(w http.ResponseWriter, r *http.Request, rs *reqState, o outcome) {
	switch {
	case o == outcomeClientGone:
		// Nothing to say, and never net/http's default 200 for a handler that wrote
		// nothing: should the client still listen, its connection or stream ends.
		rs.abort = true
		return
	case (o == outcomeClientBody || o == outcomeBodyTimeout) && r.ProtoMajor == 1:
		// The rest of the body, if any, cannot be told from a next request.
		w.Header()["Connection"] = valClose
	}
	s.answer(w, rs, o)
}

// methodUsuallyLacksBody reports a method whose requests rarely have content (Go's
// transport probes the body of exactly these).
func methodUsuallyLacksBody(m string) bool {
	switch m {
	case "GET", "HEAD", "DELETE", "OPTIONS", "PROPFIND", "SEARCH":
		return true
	}
	return false
}

// bodyProbeWait is how long probeBody waits for a body's first byte (Go's transport
// waits 200 ms).
const bodyProbeWait = 200 * time.Millisecond

// probeBody finds out whether a request of unknown length (HTTP/3 without content-length,
// HTTP/1.1 chunked) whose method usually has no content has any: an HTTP/3 GET ends its
// stream with its HEADERS, and then its body is at EOF at once. A request that has none
// goes to its target without one (no chunked GET), and may be sent again like any GET.
// A first byte, or no answer within bodyProbeWait, means a body: the byte read is given
// back in front of the rest.
func probeBody(r *http.Request, dl deadlineSetter) (io.Reader, bool) {
	if dl != nil {
		_ = dl.SetReadDeadline(time.Now().Add(bodyProbeWait))
	}
	var one [1]byte
	n, err := r.Body.Read(one[:])
	if dl != nil {
		_ = dl.SetReadDeadline(time.Time{})
	}
	switch {
	case n == 0 && err == io.EOF:
		return nil, false
	case n > 0:
		return io.MultiReader(bytes.NewReader(one[:n:n]), r.Body), true
	}
	return r.Body, true // no byte in time (or a failure the upload will meet again)
}

// relayHTTP relays the target's answer (fw.res, its body from uc) to w (relay.go,
// httpSink).
func (s *Server) relayHTTP(w http.ResponseWriter, r *http.Request, rs *reqState, fw *h2Work, uc *upstream.Conn, up *uploader) {
	k := &fw.sink
	*k = httpSink{w: w, r: r, list: k.list[:0]}
	if dl := deadlinesOf(w); dl != nil {
		k.sp.init(dl, r.ProtoMajor == 2, s.cfg.ClientSendTimeout)
	}
	rl := relay{s: s, sink: k, rec: rs.exchangeRecord, up: up, w: &fw.upWork, uc: uc,
		head: r.Method == http.MethodHead, altSvc: rs.altSvc}
	rl.run()
	rs.exchangeRecord = rl.rec
	rs.abort = rs.abort || k.cutOff
	k.sp.finish(k.wrote && !rs.abort && rs.status != 0)
	if rs.status == 0 {
		rs.abort = true // the client left or stalled: nothing more to say to it
	}
	list := k.list
	clear(list[:cap(list)])
	*k = httpSink{list: list[:0]}
}

// httpTarget appends the request-target r goes to its target with: the path re-escaped
// where needed, the query as it came on HTTP/1.1 and with the bytes a query may not hold
// percent-encoded on HTTP/2 and HTTP/3 (appendTarget), the origin form of an absolute
// one.
func httpTarget(b []byte, r *http.Request) ([]byte, error) {
	uri := r.RequestURI
	if uri == "" || uri[0] != '/' && uri != "*" {
		uri = r.URL.RequestURI()
	}
	return appendTargetQuery(b, uri, r.ProtoMajor < 2)
}

// appendHeaderFields flattens a net/http header (hop-by-hop fields and those its
// Connection names already removed) into decoded fields for appendHead.
func appendHeaderFields(fields []hpack.HeaderField, h http.Header) []hpack.HeaderField {
	for k, vv := range h {
		for _, v := range vv {
			fields = append(fields, hpack.HeaderField{Name: k, Value: v})
		}
	}
	return fields
}

// trailerNames is the Trailer field for the trailers a request announced (names that are
// tokens; appendHead then keeps those a trailer may carry).
func trailerNames(tr http.Header) string {
	keys := make([]string, 0, len(tr))
	for k := range tr {
		if httpguts.ValidHeaderFieldName(k) {
			keys = append(keys, k)
		}
	}
	return strings.Join(keys, ", ")
}

// errBadField is the access log's reason for a request refused for a field no HTTP/1.1
// head may carry.
var errBadField = errors.New("proxy: a header field name or value no HTTP/1.1 head may carry")

// validFields reports whether every field may go into an HTTP/1.1 head as it is: a token
// for a name, a value without control bytes (but HTAB). net/http's HTTP/1.1 server checks
// this already; the check covers HTTP/3's decoded fields the same way.
func validFields(fields []hpack.HeaderField) bool {
	for i := range fields {
		if !httpguts.ValidHeaderFieldName(fields[i].Name) || !httpguts.ValidHeaderFieldValue(fields[i].Value) {
			return false
		}
	}
	return true
}

// httpBody is net/http's request body as a bodySource, read through its trackedBody
// (ClientBodyTimeout, what was taken).
type httpBody struct {
	tb *trackedBody
	r  *http.Request
	dl deadlineSetter // nil when the writer has none
}

func (b *httpBody) Read(p []byte) (int, error) { return b.tb.Read(p) }

// stop fails the read in progress: its deadline is set in the past once the progress
// deadlines are done with.
//
// Once the body was read to its end no read is pending, and none may fail: net/http's
// HTTP/1.1 server then reads the connection in the background, and a deadline in the past
// would end that read and cancel every later request's context on the connection.
func (b *httpBody) stop() {
	b.tb.progress.finish()
	if b.dl != nil && !b.tb.ended.Load() {
		_ = b.dl.SetReadDeadline(longAgo)
	}
}

func (b *httpBody) trailers() []hpack.HeaderField {
	var tr []hpack.HeaderField
	for k, vv := range b.r.Trailer {
		for _, v := range vv {
			if f := (hpack.HeaderField{Name: k, Value: v}); validFields([]hpack.HeaderField{f}) {
				tr = append(tr, f) // one that is not valid is left out, as a field the target may not see
			}
		}
	}
	return tr
}

func (b *httpBody) failure(err error) outcome {
	switch {
	case errors.Is(err, errBodyTooLong):
		return outcomeClientBody
	case b.tb.timedOut.Load():
		return outcomeBodyTimeout
	case b.r.Context().Err() != nil || errors.Is(err, context.Canceled):
		return outcomeClientGone
	}
	return outcomeClientBody
}

// httpSink is net/http's response writer as the relay's answerSink. Each write must
// complete within ClientSendTimeout (sendProgress); an answer of unknown length or an
// event stream is flushed at every write, so that it flows.
type httpSink struct {
	w      http.ResponseWriter
	r      *http.Request
	cutOff bool // cut: the response is aborted after its accounting
	sp     sendProgress
	list   []hpack.HeaderField // fields' list, reused
	fl     http.Flusher
	flush  bool
	wrote  bool
}

func (k *httpSink) fields(n int) []hpack.HeaderField {
	if cap(k.list) < n {
		k.list = make([]hpack.HeaderField, 0, n)
	}
	return k.list[:0]
}

func (k *httpSink) context() context.Context { return k.r.Context() }

func (k *httpSink) head(status int, fields []hpack.HeaderField, body []byte, end bool) error {
	dst := k.w.Header()
	delete(dst, "Alt-Svc") // set by ServeHTTP; the relay's fields carry it
	hasLength := false
	// The values' one backing array is the answer's own: a writer may serialise the
	// header only when the handler returns, after the work area went back to its pool.
	vals := make([]string, 0, len(fields))
	for _, f := range fields {
		key := canonicalName(f.Name)
		switch key {
		case "Content-Length":
			hasLength = true
		case "Content-Type":
			k.flush = isEventStreamValue(f.Value)
		}
		if prior := dst[key]; len(prior) > 0 {
			dst[key] = append(prior, f.Value) // a repeated field (Set-Cookie): its own array
			continue
		}
		vals = append(vals, f.Value)
		dst[key] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	k.fl, _ = k.w.(http.Flusher)
	if _, ok := dst["Content-Type"]; !ok {
		// Present without a value: net/http then guesses no type for a body the target
		// sent untyped (a proxy relays, it does not sniff), and writes no field.
		dst["Content-Type"] = nil
	}
	k.flush = k.flush || !hasLength
	k.w.WriteHeader(status)
	if len(body) == 0 {
		if !end && k.flush {
			return k.doFlush()
		}
		return nil
	}
	return k.write(body, end)
}

func (k *httpSink) data(b []byte) error { return k.write(b, false) }

func (k *httpSink) write(b []byte, last bool) error {
	k.sp.before(last)
	_, err := k.w.Write(b)
	if err == nil && k.flush {
		err = k.doFlush()
	}
	k.sp.after()
	if err == nil {
		k.wrote = true
	}
	return err
}

func (k *httpSink) doFlush() error {
	if k.fl != nil {
		k.fl.Flush()
	}
	return nil
}

func (k *httpSink) end(trailers []hpack.HeaderField) error {
	dst := k.w.Header()
	for _, f := range trailers {
		key := http.TrailerPrefix + canonicalName(f.Name)
		dst[key] = append(dst[key], f.Value)
	}
	return nil
}

// cut aborts the response after its accounting (ServeHTTP panics with
// http.ErrAbortHandler), so that the client never takes the truncated body for whole.
func (k *httpSink) cut() { k.cutOff = true }

// canonicalName is a lower-case field name in net/http's canonical form, without
// allocating for the common ones.
func canonicalName(lower string) string {
	if v, ok := canonicalNames[lower]; ok {
		return v
	}
	return http.CanonicalHeaderKey(lower)
}

var canonicalNames = func() map[string]string {
	m := make(map[string]string, len(lowerNames))
	for k, v := range lowerNames {
		m[v] = k
	}
	return m
}()

func isEventStreamValue(ct string) bool {
	return len(ct) >= len("text/event-stream") && strings.EqualFold(ct[:len("text/event-stream")], "text/event-stream")
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
