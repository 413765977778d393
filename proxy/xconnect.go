package proxy

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/serve-zone/ingress/routetable"
	"github.com/serve-zone/ingress/stats"
)

// Extended CONNECT (RFC 8441 over HTTP/2, RFC 9220 over HTTP/3) with :protocol websocket
// becomes an HTTP/1.1 WebSocket upgrade to a target; this is the part both front-ends
// share (h2tunnel.go, h3tunnel.go): the upgrade request, the walk over the targets, the
// handshake, and the tunnel once the target switched protocols. HTTP/1.1 upgrades
// (websocket.go) take the same walk, dial and handshake (dialUpgrade).

// asUpgrade turns the outgoing request of an extended CONNECT into the HTTP/1.1 upgrade
// the target expects: GET, Connection/Upgrade, a Sec-WebSocket-Key of our own (RFC 8441
// has none: the stream itself is the proof), no body (the stream's DATA is the tunnel's,
// after the 101).
func asUpgrade(req *http.Request) {
	req.Method = http.MethodGet
	req.Body, req.ContentLength = nil, 0
	h := req.Header
	h["Connection"] = valUpgrade
	h["Upgrade"] = valWebSocket
	var key [16]byte
	_, _ = rand.Read(key[:])
	h["Sec-Websocket-Key"] = []string{base64.StdEncoding.EncodeToString(key[:])}
}

// upgradeResult is how the upgrade went.
type upgradeResult struct {
	res *http.Response // the target's answer (101 or any other); nil when none came
	bc  net.Conn       // the target connection when res is set
	br  *bufio.Reader  // bc's reader (it may hold the first tunnel bytes)
	oc  outcome        // what to answer when res is nil
	err error          // why, for the access log
}

// dialUpgrade sends req (asUpgrade'd, its URL host set here) to one of walk's targets:
// the same pick, connect retry and passive health as a forward. A handshake that breaks
// or a 101 without Upgrade: websocket is a handshake failure (counted and logged). With
// res set the target took the request (walk.took): the caller ends it with walk.done.
// The handshake is bounded by ResponseHeaderTimeout and by ctx (the client's presence).
func (s *Server) dialUpgrade(ctx context.Context, walk *targetWalk, req *http.Request) upgradeResult {
	var (
		b  *routetable.Backend
		bc net.Conn
	)
	for {
		if b = walk.next(); b == nil {
			return upgradeResult{oc: walk.last}
		}
		var err error
		bc, err = s.dialer.DialContext(ctx, "tcp", b.Addr)
		if err == nil {
			walk.took()
			break
		}
		if ctx.Err() != nil {
			walk.missed(outcomeClientGone, err, false)
			return upgradeResult{oc: outcomeClientGone, err: err}
		}
		walk.missed(outcomeConnect, err, true) // marked down; the next target is tried
	}
	req.URL.Host = b.Addr
	_ = bc.SetDeadline(time.Now().Add(s.cfg.ResponseHeaderTimeout))
	stop := context.AfterFunc(ctx, func() { _ = bc.SetDeadline(time.Unix(1, 0)) })
	br := bufio.NewReaderSize(bc, 4<<10)
	var res *http.Response
	err := req.Write(bc)
	if err == nil {
		res, err = http.ReadResponse(br, req)
	}
	gone := !stop() || ctx.Err() != nil
	if err == nil && !gone && res.StatusCode == http.StatusSwitchingProtocols &&
		!httpguts.HeaderValuesContainsToken(res.Header["Upgrade"], "websocket") {
		err = errNoUpgrade
	}
	if err != nil || gone {
		bc.Close()
		walk.done()
		if gone {
			return upgradeResult{oc: outcomeClientGone, err: err}
		}
		s.failed(outcomeHandshake, walk.e, b, err)
		return upgradeResult{oc: outcomeHandshake, err: err}
	}
	_ = bc.SetDeadline(time.Time{})
	return upgradeResult{res: res, bc: bc, br: br}
}

// openUpgrade is the start of a tunnel on the net/http front-ends, HTTP/1.1 Upgrade
// (websocket.go) and HTTP/3 extended CONNECT (h3tunnel.go, connect set: the request
// becomes an upgrade first): a tunnel slot, then the walk, dial and handshake of
// dialUpgrade. When the target switched protocols it calls switched, holding the slot and
// the target (walk.done) until switched returns; otherwise it answers the client itself:
// the target's answer relayed, a failure mapped to its status, or nothing at all for a
// client that went away (rs.abort: never net/http's default 200).
func (s *Server) openUpgrade(w http.ResponseWriter, r *http.Request, rs *reqState, connect bool, switched func(u upgradeResult)) {
	if !s.tunnels.acquire() {
		s.answer(w, rs, outcomeUnavailable)
		return
	}
	defer s.tunnels.release()
	o := s.newOutbound(r, rs, true)
	if connect {
		asUpgrade(&o.req)
	}
	walk := newWalk(s, rs.entry)
	u := s.dialUpgrade(r.Context(), &walk, &o.req)
	rs.backend, rs.err = walk.b, u.err
	switch {
	case u.res == nil && u.oc == outcomeClientGone:
		rs.abort = true
		return
	case u.res == nil:
		s.answer(w, rs, u.oc)
		return
	}
	defer walk.done()
	if u.res.StatusCode != http.StatusSwitchingProtocols {
		s.relay(w, r, u.res, rs)
		u.bc.Close()
		return
	}
	switched(u)
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
// route-table swap touches it, Shutdown waits for it and its deadline closes it. It
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
		up, err = s.pipe(bc, client, e.Stats, p, true)
		if err != nil {
			t.close()
		} else {
			closeWrite(bc)
		}
	})
	var err error
	down, err = s.pipe(client, br, e.Stats, p, false)
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
