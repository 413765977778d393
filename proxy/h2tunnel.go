package proxy

import (
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/serve-zone/ingress/proxy/internal/h2"
	"github.com/serve-zone/ingress/stats"
)

// tunnel turns an extended CONNECT with :protocol websocket (RFC 8441) into an HTTP/1.1
// WebSocket upgrade to a target (xconnect.go), answers 200 when the target switches
// protocols, then copies the stream's DATA and the target connection's bytes both ways.
func (x *h2Req) tunnel() {
	s, st, rq, f := x.f.s, x.st, x.rq, x.f
	if !originForm(rq.Path) {
		x.answer(outcomeBadRequest)
		return
	}
	if !s.tunnels.acquire() {
		x.answer(outcomeUnavailable)
		return
	}
	defer s.tunnels.release()
	w := listWorks.Get().(*listWork)
	defer w.release()
	target, err := appendTarget(w.target[:0], rq.Path)
	if err != nil {
		x.err = err
		x.answer(outcomeBadRequest)
		return
	}
	w.target = target
	w.lf.fields = rq.Fields
	w.lf.classify(w.kinds[:])
	h := outHead{target: string(target), host: rq.Authority, newKey: true,
		fwd: forwardedFor{clientIP: f.ip, host: rq.Authority, https: f.secure, trusted: f.trusted}}
	e := x.entry
	walk := newWalk(s, e)
	u := upgrade(s, &walk, &w.upWork, &w.lf, &h, (*h2Watch)(st))
	w.lf = listFields{}
	x.backend, x.err = walk.b, u.err
	switch {
	case u.uc == nil && u.oc == outcomeClientGone:
		return
	case u.uc == nil:
		x.answer(u.oc)
		return
	}
	defer walk.done()
	if !u.switched {
		x.relayBytes(w, u.uc)
		return
	}
	hd := acceptedFields(responseHeader(&w.res))
	fields := make([]hpack.HeaderField, 0, len(hd)+2)
	for k, vv := range hd {
		for _, v := range vv {
			fields = append(fields, hpack.HeaderField{Name: lowerFieldName(k), Value: v})
		}
	}
	fields = s.commonFields(fields, len(hd["Date"]) > 0, f.altSvc)
	x.status = http.StatusOK
	x.out += headBytes(fields)
	bc, br := u.tunnelConn()
	st.SetBodyTimeout(0) // a WebSocket may be silent up to TunnelIdleTimeout (sweepIdle)
	if err := st.WriteHead(http.StatusOK, fields, nil, false); err != nil {
		bc.Close()
		x.clientStopped(err)
		return
	}
	x.upgraded = true
	x.in += x.rq.HeaderBytes
	s.countUpgrade(e, stats.ProtoHTTP2, x.in, x.out)
	up, down := s.runTunnel(e, stats.ProtoHTTP2, &streamConn{st: st, local: f.cc.LocalAddr(), remote: f.cc.RemoteAddr()}, bc, br)
	x.in, x.out = x.in+up, x.out+down
}

// originForm reports whether an extended CONNECT's :path (RFC 8441 §4, RFC 9220 §3) is an
// origin-form target: it starts with '/' and holds no control byte. Anything else ('*',
// an authority, an absolute URI) is refused with 400 before any target sees it: it would
// otherwise become the request line of the upgrade the target gets (GET * HTTP/1.1).
func originForm(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] < 0x20 || p[i] == 0x7f {
			return false
		}
	}
	return true
}

// streamConn is an HTTP/2 stream as the client side of a tunnel: Close resets it.
type streamConn struct {
	st            *h2.Stream
	local, remote net.Addr
	once          sync.Once
}

func (c *streamConn) Read(p []byte) (int, error)  { return c.st.Read(p) }
func (c *streamConn) Write(p []byte) (int, error) { return c.st.Write(p) }
func (c *streamConn) closeWrite()                 { _ = c.st.Close(nil) }
func (c *streamConn) Close() error {
	c.once.Do(func() { c.st.Reset(http2.ErrCodeCancel) })
	return nil
}
func (c *streamConn) LocalAddr() net.Addr              { return c.local }
func (c *streamConn) RemoteAddr() net.Addr             { return c.remote }
func (c *streamConn) SetDeadline(time.Time) error      { return nil }
func (c *streamConn) SetReadDeadline(time.Time) error  { return nil }
func (c *streamConn) SetWriteDeadline(time.Time) error { return nil }
