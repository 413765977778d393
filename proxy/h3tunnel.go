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
)

// An HTTP/3 extended CONNECT with :protocol websocket (RFC 9220; quic-go hands it to the
// routing handler with Proto set to the :protocol) becomes an HTTP/1.1 WebSocket upgrade
// to a target (openTunnel, pipeline.go); when the target switches protocols it is
// answered 200 and its QUIC stream carries the tunnel.

// switchH3 answers 200 with the target's 101 fields (acceptedFields) and takes the QUIC
// stream over as the client's side of the tunnel.
func (x *httpWork) switchH3(accepted http.Header, bc net.Conn) tunnelClient {
	p, w := &x.p, x.w
	dst := w.Header()
	for k, vv := range acceptedFields(accepted) {
		dst[k] = vv
	}
	p.out += responseFieldBytes(dst)
	w.WriteHeader(http.StatusOK)
	str, err := w.(http3.HTTPStreamer).HTTPStream() // tunnelHead checked that it can
	if err != nil {
		bc.Close()
		p.err, p.abort = err, true
		return nil
	}
	p.upgraded, p.status = true, http.StatusOK
	return &h3StreamConn{str: str}
}

// h3StreamConn is an HTTP/3 request stream as the client side of a tunnel. Close
// aborts only what has not ended cleanly: the receiving side unless the client's FIN was
// read or ours sent, the sending side unless ours was sent. QUIC lets a RESET_STREAM overtake
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
			if c.fin.Load() {
				// After our FIN (tunnelFinWait passed) reading only stops here: a
				// STOP_SENDING then fails Chromium's other WebSockets on the connection
				// (148, EnableWebsocketsOverHttp3). The stream ends with the client's
				// FIN or the connection; what the client sends meanwhile stays within
				// the stream's flow-control window.
				_ = c.str.SetReadDeadline(time.Unix(1, 0))
			} else {
				c.str.CancelRead(quic.StreamErrorCode(http3.ErrCodeRequestCanceled))
			}
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
