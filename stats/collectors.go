package stats

import (
	"github.com/prometheus/client_golang/prometheus"
)

// CollectorOptions configure NewCollector. The zero value exports process-wide series only.
type CollectorOptions struct {
	// PerHost adds today's series per hostname. Their cardinality is bounded by the
	// hostnames the registry knows, which only route tables create; they restart from
	// zero at each UTC midnight (a counter reset, as rate() expects).
	PerHost bool
}

var codeClasses = [numStatusClasses]string{"other", "1xx", "2xx", "3xx", "4xx", "5xx"}

type collector struct {
	reg    *Registry
	totals *Totals
	opts   CollectorOptions

	requests, bytes, unknown, failures, inFlight, conns, websockets, tlsFailures *prometheus.Desc
	abuse, penalized, tunnelIdle, refusals                                       *prometheus.Desc
	hostRequests, hostBytes                                                      *prometheus.Desc
}

// NewCollector returns a collector that reads totals and reg at scrape time, so the hot
// path increments nothing twice. A nil totals omits the process-wide series; a nil reg
// omits the per-hostname ones. Register it once per registry; Collect is safe for
// concurrent use.
func NewCollector(reg *Registry, totals *Totals, opts CollectorOptions) prometheus.Collector {
	return &collector{
		reg:    reg,
		totals: totals,
		opts:   opts,
		requests: prometheus.NewDesc("ingress_requests_total",
			"Finished client requests by protocol and response status class.", []string{"protocol", "code_class"}, nil),
		bytes: prometheus.NewDesc("ingress_request_bytes_total",
			"Bytes received from (in) and sent to (out) clients for requests.", []string{"protocol", "direction"}, nil),
		unknown: prometheus.NewDesc("ingress_unknown_host_requests_total",
			"Requests whose Host matched no route.", nil, nil),
		failures: prometheus.NewDesc("ingress_backend_failures_total",
			"Backend failures by kind (connect, handshake, request).", []string{"kind"}, nil),
		inFlight: prometheus.NewDesc("ingress_requests_in_flight",
			"Client requests being served.", nil, nil),
		conns: prometheus.NewDesc("ingress_open_connections",
			"Open client connections by protocol.", []string{"protocol"}, nil),
		websockets: prometheus.NewDesc("ingress_open_websockets",
			"Open WebSocket tunnels.", nil, nil),
		tlsFailures: prometheus.NewDesc("ingress_tls_handshake_failures_total",
			"Failed client TLS handshakes.", nil, nil),
		abuse: prometheus.NewDesc("ingress_client_abuse_total",
			"Client connections ended for abuse (HTTP/2 floods, GOAWAY ENHANCE_YOUR_CALM); each penalises the client's address for a while.", nil, nil),
		penalized: prometheus.NewDesc("ingress_penalized_connections_total",
			"Client connections closed at accept, before any TLS or HTTP, because their address is penalised for abuse.", nil, nil),
		tunnelIdle: prometheus.NewDesc("ingress_tunnels_closed_idle_total",
			"Tunnels (WebSockets over HTTP/1.1, HTTP/2 and HTTP/3) closed because no byte passed either way for the tunnel idle timeout.", nil, nil),
		refusals: prometheus.NewDesc("ingress_refusals_total",
			"What was refused to a client before any target saw it, by kind: connections, requests and tunnels over their address's budget, connections of penalised addresses (penalty on TCP, http3-penalty on QUIC), a trusted balancer's connections with a bad or missing PROXY protocol header (proxy-protocol), requests the ingress could not send for want of file descriptors (descriptors), requests and tunnels over the bound of requests in flight over all clients (max-requests), QUIC handshakes over the bounds of handshakes in progress (handshakes).", []string{"kind"}, nil),
		hostRequests: prometheus.NewDesc("ingress_host_requests_total",
			"Requests for a route hostname today (UTC); resets at midnight.", []string{"hostname"}, nil),
		hostBytes: prometheus.NewDesc("ingress_host_bytes_total",
			"Client bytes for a route hostname today (UTC); resets at midnight.", []string{"hostname", "direction"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	if c.totals != nil {
		for _, d := range []*prometheus.Desc{c.requests, c.bytes, c.unknown, c.failures, c.inFlight, c.conns, c.websockets, c.tlsFailures, c.abuse, c.penalized, c.tunnelIdle, c.refusals} {
			ch <- d
		}
	}
	if c.opts.PerHost && c.reg != nil {
		ch <- c.hostRequests
		ch <- c.hostBytes
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	if t := c.totals; t != nil {
		counter := func(d *prometheus.Desc, v uint64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
		}
		gauge := func(d *prometheus.Desc, v int64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
		}
		for p := range numProtos {
			proto := p.String()
			for class := range numStatusClasses {
				counter(c.requests, t.requests[p][class].Load(), proto, codeClasses[class])
			}
			counter(c.bytes, t.bytesIn[p].Load(), proto, "in")
			counter(c.bytes, t.bytesOut[p].Load(), proto, "out")
			gauge(c.conns, t.conns[p].Load(), proto)
		}
		counter(c.unknown, t.unknownHost.Load())
		for k := range numFailureKinds {
			counter(c.failures, t.failures[k].Load(), k.String())
		}
		gauge(c.inFlight, t.inFlight.Load())
		gauge(c.websockets, t.websockets.Load())
		counter(c.tlsFailures, t.tlsFailures.Load())
		counter(c.abuse, t.abuse.Load())
		counter(c.penalized, t.refusals[RefusalPenalty].Load())
		counter(c.tunnelIdle, t.tunnelIdle.Load())
		for k := range numRefusalKinds {
			counter(c.refusals, t.refusals[k].Load(), k.String())
		}
	}
	if c.opts.PerHost && c.reg != nil {
		for _, h := range c.reg.todayCounters() {
			ch <- prometheus.MustNewConstMetric(c.hostRequests, prometheus.CounterValue, float64(h.c.Requests), h.name)
			ch <- prometheus.MustNewConstMetric(c.hostBytes, prometheus.CounterValue, float64(h.c.BytesIn), h.name, "in")
			ch <- prometheus.MustNewConstMetric(c.hostBytes, prometheus.CounterValue, float64(h.c.BytesOut), h.name, "out")
		}
	}
}

type namedCounters struct {
	name string
	c    Counters
}

// todayCounters copies today's counters of every known host, so that the scrape sends them
// without holding the registry's lock.
func (r *Registry) todayCounters() []namedCounters {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rollLocked(DayOf(r.now()))
	d := Day(r.today.Load() - 1)
	hosts := r.sortedLocked()
	out := make([]namedCounters, len(hosts))
	for i, h := range hosts {
		out[i] = namedCounters{h.name, r.countersLocked(d, h.name, h)}
	}
	return out
}
