package browser

// Chromium, headless, driven over the DevTools protocol, and what its Network events say.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/serve-zone/ingress/internal/toolbin"
)

// tools are the external programs the suite needs.
type tools struct {
	chromium, certutil string
}

// findTools finds chromium ($CHROMIUM, else chromium on PATH) and certutil; without them
// the test is skipped, or fails when CI is set.
func findTools(t *testing.T) tools {
	t.Helper()
	var tl tools
	var missing []string
	if p := os.Getenv("CHROMIUM"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("CHROMIUM=%s: %v", p, err)
		}
		tl.chromium = p
	} else if p, err := exec.LookPath("chromium"); err == nil {
		tl.chromium = p
	} else {
		missing = append(missing, "chromium (Debian package chromium)")
	}
	if p, err := exec.LookPath("certutil"); err == nil {
		tl.certutil = p
	} else {
		missing = append(missing, "certutil (Debian package libnss3-tools)")
	}
	if len(missing) > 0 {
		toolbin.Missing(t, "the browser suite needs "+strings.Join(missing, " and ")+": apt-get install chromium libnss3-tools (.ci/run does as root)")
	}
	return tl
}

// lockedBuffer collects chromium's output for failure messages.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// browser is one chromium with one tab, and the record of its Network events.
type browser struct {
	ctx    context.Context // the tab's; every action runs under it
	out    *lockedBuffer   // chromium's stdout and stderr
	events *netEvents
}

// startBrowser starts chromium headless with a fresh profile whose HOME holds home's NSS
// database, name resolution of appHost and otherHost to 127.0.0.1 (and of nothing else),
// and flags added to chromedp's defaults; the browser is closed when ctx ends or at cleanup.
func startBrowser(ctx context.Context, t *testing.T, tl tools, home string, flags map[string]any) *browser {
	t.Helper()
	out := &lockedBuffer{}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(tl.chromium),
		chromedp.UserDataDir(filepath.Join(t.TempDir(), "profile")),
		chromedp.NoInheritEnv,
		chromedp.Env("HOME="+home, "PATH="+os.Getenv("PATH"), "TMPDIR="+os.TempDir()),
		// Root (CI) cannot run chromium's sandbox; this browser only sees loopback.
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("host-resolver-rules", "MAP "+appHost+" 127.0.0.1, MAP "+otherHost+" 127.0.0.1, MAP * ~NOTFOUND"),
		chromedp.CombinedOutput(out),
	)
	for name, v := range flags {
		opts = append(opts, chromedp.Flag(name, v))
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	events := newNetEvents()
	bctx, cancelTab := chromedp.NewContext(actx, chromedp.WithListener(events.record))
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc() // waits for chromium to exit
	})
	b := &browser{ctx: bctx, out: out, events: events}
	if _, err := chromedp.Call(bctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatalf("starting chromium: %v\n%s", err, out)
	}
	return b
}

// eval evaluates expr in b's page, awaiting the promise it returns, and decodes the
// result into a T.
func eval[T any](t *testing.T, b *browser, expr string) T {
	t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("evaluating %s: %v\nnetwork: %s\nchromium:\n%s", expr, err, b.events, tail(b.out.String(), 30))
	}
	return v
}

// navigate loads url and returns the URL the tab ends at (fragment included).
func (b *browser) navigate(t *testing.T, url string) string {
	t.Helper()
	err := chromedp.Do(b.ctx, chromedp.Navigate(url))
	var at string
	if err == nil {
		at, err = chromedp.Run(b.ctx, chromedp.Location())
	}
	if err != nil {
		t.Fatalf("navigating to %s: %v\nnetwork: %s\nchromium:\n%s", url, err, b.events, tail(b.out.String(), 30))
	}
	return at
}

// response is what "Network.responseReceived" said about one response.
type response struct {
	url, protocol string
	status        int64
}

// redirect is one redirect as "Network.requestWillBeSent" reported it.
type redirect struct {
	from, to, location, protocol string
	status                       int64
}

// wsHandshake is one WebSocket's handshake as the Network events reported it.
type wsHandshake struct {
	url    string
	status int64 // 0 until the handshake's response came
}

// netEvents records the Network events of one tab.
type netEvents struct {
	mu        sync.Mutex
	responses []response
	redirects []redirect
	sockets   map[network.RequestID]*wsHandshake
	order     []network.RequestID // sockets in the order they were created
	failures  []string
}

func newNetEvents() *netEvents {
	return &netEvents{sockets: map[network.RequestID]*wsHandshake{}}
}

func (n *netEvents) record(ev any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch ev := ev.(type) {
	case *network.EventResponseReceived:
		n.responses = append(n.responses, response{url: ev.Response.URL, protocol: ev.Response.Protocol, status: ev.Response.Status})
	case *network.EventRequestWillBeSent:
		if r := ev.RedirectResponse; r != nil {
			loc, _ := r.Headers["Location"].(string)
			if loc == "" {
				loc, _ = r.Headers["location"].(string)
			}
			n.redirects = append(n.redirects, redirect{from: r.URL, to: ev.Request.URL + ev.Request.URLFragment,
				location: loc, protocol: r.Protocol, status: r.Status})
		}
	case *network.EventWebSocketCreated:
		n.sockets[ev.RequestID] = &wsHandshake{url: ev.URL}
		n.order = append(n.order, ev.RequestID)
	case *network.EventWebSocketHandshakeResponseReceived:
		if s := n.sockets[ev.RequestID]; s != nil && ev.Response != nil {
			s.status = ev.Response.Status
		}
	case *network.EventLoadingFailed:
		n.failures = append(n.failures, fmt.Sprintf("%s: %s", ev.RequestID, ev.ErrorText))
	}
}

// snapshot returns copies of what was recorded.
func (n *netEvents) snapshot() (responses []response, redirects []redirect, sockets []wsHandshake) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, id := range n.order {
		sockets = append(sockets, *n.sockets[id])
	}
	return append([]response(nil), n.responses...), append([]redirect(nil), n.redirects...), sockets
}

// String summarises the record for failure messages.
func (n *netEvents) String() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	protos := map[string]int{}
	for _, r := range n.responses {
		protos[fmt.Sprintf("%s %d", r.protocol, r.status)]++
	}
	var ws []string
	for _, id := range n.order {
		ws = append(ws, fmt.Sprintf("%s=%d", n.sockets[id].url, n.sockets[id].status))
	}
	return fmt.Sprintf("responses by protocol and status %v; websockets %v; redirects %v; failures %v", protos, ws, n.redirects, n.failures)
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
