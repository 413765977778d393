package stats

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// gatherText registers c on a pedantic registry (which checks that Collect matches
// Describe and that every series is consistent), gathers it and renders the named
// families as sorted "name{label="value",…} value" lines. (prometheus/testutil would do,
// but it needs a module that go.mod does not list.)
func gatherText(t *testing.T, c prometheus.Collector, names ...string) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, mf := range mfs {
		if len(names) > 0 && !slices.Contains(names, mf.GetName()) {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			lines = append(lines, fmt.Sprintf("%s %s{%s} %v", strings.ToLower(mf.GetType().String()), mf.GetName(), strings.Join(labels, ","), v))
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

func wantText(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

func TestCollectorReadsTotals(t *testing.T) {
	var tot Totals
	tot.Request(ProtoHTTP1, 200, 10, 100)
	tot.Request(ProtoHTTP1, 204, 5, 0)
	tot.Request(ProtoHTTP2, 503, 1, 2)
	tot.Request(ProtoHTTP3, 99, 0, 0) // no class: "other"
	tot.Request(Proto(9), 200, 1, 1)  // unknown protocol: ignored
	tot.UnknownHost()
	tot.BackendFailure(FailureConnect)
	tot.BackendFailure(FailureRequest)
	tot.BackendFailure(FailureRequest)
	tot.InFlight(3)
	tot.InFlight(-1)
	tot.Conn(ProtoHTTP2, 4)
	tot.WebSocket(2)
	tot.TLSHandshakeFailure()
	tot.ClientAbuse()
	tot.ClientAbuse()
	tot.PenalizedRefusal()
	tot.Refusal(RefusalConnections)
	tot.Refusal(RefusalRequests)
	tot.Refusal(RefusalRequests)
	tot.Refusal(RefusalTunnels)
	tot.Refusal(RefusalHTTP3Penalty)
	tot.Refusal(RefusalProxyProtocol)
	tot.Refusal(RefusalProxyProtocol)
	tot.Refusal(RefusalDescriptors)
	tot.Refusal(RefusalMaxRequests)
	tot.Refusal(RefusalHandshakes)
	tot.Refusal(RefusalKind(99)) // unknown: ignored
	tot.TunnelClosedIdle()
	tot.TunnelClosedIdle()
	tot.TunnelClosedIdle()

	c := NewCollector(nil, &tot, CollectorOptions{})
	want := `
counter ingress_backend_failures_total{kind="connect"} 1
counter ingress_backend_failures_total{kind="handshake"} 0
counter ingress_backend_failures_total{kind="request"} 2
gauge ingress_open_connections{protocol="http1"} 0
gauge ingress_open_connections{protocol="http2"} 4
gauge ingress_open_connections{protocol="http3"} 0
gauge ingress_open_websockets{} 2
gauge ingress_requests_in_flight{} 2
counter ingress_tls_handshake_failures_total{} 1
counter ingress_client_abuse_total{} 2
counter ingress_penalized_connections_total{} 1
counter ingress_refusals_total{kind="connections"} 1
counter ingress_refusals_total{kind="requests"} 2
counter ingress_refusals_total{kind="tunnels"} 1
counter ingress_refusals_total{kind="penalty"} 1
counter ingress_refusals_total{kind="http3-penalty"} 1
counter ingress_refusals_total{kind="proxy-protocol"} 2
counter ingress_refusals_total{kind="descriptors"} 1
counter ingress_refusals_total{kind="max-requests"} 1
counter ingress_refusals_total{kind="handshakes"} 1
counter ingress_tunnels_closed_idle_total{} 3
counter ingress_unknown_host_requests_total{} 1
counter ingress_request_bytes_total{direction="in",protocol="http1"} 15
counter ingress_request_bytes_total{direction="out",protocol="http1"} 100
counter ingress_request_bytes_total{direction="in",protocol="http2"} 1
counter ingress_request_bytes_total{direction="out",protocol="http2"} 2
counter ingress_request_bytes_total{direction="in",protocol="http3"} 0
counter ingress_request_bytes_total{direction="out",protocol="http3"} 0
`
	var req []string
	for _, p := range []string{"http1", "http2", "http3"} {
		for _, class := range []string{"1xx", "2xx", "3xx", "4xx", "5xx", "other"} {
			v := map[string]int{"http1/2xx": 2, "http2/5xx": 1, "http3/other": 1}[p+"/"+class]
			req = append(req, fmt.Sprintf("counter ingress_requests_total{code_class=%q,protocol=%q} %d", class, p, v))
		}
	}
	if got, want := gatherText(t, c), wantText(want+strings.Join(req, "\n")); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	if got := gatherText(t, c, "ingress_host_requests_total"); got != "" {
		t.Fatalf("per-host series without PerHost:\n%s", got)
	}
}

func TestCollectorPerHostToday(t *testing.T) {
	clk := newFakeClock(time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC))
	r := NewRegistry(Options{Now: clk.Now})
	a, b := r.Host("a.example.test"), r.Host("b.example.test")
	a.Request(10, 20)
	b.Request(1, 1)
	clk.Set(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)) // yesterday's counts leave the series
	a.Request(10, 20)                                       // still recorded under the 28th: nobody rolled yet
	r.Roll(clk.Now())
	a.Request(3, 4)
	c := NewCollector(r, nil, CollectorOptions{PerHost: true})
	want := `
counter ingress_host_bytes_total{direction="in",hostname="a.example.test"} 3
counter ingress_host_bytes_total{direction="in",hostname="b.example.test"} 0
counter ingress_host_bytes_total{direction="out",hostname="a.example.test"} 4
counter ingress_host_bytes_total{direction="out",hostname="b.example.test"} 0
counter ingress_host_requests_total{hostname="a.example.test"} 1
counter ingress_host_requests_total{hostname="b.example.test"} 0
`
	if got, want := gatherText(t, c), wantText(want); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	// Both halves on one registry: descriptors do not collide.
	if got := gatherText(t, NewCollector(r, new(Totals), CollectorOptions{PerHost: true}), "ingress_host_requests_total"); !strings.Contains(got, `hostname="a.example.test"} 1`) {
		t.Fatalf("combined collector:\n%s", got)
	}
}
