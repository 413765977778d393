package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"net"
	"sync"
	"time"

	"github.com/serve-zone/ingress/proxy/internal/h1wire"
	"github.com/serve-zone/ingress/proxy/internal/upstream"
	"github.com/serve-zone/ingress/routetable"
)

// The byte-level exchange with a target, shared by the HTTP/1.1 fast path
// (h1forward.go) and the own HTTP/2 server (h2bytes.go): the front-end writes the
// outgoing request into upWork.wb, Server.exchange sends it over a pooled or new
// connection and reads the response head into upWork.up, parsed by h1wire. No
// http.Request or http.Response is made.

// copyBufSize is the size of the pooled buffers that bodies and tunnels are copied with.
const copyBufSize = 32 << 10

var bufPool = sync.Pool{New: func() any { return new([copyBufSize]byte) }}

// targetPools are the targets' connection pools (internal/upstream) with the clock
// their idle ages are read from (tests move it to expire idle connections without
// waiting).
type targetPools struct {
	*upstream.Pools
	now func() time.Time
}

// newTargetPools makes the pools every exchange draws from: connections dialled within
// DialTimeout, their errors marked as dialError (a connect failure, which may go to
// another target whatever the request), limits from DefaultLimits.
func newTargetPools(cfg Config) *targetPools {
	d := &net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, &dialError{err: err}
		}
		return c, nil
	}
	return &targetPools{Pools: upstream.New(upstream.DefaultLimits(cfg.ResponseHeaderTimeout), dial), now: time.Now}
}

// upWork is one exchange's work area, pooled inside the front-end's own.
type upWork struct {
	res       h1wire.Response
	resFields [h1wire.MaxFields]h1wire.Field
	wb        []byte // the outgoing request (and, later, the client's response head)
	// ubuf is the target's answer's read buffer, taken from upBufs by the exchange
	// (ready) and given back by reset: a request that waits for its body (holdBody)
	// holds none (issue 33: 33 KB per request in flight).
	ubuf    *[h1Headroom + h1UpBuf]byte
	up      []byte // ubuf, or a larger buffer for a huge response head; nil before the exchange
	resHead int    // length of the response head in up[h1Headroom:]
	filled  int    // bytes read into up[h1Headroom:]
}

var upBufs = sync.Pool{New: func() any { return new([h1Headroom + h1UpBuf]byte) }}

func (w *upWork) init() {
	w.wb = make([]byte, 0, 4<<10)
}

// ready gives w its read buffer before an exchange.
func (w *upWork) ready() {
	if w.ubuf == nil {
		w.ubuf = upBufs.Get().(*[h1Headroom + h1UpBuf]byte)
	}
	if w.up == nil {
		w.up = w.ubuf[:]
	}
}

// reset prepares w for the pool.
func (w *upWork) reset() {
	w.res = h1wire.Response{}
	w.up = nil
	if w.ubuf != nil {
		upBufs.Put(w.ubuf)
		w.ubuf = nil
	}
	if cap(w.wb) > 64<<10 {
		w.wb = make([]byte, 0, 4<<10)
	}
}

// clientWatch is how Server.exchange learns, while a target thinks, that the client
// went away.
type clientWatch interface{ clientGone() bool }

// attempt is one request's try at one target, as Server.exchange sends it; it lives on
// the forwarding goroutine's stack.
type attempt struct {
	route      *routetable.Entry // the request's route
	addr       string            // the target being tried
	watch      clientWatch       // tells that the client went away while the target thinks
	replayable bool              // the request may be sent again by itself (upstream.Replayable)
	up         *uploader         // sends the body as it comes; nil when the head carries it all
	// upgrade: a tunnel's handshake. It goes on a new connection, never a pooled one, and
	// a 101 is its final answer; the tunnel then takes the connection over
	// (upstream.Conn.Detach).
	upgrade bool
}

// exchange sends w.wb to a.addr over a pooled or new connection and reads the response
// head into w.up. A pooled connection that turns out dead before any response byte is
// replaced once by a new one under the pools' rule (upstream.MayReplay); w.wb holds the
// whole request head (and, on the fast path, the body), so nothing the client sent is
// lost by sending it again, unless a.up (a body sent as it comes) took some of it beyond
// what the core holds (holdBody: a body held whole is sent again from memory).
func (s *Server) exchange(w *upWork, a attempt) (*upstream.Conn, error) {
	w.ready()
	ps := s.up.Pools
	up := a.up
	var uc *upstream.Conn
	if !a.upgrade {
		uc = ps.Get(a.addr, s.up.now())
	}
	for retried := false; ; retried = true {
		if uc == nil {
			var err error
			if uc, err = ps.Dial(context.Background(), a.addr); err != nil {
				return nil, err
			}
		}
		err := s.roundTrip(w, uc, &a)
		if err == nil {
			return uc, nil
		}
		up.end(uc) // uc is closed; an upload on it ends
		if up != nil && up.clientErr != nil {
			return nil, err // the client's body failed: nothing to send again
		}
		if upstream.MayReplay(uc, retried, err, up.taken(), a.replayable) {
			uc = nil
			continue
		}
		return nil, err
	}
}

