package proxy

import (
	"io"
	"net/http"
	"testing"
	"time"
)

// fdLimitChild names the environment variable under which the test binary runs
// TestSleeperWakeAtDescriptorLimit's body in a process of its own (it lowers that
// process's descriptor limit).
const fdLimitChild = "PROXY_TEST_FDLIMIT_CHILD"

// TestSleeperWakeAtDescriptorLimit: a sleeping connection whose client sends its next
// request while the process has no descriptor free at all is answered, as a connection
// parked in its full form would be: waking needs no second descriptor
// (rawnet.NewSockConn). Issue 33 found a wake that borrowed a spare descriptor's room
// losing it to an accept in between, and its request with it. The body runs in a child
// process, whose descriptor limit it lowers to what is open.
func TestSleeperWakeAtDescriptorLimit(t *testing.T) {
	skipUnlessParking(t)
	if !inChildProcess(t, fdLimitChild) {
		return
	}
	e := sleepEnv(t)
	e.apply([]routeSpec{{host: h1Host, backends: []string{echoTarget(t).addr}}})
	rc := newRawClient(t, e.http)
	rc.send(get1("/first"))
	rc.read("GET")
	waitFor(t, "asleep", func() bool { return sleepers(e.srv) == 1 })

	restore := exhaustDescriptors(t)
	_ = rc.c.SetDeadline(time.Now().Add(5 * time.Second))
	rc.send(get1("/at-the-limit"))
	res, err := readResponse(rc)
	restore()
	if err != nil {
		t.Fatalf("a sleeper's request at the descriptor limit: %v; want its answer", err)
	}
	if res != echoed("GET", "/at-the-limit", "") {
		t.Fatalf("a sleeper's request at the descriptor limit: %q", res)
	}
}

// readResponse reads one GET response from rc and returns its body, or the error.
func readResponse(rc *rawClient) (string, error) {
	res, err := http.ReadResponse(rc.br, &http.Request{Method: "GET"})
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return string(b), err
}
