package proxy

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/quic-go/quic-go"

	"github.com/serve-zone/ingress/internal/testwait"
	"github.com/serve-zone/ingress/routetable"
	"github.com/serve-zone/ingress/stats"
)

var addrC = netip.MustParseAddr("127.0.0.3")

// h1ClientFrom is e.h1Client dialling from the local address from.
func (e *env) h1ClientFrom(from netip.Addr) *http.Client {
	cl := e.h1Client()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: from.AsSlice()}}
	cl.Transport.(*http.Transport).DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", e.http)
	}
	return cl
}

// refusalSeries gathers ingress_refusals_total from a collector of totals, by kind.
func refusalSeries(t *testing.T, totals *stats.Totals) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(stats.NewCollector(nil, totals, stats.CollectorOptions{}))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "ingress_refusals_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" {
					got[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return got
}

// TestRefusalMetrics: each kind of refusal shows in /metrics' ingress_refusals_total
// under its kind: a request and a connection over A's budgets, a tunnel over B's, and
// C's TCP and QUIC connections while C is penalised.
func TestRefusalMetrics(t *testing.T) {
	e := newEnv(t, withHTTP3, func(c *Config) {
		c.MaxConnsPerClient, c.MaxRequestsPerClient, c.MaxTunnelsPerClient = 2, 1, 1
	})
	tg := newSlowTarget(t)
	e.apply([]routeSpec{
		{host: "app.example.test", tls: &routetable.RouteTLS{CertificateID: "c1"}, backends: []string{tg.addr}},
		{host: "ws.example.test", backends: []string{wsEcho(t)}},
	}, certSpec{"c1", []string{"app.example.test"}})

	// requests: A's second request while its first is in flight.
	slow := dialFrom(t, addrA, e.http)
	sendGet(t, slow, "/slow")
	tg.waitArrivals(t, 1)
	c2 := dialFrom(t, addrA, e.http)
	if st, _ := getOn(c2, bufio.NewReader(c2)); st != http.StatusServiceUnavailable {
		t.Fatalf("A's second request: %d, want 503", st)
	}
	// connections: A's third connection.
	refusedAtAccept(t, "A's third connection", addrA, e.http)

	// tunnels: B's second WebSocket.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opts := &websocket.DialOptions{Host: "ws.example.test", HTTPClient: e.h1ClientFrom(addrB)}
	ws, _, err := websocket.Dial(ctx, "ws://"+e.http+"/ws", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	if _, res, err := websocket.Dial(ctx, "ws://"+e.http+"/ws", opts); err == nil || res == nil || res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("B's second WebSocket: %v %v, want 503", err, res)
	}

	// penalty and http3-penalty: C's connections while C is penalised (an abuse
	// verdict's stand-in: penalize.go's strike).
	e.srv.strike(addrC, "test")
	pc := dialFrom(t, addrC, e.http)
	testwait.UntilWhy(t, 5*time.Second, "C's connection refused", func() (bool, string) {
		n := e.totals.Snapshot().Refusals[stats.RefusalPenalty]
		return n == 1, strconv.FormatUint(n, 10)
	})
	pc.Close()
	_, err = quicFrom(t, e, addrC)
	var te *quic.TransportError
	if !errors.As(err, &te) || te.ErrorCode != quic.ConnectionRefused {
		t.Fatalf("C's QUIC handshake: %v; want CONNECTION_REFUSED", err)
	}

	want := map[string]float64{"connections": 1, "requests": 1, "tunnels": 1, "penalty": 1, "http3-penalty": 1, "proxy-protocol": 0, "descriptors": 0, "max-requests": 0, "handshakes": 0}
	got := refusalSeries(t, e.totals)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("ingress_refusals_total{kind=%q} = %v, want %v", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("kinds exported: %v, want %v", got, want)
	}
}
