package proxy

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"syscall"
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
	if os.Getenv(fdLimitChild) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSleeperWakeAtDescriptorLimit$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), fdLimitChild+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the child process failed (%v):\n%s", err, out)
		}
		return
	}
	e := sleepEnv(t)
	e.apply([]routeSpec{{host: h1Host, backends: []string{echoTarget(t).addr}}})
	rc := newRawClient(t, e.http)
	rc.send(get1("/first"))
	rc.read("GET")
	waitFor(t, "asleep", func() bool { return sleepers(e.srv) == 1 })

	// No descriptor to spare: the limit just above the highest open one, and every
	// free number below it taken.
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	high := 0
	for _, en := range ents {
		if n, err := strconv.Atoi(en.Name()); err == nil {
			high = max(high, n)
		}
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	lim := old
	lim.Cur = uint64(high + 1)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	var fill []int
	for {
		fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			if err != syscall.EMFILE {
				t.Fatalf("filling the descriptor table: %v", err)
			}
			break
		}
		fill = append(fill, fd)
	}
	restore := func() {
		for _, fd := range fill {
			_ = syscall.Close(fd)
		}
		fill = nil
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old)
	}
	defer restore()

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
