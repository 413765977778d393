// Package relay speaks TypedRequest over one WebSocket (contract §2): the envelope, its
// decoder, and Peer, which calls methods on the other side and serves methods to it over
// the same socket, with liveness pings, per-call timeouts, retries and a message size limit.
//
// relay is a leaf: it knows nothing of routes, sessions or HTTP serving. A Peer is made by
// Dial (the ingress side) or Accept (the relay side, used by relaysim), then driven by Run.
//
// There is no request hot path here: a session makes a handful of calls a minute. The hot
// path of a Peer starts at readLoop, which reads one frame at a time and hands requests to
// bounded handler goroutines so that answers to our own calls are never stuck behind them.
//
// Frames carry secrets (the registration bearer travels in requests and is echoed back in
// answers), so no function of this package ever logs or puts into an error a raw frame or a
// request body; log lines name the method, the correlation id and what was wrong, and every
// string the other side chose passes through Options.Redact on its way into a log line or a
// RemoteError's Text (a peer may echo the bearer in any of them).
package relay
