// Package h2 is the ingress's own HTTP/2 server engine (RFC 9113): it serves one
// already-accepted connection, TLS after ALPN "h2" or plain with the prior-knowledge
// preface, and hands each request stream to a Handler. It knows nothing of routes,
// targets, statistics or listeners; frames and HPACK are coded by
// golang.org/x/net/http2's Framer and hpack. Header blocks (HEADERS and CONTINUATION
// frames) are put together and their fields checked by the engine itself (headers.go),
// as the Framer's ReadMetaHeaders would, without its allocations per block.
//
// # Goroutines and the hot path
//
// The hot path starts at [Conn.Serve]'s read loop (conn.go): one goroutine per
// connection reads frames and handles each one inline, under the connection's lock
// (no channel per frame). A new request stream runs its handler ([Handler.ServeH2]) on
// a goroutine of its own, a worker the connection keeps parked between streams, with a
// Stream object reused from an earlier stream (reuse.go): a busy connection starts a
// stream without allocating. The handler reads the request body with [Stream.Read] and
// answers with [Stream.WriteHead], [Stream.Write] and [Stream.Close]. These only queue:
// one writer goroutine per connection (writer.go) drains the queue of every stream,
// encodes control frames, HEADERS and DATA into a per-connection buffer and flushes it
// only when nothing more is queued, so a small response's HEADERS and DATA(END_STREAM)
// leave in one write and, under load, several responses share one.
//
// # Idle connections
//
// A connection without streams and with nothing to write for Config.ParkAfter parks
// (park.go): its writer goroutine ends, its buffers go back to pools or are dropped,
// and Serve returns ErrParked, so that the caller can wait for the socket without a
// goroutine and call Resume when it is readable. The connection's state (settings,
// windows, budgets, the request decoder's HPACK table) stays; the response encoder
// starts afresh and tells the client so.
//
// # Limits
//
// Everything a client can make the connection hold is bounded (config.go): streams
// (MaxConcurrentStreams counts handlers still running, not only open streams, so reset
// streams do not free their slot before their handler ends), request body buffers (the
// receive windows), response buffers (StreamBuffer per stream), queued control frames
// (MaxQueuedControl), header lists (MaxHeaderBytes, also bounding CONTINUATION
// sequences), resets sent or received, refused streams and request heads over
// MaxHeaderBytes (answered 431 and charged as 16 resets: an HPACK bomb is nothing but
// them), and frames that do no work (token buckets whose exhaustion ends the connection with ENHANCE_YOUR_CALM;
// WINDOW_UPDATEs are free up to two per DATA frame sent and per stream opened).
//
// A reset the client sends is charged whenever it arrives, also after the stream's
// answer is complete, and so is the first frame that arrives on a stream after the
// engine reset it (trailers or body in flight, ignored as RFC 9113 §5.1 says:
// lateframes.go). A connection serves MaxStreams streams in all (default 1000), then
// asks the client to go away (GOAWAY NO_ERROR naming the last stream it serves) and
// closes once those are done.
//
// These budgets are per connection. A verdict of abuse (ENHANCE_YOUR_CALM) is reported
// to Config.OnAbuse, so that the caller can refuse the client's next connections for a
// while: a reconnecting flood would otherwise get a fresh budget every time. A verdict
// the caller reaches itself (a penalty of the client's address) ends the connections it
// already holds with [Conn.Abort].
package h2
