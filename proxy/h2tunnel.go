package proxy

import (
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/serve-zone/ingress/proxy/internal/h2"
)

// An extended CONNECT with :protocol websocket (RFC 8441) becomes an HTTP/1.1 WebSocket
// upgrade to a target (the pipeline's openTunnel); when the target switches protocols
// the stream is answered 200 and carries the tunnel's bytes both ways (runTunnel).

// tunnelHead writes the upgrade for the stream's extended CONNECT: 400 for a :path that
// is no origin-form target (errTunnelTarget).
func (x *streamWork) tunnelHead() error {
	rq, h := x.rq, &x.p.oh
	if !originForm(rq.Path) {
		return errTunnelTarget
	}
	target, err := appendTarget(x.target[:0], rq.Path)
	if err != nil {
		return err
	}
	x.target = target
	x.lf.fields = rq.Fields
	x.lf.classify(x.kinds[:])
	h.target, h.newKey = string(target), true
	writeHead(&x.p, &x.lf)
	x.lf = listFields{}
	return nil
}

// switchTunnel answers the stream 200 with the target's 101 fields (acceptedFields) and
// makes it the client's side of the tunnel.
func (x *streamWork) switchTunnel(accepted http.Header, bc net.Conn) tunnelClient {
	p, st := &x.p, x.st
	hd := acceptedFields(accepted)
	fields := make([]hpack.HeaderField, 0, len(hd)+2)
	for k, vv := range hd {
		for _, v := range vv {
			fields = append(fields, hpack.HeaderField{Name: lowerFieldName(k), Value: v})
		}
	}
	fields = p.s.commonFields(fields, len(hd["Date"]) > 0, p.altSvc)
	p.status = http.StatusOK
	p.out += headBytes(fields)
	st.SetBodyTimeout(0) // a WebSocket may be silent up to TunnelIdleTimeout (sweepIdle)
	if err := st.WriteHead(http.StatusOK, fields, nil, false); err != nil {
		bc.Close()
		p.status, p.err = outcomeClientStalled.status(), err // 499, not a backend failure
		return nil
	}
	p.upgraded = true
	return &streamConn{st: st, local: x.f.cc.LocalAddr(), remote: x.f.cc.RemoteAddr()}
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

// streamConn is an HTTP/2 stream as the client side of a tunnel: Close resets it, or
// after closeWrite ends the reading of it (the stream's end then tells the client to
// stop sending with RST_STREAM NO_ERROR, RFC 9113 §8.1).
type streamConn struct {
	st            *h2.Stream
	local, remote net.Addr
	once          sync.Once
}

func (c *streamConn) Read(p []byte) (int, error)  { return c.st.Read(p) }
func (c *streamConn) Write(p []byte) (int, error) { return c.st.Write(p) }
func (c *streamConn) closeWrite()                 { _ = c.st.Close(nil) }
func (c *streamConn) Close() error {
	c.once.Do(func() {
		c.st.Reset(http2.ErrCodeCancel) // nothing after the response ended (closeWrite)
		c.st.CloseRead()
	})
	return nil
}
func (c *streamConn) LocalAddr() net.Addr              { return c.local }
func (c *streamConn) RemoteAddr() net.Addr             { return c.remote }
func (c *streamConn) SetDeadline(time.Time) error      { return nil }
func (c *streamConn) SetReadDeadline(time.Time) error  { return nil }
func (c *streamConn) SetWriteDeadline(time.Time) error { return nil }
