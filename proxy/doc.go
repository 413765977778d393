// Package proxy is the data plane of the ingress: the plain-HTTP and TLS listeners
// (HTTP/1.1, HTTP/2 over TLS, prior-knowledge h2c), HTTP/3 over QUIC (http3.go), routing
// by Host/:authority/SNI through the current route table, forwarding to targets with
// passive health, WebSocket tunnels, per-hostname byte accounting (contract §5), OCSP
// stapling (ocsp.go) and graceful stop.
//
// The hot path starts at [handler.ServeHTTP] (handler.go): one TableSource.Load, one
// Compiled.Lookup, a target pick (targets.go), the forward (forward.go) with one RoundTrip
// on the lean HTTP/1.1 upstream (upstream.go, on the handler's goroutine; it falls back to
// the shared http.Transport for what it does not handle), and a few atomic adds into the
// route's stats.Host and the Totals. It writes no map of its own; the only lock it takes
// is the target's idle-connection pool mutex, held for one push or pop. It allocates only
// what net/http itself needs plus one small per-request outbound struct (the outgoing
// request, its URL and its body tracker) and the Forwarded value. Connection-level work
// (TLS handshake, byte counters, ConnState) lives in conn.go; everything in server.go is
// cold path.
//
// The handler is protocol-agnostic: it learns what it needs about the client connection
// from the *clientConn that ConnContext puts into the request context and falls back to
// the request itself when there is none (as for the HTTP/3 server sharing it).
//
// proxy imports routetable and stats only, never register or relay.
package proxy
