package stats

// RefusalKind names why the ingress refused a client something before any target saw
// it (the `kind` label of ingress_refusals_total).
type RefusalKind uint8

const (
	// RefusalConnections: a connection over its address's open-connection budget,
	// refused at accept (TCP) or at the handshake (QUIC).
	RefusalConnections RefusalKind = iota
	// RefusalRequests: a request or stream over its address's in-flight budget (HTTP/2
	// REFUSED_STREAM, HTTP/1.1 and HTTP/3 503 with Retry-After).
	RefusalRequests
	// RefusalTunnels: a WebSocket over its address's open-tunnel budget (503).
	RefusalTunnels
	// RefusalPenalty: a TCP connection from an address penalised for abuse, refused at
	// accept (also counted in ingress_penalized_connections_total).
	RefusalPenalty
	// RefusalHTTP3Penalty: a QUIC connection from an address penalised for abuse,
	// refused at the handshake.
	RefusalHTTP3Penalty
	// RefusalProxyProtocol: a connection from a trusted load balancer whose PROXY
	// protocol header was malformed, truncated or did not come in time, closed before
	// any TLS or HTTP.
	RefusalProxyProtocol
	// RefusalDescriptors: a request the ingress could not send for want of a file
	// descriptor of its own (EMFILE or ENFILE dialling its target): 503, not the
	// target's failure.
	RefusalDescriptors
	// RefusalMaxRequests: a request or tunnel over the bound of requests in flight over
	// all clients (--max-requests): REFUSED_STREAM on HTTP/2, 503 elsewhere.
	RefusalMaxRequests
	// RefusalHandshakes: a QUIC connection over the bounds of handshakes in progress,
	// its address's or all addresses' (CONNECTION_REFUSED).
	RefusalHandshakes
	numRefusalKinds
)

// String returns the kind's metric label.
func (k RefusalKind) String() string {
	switch k {
	case RefusalConnections:
		return "connections"
	case RefusalRequests:
		return "requests"
	case RefusalTunnels:
		return "tunnels"
	case RefusalPenalty:
		return "penalty"
	case RefusalHTTP3Penalty:
		return "http3-penalty"
	case RefusalProxyProtocol:
		return "proxy-protocol"
	case RefusalDescriptors:
		return "descriptors"
	case RefusalMaxRequests:
		return "max-requests"
	case RefusalHandshakes:
		return "handshakes"
	}
	return "unknown"
}

// Refusal counts one refusal of kind k.
func (t *Totals) Refusal(k RefusalKind) {
	if k < numRefusalKinds {
		t.refusals[k].Add(1)
	}
}
