package proxy

import (
	"testing"

	"github.com/serve-zone/ingress/stats"
)

// dialShortageChild names the environment variable under which the test binary runs
// TestDialOutOfDescriptors's body in a process of its own (it lowers that process's
// descriptor limit).
const dialShortageChild = "PROXY_TEST_DIAL_SHORTAGE_CHILD"

// TestDialOutOfDescriptors (issue 33, item 4): when the ingress itself has no descriptor
// left for a target's connection (EMFILE), the request is answered 503 with
// Retry-After, counted as ingress_refusals_total{kind="descriptors"}, and the target is
// neither charged a connect failure nor marked down: once descriptors are back, the
// next request reaches it. The body runs in a child process, whose descriptor limit it
// lowers to what is open.
func TestDialOutOfDescriptors(t *testing.T) {
	if !inChildProcess(t, dialShortageChild) {
		return
	}
	const other = "other.example.test"
	e := newEnv(t)
	e.apply([]routeSpec{{host: h1Host, backends: []string{echoTarget(t).addr}}, {host: other, backends: []string{echoTarget(t).addr}}})
	rc := newRawClient(t, e.http)
	rc.send("GET /warm HTTP/1.1\r\nHost: " + other + "\r\n\r\n")
	if res, body := rc.read("GET"); res.StatusCode != 200 {
		t.Fatalf("warm-up: %d %q", res.StatusCode, body)
	}

	// h1Host's target was never dialled: its request needs a new descriptor.
	restore := exhaustDescriptors(t)
	rc.send(get1("/short"))
	res, body := rc.read("GET")
	restore()
	if res.StatusCode != 503 || res.Header.Get("Retry-After") != "1" {
		t.Fatalf("a request without a descriptor for its target: %d (Retry-After %q) %q; want 503 with Retry-After: 1",
			res.StatusCode, res.Header.Get("Retry-After"), body)
	}
	snap := e.totals.Snapshot()
	if n := snap.BackendFailures[stats.FailureConnect]; n != 0 {
		t.Fatalf("%d connect failures counted against the target; want none (the shortage is ours)", n)
	}
	if n := snap.Refusals[stats.RefusalDescriptors]; n != 1 {
		t.Fatalf("%d refusals counted as descriptors; want 1", n)
	}

	rc.send(get1("/after"))
	if res, body := rc.read("GET"); res.StatusCode != 200 || body != echoed("GET", "/after", "") {
		t.Fatalf("once descriptors are back: %d %q; want the target's answer (not marked down)", res.StatusCode, body)
	}
	if n := e.stat(h1Host).BackendFailures.Connect; n != 0 {
		t.Fatalf("the route counts %d connect failures; want none", n)
	}
}
