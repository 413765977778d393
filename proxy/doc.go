// Package proxy is the data plane of the ingress: the plain-HTTP and TLS listeners
// (HTTP/1.1, HTTP/2 over TLS, prior-knowledge h2c), HTTP/3 over QUIC (http3.go), routing
// by Host/:authority/SNI through the current route table, forwarding to targets with
// passive health, WebSocket tunnels, per-hostname byte accounting (contract §5), OCSP
// stapling (ocsp.go) and graceful stop. ACME reaches it only through three Config hooks
// (GetCertificate, NextProtos, HTTPChallenge; challenge.go): the acme package answers the
// challenges on these listeners and serves the certificates it obtains.
//
// # Hot paths
//
// HTTP/1.1 (plain and over TLS) starts at [h1Conn.run] (h1serve.go): one goroutine per
// connection reads requests into its own buffer and parses them in place (internal/h1wire);
// a plain connection does so inside one syscall.RawConn.Read ([h1Conn.loopRaw], h1raw.go),
// so that it waits for the next request without a read that finds nothing;
// [h1Conn.serveRequest] (h1forward.go) does one TableSource.Load, one Compiled.Lookup, a
// target pick (targets.go), writes the request to a pooled target connection in one
// write and waits for the answer before reading (upstream.Conn.WriteRead), parses it in place and relays it, head and first body bytes in one
// write, then a few atomic adds into the route's stats.Host and the Totals. No header
// maps, no goroutine hand-off, no allocation per request (TestH1HotPathAllocs).
//
// HTTP/2 (h2 by ALPN, prior-knowledge h2c) is served by the own engine
// (proxy/internal/h2) on the same connection goroutine, from [h1Conn.serveH2]
// (h2serve.go); each stream's hot path starts at [h2Front.ServeH2] (h2forward.go), which
// translates it into the same lookup, pick, forwarding policy and accounting, without
// http.Request or ResponseWriter on the client side. Every request is then forwarded at
// the byte level like an HTTP/1.1 one ([h2Req.forwardBytes], h2bytes.go): its HTTP/1.1
// request head written into bytes, the exchange shared with the fast path
// ([Server.exchange], exchange.go), the answer parsed by h1wire and relayed as DATA; a
// request body streams to the target as its DATA arrives, under the client's flow control
// (h2upload.go: Content-Length when the client stated one, chunked otherwise). An
// extended CONNECT becomes a WebSocket tunnel (h2tunnel.go). With Config.HTTP2Server
// "std" HTTP/2 goes to net/http instead, as below.
//
// Everything the fast path does not handle (HTTP/2 with "std", HTTP/1.0, upgrades, Expect, chunked
// or large request bodies, anything its strict parser refuses) is handed, connection and
// already-read bytes together, to net/http, which calls [handler.ServeHTTP] (handler.go)
// per request: the same lookup and pick, then the forward (forward.go) with one
// RoundTrip on the lean HTTP/1.1 transport (lean.go, on the handler's goroutine; it
// falls back to the shared http.Transport for what it does not handle). HTTP/3 uses the
// same handler. It is protocol-agnostic: it learns what it needs about the client
// connection from the *clientConn that ConnContext puts into the request context and
// falls back to the request itself when there is none.
//
// Both paths share the forwarding core (core.go names its parts: target pick, failure
// mapping, fixed answers, forwarding fields, accounting) and the targets' pools
// (internal/upstream). Connection-level work
// (TLS handshake, byte counters, ConnState) lives in conn.go; server.go is cold path.
// Every accepted connection first passes the penalty check (penalize.go: an address
// whose HTTP/2 connection was ended for abuse is refused for a while), a hash and an
// atomic load or two of a fixed table (internal/penalty).
//
// proxy imports routetable and stats only, never register or relay.
package proxy
