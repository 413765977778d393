package proxy

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"sync"
	"time"

	"github.com/serve-zone/ingress/proxy/internal/h1wire"
	"github.com/serve-zone/ingress/proxy/internal/upstream"
	"github.com/serve-zone/ingress/routetable"
	"github.com/serve-zone/ingress/stats"
)

// The start of every WebSocket tunnel, whatever the client's protocol: an HTTP/1.1
// Upgrade (websocket.go) or an extended CONNECT with :protocol websocket (RFC 8441 over
// HTTP/2, h2tunnel.go; RFC 9220 over HTTP/3, h3tunnel.go) becomes an HTTP/1.1 WebSocket
// upgrade to a target (appendHead with upgrade set), sent by the same exchange as every
// forward (Server.exchange with upgrade: a new connection, the 1xx rule with 101 as the
// final answer), over the same walk of the route's targets. Then the tunnel copies bytes
// both ways (runTunnel).

// upgradeResult is how the upgrade went.
type upgradeResult struct {
	// uc is the target's connection when it answered (res in the work area holds the
	// answer's head): switched, or any other final answer, which the caller relays.
	uc       *upstream.Conn
	switched bool
	rest     []byte // tunnel bytes that came with the 101 (a copy)
	oc       outcome
	err      error // why, for the access log
}

// upgrade writes the upgrade request for src and h into w and sends it to one of walk's
// targets: the same pick, connect retry and passive health as a forward. A handshake that
// breaks or times out (ResponseHeaderTimeout), or a 101 without Upgrade: websocket, is a
// handshake failure (counted and logged). With uc set the target took the request
// (walk.took): the caller ends it with walk.done.
func upgrade[S headFields](s *Server, walk *targetWalk, w *upWork, src S, h *outHead, cw clientWatch) upgradeResult {
	h.method, h.upgrade = http.MethodGet, true
	h.body, h.zeroLength, h.trailers = false, false, false
	w.wb, _ = appendHead(w.wb[:0], src, h)
	for {
		b := walk.next()
		if b == nil {
			return upgradeResult{oc: walk.last}
		}
		uc, err := s.exchange(w, attempt{route: walk.e, addr: b.Addr, watch: cw, upgrade: true})
		if err == nil && w.res.Status == http.StatusSwitchingProtocols && !upgradesToWebSocket(&w.res) {
			uc.Close()
			err = errNoUpgrade
		}
		if err == nil {
			walk.took()
			u := upgradeResult{uc: uc, switched: w.res.Status == http.StatusSwitchingProtocols}
			if u.switched && w.filled > w.resHead {
				u.rest = bytes.Clone(w.up[h1Headroom+w.resHead : h1Headroom+w.filled])
			}
			return u
		}
		o := classifyUpstream(err)
		if o == outcomeConnect {
			walk.missed(o, err, true) // marked down; the next target is tried
			continue
		}
		if o != outcomeClientGone && o != outcomeDescriptors {
			o = outcomeHandshake
		}
		walk.missed(o, err, false)
		return upgradeResult{oc: o, err: err}
	}
}

// upgradesToWebSocket reports a 101 whose Upgrade names websocket.
func upgradesToWebSocket(res *h1wire.Response) bool {
	for i := range res.Fields {
		f := &res.Fields[i]
		if eqFoldBytes(f.Name(res.Head), "upgrade") && hasToken(string(f.Value(res.Head)), "websocket") {
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

// tunnelConn is the target side of a switched tunnel: its connection, and a reader that
// first gives the bytes that came with the 101.
func (u *upgradeResult) tunnelConn() (net.Conn, io.Reader) {
	_ = u.uc.SetReadDeadline(time.Time{}) // the handshake's: a tunnel may be silent
	bc := u.uc.Detach()
	if len(u.rest) == 0 {
		return bc, bc
	}
	return bc, io.MultiReader(bytes.NewReader(u.rest), bc)
}

// reqWatch is a net/http request as Server.exchange's clientWatch.
type reqWatch struct{ r *http.Request }

func (w reqWatch) clientGone() bool { return w.r.Context().Err() != nil }

// openUpgrade is the start of a tunnel on the net/http front-ends, HTTP/1.1 Upgrade
// (websocket.go) and HTTP/3 extended CONNECT (h3tunnel.go): a tunnel slot, then the
// upgrade. When the target switched protocols it calls switched with the 101's fields,
// holding the slot and the target (walk.done) until switched returns; otherwise it
// answers the client itself: the target's answer relayed, a failure mapped to its
// status, or nothing at all for a client that went away (rs.abort: never net/http's
// default 200).
func (s *Server) openUpgrade(w http.ResponseWriter, r *http.Request, rs *reqState, connect bool, switched func(u *upgradeResult, accepted http.Header)) {
	if !s.tunnels.acquire() {
		s.answer(w, rs, outcomeUnavailable)
		return
	}
	defer s.tunnels.release()
	uw := h2Works.Get().(*h2Work)
	defer uw.release()
	te := removeHopByHop(r.Header)
	uw.hf = appendHeaderFields(uw.hf[:0], r.Header)
	uw.lf.fields = uw.hf
	if !validFields(uw.lf.fields) {
		rs.err = errBadField
		s.answer(w, rs, outcomeBadRequest)
		return
	}
	uw.lf.classify(uw.kinds[:])
	ip := clientIP(r.RemoteAddr)
	h := outHead{target: r.URL.RequestURI(), host: r.Host, te: te, newKey: connect,
		fwd: forwardedFor{clientIP: ip, host: r.Host, https: rs.secure, trusted: s.isTrusted(ip)}}
	walk := newWalk(s, rs.entry)
	u := upgrade(s, &walk, &uw.upWork, &uw.lf, &h, reqWatch{r})
	uw.lf = listFields{}
	rs.backend, rs.err = walk.b, u.err
	switch {
	case u.uc == nil && u.oc == outcomeClientGone:
		rs.abort = true
		return
	case u.uc == nil:
		s.answer(w, rs, u.oc)
		return
	}
	defer walk.done()
	if !u.switched {
		s.relayHTTP(w, r, rs, uw, u.uc, nil)
		return
	}
	switched(&u, responseHeader(&uw.res))
}

// tunnelClient is the client side of a tunnel: a stream of the client's connection.
type tunnelClient interface {
	net.Conn
	// closeWrite ends what we send to the client (END_STREAM, a QUIC stream's FIN).
	closeWrite()
}

// runTunnel copies bytes both ways between the client's stream and the target until
// both directions end, each chunk counted into e's route as it passes (so long tunnels
// land on the right day; the totals under protocol p). The tunnel is tracked like an HTTP/1.1 one (tunnelSet): no
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

// countUpgrade records the CONNECT and its 200 as one request of the route.
func (s *Server) countUpgrade(e *routetable.Entry, p stats.Proto, in, out int64) {
	s.record(e, p, http.StatusOK, in, out)
}
