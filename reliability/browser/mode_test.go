package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/testwait"
)

// runMode runs everything on one mode: its own ingress and its own chromium.
func runMode(t *testing.T, m mode, tl tools, ca *testCA, home string, a, b *target) {
	began := time.Now()
	in := startIngress(t, ca, a)
	httpsPort, httpPort := port(t, in.p.HTTPS), port(t, in.p.HTTP)
	origin := "https://" + appHost + ":" + httpsPort
	flags := map[string]any{}
	for k, v := range m.flags {
		if s, ok := v.(string); ok {
			v = strings.ReplaceAll(s, "{port}", httpsPort)
		}
		flags[k] = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), modeLimit)
	defer cancel()
	br := startBrowser(ctx, t, tl, home, flags)
	sseEndedBefore := a.sseEnded.Load()

	if at := br.navigate(t, origin+"/"); at != origin+"/" {
		t.Fatalf("the page is at %s, want %s/", at, origin)
	}
	cfg, _ := json.Marshal(checks)
	res := eval[checkResults](t, br, "runChecks("+string(cfg)+")")
	verifyChecks(t, &res)
	checked := time.Since(began)

	leases := holdThroughChanges(t, br, in, ca, a, b)
	leases["lease-a"]++ // the echo check's
	checkRedirect(t, br, in, m, origin, httpPort)
	checkProtocols(t, br, in, m, origin, leases)
	checkClosedStream(t, in, m, a, sseEndedBefore)

	cancel()
	in.p.Stop(10 * time.Second)
	t.Logf("%s: page checks done after %s (ms to each one's end: images %.0f, JSON %.0f, upload %.0f, download %.0f, WebSocket %.0f, SSE %.0f), everything after %s; %d WebSocket bytes each way, SSE %d events, largest gap %.0f ms",
		m.name, checked.Round(time.Millisecond), res.ImagesRaw.Ms, res.JSON.Ms, res.Upload.Ms, res.Download.Ms, res.WebSocket.Ms, res.SSE.Ms,
		time.Since(began).Round(time.Millisecond), res.WebSocket.OK.Bytes, len(res.SSE.OK.IDs), res.SSE.OK.MaxGapMs)
}

// holdThroughChanges holds a WebSocket open in the page through five route-table changes
// (each also re-issues the certificate; one re-points the route to target b, whose new
// WebSockets then reach b while the held one stays on a), asserting after each that it
// still carries messages. It returns how many WebSockets it opened on each target's lease.
func holdThroughChanges(t *testing.T, br *browser, in *ingress, ca *testCA, a, b *target) map[string]int {
	t.Helper()
	eval[bool](t, br, "holdOpen()")
	opened := map[string]int{"lease-a": 1}
	changes := []struct {
		what    string
		targets []*target
		other   bool
		fresh   string // the target a new WebSocket must reach after the change, "" for any
	}{
		{"a route added", []*target{a}, true, "target:a"},
		{"a target added", []*target{a, b}, true, ""},
		{"re-pointed to b", []*target{b}, true, "target:b"},
		{"a route removed", []*target{b}, false, "target:b"},
		{"re-pointed back to a", []*target{a}, false, "target:a"},
	}
	for i, c := range changes {
		in.change(t, ca, c.targets, c.other)
		tag := fmt.Sprintf("after change %d (%s)", i+1, c.what)
		ping := eval[struct {
			Echo   *string `json:"echo"`
			Closed *closed `json:"closed"`
		}](t, br, fmt.Sprintf("holdPing(%q)", tag))
		if ping.Closed != nil || ping.Echo == nil || *ping.Echo != tag {
			echo := "none"
			if ping.Echo != nil {
				echo = fmt.Sprintf("%q", *ping.Echo)
			}
			t.Fatalf("held WebSocket %s: echo %s, closed %+v", tag, echo, ping.Closed)
		}
		if who := eval[string](t, br, "holdWhoami()"); who != "target:a" {
			t.Fatalf("held WebSocket %s: on %q, want target:a (it must stay on its target)", tag, who)
		}
		if c.fresh != "" {
			if who := eval[string](t, br, "freshWhoami()"); who != c.fresh {
				t.Fatalf("new WebSocket %s: reached %q, want %s", tag, who, c.fresh)
			}
			opened["lease-"+strings.TrimPrefix(c.fresh, "target:")]++
		}
	}
	if cl := eval[closed](t, br, "holdClose()"); cl.Code != 1000 {
		t.Fatalf("held WebSocket closed with %+v, want 1000", cl)
	}
	return opened
}

