package proxy

import (
	"bufio"
	"context"
	"errors"
	"github.com/serve-zone/ingress/proxy/internal/upstream"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// leanTransport is the HTTP/1.1 RoundTripper forward sends through. It exists because
// http.Transport hands every round trip to two per-connection goroutines (writeLoop and
// readLoop), which costs several goroutine wake-ups, channel operations and selects per
// request; here the whole round trip (checkout, write, response header, body) runs on the
// caller's goroutine and the connection goes back to its target's pool when the body
// reaches EOF.
//
// Framing is the standard library's: (*http.Request).Write and http.ReadResponse (so the
// wire bytes are what http.Transport would send, and response parsing keeps its request
// smuggling defences). Requests it does not handle go to fallback (the shared
// http.Transport): see lean. The pools, the replay rule, the 1xx rule and the limits are
// the upstream package's, shared with the fast path (h1forward.go).
//
// All methods are safe for concurrent use.
type leanTransport struct {
	*upstream.Pools
	fallback http.RoundTripper
	// now is the pools' clock on both HTTP/1.1 paths (idle ages at Get and Put); tests
	// move it to expire idle connections without waiting.
	now func() time.Time
}

const (
	// upMaxBody is the largest request body (with a known length) sent on the lean path.
	// The body is written completely before the response is read, which is safe only
	// while it fits in the socket buffers: a target that answers early or streams its
	// answer while reading the upload must never find us stuck in a write. Larger and
	// chunked bodies go to http.Transport, which writes and reads concurrently.
	upMaxBody  = 16 << 10
	upReadBuf  = 16 << 10
	upWriteBuf = 8 << 10
)

// newLeanTransport builds the lean round tripper. dial must mark its errors as *dialError
// (the transport's DialContext does), so that connect failures classify as today.
func newLeanTransport(cfg Config, t *http.Transport) *leanTransport {
	return &leanTransport{
		Pools:    upstream.New(upstream.DefaultLimits(cfg.ResponseHeaderTimeout), t.DialContext),
		fallback: t,
		now:      time.Now,
	}
}

// lean reports whether req goes over the lean path. Everything else goes to fallback:
// Expect (100-continue needs a concurrent writer and a timer), bodies of unknown length
// (chunked, with trailers) or larger than upMaxBody, and anything not plain http.
func lean(req *http.Request) bool {
	if req.URL.Scheme != "http" || len(req.TransferEncoding) > 0 || req.Trailer != nil {
		return false
	}
	if req.Body != nil && req.Body != http.NoBody {
		if req.ContentLength <= 0 || req.ContentLength > upMaxBody {
			return false
		}
	} else if req.ContentLength != 0 {
		return false
	}
	if _, ok := req.Header["Expect"]; ok {
		return false
	}
	return true
}

// RoundTrip sends req over a pooled or new connection to req.URL.Host. A pooled
// connection that turns out to be closed before any response byte arrived is replaced
// once by a freshly dialled one, under the rule http.Transport applies (see retryable).
func (u *leanTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !lean(req) {
		return u.fallback.RoundTrip(req)
	}
	ctx := req.Context()
	addr := req.URL.Host
	uc := u.Get(addr, u.now())
	for retried := false; ; retried = true {
		if uc == nil {
			var err error
			if uc, err = u.Dial(ctx, addr); err != nil {
				return nil, err
			}
		}
		res, err := u.exchange(ctx, uc, req)
		if err == nil {
			return res, nil
		}
		if ctx.Err() == nil && upstream.MayReplay(uc, retried, err, bodyTaken(req), replayableReq(req)) {
			uc = nil
			continue
		}
		return nil, err
	}
}

// bodyTaken reports whether bytes of req's body may have been read from the client (a
// body that is not ours to track counts as taken).
func bodyTaken(req *http.Request) bool {
	if req.Body == nil {
		return false
	}
	tb, ok := req.Body.(*trackedBody)
	return !ok || tb.started.Load()
}

// replayableReq applies upstream.Replayable to req.
func replayableReq(req *http.Request) bool {
	_, k1 := req.Header["Idempotency-Key"]
	_, k2 := req.Header["X-Idempotency-Key"]
	return upstream.Replayable(req.Method, req.Body != nil, k1 || k2)
}

var (
	upReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, upReadBuf) }}
	upWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, upWriteBuf) }}
)

