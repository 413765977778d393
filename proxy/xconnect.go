package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"sync"
	"time"

	"github.com/serve-zone/ingress/internal/ascii"
	"github.com/serve-zone/ingress/proxy/internal/h1wire"
	"github.com/serve-zone/ingress/proxy/internal/upstream"
	"github.com/serve-zone/ingress/routetable"
	"github.com/serve-zone/ingress/stats"
)

// The WebSocket tunnel, whatever the client's protocol: an HTTP/1.1 Upgrade
// (websocket.go) or an extended CONNECT with :protocol websocket (RFC 8441 over HTTP/2,
// h2tunnel.go; RFC 9220 over HTTP/3, h3tunnel.go) becomes an HTTP/1.1 WebSocket upgrade
// to a target (appendHead with upgrade set), sent by the pipeline's walk like every
// forward (openTunnel, pipeline.go). Then the tunnel copies bytes both ways (runTunnel).

var (
	// errNoTakeover: the client's wire cannot carry a tunnel (a writer that cannot be
	// hijacked, an HTTP/3 writer without its stream): a handshake failure.
	errNoTakeover = errors.New("proxy: the client's connection cannot be taken over for a tunnel")
	// errTunnelTarget: an extended CONNECT whose :path is no origin-form target
	// (originForm): 400.
	errTunnelTarget = errors.New("proxy: an extended CONNECT's :path is no origin-form target")
)

// upgradesToWebSocket reports a 101 whose Upgrade names websocket.
func upgradesToWebSocket(res *h1wire.Response) bool {
	for i := range res.Fields {
		f := &res.Fields[i]
		if ascii.EqualLower(f.Name(res.Head), "upgrade") && hasToken(string(f.Value(res.Head)), "websocket") {
			return true
		}
	}
	return false
}

// responseHeader is a target's answer head as an http.Header (for the 101's fields).
func responseHeader(res *h1wire.Response) http.Header {
	h := make(http.Header, len(res.Fields))
	for i := range res.Fields {
		f := &res.Fields[i]
		k := textproto.CanonicalMIMEHeaderKey(string(f.Name(res.Head)))
		h[k] = append(h[k], string(f.Value(res.Head)))
	}
	return h
}

// tunnelConn is the target side of a switched tunnel: uc, detached from its pool, and a
// reader that first gives the bytes that came with the 101 (after its head in w).
func tunnelConn(uc *upstream.Conn, w *upWork) (net.Conn, io.Reader) {
	var rest []byte
	if w.filled > w.resHead {
		rest = bytes.Clone(w.up[h1Headroom+w.resHead : h1Headroom+w.filled])
	}
	_ = uc.SetReadDeadline(time.Time{}) // the handshake's: a tunnel may be silent
	bc := uc.Detach()
	if len(rest) == 0 {
		return bc, bc
	}
	return bc, io.MultiReader(bytes.NewReader(rest), bc)
}

// tunnelClient is the client side of a tunnel: a stream of the client's connection.
type tunnelClient interface {
	net.Conn
	// closeWrite ends what we send to the client (END_STREAM, a QUIC stream's FIN).
	closeWrite()
}

// tunnelFinWait is how long a tunnel's client side may stay open once the target ended
// its side (its FIN, forwarded as the client's FIN, END_STREAM or QUIC FIN), like
// HAProxy's "timeout client-fin": then the tunnel closes (an HTTP/2 stream is told to
// stop sending with RST_STREAM NO_ERROR; an HTTP/3 one is no longer read, h3tunnel.go).
// A WebSocket target closes the connection only after the close handshake (RFC 6455
// §7.1.1), so nothing the client sends after it matters; and some clients never end
// their side of a stream whose server did (Chromium 148 sends neither END_STREAM nor
// RST_STREAM after a WebSocket's close over HTTP/2), which would otherwise hold the
// tunnel until TunnelIdleTimeout.
const tunnelFinWait = 2 * time.Second

// runTunnel copies bytes both ways between the client's stream and the target until
// both directions end (the client's at most tunnelFinWait after the target's), each
// chunk counted into e's route as it passes (so long tunnels land on the right day; the
// totals under protocol p). The tunnel is tracked like an HTTP/1.1 one (tunnelSet): no
// route-table swap touches it, Shutdown waits for it and its deadline closes it, and so
// does TunnelIdleTimeout without a byte either way (sweepIdle). It
// returns the bytes that went up (client to target) and down.
func (s *Server) runTunnel(e *routetable.Entry, p stats.Proto, client tunnelClient, bc net.Conn, br io.Reader) (up, down int64) {
	t := &tunnel{client: client, backend: bc}
	if !s.tunnels.add(t) {
		t.close()
		return 0, 0
	}
	s.totals.WebSocket(1)
	defer s.totals.WebSocket(-1)
	var wg sync.WaitGroup
	wg.Go(func() {
		var err error
		up, err = s.pipe(bc, client, e.Stats, p, true, t)
		if err != nil {
			t.close()
		} else {
			closeWrite(bc)
		}
	})
	var err error
	down, err = s.pipe(client, br, e.Stats, p, false, t)
	if err != nil {
		t.close()
	} else {
		client.closeWrite()
		// The target ended: the client's side gets tunnelFinWait to end too.
		fin := time.AfterFunc(tunnelFinWait, t.close)
		defer fin.Stop()
	}
	wg.Wait()
	t.close()
	s.tunnels.remove(t)
	return up, down
}

// acceptedFields are the target's 101 fields as the client's 200 carries them: without
// hop-by-hop fields and HTTP/1.1's handshake proof.
func acceptedFields(h http.Header) http.Header {
	removeHopByHop(h)
	delete(h, "Sec-Websocket-Accept")
	return h
}