// checkRedirect loads the page over plain HTTP, with a query and a fragment, and asserts
// that the ingress's 308 took the tab to the https:// page on the TLS port with both kept.
func checkRedirect(t *testing.T, br *browser, in *ingress, m mode, origin, httpPort string) {
	t.Helper()
	const pathQuery, fragment = "/landing?x=1&y=a%20b&z=%E2%82%AC", "#frag-1"
	from := "http://" + appHost + ":" + httpPort + pathQuery
	if at := br.navigate(t, from+fragment); at != origin+pathQuery+fragment {
		t.Errorf("http:// landed on %s, want %s", at, origin+pathQuery+fragment)
	}
	_, redirects, _ := br.events.snapshot()
	i := slices.IndexFunc(redirects, func(r redirect) bool { return r.from == from })
	if i < 0 {
		t.Fatalf("no redirect from %s in DevTools: %v", from, redirects)
	}
	if r := redirects[i]; r.status != 308 || r.location != origin+pathQuery || r.protocol != "http/1.1" {
		t.Errorf("redirect from %s: %d to %q over %s, want 308 to %s over http/1.1", from, r.status, r.location, r.protocol, origin+pathQuery)
	}
	in.waitAccess(t, 5*time.Second, "/landing", func(l accessLine) bool { return l.Status == 308 && l.Proto == "http1" })
	l := in.waitAccess(t, 5*time.Second, "/landing", func(l accessLine) bool { return l.Status == 200 })
	if l.Proto != m.logProto || l.Query != strings.TrimPrefix(pathQuery, "/landing?") {
		t.Errorf("access log of the redirected request: %v query %q, want proto %s", l, l.Query, m.logProto)
	}
}

// checkProtocols asserts the protocol of every response and WebSocket in DevTools and in
// the access log, where the WebSockets must be on the leases the page opened them on.
func checkProtocols(t *testing.T, br *browser, in *ingress, m mode, origin string, leases map[string]int) {
	t.Helper()
	responses, _, sockets := br.events.snapshot()
	seen := 0
	for _, r := range responses {
		if !strings.HasPrefix(r.url, origin+"/") {
			continue
		}
		seen++
		if r.protocol != m.page {
			t.Errorf("DevTools: %s came over %q (status %d), want %s", r.url, r.protocol, r.status, m.page)
		}
	}
	if min := 1 + checks.Images + checks.JSON + 2; seen < min {
		t.Errorf("DevTools reported %d responses from %s, want at least %d", seen, origin, min)
	}
	websockets := 0
	for _, n := range leases {
		websockets += n
	}
	if len(sockets) != websockets {
		t.Errorf("DevTools saw %d WebSockets, want %d: %v", len(sockets), websockets, sockets)
	}
	for _, s := range sockets {
		if s.status != m.wsStatus {
			t.Errorf("DevTools: WebSocket %s handshake status %d, want %d", s.url, s.status, m.wsStatus)
		}
	}
	for _, path := range []string{"/", "/page.js", "/img/0.png", "/api/item", "/upload", "/download"} {
		l := in.waitAccess(t, 5*time.Second, path, func(accessLine) bool { return true })
		if l.Proto != m.logProto || l.Status != 200 || l.Error != "" {
			t.Errorf("access log of %s: %v, want proto %s, status 200, no error", path, l, m.logProto)
		}
	}
	// A WebSocket's line comes when it ends: wait for the four.
	testwait.UntilWhy(t, 10*time.Second, "a line for each WebSocket in the access log", func() (bool, string) {
		n := len(in.accessLines("/ws"))
		return n >= websockets, fmt.Sprintf("%d of %d", n, websockets)
	})
	logged := map[string]int{}
	for _, l := range in.accessLines("/ws") {
		logged[l.Lease]++
		if l.Proto != m.wsLogProto || l.Method != m.wsMethod || int64(l.Status) != m.wsStatus || l.Error != "" {
			t.Errorf("access log of a WebSocket: %v, want proto %s, method %s, status %d, no error", l, m.wsLogProto, m.wsMethod, m.wsStatus)
		}
	}
	if !maps.Equal(logged, leases) {
		t.Errorf("WebSockets by target lease in the access log: %v, want %v", logged, leases)
	}
}

// checkClosedStream asserts what the access log says about the event stream the page
// closed, and that the target's request for it was cancelled.
func checkClosedStream(t *testing.T, in *ingress, m mode, a *target, sseEndedBefore int64) {
	t.Helper()
	testwait.Until(t, 5*time.Second, "the target's event stream cancelled after the page closed it", func() bool {
		return a.sseEnded.Load() > sseEndedBefore
	})
	l := in.waitAccess(t, 5*time.Second, "/sse", func(accessLine) bool { return true })
	if l.Proto != m.logProto || l.BytesOut == 0 {
		t.Errorf("access log of the event stream: %v, want proto %s and bytes out", l, m.logProto)
	}
	// The page closed the stream: the client left, which the access log says with 499
	// (as for any client that goes away), not 200 with an internal error text.
	if l.Status != 499 || strings.Contains(l.Error, "closed network connection") {
		t.Errorf("access log of the event stream the page closed: %v, want status 499 (the client left)", l)
	}
}
