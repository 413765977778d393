package reliability

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/serve-zone/ingress/internal/binarytest"
	"github.com/serve-zone/ingress/internal/floodtest"
	"github.com/serve-zone/ingress/internal/testwait"
	"github.com/serve-zone/ingress/routetable"
)

// sinkTarget accepts connections and reads them to their end without ever answering: a
// body that streams to it stays in flight.
type sinkTarget struct {
	ln    net.Listener
	conns atomic.Int64
}

func newSinkTarget(t *testing.T) (*sinkTarget, routetable.Target) {
	t.Helper()
	s := &sinkTarget{ln: listen(t)}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	wg.Go(func() {
		for {
			c, err := s.ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(io.Discard, c) })
		}
	})
	t.Cleanup(func() {
		s.ln.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return s, binarytest.TargetOf(t, s.ln.Addr().String(), "lease-sink")
}

// holdFrom holds bodies from n addresses 127.0.<net>.1 and up (each conns connections,
// streams requests each over h2c when h2), and waits until every request was sent,
// refused or answered.
func holdFrom(t *testing.T, p *proc, host string, netByte byte, n, conns, streams int, h2 bool) *floodtest.Holders {
	t.Helper()
	spec := floodtest.HoldSpec{Addr: p.HTTP, Host: host, Conns: conns, H2: h2, Streams: streams, Body: 65000, Length: 1 << 20}
	for i := range n {
		spec.From = append(spec.From, net.IPv4(127, 0, netByte, byte(1+i)))
	}
	h := floodtest.Hold(context.Background(), spec)
	t.Cleanup(h.Close)
	testwait.UntilWhy(t, 4*waitLimit, "every held request sent, refused or answered", func() (bool, string) {
		return h.Settled(), h.String()
	})
	return h
}

// TestHeldBodiesBounded (issue 33, item 3): what all clients together may hold is
// bounded, whatever the number of their addresses. With --max-requests 400 and
// --request-buffer-total 16 MiB, clients from 4 addresses (over h2c: 128 streams on one
// connection each; over HTTP/1.1: 128 connections each) send the first 65,000 bytes of
// 1 MiB bodies and wait: 400 requests are in flight and the rest refused
// (max-requests), at most 256 bodies are held (16 MiB in 64 KiB) and the others stream
// to the target (which never answers), and 4 more addresses doing the same add
// refusals, not requests in flight nor memory.
func TestHeldBodiesBounded(t *testing.T) {
	const host = "held.rel.test"
	const maxRequests, heldBodies = 400, 256
	sink, target := newSinkTarget(t)
	p, _ := standalone(t, binarytest.TableJSON(t, 1, nil, binarytest.Route(host, "", false, target)),
		"--max-requests", fmt.Sprint(maxRequests), "--request-buffer-total", fmt.Sprint(16<<20),
		"--client-body-timeout", "2m", "--log-level", "info")

	for _, proto := range []struct {
		name           string
		h2             bool
		conns, streams int
		netA, netB     byte
	}{
		{name: "h2c", h2: true, conns: 1, streams: 128, netA: 41, netB: 42},
		{name: "HTTP/1.1", conns: 128, netA: 43, netB: 44},
	} {
		t.Run(proto.name, func(t *testing.T) {
			before := scrape(t, p.Admin)
			sinkBefore := sink.conns.Load()
			a := holdFrom(t, p, host, proto.netA, 4, proto.conns, proto.streams, proto.h2)
			// The server takes the requests in as it reads them: once it has, those
			// over the bound were refused and the others are in flight (a refused one
			// counts in flight while it is answered). Without the bound the wait ends
			// with every request in flight and none refused.
			var m metrics
			var inFlight, refused float64
			want := float64(a.Requests() - maxRequests)
			testwait.UntilWhy(t, waitLimit, fmt.Sprintf("%.0f requests refused as over --max-requests %d, the others in flight", want, maxRequests), func() (bool, string) {
				m = scrape(t, p.Admin)
				inFlight = m.get("ingress_requests_in_flight")
				refused = m.get(`ingress_refusals_total{kind="max-requests"}`) - before.get(`ingress_refusals_total{kind="max-requests"}`)
				return refused >= want && inFlight <= maxRequests, fmt.Sprintf("%.0f in flight, %.0f refused", inFlight, refused)
			})
			t.Logf("4 addresses: %s; %.0f in flight, %.0f refused (max-requests), %d bodies streamed to the target; %s",
				a, inFlight, refused, sink.conns.Load()-sinkBefore, m.usage())
			// The bodies past the held bound stream to the target (each on a new
			// connection); without the bound every admitted one would be held.
			testwait.UntilWhy(t, waitLimit, "the bodies past --request-buffer-total streaming to the target", func() (bool, string) {
				n := sink.conns.Load() - sinkBefore
				return n >= maxRequests-heldBodies, fmt.Sprintf("%d target connections", n)
			})
			rssA := scrape(t, p.Admin).usage().rss

			refusedA := m.get(`ingress_refusals_total{kind="max-requests"}`)
			b := holdFrom(t, p, host, proto.netB, 4, proto.conns, proto.streams, proto.h2)
			testwait.UntilWhy(t, waitLimit, "the 8 addresses' requests refused", func() (bool, string) {
				m = scrape(t, p.Admin)
				n := m.get(`ingress_refusals_total{kind="max-requests"}`) - refusedA
				f := m.get("ingress_requests_in_flight")
				return n >= float64(b.Requests()) && f <= maxRequests, fmt.Sprintf("%.0f refused, %.0f in flight", n, f)
			})
			t.Logf("8 addresses: %s; %s", b, m.usage())
			// 400 requests held or streaming take about 40 MB; 512 more refused
			// requests must not add as much again.
			if grew := m.usage().rss - rssA; grew > 32<<20 {
				t.Fatalf("RSS grew by %.1f MiB from 4 to 8 addresses (%.1f MiB): the bound grows with addresses", grew/(1<<20), m.usage().rss/(1<<20))
			}
			a.Close()
			b.Close()
			testwait.UntilWhy(t, waitLimit, "the held requests ended", func() (bool, string) {
				n := scrape(t, p.Admin).get("ingress_requests_in_flight")
				return n == 0, fmt.Sprintf("%.0f in flight", n)
			})
		})
	}
}
