// Package relaysim is a development relay: it accepts ingress sessions on /typedrequest,
// answers registerClusterIngress and getClusterIngressRouteTable as contract §2–§4 say,
// pushes change hints and queries statistics, records every call it receives, and has knobs
// (refusals, delays, dropped answers, closed sockets) and faults (error answers of any
// text, garbage and oversized frames, a crash without closing handshake: faults.go) for
// the session's tests, the reliability suite and `ingress demo`. Every method of Server is
// safe for concurrent use while it runs.
//
// There is no hot path here: it is a test and demo tool. Tables are held as raw JSON and
// served as given; relaysim does not judge them, so tests can hand out broken tables.
package relaysim