// headerTimeout is how long route's targets may take to start their answer, counted from
// the end of the request.
func (s *Server) headerTimeout(route *routetable.Entry) time.Duration {
	return s.up.HeaderTimeout
}

// roundTrip writes the request and reads the response head (skipping 1xx interim
// answers by upstream.Limits.Interim; a 100 lets a.up's body go). With a.up, the body is
// sent by it from when the head is written. On error uc is closed.
func (s *Server) roundTrip(w *upWork, uc *upstream.Conn, a *attempt) error {
	ps := s.up.Pools
	cw, up, upgrade := a.watch, a.up, a.upgrade
	wait := s.headerTimeout(a.route)
	// The deadlines count from now, as the request goes out: not from when it arrived,
	// which a slow connect (a dropped SYN, a dead target tried first) or a wait for a
	// processor may have put more than a slice's length ago.
	now := time.Now()
	uc.Begin(math.MaxInt64) // the head's limit is checked below, on the buffer
	// The wait is cut into h1ClientWatch slices: at each one the client is checked,
	// so that a client that went away does not leave its request running on the target.
	deadline := now.Add(wait)
	next := now.Add(h1ClientWatch)
	// A slice's end that comes early only checks the client once more (below).
	_ = uc.ReadDeadlineBy(earliest(deadline, next), h1ClientWatch/4)
	buf := w.up[h1Headroom:]
	// The request, then the first bytes of the answer (a failed write ends below, as a
	// failed read does: the connection is closed and the error returned).
	var filled int
	var rerr error
	if up == nil {
		filled, rerr = uc.WriteRead(w.wb, buf)
	} else if _, rerr = uc.Write(w.wb); rerr == nil {
		up.start(uc)
		filled, rerr = uc.Read(buf)
	}
	scanned := 0
	for n1xx := 0; ; {
		// A head may already be buffered (a 1xx and the final answer in one segment).
		if hl := h1wire.HeadEnd(buf[:filled], scanned); hl >= 0 {
			err := h1wire.ParseResponse(&w.res, buf[:hl], w.resFields[:])
			if err == h1wire.ErrTooManyFields {
				// Rare: parse again with room for every line the head can hold.
				err = h1wire.ParseResponse(&w.res, buf[:hl], make([]h1wire.Field, 0, hl/4))
			}
			interim := false
			if err == nil && w.res.Status < 200 {
				n1xx++
				interim, err = ps.Interim(w.res.Status, n1xx, upgrade)
				if w.res.Status == 100 && up != nil {
					up.proceed()
				}
			}
			if err != nil {
				uc.Close()
				return err
			}
			if interim {
				filled = copy(buf, buf[hl:filled])
				scanned = 0
				continue
			}
			w.resHead, w.filled = hl, filled
			if up != nil {
				up.answered()
			}
			return nil
		}
		if scanned < filled && bytes.Contains(buf[max(scanned-1, 0):filled], lflf) {
			uc.Close()
			return h1wire.ErrBadResponse // bare LF line ends: refused at once, not at the header timeout
		}
		scanned = filled
		if rerr != nil {
			var ne net.Error
			timeout := errors.As(rerr, &ne) && ne.Timeout()
			if timeout {
				now := time.Now()
				if up.running() {
					// The header timeout counts from the end of the request: a body still
					// going out (a large upload) moves it on.
					deadline = now.Add(wait)
				}
				if now.Before(deadline) {
					if cw.clientGone() {
						uc.Close()
						return errClientGone
					}
					_ = uc.SetReadDeadline(earliest(deadline, now.Add(h1ClientWatch)))
					rerr = nil
					continue
				}
			}
			uc.Close()
			switch {
			case timeout:
				return upstream.ErrHeaderTimeout
			case rerr == io.EOF && filled > 0:
				return io.ErrUnexpectedEOF
			}
			return rerr
		}
		if filled == len(buf) {
			if int64(len(buf)) >= ps.MaxHeaderBytes {
				uc.Close()
				return upstream.ErrHeaderTooLong
			}
			nb := make([]byte, h1Headroom+2*len(buf))
			copy(nb[h1Headroom:], buf[:filled])
			w.up = nb
			buf = nb[h1Headroom:]
		}
		var nr int
		nr, rerr = uc.Read(buf[filled:])
		filled += nr
	}
}
