package proxy

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/serve-zone/ingress/proxy/internal/h2"
	"github.com/serve-zone/ingress/routetable"
	"github.com/serve-zone/ingress/stats"
)

// tunnel turns an extended CONNECT with :protocol websocket (RFC 8441) into an HTTP/1.1
// WebSocket upgrade to a target (the same pick, retry and passive health as a forward),
// answers 200 when the target switches protocols, then copies the stream's DATA and the
// target connection's bytes both ways. The tunnel is tracked like an HTTP/1.1 one
// (tunnelSet): no route-table swap touches it, its bytes are counted into the route as
// they pass, Shutdown waits for it and its deadline closes it.
func (x *h2Req) tunnel() {
	s, st := x.f.s, x.st
	if !s.tunnels.acquire() {
		x.answer(outcomeUnavailable)
		return
	}
	defer s.tunnels.release()
	e := x.entry
	o := new(outbound)
	req, _, err := x.outgoing(o)
	if err != nil {
		x.err = err
		x.answer(outcomeBadRequest)
		return
	}
	req.Method = http.MethodGet
	req.Body, req.ContentLength = nil, 0 // the stream's DATA is the tunnel's, after the 101
	h := req.Header
	h["Connection"] = valUpgrade
	h["Upgrade"] = valWebSocket
	var key [16]byte
	_, _ = rand.Read(key[:])
	h["Sec-Websocket-Key"] = []string{base64.StdEncoding.EncodeToString(key[:])}

	walk := newWalk(s, e)
	var (
		b  *routetable.Backend
		bc net.Conn
	)
	for {
		b = walk.next()
		if b == nil {
			x.answer(walk.last)
			return
		}
		x.backend = b
		bc, err = s.dialer.DialContext(st.Context(), "tcp", b.Addr)
		if err == nil {
			walk.took()
			break
		}
		x.err = err
		if st.Context().Err() != nil {
			walk.missed(outcomeClientGone, err, false)
			return
		}
		walk.missed(outcomeConnect, err, true)
	}
	defer walk.done()
	x.err = nil
	o.url.Host = b.Addr

	// The handshake: bounded by ResponseHeaderTimeout and by the client's presence.
	_ = bc.SetDeadline(time.Now().Add(s.cfg.ResponseHeaderTimeout))
	stop := context.AfterFunc(st.Context(), func() { _ = bc.SetDeadline(time.Unix(1, 0)) })
	br := bufio.NewReaderSize(bc, 4<<10)
	var res *http.Response
	err = req.Write(bc)
	if err == nil {
		res, err = http.ReadResponse(br, req)
	}
	clientGone := !stop() || st.Context().Err() != nil
	if err != nil || clientGone {
		bc.Close()
		if !clientGone {
			x.err = err
			s.failed(outcomeHandshake, e, b, err)
			x.answer(outcomeHandshake)
		}
		return
	}
	_ = bc.SetDeadline(time.Time{})
	if res.StatusCode != http.StatusSwitchingProtocols {
		x.relay(req, res, nil)
		bc.Close()
		return
	}
	if !httpguts.HeaderValuesContainsToken(res.Header["Upgrade"], "websocket") {
		bc.Close()
		x.err = errNoUpgrade
		s.failed(outcomeHandshake, e, b, errNoUpgrade)
		x.answer(outcomeHandshake)
		return
	}
	removeHopByHop(res.Header)
	delete(res.Header, "Sec-Websocket-Accept") // HTTP/1.1's handshake, not the client's
	fields := make([]hpack.HeaderField, 0, len(res.Header)+2)
	for k, vv := range res.Header {
		for _, v := range vv {
			fields = append(fields, hpack.HeaderField{Name: lowerFieldName(k), Value: v})
		}
	}
	fields = x.commonFields(fields, len(res.Header["Date"]) > 0)
	x.status = http.StatusOK
	x.out += headBytes(fields)
	st.SetBodyTimeout(0) // a WebSocket may be silent for as long as it likes
	if err := st.WriteHead(http.StatusOK, fields, nil, false); err != nil {
		bc.Close()
		x.clientStopped(err)
		return
	}

	// The CONNECT and its 200 are one request of the route.
	x.upgraded = true
	x.in += x.rq.HeaderBytes
	e.Stats.Request(x.in, x.out)
	s.totals.Request(stats.ProtoHTTP2, http.StatusOK, x.in, x.out)

	sc := &streamConn{st: st, local: x.f.cc.LocalAddr(), remote: x.f.cc.RemoteAddr()}
	t := &tunnel{client: sc, backend: bc}
	if !s.tunnels.add(t) {
		t.close()
		return
	}
	s.totals.WebSocket(1)
	var up, down int64
	var wg sync.WaitGroup
	wg.Go(func() {
		var err error
		up, err = s.pipe(bc, sc, e.Stats, true)
		if err != nil {
			t.close()
		} else {
			closeWrite(bc)
		}
	})
	var derr error
	down, derr = s.pipe(sc, br, e.Stats, false)
	if derr != nil {
		t.close()
	} else {
		_ = st.Close(nil) // the target is done sending: END_STREAM
	}
	wg.Wait()
	t.close()
	s.tunnels.remove(t)
	s.totals.WebSocket(-1)
	x.in, x.out = x.in+up, x.out+down
}

// streamConn is an HTTP/2 stream as the client side of a tunnel: Close resets it.
type streamConn struct {
	st            *h2.Stream
	local, remote net.Addr
	once          sync.Once
}

func (c *streamConn) Read(p []byte) (int, error)  { return c.st.Read(p) }
func (c *streamConn) Write(p []byte) (int, error) { return c.st.Write(p) }
func (c *streamConn) Close() error {
	c.once.Do(func() { c.st.Reset(http2.ErrCodeCancel) })
	return nil
}
func (c *streamConn) LocalAddr() net.Addr              { return c.local }
func (c *streamConn) RemoteAddr() net.Addr             { return c.remote }
func (c *streamConn) SetDeadline(time.Time) error      { return nil }
func (c *streamConn) SetReadDeadline(time.Time) error  { return nil }
func (c *streamConn) SetWriteDeadline(time.Time) error { return nil }
