package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"go.uber.org/zap/zaptest"

	"github.com/serve-zone/ingress/routetable"
)

// TestDemoServesItsRoutes runs the demo's wiring on free ports and sends requests through
// it: plain HTTP, TLS with HTTP/2, the redirect, and the statistics that count them.
func TestDemoServesItsRoutes(t *testing.T) {
	o := defaultOptions()
	o.HTTPAddr, o.HTTPSAddr, o.AdminAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	o.DrainTimeout = 5 * time.Second
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d, err := startDemo(ctx, o, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	if err := d.waitReady(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	httpAddr, httpsAddr := d.in.proxy.Addrs()

	plain := &http.Client{
		Timeout:       5 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	get := func(c *http.Client, url, host string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		req.Host = host
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET %s (Host %s): %v", url, host, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, string(body)
	}

	resp, body := get(plain, "http://"+httpAddr.String()+"/hello", demoApp)
	if resp.StatusCode != 200 || !strings.Contains(body, "hello from backend-") {
		t.Fatalf("plain: %d %q", resp.StatusCode, body)
	}
	resp, _ = get(plain, "http://"+httpAddr.String()+"/p?q=1", demoSecure)
	if resp.StatusCode != http.StatusPermanentRedirect || !strings.HasPrefix(resp.Header.Get("Location"), "https://"+demoSecure) ||
		!strings.HasSuffix(resp.Header.Get("Location"), "/p?q=1") {
		t.Fatalf("redirect: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}

	tlsClient := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		ForceAttemptHTTP2: true,
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true, ServerName: demoApp}, //nolint:gosec // demo certificate
		DialTLSContext:    nil,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, httpsAddr.String())
		},
	}}
	resp, body = get(tlsClient, "https://"+demoApp+"/tls", demoApp)
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 || !strings.Contains(body, "(https,") {
		t.Fatalf("tls: %d %s %q", resp.StatusCode, resp.Proto, body)
	}

	// HTTP/3 on UDP at the HTTPS address, announced by Alt-Svc over TCP.
	if alt := resp.Header.Get("Alt-Svc"); !strings.HasPrefix(alt, `h3=":`) {
		t.Fatalf("Alt-Svc %q", alt)
	}
	h3 := &http3.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // demo certificate
		Dial: func(ctx context.Context, _ string, tlsCfg *tls.Config, cfg *quic.Config) (*quic.Conn, error) {
			return quic.DialAddr(ctx, d.in.proxy.HTTP3Addr().String(), tlsCfg, cfg)
		},
	}
	defer h3.Close()
	resp, body = get(&http.Client{Transport: h3, Timeout: 5 * time.Second}, "https://"+demoApp+"/h3", demoApp)
	if resp.StatusCode != 200 || resp.ProtoMajor != 3 || !strings.Contains(body, "hello from backend-") {
		t.Fatalf("h3: %d %s %q", resp.StatusCode, resp.Proto, body)
	}

	today := time.Now().UTC().Format(time.DateOnly)
	resp, body = get(plain, fmt.Sprintf("http://%s/v1/traffic-statistics?fromDayUtc=%s&toDayUtc=%s&limit=100", d.in.adminAddr(), today, today), "")
	if resp.StatusCode != 200 {
		t.Fatalf("statistics: %d %s", resp.StatusCode, body)
	}
	var page struct {
		Statistics []struct {
			Hostname string `json:"hostname"`
			Requests uint64 `json:"requests"`
			NodeID   string `json:"nodeId"`
		} `json:"statistics"`
	}
	if err := json.Unmarshal([]byte(body), &page); err != nil {
		t.Fatalf("statistics body %q: %v", body, err)
	}
	got := map[string]uint64{}
	for _, e := range page.Statistics {
		got[e.Hostname] = e.Requests
		if e.NodeID != demoNode {
			t.Errorf("nodeId = %q", e.NodeID)
		}
	}
	if got[demoApp] != 3 || got[demoSecure] != 1 {
		t.Fatalf("statistics = %v, want 3 requests for %s and 1 for %s", got, demoApp, demoSecure)
	}
}

// TestDemoTableIsValidWhateverThePorts: the backends' ports are random, and the table must
// order targets by port when their addresses are equal.
func TestDemoTableIsValidWhateverThePorts(t *testing.T) {
	for _, addrs := range [][]string{{"127.0.0.1:40000", "127.0.0.1:30000"}, {"127.0.0.1:30000", "127.0.0.1:40000"}} {
		raw, err := demoTable(addrs)
		if err != nil {
			t.Fatal(err)
		}
		tbl, err := routetable.Decode(raw, routetable.ModeRelay)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := routetable.Validate(tbl, routetable.ModeRelay); err != nil {
			t.Fatalf("demo table with backends %v refused: %v", addrs, err)
		}
	}
}
