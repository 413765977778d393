package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/testwait"
)

// checkConfig is what the page's runChecks does.
type checkConfig struct {
	Images    int   `json:"images"`
	JSON      int   `json:"json"`
	Upload    int   `json:"upload"`
	WSSizes   []int `json:"wsSizes"` // one WebSocket message of each size
	SSEEvents int   `json:"sseEvents"`
}

var checks = checkConfig{
	Images:    100,
	JSON:      40,
	Upload:    2 << 20,
	WSSizes:   wsSizes(200),
	SSEEvents: 50,
}

// wsSizes are the sizes of n WebSocket messages: around each of the frame header's length
// boundaries (125/126, 65535/65536) in turn, with a 1 MiB one every hundred (about 6 MiB
// in all: enough to cross every boundary, small enough for a loaded CI machine under -race).
func wsSizes(n int) []int {
	cycle := []int{0, 1, 125, 126, 127, 1000, 4096, 16383, 16384, 65535, 65536, 65537, 100000}
	sizes := make([]int, n)
	for i := range sizes {
		sizes[i] = cycle[i%len(cycle)]
		if i%100 == 99 {
			sizes[i] = 1 << 20
		}
	}
	return sizes
}

// maxSSEGap is the longest time in ms the page may wait for an event (sent every
// ssePeriod): generous for a loaded CI machine, shorter than a 4 KiB buffer takes to fill
// (over 3 s), so that a stream held back by a buffer fails.
const maxSSEGap = 2000

// settled is one check's outcome in the page: its facts, or the error it ended with.
type settled[T any] struct {
	OK    *T      `json:"ok"`
	Error string  `json:"error"`
	Ms    float64 `json:"ms"` // from the start of the checks to this one's end
}

type checkResults struct {
	ImagesRaw settled[[]struct {
		I     int  `json:"i"`
		W     int  `json:"w"`
		H     int  `json:"h"`
		Error bool `json:"error"`
	}] `json:"images"`
	JSON settled[[]struct {
		Status int    `json:"status"`
		Sent   int    `json:"sent"`
		I      int    `json:"i"`
		Square int    `json:"square"`
		PadLen int    `json:"padLen"`
		Method string `json:"method"`
	}] `json:"json"`
	Upload settled[struct {
		Status       int    `json:"status"`
		Size         int    `json:"size"`
		SHA256       string `json:"sha256"`
		TargetSize   int    `json:"targetSize"`
		TargetSHA256 string `json:"targetSha256"`
	}] `json:"upload"`
	Download settled[struct {
		Status int    `json:"status"`
		Size   int    `json:"size"`
		SHA256 string `json:"sha256"`
	}] `json:"download"`
	WebSocket settled[struct {
		Sent       int    `json:"sent"`
		Received   int    `json:"received"`
		Bytes      int64  `json:"bytes"`
		Mismatches []int  `json:"mismatches"`
		Whoami     string `json:"whoami"`
		Closed     closed `json:"closed"`
	}] `json:"websocket"`
	SSE settled[struct {
		IDs      []int   `json:"ids"`
		MaxGapMs float64 `json:"maxGapMs"`
		Errors   int     `json:"errors"`
	}] `json:"sse"`
}

// closed is a WebSocket's close event in the page.
type closed struct {
	Code   int    `json:"code"`
	Reason string `json:"reason"`
	Clean  bool   `json:"clean"`
}

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

// verifyChecks compares the page's facts with what the target served.
func verifyChecks(t *testing.T, r *checkResults) {
	t.Helper()
	for name, err := range map[string]string{"images": r.ImagesRaw.Error, "json": r.JSON.Error, "upload": r.Upload.Error,
		"download": r.Download.Error, "websocket": r.WebSocket.Error, "sse": r.SSE.Error} {
		if err != "" {
			t.Errorf("page check %s failed: %s", name, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	imgs := *r.ImagesRaw.OK
	if len(imgs) != checks.Images {
		t.Errorf("%d images reported, want %d", len(imgs), checks.Images)
	}
	for _, im := range imgs {
		if w, h := imageSize(im.I); im.Error || im.W != w || im.H != h {
			t.Errorf("image %d: error %t, %dx%d, want %dx%d", im.I, im.Error, im.W, im.H, w, h)
		}
	}
	js := *r.JSON.OK
	if len(js) != checks.JSON {
		t.Errorf("%d JSON answers, want %d", len(js), checks.JSON)
	}
	for _, j := range js {
		wantPad, wantMethod := 0, "GET"
		if j.Sent%2 == 1 {
			wantPad, wantMethod = j.Sent*100, "POST"
		}
		if j.Status != 200 || j.I != j.Sent || j.Square != j.Sent*j.Sent || j.PadLen != wantPad || j.Method != wantMethod {
			t.Errorf("JSON %d: %+v", j.Sent, j)
		}
	}
	if u := r.Upload.OK; u.Status != 200 || u.Size != checks.Upload || u.TargetSize != u.Size || u.TargetSHA256 != u.SHA256 {
		t.Errorf("upload: sent %d bytes (SHA-256 %s), the target got %d (%s), status %d", u.Size, u.SHA256, u.TargetSize, u.TargetSHA256, u.Status)
	}
	if d := r.Download.OK; d.Status != 200 || d.Size != downloadSize || d.SHA256 != downloadSHA256 {
		t.Errorf("download: %d bytes, SHA-256 %s, status %d; want %d bytes, %s", d.Size, d.SHA256, d.Status, downloadSize, downloadSHA256)
	}
	if w := r.WebSocket.OK; w.Sent != len(checks.WSSizes) || w.Received != w.Sent || len(w.Mismatches) > 0 || w.Whoami != "target:a" || w.Closed.Code != 1000 {
		t.Errorf("websocket: sent %d, %d echoes came back, mismatched %v, whoami %q, closed %+v", w.Sent, w.Received, w.Mismatches, w.Whoami, w.Closed)
	}
	s := r.SSE.OK
	if s.Errors != 0 {
		t.Errorf("SSE: %d errors in the page (a reconnect)", s.Errors)
	}
	if len(s.IDs) != checks.SSEEvents {
		t.Errorf("SSE: %d events, want %d", len(s.IDs), checks.SSEEvents)
	}
	if s.MaxGapMs > maxSSEGap {
		t.Errorf("SSE: waited %.0f ms for an event, want at most %d (one every %s; a buffered stream?)", s.MaxGapMs, maxSSEGap, ssePeriod)
	}
	for i, id := range s.IDs {
		if id != i {
			t.Errorf("SSE: event %d has id %d: a gap (ids %v)", i, id, s.IDs)
			break
		}
	}
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
	testwait.Until(t, 10*time.Second, "a line for each WebSocket in the access log", func() bool {
		return len(in.accessLines("/ws")) >= websockets
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
	// TODO(issue 27): the proxy fix that logs a stream the client closed as 499 is being
	// made in another branch; once it is merged, drop BROWSER_EXPECT_499 and assert always.
	if os.Getenv("BROWSER_EXPECT_499") == "1" {
		if l.Status != 499 {
			t.Errorf("access log of the event stream the page closed: %v, want status 499 (the client left)", l)
		}
	} else if l.Status != 499 {
		t.Logf("TODO(issue 27): the event stream the page closed is logged as %v, not 499; BROWSER_EXPECT_499=1 makes this fail", l)
	}
}
