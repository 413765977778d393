package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// upstream is the HTTP/1.1 RoundTripper forward sends through. It exists because
// http.Transport hands every round trip to two per-connection goroutines (writeLoop and
// readLoop), which costs several goroutine wake-ups, channel operations and selects per
// request; here the whole round trip (checkout, write, response header, body) runs on the
// caller's goroutine and the connection goes back to its target's pool when the body
// reaches EOF.
//
// Framing is the standard library's: (*http.Request).Write and http.ReadResponse (so the
// wire bytes are what http.Transport would send, and response parsing keeps its request
// smuggling defences). Requests it does not handle go to fallback (the shared
// http.Transport): see lean.
//
// Idle connections are kept per target address ("ip:port") in a LIFO stack of at most
// maxIdle, behind a small mutex per target (no lock is shared between targets; the
// address-to-pool lookup is a sync.Map read). Connections idle for idleTimeout are
// closed lazily at checkout and by sweep (Server.Serve runs the janitor). Idle
// connections hold no buffers: the bufio.Reader and Writer are pooled and attached for
// one exchange only.
//
// All methods are safe for concurrent use.
type upstream struct {
	dial          func(ctx context.Context, network, addr string) (net.Conn, error)
	fallback      http.RoundTripper
	headerTimeout time.Duration // > 0
	idleTimeout   time.Duration // > 0
	maxIdle       int           // per target; 0 keeps nothing idle
	maxHeader     int64         // response header bytes read before giving up
	now           func() time.Time

	pools  sync.Map // target address -> *upPool
	closed atomic.Bool
}

const (
	upMaxIdlePerTarget = 1024
	upIdleTimeout      = 90 * time.Second
	upMaxHeaderBytes   = 1 << 20
	// upMaxBody is the largest request body (with a known length) sent on the lean path.
	// The body is written completely before the response is read, which is safe only
	// while it fits in the socket buffers: a target that answers early or streams its
	// answer while reading the upload must never find us stuck in a write. Larger and
	// chunked bodies go to http.Transport, which writes and reads concurrently.
	upMaxBody  = 16 << 10
	upMax1xx   = 5
	upReadBuf  = 16 << 10
	upWriteBuf = 8 << 10
)

// newUpstream builds the lean round tripper. dial must mark its errors as *dialError
// (the transport's DialContext does), so that connect failures classify as today.
func newUpstream(cfg Config, t *http.Transport) *upstream {
	return &upstream{
		dial:          t.DialContext,
		fallback:      t,
		headerTimeout: cfg.ResponseHeaderTimeout,
		idleTimeout:   upIdleTimeout,
		maxIdle:       upMaxIdlePerTarget,
		maxHeader:     upMaxHeaderBytes,
		now:           time.Now,
	}
}

// timeoutError is a net.Error whose Timeout is true, so classify maps it to
// outcomeTimeout (504, a request failure) as it does http.Transport's own "timeout
// awaiting response headers".
type timeoutError struct{ msg string }

func (e *timeoutError) Error() string   { return e.msg }
func (e *timeoutError) Timeout() bool   { return true }
func (e *timeoutError) Temporary() bool { return true }

var (
	errResponseHeaderTimeout error = &timeoutError{"proxy: timeout awaiting response headers"}
	errResponseHeaderTooLong       = errors.New("proxy: target response header too large")
	errTooMany1xx                  = errors.New("proxy: too many 1xx responses from target")
	errUnexpectedUpgrade           = errors.New("proxy: target switched protocols unasked")
)

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
func (u *upstream) RoundTrip(req *http.Request) (*http.Response, error) {
	if !lean(req) {
		return u.fallback.RoundTrip(req)
	}
	ctx := req.Context()
	addr := req.URL.Host
	p := u.pool(addr)
	uc := p.get(u)
	for retried := false; ; retried = true {
		reused := uc != nil
		if !reused {
			c, err := u.dial(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			uc = newUpConn(c, p)
		}
		res, err := u.exchange(ctx, uc, req)
		if err == nil {
			return res, nil
		}
		if reused && !retried && ctx.Err() == nil && retryable(uc, err, req) {
			uc = nil
			continue
		}
		return nil, err
	}
}

func (u *upstream) pool(addr string) *upPool {
	if v, ok := u.pools.Load(addr); ok {
		return v.(*upPool)
	}
	v, _ := u.pools.LoadOrStore(addr, new(upPool))
	return v.(*upPool)
}

var (
	upReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, upReadBuf) }}
	upWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, upWriteBuf) }}
)

