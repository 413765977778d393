package browser

import (
	"context"
	"os"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	code := m.Run()
	ingressBin.Remove()
	os.Exit(code)
}

// mode is one way of running chromium against the ingress, and the protocols it must use.
// The ingress always runs with HTTP/3 on, as by default, so it announces h3 in Alt-Svc.
type mode struct {
	name  string
	flags map[string]any // chromium flags; "{port}" in a value is the HTTPS port
	// page is the protocol DevTools must report for the page and everything it loads
	// ("http/1.1", "h2", "h3"); logProto the access log's proto for them.
	page, logProto string
	// wsStatus is the WebSocket handshake's status in DevTools: 101 for HTTP/1.1's
	// Upgrade, 200 for extended CONNECT (RFC 8441, RFC 9220); wsLogProto and wsMethod are
	// the access log's proto and method for it.
	wsStatus             int64
	wsLogProto, wsMethod string
}

// modes are the protocols the suite drives the browser over. Chromium uses QUIC for a
// certificate chaining to a locally trusted root (this suite's CA) only for an origin
// forced with --origin-to-force-quic-on (otherwise QUIC_CERT_ROOT_NOT_KNOWN): without
// it the Alt-Svc is dropped silently and everything stays on TCP, which the http1.1 and
// h2 modes assert. Chromium opens a WebSocket over HTTP/2 only on an HTTP/2 connection it
// already has, and over HTTP/3 only with the EnableWebsocketsOverHttp3 feature: without
// it, from an HTTP/3 page, the WebSocket goes over a new TCP connection with HTTP/1.1's
// Upgrade, which the h3 mode asserts.
var modes = []mode{
	{name: "http1.1", flags: map[string]any{"disable-http2": true},
		page: "http/1.1", logProto: "http1", wsStatus: 101, wsLogProto: "http1", wsMethod: "GET"},
	{name: "h2",
		page: "h2", logProto: "http2", wsStatus: 200, wsLogProto: "http2", wsMethod: "CONNECT"},
	{name: "h3", flags: map[string]any{"origin-to-force-quic-on": appHost + ":{port}"},
		page: "h3", logProto: "http3", wsStatus: 101, wsLogProto: "http1", wsMethod: "GET"},
	{name: "h3-websocket", flags: map[string]any{
		"origin-to-force-quic-on": appHost + ":{port}",
		// chromedp's default value of the flag, and the feature (base::Feature
		// "kEnableWebsocketsOverHttp3" in Chromium 148 and 156).
		"enable-features": "NetworkService,NetworkServiceInProcess,EnableWebsocketsOverHttp3",
	}, page: "h3", logProto: "http3", wsStatus: 200, wsLogProto: "http3", wsMethod: "CONNECT"},
}

// modeLimit bounds one mode's run, browser start to ingress stop.
const modeLimit = 60 * time.Second

// TestBrowser drives headless chromium through the ingress on each mode's protocols: the
// page's checks, the protocol in DevTools and in the access log, a WebSocket held open
// through five route-table changes (one re-points the route), the access log of a stream
// the page closed, and the redirect from http://.
func TestBrowser(t *testing.T) {
	tl := findTools(t)
	ca, err := newCA()
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ca.trustInNSS(ctx, tl.certutil, home); err != nil {
		t.Fatal(err)
	}
	ingressBin.Path(t) // build once, before the clocks of the modes start
	a, b := newTarget(t, "a"), newTarget(t, "b")
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			runMode(t, m, tl, ca, home, a, b)
		})
	}
}
