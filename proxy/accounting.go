package proxy

import (
	"net/http"
	"sync/atomic"

	"github.com/serve-zone/ingress/routetable"
	"github.com/serve-zone/ingress/stats"
)

// Byte accounting (contract §5).
//
// HTTP/1.1 on our listeners: the clientConn counts every byte read and written (plaintext
// for TLS). Each request is attributed the read bytes since the previous request's end
// (its start line, header block and any body bytes read ahead) plus those read while it
// ran, and the bytes written while it ran; bytes written after its handler returned (a
// chunked terminator, trailers) go to the same hostname at the next request or at close;
// bytes left when the connection closes go to its last hostname. So on one connection the
// sum over its requests equals the bytes on the wire.
//
// HTTP/2 (and a request served through Handler without our connection): the decoded
// header field names and values, pseudo-headers included, plus body bytes.

// requestFieldBytes returns the decoded size of r's header fields as HTTP/2 carries them:
// :method, :scheme, :authority, :path and every regular field. It allocates nothing.
func requestFieldBytes(r *http.Request, secure bool) int64 {
	scheme := "http"
	if secure {
		scheme = "https"
	}
	n := len(":method") + len(r.Method) +
		len(":scheme") + len(scheme) +
		len(":authority") + len(r.Host) +
		len(":path") + len(r.RequestURI)
	return int64(n) + fieldBytes(r.Header) + fieldBytes(r.Trailer)
}

// responseFieldBytes returns the decoded size of a response header: :status plus fields.
func responseFieldBytes(h http.Header) int64 {
	return int64(len(":status")+3) + fieldBytes(h)
}

func fieldBytes(h http.Header) int64 {
	var n int
	for k, vv := range h {
		for _, v := range vv {
			n += len(k) + len(v)
		}
	}
	return int64(n)
}

// connAttribution counts a client connection once, under the first hostname it is
// attributed to (by its SNI or its first routed request), whatever the protocol: the
// rule of contract §5 for connections, in one place.
type connAttribution struct{ counted atomic.Bool }

// attribute counts the connection for h unless it already was.
func (a *connAttribution) attribute(h *stats.Host) {
	if !a.counted.Load() && a.counted.CompareAndSwap(false, true) {
		h.Connection()
	}
}

// record does one request's accounting, once, for every front-end: the route's
// counters when the host matched a route (e non-nil), and the totals (a request that got
// no answer, status 0, is recorded as 499).
func (s *Server) record(e *routetable.Entry, p stats.Proto, status int, in, out int64) {
	if e != nil {
		e.Stats.Request(in, out)
	}
	s.totals.Request(p, statusForTotals(status), in, out)
}

// settle closes an HTTP/1.1 request's byte account on its connection: in bytes were
// read for it (the caller knows how many of the bytes read are its), and everything
// written since the previous request's account is its output. The connection's later
// bytes (a close, the next request's head) go to e's hostname (lastHost).
func (cc *clientConn) settle(in int64, e *routetable.Entry) (out int64) {
	wr := cc.writeN.Load()
	out = wr - cc.acctWrite
	cc.acctWrite = wr
	cc.acctRead += in
	cc.lastHost = nil
	if e != nil {
		cc.lastHost = e.Stats
	}
	return out
}
