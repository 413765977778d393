// Package upstream keeps the connections to targets: one pool of idle HTTP/1.1
// connections per target address, and the rules every protocol front-end of the proxy
// applies to them. It knows nothing of routes, statistics or listeners.
//
// # Hot path
//
// [Pools.Get] (a sync.Map read, a small per-target mutex, one non-blocking peek at the
// connection) before a request, [Pools.Put] after a clean exchange. Neither allocates.
//
// # Rules kept here, once
//
//   - Which connection is reused: the most recently idled one (LIFO), never one idle
//     longer than [Limits.IdleTimeout], never one the target closed or wrote to while it
//     was idle (the probe before every reuse).
//   - When a failed exchange may be sent again on a new connection: [MayReplay].
//   - What an interim (1xx) answer means: [Interim].
//   - The limits: [DefaultLimits].
package upstream
