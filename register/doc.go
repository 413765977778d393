// Package register runs the ingress's session with the cluster's relay (contract §2–§5):
// connect, register first on every connection, honour refusals and back off, pull route
// tables when the relay hints, after acceptances and every five minutes, and answer the
// relay's statistics queries.
//
// The package is control plane only: it never touches a listener and has no request hot
// path. It sees the data plane through two small interfaces, [Tables] (a place to apply
// tables) and [Statistics] (a place to query counters), so tests can stand in for either.
//
// Where to start reading: [Session.Run] is the connection loop, register.go the
// registration and its refusals, pull.go the coalescing puller.
package register
