// Package proxy is the data plane of the ingress: the plain-HTTP and TLS listeners
// (HTTP/1.1, HTTP/2 over TLS, prior-knowledge h2c), HTTP/3 over QUIC (http3.go), routing
// by Host/:authority/SNI through the current route table, forwarding to targets with
// passive health, WebSocket tunnels, per-hostname byte accounting (contract §5), OCSP
// stapling (ocsp.go) and graceful stop. ACME reaches it only through three Config hooks
// (GetCertificate, NextProtos, HTTPChallenge; challenge.go): the acme package answers the
// challenges on these listeners and serves the certificates it obtains.
//
// # One request pipeline, thin front-ends
//
// Every request, whatever its protocol, is served by one function ([Server.serve],
// pipeline.go): its front-end translates the wire into a pipe (the request's fields, its
// body, an answer sink, a watch on the client, its protocol) and back, through the
// frontEnd methods of its work area. The pipeline takes one verdict ([Server.decide],
// core.go: a fixed answer, the redirect to HTTPS, a tunnel or a forward). A forward has
// its HTTP/1.1 head written with the one forwarding-field table ([appendHead],
// outhead.go), a body held up to Config.RequestBuffer before the target walk starts
// ([Server.holdBody], bodybuf.go: one that ends within it is checked whole, and a
// malformed one reaches no target), the one replay rule ([mayResend]), then walks the
// route's targets ([Server.try]: targetWalk, targets.go) through the one exchange with a
// target ([Server.exchange], exchange.go, over the pools of internal/upstream: dial,
// reuse probe, header timeout and size, the 1xx rule, the replay rule on a new
// connection); the body goes to the target, the held bytes first and the rest as it
// comes ([uploader], h2upload.go). A tunnel's handshake is the same walk with upgrade
// set ([Server.openTunnel]). The answer comes back through the one relay ([relay.run],
// relay.go) into the front-end's answerSink, except on the HTTP/1.1 fast path, which
// relays the target's bytes as they came (h1forward.go). Then the statistics
// ([Server.record]) and the access-log line, once. Failures map to statuses in
// errors.go; accounting is accounting.go's.
//
// # Hot paths
//
// HTTP/1.1 (plain and over TLS) starts at [tcpConn.run] (h1serve.go): one goroutine per
// connection reads requests into its own buffer and parses them in place (internal/h1wire);
// a plain connection does so inside one syscall.RawConn.Read ([tcpConn.loopRaw], h1raw.go),
// so that it waits for the next request without a read that finds nothing;
// [tcpConn.serveRequest] (h1forward.go) hands it to the pipeline, which writes the request
// to a pooled target connection in one write and waits for the answer before reading
// (upstream.Conn.WriteRead); the fast path's byte relay parses it in place and relays
// it, head and first body bytes in one write, then a few atomic adds into the route's
// stats.Host and the Totals. No header maps, no goroutine hand-off, no allocation per
// request (TestH1HotPathAllocs).
//
// HTTP/2 (h2 by ALPN, prior-knowledge h2c) is served by the own engine
// (proxy/internal/h2) on the same connection goroutine, from [tcpConn.serveH2]
// (h2serve.go); each stream's hot path starts at [h2Front.ServeH2] (h2forward.go), which
// hands it to the pipeline: the head written by appendHead ([streamWork.forwardHead],
// h2bytes.go), the shared walk and exchange, the answer relayed as DATA by relay.run
// into the stream (h2Sink). An extended CONNECT becomes a WebSocket tunnel (h2tunnel.go).
//
// Everything the fast HTTP/1.1 path does not handle (HTTP/1.0, upgrades, Expect, chunked
// or large request bodies, anything its strict parser refuses) is handed, connection and
// already-read bytes together, to net/http, which calls [handler.ServeHTTP] (handler.go)
// per request; HTTP/3 (quic-go) uses the same handler. It hands the request to the same
// pipeline ([httpWork.forwardHead], httpforward.go), the response writer as the
// answerSink (httpSink). It learns what it needs about the client connection from the
// *clientConn that ConnContext puts into the request context and falls back to the
// request itself when there is none. net/http's HTTP/2 server is no front-end of the
// ingress: the package's differential tests use it as their oracle.
//
// Idle connections belong to the parker (park.Parker, proxy/internal/park; when to
// park and what a woken connection becomes are h1idle.go's): one epoll goroutine per
// server holds every HTTP/1.1 and HTTP/2 connection that waited for its client long
// enough, with no goroutine or buffer of its own; a plain HTTP/1.1 one as a small
// sleeper whose Go connection is rebuilt from its own descriptor when it wakes
// (h1sleep_linux.go). Every form a connection takes shares one state word (connLife,
// life.go: a park.State), which says who owns it now and how to end it: its goroutine
// (new, idle, active), the parker (parked, asleep), a goroutine changing its form
// (sleeping, waking), or whoever ended it (closing, struck). Whoever ends a connection
// (idle timeout, hang-up, Shutdown, closeNow, a strike) switches on that word alone,
// and claims a parked one from the parker first, so that its descriptor leaves the
// epoll set before anything closes it.
//
// Connection-level work (TLS handshake, byte counters, ConnState) lives in conn.go;
// server.go is cold path. Every accepted connection first passes the penalty check
// (penalize.go: an address whose HTTP/2 connection was ended for abuse is refused for a
// while), a hash and an atomic load or two of a fixed table (internal/penalty). A
// connection from a trusted load balancer (Config.ProxyProtocolFrom) passes it after its
// PROXY header, on its own goroutine, as the header's client (balancer.go).
//
// proxy imports routetable and stats only, never register or relay.
package proxy
