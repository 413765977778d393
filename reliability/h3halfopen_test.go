package reliability

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"

	"github.com/serve-zone/ingress/internal/binarytest"
	"github.com/serve-zone/ingress/internal/floodtest"
	"github.com/serve-zone/ingress/internal/testwait"
	"github.com/serve-zone/ingress/routetable"
)

// TestHalfOpenQUICBounded (issue 33, item 2): one address starts QUIC handshakes and
// drops what follows each ClientHello (answering Retry packets: it proves its address)
// for 6 s (or until its first refusal). Its half-open connections take places in its budget of connections from
// their first packet: the HTTP/3 connections open stay within the budget (512; the
// binary holds no more than 32 (proxy's per-address bound) in progress per address), the
// refusals are counted as handshakes, the RSS stays flat, a bystander's HTTP/3 request
// is answered meanwhile, and once the flood stops every half-open connection ends.
// Before, the connections took no place until their handshakes completed: 1,300 were
// open after 3 s and the RSS grew by about 100 MB a second.
func TestHalfOpenQUICBounded(t *testing.T) {
	backend := echoBackend(t, "h3")
	certPEM, keyPEM := keyPair(t, h3Host)
	p, _ := standalone(t, binarytest.TableJSON(t, 1, []routetable.Certificate{{ID: "c", CertificatePEM: certPEM, PrivateKeyPEM: keyPEM}},
		binarytest.Route(h3Host, "c", false, backend)),
		"--http3=true", "--read-header-timeout", "2s", "--log-level", "info")
	started := p.FindLine(0, func(m map[string]any) bool { return m["msg"] == "ingress started" })
	h3addr, _ := started["http3"].(string)
	if _, _, err := net.SplitHostPort(h3addr); err != nil {
		t.Fatalf("the ingress started line names no HTTP/3 address (%q): is HTTP/3 on?", h3addr)
	}
	const budget = 512
	const open = `ingress_open_connections{protocol="http3"}`

	// The flood runs 6 s, and on until a refusal was counted by the binary and seen by
	// the attacker (at most 30 s): a loaded machine starts fewer handshakes a second, and
	// a refusal the binary counted may still be on its way.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	floodStart := time.Now()
	flood := make(chan floodtest.HalfOpenResult, 1)
	var refusalsSeen atomic.Int64
	go func() {
		r, err := floodtest.RunHalfOpen(ctx, floodtest.HalfOpen{Addr: h3addr, SNI: h3Host, From: net.IPv4(127, 0, 0, 81),
			Concurrency: 64, Attempt: 250 * time.Millisecond, Refusals: &refusalsSeen})
		if err != nil {
			t.Error(err)
		}
		flood <- r
	}()
	var peakOpen, firstRSS, lastRSS float64
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	bystander := false
	for n := 0; ctx.Err() == nil; n++ {
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
		m := scrape(t, p.Admin)
		peakOpen = max(peakOpen, m.get(open))
		if n == 2 {
			firstRSS = m.usage().rss // once the flood is under way
		}
		lastRSS = m.usage().rss
		if time.Since(floodStart) >= 6*time.Second && m.get(`ingress_refusals_total{kind="handshakes"}`) > 0 && refusalsSeen.Load() > 0 {
			cancel()
		}
		if n == 4 && !bystander {
			bystander = true
			c := h3Client(t, net.IPv4(127, 0, 0, 1), h3addr)
			if code, body, err := h3Get(c, "/bystander"); err != nil || code != http.StatusOK {
				t.Errorf("HTTP/3 from 127.0.0.1 during the flood: %d %q %v; want 200", code, body, err)
			}
			_ = c.Transport.(*http3.Transport).Close() // its connection is not the flood's

		}
	}
	r := <-flood
	m := scrape(t, p.Admin)
	t.Logf("flood: %d attempts, %d Retry packets, %d refused by the server; at most %.0f HTTP/3 connections open; RSS %.1f MiB after 1 s, %.1f MiB at the end; %s; %.0f handshakes refused",
		r.Attempts, r.Retries, r.Refused, peakOpen, firstRSS/(1<<20), lastRSS/(1<<20), m.usage(), m.get(`ingress_refusals_total{kind="handshakes"}`))
	if peakOpen > budget {
		t.Fatalf("%.0f HTTP/3 connections open from one address, over its budget of %d", peakOpen, budget)
	}
	if r.Refused == 0 || m.get(`ingress_refusals_total{kind="handshakes"}`) == 0 {
		t.Fatalf("no handshake refused (%d seen by the attacker): the handshakes in progress are not bounded", r.Refused)
	}
	if grew := lastRSS - firstRSS; grew > 64<<20 {
		t.Fatalf("RSS grew by %.1f MiB in %s of half-open handshakes from one address", grew/(1<<20), time.Since(floodStart).Round(time.Second))
	}
	testwait.UntilWhy(t, waitLimit, "every half-open connection ended", func() (bool, string) {
		n := scrape(t, p.Admin).get(open)
		return n == 0, fmt.Sprintf("%.0f HTTP/3 connections open", n)
	})
}
