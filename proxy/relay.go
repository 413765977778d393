package proxy

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"go.uber.org/zap"
	"golang.org/x/net/http2/hpack"

	"github.com/serve-zone/ingress/internal/ascii"
	"github.com/serve-zone/ingress/proxy/internal/h1wire"
	"github.com/serve-zone/ingress/proxy/internal/upstream"
	"github.com/serve-zone/ingress/routetable"
)

// The answer relay of the front-ends that carry fields as a list (the own HTTP/2 engine,
// net/http's writer for HTTP/3 and hand-offs): a target's answer, its head parsed by
// h1wire into an exchange's work area and its body read from the target connection,
// goes to an answerSink, the client's side in its front-end's wire. Which fields go on,
// the content-length rule (304 and 204 included), Alt-Svc and Date, 502 for an answer
// broken before its head went out, a reset for one broken after, trailers, the byte
// accounting and the return of the target connection to its pool are decided here,
// once. (The HTTP/1.1 fast path relays bytes as they came, chunked coding included:
// h1forward.go.)

// answerSink is the client's side of a relayed answer.
type answerSink interface {
	// head writes the answer's head, fields with lower-case names (a list from
	// fields), with its first body bytes; end says nothing follows.
	head(status int, fields []hpack.HeaderField, body []byte, end bool) error
	// data writes body bytes.
	data(b []byte) error
	// end ends the body with trailers (nil: none).
	end(trailers []hpack.HeaderField) error
	// cut breaks the answer off so that the client never takes it for whole.
	cut()
	// fields returns an empty field list with room for n (the sink may reuse one).
	fields(n int) []hpack.HeaderField
	// context is done once the client went away.
	context() context.Context
}

// exchangeRecord is what one forwarded request left for its accounting and access log,
// whatever the front-end.
type exchangeRecord struct {
	entry   *routetable.Entry
	backend *routetable.Backend // the target tried last; nil when none was
	status  int                 // 0: the client went away (499)
	in, out int64               // decoded fields plus body bytes (accounting.go's HTTP/2 rule)
	err     error               // why the request failed; nil when it did not
}

func (rec *exchangeRecord) hostname() string {
	if rec.entry == nil {
		return ""
	}
	return rec.entry.Hostname
}

// answerBody frames a target's answer body as it is read, for both relays: what of the
// bytes read belongs to the body (and goes to the client: de-chunked for the sinks, the
// chunks as they came for the HTTP/1.1 fast path), and when it ends.
type answerBody struct {
	frame     int   // responseFraming's
	remaining int64 // frameLength: bytes still due
	sc        h1wire.ChunkScanner
	decode    bool // frameChunked: pass the data on without the chunked coding
	clean     bool // nothing came beyond the body so far: the connection may be kept
}

func newAnswerBody(frame int, length int64, decode bool) answerBody {
	return answerBody{frame: frame, remaining: length, decode: decode, clean: true}
}

// take frames p, bytes just read: the part of it that goes to the client, and whether
// the body ended with it. A close-delimited body ends at EOF, which take does not see.
func (b *answerBody) take(p []byte) (out []byte, done bool, err error) {
	switch b.frame {
	case frameLength:
		var clean bool
		p, b.remaining, clean = takeLength(p, b.remaining)
		b.clean = b.clean && clean
		return p, b.remaining == 0, nil
	case frameChunked:
		var n, d int
		var fin bool
		if b.decode {
			n, d, fin, err = b.sc.Decode(p)
		} else {
			n, fin, err = b.sc.Scan(p)
			d = n
		}
		if err != nil {
			return nil, false, err
		}
		b.clean = b.clean && (!fin || n == len(p))
		return p[:d], fin, nil
	}
	return p, false, nil
}

// relay is one answer's relay; it lives on the forwarding goroutine's stack.
type relay struct {
	s      *Server
	sink   answerSink
	rec    exchangeRecord // the request's, copied in and out (pointers in a relay leak to its sink)
	up     *uploader      // the request body's, if any: it must end before uc is pooled
	w      *upWork
	uc     *upstream.Conn
	head   bool // the request was HEAD
	altSvc bool // the answer announces HTTP/3 (TLS on TCP with HTTP/3 on)
}

// relayList relays the target's answer (p.w's head, its body from uc) into p's sink.
func (s *Server) relayList(p *pipe, uc *upstream.Conn) {
	r := relay{s: s, sink: p.sink, rec: p.exchangeRecord, up: p.up, w: p.w, uc: uc, head: p.head, altSvc: p.altSvc}
	r.run()
	p.exchangeRecord = r.rec
}

