// Package h1wire is the HTTP/1.1 wire code of the proxy's fast path: the request and
// response head parsers, the chunked-body scanner and the one list of hop-by-hop fields.
// It knows nothing of routes, statistics or listeners: it reads bytes in place and
// reports spans into them, allocating nothing.
//
// # Hot path
//
// [HeadEnd] finds a head's end, [ParseRequest] classifies every field ([Field.Kind])
// and gives a [Verdict]; [ParseResponse] and [ChunkScanner.Scan] read what targets send.
// The proxy's fast path (proxy/h1serve.go, proxy/h1forward.go) calls them per request.
//
// The fuzzers here (FuzzH1RequestSubset, FuzzChunkScanner) hold the parsers to the
// standard library's reading; proxy's FuzzH1FastPathMatchesNetHTTP compares what
// targets receive through both HTTP/1.1 paths.
package h1wire
