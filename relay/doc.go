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
// request body. No string the other side chose (an error text, a method name, a correlation
// id, a close reason, the keys a malformed frame names) reaches a log line above debug level
// or the text of an error this package returns: they carry the string's fingerprint
// (length and a short hash, see untrusted.go), since a peer may echo the bearer in any of
// them and in any encoding. At debug level the string itself is logged, passed through
// Options.Redact; a RemoteError's Text has passed through it too.
package relay