// run writes the target's answer (w.res, its head in w.up) to the sink and relays its
// body, then hands uc back to its pool when the exchange ended cleanly.
func (r *relay) run() {
	w, uc, res := r.w, r.uc, &r.w.res
	frame, keepUp := responseFraming(res, r.head)
	fields := r.fields(res, frame)
	r.rec.out += headBytes(fields)
	r.rec.status = res.Status

	buf := w.up[h1Headroom:]
	got := buf[w.resHead:w.filled] // body bytes that came with the head
	switch frame {
	case frameNone:
		r.whole(res.Status, fields, nil, keepUp && len(got) == 0)
		return
	case frameLength:
		if res.ContentLength > int64(len(got)) && res.ContentLength <= int64(len(buf)) {
			// A body that fits the buffer is read whole before the head goes out, so
			// that head and body leave together and a broken one becomes a 502.
			copy(buf, got)
			n := len(got)
			stop := context.AfterFunc(r.sink.context(), uc.Abort()) // a client that leaves stops the wait
			_ = uc.SetReadDeadline(time.Time{})
			for int64(n) < res.ContentLength {
				k, err := uc.Read(buf[n:])
				n += k
				if err != nil && int64(n) < res.ContentLength {
					stop()
					uc.Close()
					r.badAnswer(err)
					return
				}
			}
			stop()
			got = buf[:n]
		}
		k := min(int64(len(got)), res.ContentLength)
		keepUp = keepUp && int64(len(got)) <= res.ContentLength
		if k == res.ContentLength {
			r.rec.out += k
			r.whole(res.Status, fields, got[:k], keepUp)
			return
		}
		if err := r.sink.head(res.Status, fields, got, false); err != nil {
			uc.Close()
			r.clientStopped(err)
			return
		}
		r.rec.out += int64(len(got))
		ab := newAnswerBody(frame, res.ContentLength-int64(len(got)), true)
		ab.clean = keepUp // a Connection: close (or bytes beyond the body) is kept in mind
		r.rest(&ab)
	case frameChunked:
		ab := newAnswerBody(frame, 0, true)
		first, fin, err := ab.take(got)
		if err != nil {
			uc.Close()
			r.badAnswer(err)
			return
		}
		if fin && len(ab.sc.Trailer) == 0 {
			r.rec.out += int64(len(first))
			r.whole(res.Status, fields, first, keepUp && ab.clean)
			return
		}
		if err := r.sink.head(res.Status, fields, first, false); err != nil {
			uc.Close()
			r.clientStopped(err)
			return
		}
		r.rec.out += int64(len(first))
		if fin {
			r.endChunked(&ab.sc, keepUp && ab.clean)
			return
		}
		ab.clean = ab.clean && keepUp
		r.rest(&ab)
	default: // frameClose
		if err := r.sink.head(res.Status, fields, got, false); err != nil {
			uc.Close()
			r.clientStopped(err)
			return
		}
		r.rec.out += int64(len(got))
		ab := newAnswerBody(frame, 0, true)
		r.rest(&ab)
	}
}

// rest relays the body after the first bytes, as it comes (event streams flow): a
// length's remaining bytes, chunks or everything until the target closes (ab frames
// it). A client that goes away closes the target connection at once.
func (r *relay) rest(ab *answerBody) {
	uc := r.uc
	stop := context.AfterFunc(r.sink.context(), uc.Abort())
	defer stop()
	_ = uc.SetReadDeadline(time.Time{})
	buf := r.w.up[h1Headroom:]
	for {
		nr, rerr := uc.Read(buf)
		if nr > 0 {
			chunk, done, err := ab.take(buf[:nr])
			if err != nil {
				r.brokenBody(err)
				return
			}
			if len(chunk) > 0 {
				if err := r.sink.data(chunk); err != nil {
					uc.Close()
					r.clientStopped(err)
					return
				}
				r.rec.out += int64(len(chunk))
			}
			if done {
				// From here the client's going away no longer closes uc: it may be
				// back in its pool, another exchange's. An abort already begun keeps
				// it out.
				keep := stop() && ab.clean
				if ab.frame == frameChunked {
					r.endChunked(&ab.sc, keep)
					return
				}
				first := r.putFirst(keep)
				if err := r.sink.end(nil); err != nil {
					r.clientStopped(err)
				}
				if !first {
					r.put(keep)
				}
				return
			}
		}
		if rerr != nil {
			if ab.frame == frameClose && rerr == io.EOF {
				uc.Close()
				if err := r.sink.end(nil); err != nil {
					r.clientStopped(err)
				}
				return
			}
			r.brokenBody(rerr)
			return
		}
	}
}

