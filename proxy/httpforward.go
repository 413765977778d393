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
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/quic-go/quic-go/http3"
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

// The forward of net/http's front-ends (HTTP/1.1 hand-offs, HTTP/3): the request goes to
// a target by the same pipeline as the own front-ends' (appendHead, the walk, the
// uploader for its body) and the answer comes back through the same relay (relay.go)
// into httpSink, the response writer as an answerSink.

// forwardHead writes the outgoing head (writeHead) of net/http's request: its target
// (httpTarget), its header without hop-by-hop fields and those its Connection names
// (removeHopByHop; a field no HTTP/1.1 head may carry refuses it: errBadField), the body
// framed as it will be sent. A request with a body gets an uploader (x.body) that reads
// it through a trackedBody.
func (x *httpWork) forwardHead() (*uploader, error) {
	p, r, h := &x.p, x.r, &x.p.oh
	target, err := httpTarget(x.target[:0], r)
	if err != nil {
		return nil, err
	}
	x.target = target
	te := removeHopByHop(r.Header)
	x.hf = appendHeaderFields(x.hf[:0], r.Header)
	if !validFields(x.hf) {
		// Written into an HTTP/1.1 head as they are: a name that is no token or a value
		// with a line end would be another field, or another request, at the target.
		return nil, errBadField
	}
	hasBody := r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
	var body io.Reader = r.Body
	dl := deadlinesOf(x.w)
	if hasBody && r.ContentLength < 0 && methodUsuallyLacksBody(r.Method) {
		body, hasBody = probeBody(r, dl)
	}
	if hasBody && len(r.Trailer) > 0 {
		x.hf = append(x.hf, hpack.HeaderField{Name: "Trailer", Value: trailerNames(r.Trailer)})
	}
	x.lf.fields = x.hf
	x.lf.classify(x.kinds[:])
	h.target = unsafe.String(unsafe.SliceData(target), len(target))
	h.body, h.length, h.trailers = hasBody, r.ContentLength, hasBody
	h.zeroLength = !hasBody && (r.Method == http.MethodPost || r.Method == http.MethodPut || r.Method == http.MethodPatch)
	h.te = te
	plan := writeHead(p, &x.lf)
	x.lf = listFields{}
	if !hasBody {
		return nil, nil
	}
	tb := &x.tb
	*tb = trackedBody{rc: body, limit: r.ContentLength}
	if tb.limit < 0 {
		tb.limit = math.MaxInt64 // chunked, or HTTP/2 and HTTP/3 without a length: to EOF
	}
	if dl != nil {
		// The upload may read the body until the exchange is over, and not after the
		// handler has returned (account ends the progress deadlines).
		tb.progress.init(dl, r.ProtoMajor == 2, p.s.cfg.ClientBodyTimeout)
	}
	x.hb = httpBody{tb: tb, r: r, dl: dl}
	up := &x.body
	*up = uploader{src: &x.hb, chunked: plan.chunked, expect: plan.expect, length: r.ContentLength}
	return up, nil
}

// tunnelHead writes the upgrade for a WebSocket request (an HTTP/1.1 Upgrade, an HTTP/3
// extended CONNECT) once its wire can carry the tunnel (errNoTakeover, errTunnelTarget):
// its header without hop-by-hop fields (a field no HTTP/1.1 head may carry refuses it:
// errBadField).
func (x *httpWork) tunnelHead() error {
	r, h := x.r, &x.p.oh
	if r.ProtoMajor == 3 {
		if !originForm(r.RequestURI) { // quic-go refuses most of these already
			return errTunnelTarget
		}
		if _, ok := x.w.(http3.HTTPStreamer); !ok {
			return errNoTakeover
		}
	} else if _, ok := x.w.(http.Hijacker); !ok {
		return errNoTakeover
	}
	te := removeHopByHop(r.Header)
	x.hf = appendHeaderFields(x.hf[:0], r.Header)
	if !validFields(x.hf) {
		return errBadField
	}
	x.lf.fields = x.hf
	x.lf.classify(x.kinds[:])
	h.target, h.te, h.newKey = r.URL.RequestURI(), te, r.ProtoMajor == 3
	writeHead(&x.p, &x.lf)
	x.lf = listFields{}
	return nil
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

// holding: while the body is held (holdBody), at its Content-Length the client's body
// is read once more, for its end (trackedBody.readEnd); after, Content-Length is its end.
func (b *httpBody) holding(on bool) { b.tb.checkEnd = on && b.r.ContentLength > 0 }

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