// exchange writes req on uc and reads the response header. On success the response's
// body owns uc (and the context registration) until EOF or Close; on failure uc is
// closed.
func (u *leanTransport) exchange(ctx context.Context, uc *upstream.Conn, req *http.Request) (*http.Response, error) {
	uc.Begin(u.MaxHeaderBytes)
	// The client going away closes the connection, which ends any wait below and any
	// body read: no goroutine of our own per request.
	stop := context.AfterFunc(ctx, uc.Abort())

	bw := upWriters.Get().(*bufio.Writer)
	bw.Reset(uc)
	err := req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	bw.Reset(nil)
	upWriters.Put(bw)
	if err != nil {
		stop()
		uc.Close()
		return nil, err
	}

	_ = uc.SetReadDeadline(u.now().Add(u.HeaderTimeout))
	br := upReaders.Get().(*bufio.Reader)
	br.Reset(uc)
	var res *http.Response
	for n1xx := 1; ; n1xx++ {
		res, err = http.ReadResponse(br, req)
		if err != nil {
			break
		}
		if interim, ierr := u.Interim(res.StatusCode, n1xx, false); !interim {
			err = ierr
			break
		}
	}
	if err != nil {
		stop()
		uc.Close()
		putReader(br)
		var ne net.Error
		if ctx.Err() == nil && errors.As(err, &ne) && ne.Timeout() {
			err = upstream.ErrHeaderTimeout
		}
		return nil, err
	}
	_ = uc.SetReadDeadline(time.Time{})
	uc.Unlimit()

	keep := !res.Close
	if res.Body == http.NoBody {
		u.release(uc, br, stop, keep)
		return res, nil
	}
	res.Body = &upBody{u: u, uc: uc, br: br, rc: res.Body, stop: stop, keep: keep}
	return res, nil
}

func putReader(br *bufio.Reader) {
	br.Reset(nil)
	upReaders.Put(br)
}

// release ends uc's exchange: it goes back to its pool when keep allows it, the client's
// context did not close it and the target sent nothing beyond the response.
func (u *leanTransport) release(uc *upstream.Conn, br *bufio.Reader, stop func() bool, keep bool) {
	stopped := stop()
	clean := br.Buffered() == 0
	putReader(br)
	u.Put(uc, keep && stopped && clean, u.now())
}

// upBody is a lean response body: it hands the connection back at EOF (or closes it on
// an error or an early Close). Close is idempotent and may be called while a Read is
// blocked on another goroutine (it unblocks it).
type upBody struct {
	mu    sync.Mutex
	u     *leanTransport
	uc    *upstream.Conn
	br    *bufio.Reader
	rc    io.ReadCloser // http.ReadResponse's body: framing, trailers
	stop  func() bool
	keep  bool
	state uint8 // bodyOpen, bodyEOF, bodyFailed, bodyClosed
	err   error
}

const (
	bodyOpen uint8 = iota
	bodyEOF
	bodyFailed
	bodyClosed
)

func (b *upBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case bodyEOF:
		return 0, io.EOF
	case bodyFailed:
		return 0, b.err
	case bodyClosed:
		return 0, http.ErrBodyReadAfterClose
	}
	n, err := b.rc.Read(p)
	switch {
	case err == io.EOF:
		b.state = bodyEOF
		b.u.release(b.uc, b.br, b.stop, b.keep)
	case err != nil:
		b.state, b.err = bodyFailed, err
		b.stop()
		b.uc.Close()
		putReader(b.br)
	}
	return n, err
}

func (b *upBody) Close() error {
	if !b.mu.TryLock() {
		// A Read is under way: wake it. Should that Read be handing the connection back
		// just now, the pool holds a closed connection: its next exchange fails to write
		// before anything reached the wire, which MayReplay always allows.
		b.uc.Close()
		b.mu.Lock()
	}
	defer b.mu.Unlock()
	if b.state == bodyOpen {
		b.stop()
		b.uc.Close()
		putReader(b.br)
	}
	b.state = bodyClosed
	return nil
}