// endChunked ends a chunked body: its trailers (fields that may be trailers) then the
// end.
func (r *relay) endChunked(sc *h1wire.ChunkScanner, keepUp bool) {
	var tr []hpack.HeaderField
	if len(sc.Trailer) > 0 {
		arena := make([]byte, 0, len(sc.Trailer))
		h1wire.EachTrailer(sc.Trailer, func(name, value []byte) {
			if h1wire.IsHopByHop(name) || h1wire.RequestFieldKind(name) != h1wire.KindOther {
				return // connection-specific or framing: not a field a trailer may carry
			}
			at := len(arena)
			arena = ascii.AppendLower(arena, name)
			n := unsafe.String(&arena[at], len(name))
			at = len(arena)
			arena = append(arena, value...)
			tr = append(tr, hpack.HeaderField{Name: n, Value: unsafe.String(unsafe.SliceData(arena[at:]), len(value))})
			r.rec.out += int64(len(name) + len(value))
		})
	}
	first := r.putFirst(keepUp)
	if err := r.sink.end(tr); err != nil {
		r.clientStopped(err)
	}
	if !first {
		r.put(keepUp)
	}
}

// whole writes an answer read whole from the target (body may be nil) and hands uc
// back to its pool (kept when keep), first when it may (putFirst).
func (r *relay) whole(status int, fields []hpack.HeaderField, body []byte, keep bool) {
	first := r.putFirst(keep)
	if err := r.sink.head(status, fields, body, true); err != nil {
		r.clientStopped(err)
	}
	if !first {
		r.put(keep)
	}
}

// putFirst hands uc back to its pool (kept when keep) before the write that ends the
// answer, and reports that it did, when the request's body has gone out or its end is
// being written (or it has none): a client that sends its next request as soon as it
// has the answer finds the connection in the pool instead of dialling another (put
// waits at most lastWriteWait for that last write, which the target that answered has
// normally taken). With the client's body still coming it does nothing: the answer
// goes out first, and put then stops the upload.
func (r *relay) putFirst(keep bool) bool {
	if !r.up.bodyOut() {
		return false
	}
	r.put(keep)
	return true
}

// put ends the exchange on uc: the connection goes back to its pool when keep says the
// answer ended cleanly and the request's body, if any, went out whole (an upload the
// answer did not wait for is stopped first).
func (r *relay) put(keep bool) {
	if r.up != nil && !r.up.end(r.uc) {
		keep = false
	}
	r.s.up.Put(r.uc, keep, r.s.up.now())
}

// badAnswer answers 502 for an answer that broke before anything of it reached the
// client (or nothing, to a client that went away).
func (r *relay) badAnswer(err error) {
	r.rec.out = 0
	if r.sink.context().Err() != nil {
		r.rec.status, r.rec.err = 0, errClientGone
		return
	}
	r.rec.err = err
	r.s.failed(outcomeRequest, r.rec.entry, r.rec.backend, err)
	r.s.writeFixed(r.sink, &r.rec, outcomeRequest, r.head, r.altSvc)
}

// brokenBody ends an answer whose body the target broke off: a request failure, and the
// answer is cut so that the client never takes the truncated body for whole. A client
// that went away closed the target connection itself: that is the client leaving (499),
// whatever the read then said.
func (r *relay) brokenBody(err error) {
	r.uc.Close()
	if r.sink.context().Err() != nil {
		r.rec.status, r.rec.err = 0, errClientGone
		return
	}
	r.rec.err = err
	r.s.failed(outcomeRequest, r.rec.entry, r.rec.backend, err)
	r.sink.cut()
}

// clientStopped records an answer the client did not take (it reset the stream, its
// window stayed shut, or the connection went): 499, not a backend failure.
func (r *relay) clientStopped(err error) {
	r.rec.status = outcomeClientStalled.status()
	r.rec.err = err
	r.s.log.Debug("response cut", zap.String("host", r.rec.hostname()), zap.Error(err))
}