// exchange writes req on uc and reads the response header. On success the response's
// body owns uc (and the context registration) until EOF or Close; on failure uc is
// closed.
func (u *upstream) exchange(ctx context.Context, uc *upConn, req *http.Request) (*http.Response, error) {
	uc.read, uc.wrote, uc.limit = 0, 0, u.maxHeader
	// The client going away closes the connection, which ends any wait below and any
	// body read: no goroutine of our own per request.
	stop := context.AfterFunc(ctx, uc.abort)

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
		uc.close()
		return nil, err
	}

	_ = uc.c.SetReadDeadline(u.now().Add(u.headerTimeout))
	uc.br = upReaders.Get().(*bufio.Reader)
	uc.br.Reset(uc)
	var res *http.Response
	for n1xx := 0; ; n1xx++ {
		res, err = http.ReadResponse(uc.br, req)
		if err != nil || res.StatusCode >= 200 || res.StatusCode < 100 {
			break
		}
		// 1xx interim responses (103 Early Hints) are dropped as http.Transport drops
		// them; 101 was not asked for (upgrades do not come here).
		if res.StatusCode == http.StatusSwitchingProtocols {
			err = errUnexpectedUpgrade
			break
		}
		if n1xx == upMax1xx {
			err = errTooMany1xx
			break
		}
	}
	if err != nil {
		stop()
		uc.close()
		var ne net.Error
		if ctx.Err() == nil && errors.As(err, &ne) && ne.Timeout() {
			err = errResponseHeaderTimeout
		}
		return nil, err
	}
	_ = uc.c.SetReadDeadline(time.Time{})
	uc.limit = math.MaxInt64

	keep := !res.Close
	if res.Body == http.NoBody {
		u.release(uc, stop, keep)
		return res, nil
	}
	res.Body = &upBody{u: u, uc: uc, rc: res.Body, stop: stop, keep: keep}
	return res, nil
}

// release ends uc's exchange: it goes back to its pool when keep allows it, the client's
// context did not close it, the target sent nothing beyond the response and the
// upstream is not shut down; else it is closed.
func (u *upstream) release(uc *upConn, stop func() bool, keep bool) {
	stopped := stop()
	br := uc.br
	uc.br = nil
	clean := br.Buffered() == 0
	br.Reset(nil)
	upReaders.Put(br)
	if keep && stopped && clean && !u.closed.Load() {
		uc.idleAt = u.now()
		if uc.pool.put(uc, u.maxIdle) {
			return
		}
	}
	uc.close()
}

// retryable reports whether a failed exchange on a reused connection may be repeated on
// a new one: nothing of the response arrived, the connection was lost (not a timeout or
// a parse error), the request body (if any) was not started, and either nothing was
// written or the request is replayable (GET, HEAD, OPTIONS, TRACE or an idempotency key,
// without a body), as in http.Transport.
func retryable(uc *upConn, err error, req *http.Request) bool {
	if uc.read > 0 || !connLost(err) {
		return false
	}
	if req.Body != nil {
		tb, ok := req.Body.(*trackedBody)
		if !ok || tb.started.Load() {
			return false
		}
	}
	if uc.wrote == 0 {
		return true
	}
	if req.Body != nil {
		return false
	}
	switch req.Method {
	case "GET", "HEAD", "OPTIONS", "TRACE", "":
		return true
	}
	_, k1 := req.Header["Idempotency-Key"]
	_, k2 := req.Header["X-Idempotency-Key"]
	return k1 || k2
}

func connLost(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, net.ErrClosed)
}

// sweep closes connections idle since before now-idleTimeout and forgets pools that
// stayed empty for two sweeps in a row.
func (u *upstream) sweep(now time.Time) {
	var expired []*upConn
	u.pools.Range(func(k, v any) bool {
		p := v.(*upPool)
		p.mu.Lock()
		kept := p.idle[:0]
		for _, uc := range p.idle {
			if now.Sub(uc.idleAt) >= u.idleTimeout {
				expired = append(expired, uc)
			} else {
				kept = append(kept, uc)
			}
		}
		clear(p.idle[len(kept):])
		p.idle = kept
		if len(kept) > 0 {
			p.emptySweeps = 0
		} else if p.emptySweeps++; p.emptySweeps >= 2 {
			p.dead = true
			u.pools.CompareAndDelete(k, p)
		}
		p.mu.Unlock()
		return true
	})
	for _, uc := range expired {
		uc.close()
	}
}

// janitor sweeps every half idle timeout until ctx is done.
func (u *upstream) janitor(ctx context.Context) {
	t := time.NewTicker(u.idleTimeout / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			u.sweep(u.now())
		}
	}
}

// closeIdle closes every idle connection and makes connections that finish later close
// instead of going idle (Shutdown, closeNow).
func (u *upstream) closeIdle() {
	u.closed.Store(true)
	var all []*upConn
	u.pools.Range(func(k, v any) bool {
		p := v.(*upPool)
		p.mu.Lock()
		all = append(all, p.idle...)
		clear(p.idle)
		p.idle = p.idle[:0]
		p.dead = true
		p.mu.Unlock()
		u.pools.CompareAndDelete(k, p)
		return true
	})
	for _, uc := range all {
		uc.close()
	}
}

