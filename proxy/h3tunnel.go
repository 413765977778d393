package proxy

import (
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/serve-zone/ingress/stats"
)

// serveWebSocketH3 turns an HTTP/3 extended CONNECT with :protocol websocket (RFC 9220;
// quic-go hands it to the routing handler with Proto set to the :protocol) into an
// HTTP/1.1 WebSocket upgrade to a target (xconnect.go), answers 200 when the target
// switches protocols, takes the QUIC stream over and copies bytes both ways.
func (s *Server) serveWebSocketH3(w http.ResponseWriter, r *http.Request, rs *reqState) {
	if !originForm(r.RequestURI) { // quic-go refuses most of these already
		s.answer(w, rs, outcomeBadRequest)
		return
	}
	streamer, ok := w.(http3.HTTPStreamer)
	if !ok {
		s.answer(w, rs, outcomeHandshake)
		return
	}
	s.openUpgrade(w, r, rs, true, func(u *upgradeResult, accepted http.Header) {
		dst := w.Header()
		for k, vv := range acceptedFields(accepted) {
			dst[k] = vv
		}
		rs.out += responseFieldBytes(dst)
		w.WriteHeader(http.StatusOK)
		bc, br := u.tunnelConn()
		str, err := streamer.HTTPStream()
		if err != nil {
			bc.Close()
			rs.err, rs.abort = err, true
			return
		}
		rs.upgraded, rs.status = true, http.StatusOK
		e := rs.entry
		s.countUpgrade(e, stats.ProtoHTTP3, rs.in, rs.out)
		up, down := s.runTunnel(e, stats.ProtoHTTP3, &h3StreamConn{str: str}, bc, br)
		rs.in, rs.out = rs.in+up, rs.out+down
	})
}

// h3StreamConn is an HTTP/3 request stream as the client side of a tunnel. Close
// aborts only what has not ended cleanly: the receiving side unless the client's FIN was
// read, the sending side unless ours was sent. QUIC lets a RESET_STREAM overtake
// data still unacknowledged, so resetting after our FIN would cut off the tunnel's last
// bytes.
type h3StreamConn struct {
	str  *http3.Stream
	fin  atomic.Bool // closeWrite sent our FIN
	eof  atomic.Bool // Read returned the client's FIN
	once sync.Once
}

func (c *h3StreamConn) Read(p []byte) (int, error) {
	n, err := c.str.Read(p)
	if err == io.EOF {
		c.eof.Store(true)
	}
	return n, err
}
func (c *h3StreamConn) Write(p []byte) (int, error) { return c.str.Write(p) }
func (c *h3StreamConn) closeWrite() {
	if c.str.Close() == nil {
		c.fin.Store(true)
	}
}
func (c *h3StreamConn) Close() error {
	c.once.Do(func() {
		if !c.eof.Load() {
			c.str.CancelRead(quic.StreamErrorCode(http3.ErrCodeRequestCanceled))
		}
		if !c.fin.Load() {
			c.str.CancelWrite(quic.StreamErrorCode(http3.ErrCodeRequestCanceled))
		}
	})
	return nil
}
func (c *h3StreamConn) LocalAddr() net.Addr                { return nil }
func (c *h3StreamConn) RemoteAddr() net.Addr               { return nil }
func (c *h3StreamConn) SetDeadline(t time.Time) error      { return c.str.SetDeadline(t) }
func (c *h3StreamConn) SetReadDeadline(t time.Time) error  { return c.str.SetReadDeadline(t) }
func (c *h3StreamConn) SetWriteDeadline(t time.Time) error { return c.str.SetWriteDeadline(t) }