// fields is the answer's head for the client: the target's fields without hop-by-hop
// and framing ones, names in lower case, copied into one allocation (an HTTP/2 writer
// encodes them after the work area is reused, and its HPACK table may keep them);
// content-length from the target's framing; trailer when the chunked body may carry
// trailers; Date and Alt-Svc.
func (r *relay) fields(res *h1wire.Response, frame int) []hpack.HeaderField {
	head := res.Head
	n, size := 2, 40
	for i := range res.Fields {
		f := &res.Fields[i]
		n++
		size += int(f.VE - f.NS)
	}
	fields := r.sink.fields(n + 2)
	arena := make([]byte, 0, size)
	str := func(at int) string { return unsafe.String(&arena[at], len(arena)-at) }
	for i := range res.Fields {
		f := &res.Fields[i]
		if !answerFieldGoesOn(f.Kind, r.altSvc) {
			continue
		}
		value := f.Value(head)
		at := len(arena)
		arena = ascii.AppendLower(arena, f.Name(head))
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
	return r.s.commonFields(fields, res.HasDate, r.altSvc)
}

// commonFields appends what every answer carries besides its own fields
// (commonValues), as fields.
func (s *Server) commonFields(fields []hpack.HeaderField, hasDate, altSvc bool) []hpack.HeaderField {
	date, alt := s.commonValues(time.Now(), hasDate, altSvc)
	if date != "" {
		fields = append(fields, hpack.HeaderField{Name: "date", Value: date})
	}
	if alt != "" {
		fields = append(fields, hpack.HeaderField{Name: "alt-svc", Value: alt})
	}
	return fields
}

// commonValues is what every answer carries besides its own fields, for every
// front-end: Date at now unless the target sent one, and Alt-Svc when HTTP/3 is
// announced; "" for the one it does not carry.
func (s *Server) commonValues(now time.Time, hasDate, altSvc bool) (date, alt string) {
	if !hasDate {
		date = dateString(now)
	}
	if altSvc {
		alt = s.h3.altSvc[0]
	}
	return date, alt
}

// dateString is the Date value for now, made once per second (the one cache of it).
func dateString(now time.Time) string {
	sec := now.Unix()
	if d := dateStrings.Load(); d != nil && d.sec == sec {
		return d.s
	}
	d := &dateStr{sec: sec, s: now.UTC().Format(http.TimeFormat)}
	dateStrings.Store(d)
	return d.s
}

type dateStr struct {
	sec int64
	s   string
}

var dateStrings atomic.Pointer[dateStr]

// answerFieldGoesOn is the one rule for a target's answer fields, on both relays: hop-by-hop
// and framing fields stay behind (the framing is written from what is relayed; Trailer,
// which announces a chunked body's trailers, goes on: h1wire classifies it so), and so
// does the target's Alt-Svc when the ingress announces its own HTTP/3 (it is the origin
// the client talks to).
func answerFieldGoesOn(kind uint8, altSvc bool) bool {
	switch kind {
	case h1wire.KindDrop, h1wire.KindConnection, h1wire.KindKeepAlive, h1wire.KindTransferEncoding, h1wire.KindContentLength:
		return false
	case h1wire.KindAltSvc:
		return !altSvc
	}
	return true
}

// writeRedirect writes the 308 to HTTPS (appendLocation, errors.go) for host and target
// to sink, and records it.
func (s *Server) writeRedirect(sink answerSink, rec *exchangeRecord, host, target string, altSvc bool) {
	fields := append(sink.fields(4),
		hpack.HeaderField{Name: "location", Value: string(appendLocation(nil, host, s.httpsPort, target))},
		hpack.HeaderField{Name: "content-length", Value: "0"})
	fields = s.commonFields(fields, false, altSvc)
	rec.status = http.StatusPermanentRedirect
	rec.out += headBytes(fields)
	_ = sink.head(http.StatusPermanentRedirect, fields, nil, true)
}

// writeFixed writes o's fixed answer (fixedAnswers, errors.go) to sink, without its body
// for a HEAD request, and records it.
func (s *Server) writeFixed(sink answerSink, rec *exchangeRecord, o outcome, head, altSvc bool) {
	fa := fixedAnswers[o]
	fields := sink.fields(len(fa.fields) + 2)
	for _, f := range fa.fields {
		fields = append(fields, hpack.HeaderField{Name: f.lower, Value: f.val[0]})
	}
	fields = s.commonFields(fields, false, altSvc)
	body := fa.body
	if head {
		body = nil
	}
	rec.status = fa.code
	rec.out += headBytes(fields) + int64(len(body))
	_ = sink.head(fa.code, fields, body, true)
}