// idleConns returns the number of idle connections to addr (tests).
func (u *upstream) idleConns(addr string) int {
	v, ok := u.pools.Load(addr)
	if !ok {
		return 0
	}
	p := v.(*upPool)
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

// upPool is one target's idle connections, oldest first (LIFO: the warmest is reused).
type upPool struct {
	mu          sync.Mutex
	idle        []*upConn
	dead        bool // dropped by sweep or closeIdle: put refuses
	emptySweeps uint8
}

// get pops the most recently idled connection, or nil. When that one has expired, every
// idle connection has (they are ordered), and all are closed.
func (p *upPool) get(u *upstream) *upConn { return p.getAt(u, u.now()) }

// getAt is get with the clock read by the caller.
func (p *upPool) getAt(u *upstream, now time.Time) *upConn {
	for {
		var uc *upConn
		var expired []*upConn
		p.mu.Lock()
		if n := len(p.idle); n > 0 {
			if top := p.idle[n-1]; now.Sub(top.idleAt) < u.idleTimeout {
				uc = top
				p.idle[n-1] = nil
				p.idle = p.idle[:n-1]
			} else {
				expired = slices.Clone(p.idle)
				clear(p.idle)
				p.idle = p.idle[:0]
			}
		}
		p.mu.Unlock()
		for _, c := range expired {
			c.close()
		}
		// Every reuse, whatever the idle age, first checks the connection for a FIN or
		// stray bytes (one non-blocking peek): bytes that arrived after the previous
		// response ended (a second answer after a 204, a body after a HEAD answer) are
		// not the next request's answer, and a target with a short keep-alive timeout
		// (Node.js: 5 s) does not turn a non-retryable request into a 502.
		if uc == nil || uc.rc == nil || !uc.probe.run(uc.rc) {
			return uc
		}
		uc.close()
	}
}

func (p *upPool) put(uc *upConn, max int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead || len(p.idle) >= max {
		return false
	}
	p.idle = append(p.idle, uc)
	return true
}

// upConn is one connection to a target. Its Read and Write count the bytes of the
// current exchange (the retry rule needs them) and Read enforces the response header
// limit; it deliberately has no ReadFrom, so that bodies are copied through the pooled
// bufio.Writer rather than through a fresh 32 KiB buffer per request.
type upConn struct {
	c      net.Conn
	rc     syscall.RawConn // nil when c has none; used to probe idle connections
	probe  probe
	pool   *upPool
	abort  func() // closes c; registered with context.AfterFunc per exchange
	br     *bufio.Reader
	idleAt time.Time
	limit  int64
	read   int64
	wrote  int64
}

func newUpConn(c net.Conn, p *upPool) *upConn {
	uc := &upConn{c: c, pool: p}
	if sc, ok := c.(syscall.Conn); ok {
		uc.rc, _ = sc.SyscallConn()
	}
	uc.abort = func() { _ = c.Close() }
	return uc
}

func (uc *upConn) Read(p []byte) (int, error) {
	if uc.limit <= 0 {
		return 0, errResponseHeaderTooLong
	}
	if int64(len(p)) > uc.limit {
		p = p[:uc.limit]
	}
	n, err := uc.c.Read(p)
	uc.limit -= int64(n)
	uc.read += int64(n)
	return n, err
}

func (uc *upConn) Write(p []byte) (int, error) {
	n, err := uc.c.Write(p)
	uc.wrote += int64(n)
	return n, err
}

func (uc *upConn) close() {
	if uc.br != nil {
		uc.br.Reset(nil)
		upReaders.Put(uc.br)
		uc.br = nil
	}
	_ = uc.c.Close()
}

// upBody is a lean response body: it hands the connection back at EOF (or closes it on
// an error or an early Close). Close is idempotent and may be called while a Read is
// blocked on another goroutine (it unblocks it).
type upBody struct {
	mu    sync.Mutex
	u     *upstream
	uc    *upConn
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
		b.u.release(b.uc, b.stop, b.keep)
	case err != nil:
		b.state, b.err = bodyFailed, err
		b.stop()
		b.uc.close()
	}
	return n, err
}

func (b *upBody) Close() error {
	if !b.mu.TryLock() {
		// A Read is under way: wake it. Should that Read be handing the connection back
		// just now, the pool holds a closed connection: its next exchange fails to write
		// before anything reached the wire, which retryable always retries.
		_ = b.uc.c.Close()
		b.mu.Lock()
	}
	defer b.mu.Unlock()
	if b.state == bodyOpen {
		b.stop()
		b.uc.close()
	}
	b.state = bodyClosed
	return nil
}
