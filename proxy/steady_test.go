package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"
)

// Tests that a steady client is not cut by a progress timeout (Config.ClientSendTimeout,
// ClientBodyTimeout) judge the proxy only when the client did keep its pace, and when
// this process was not itself held still long enough to make a deadline pass while the
// client's bytes waited: under `go test -race ./...` on a loaded machine, either can
// happen, and a cut is then the proxy doing its job. Such a test measures both, and an
// attempt cut while one of them stalled is run again (untilConclusive).

// lateness records how late a paced loop ran: each entry is how much longer than planned
// one of its waits took.
type lateness struct {
	mu   sync.Mutex
	at   []time.Time
	late []time.Duration
}

// add records that the wait that ended at at took late longer than planned.
func (l *lateness) add(at time.Time, late time.Duration) {
	if late <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.at = append(l.at, at)
	l.late = append(l.late, late)
}

// worst returns the largest sum of lateness within any window of length window: the
// time the loop lost to its scheduling in its worst window.
func (l *lateness) worst(window time.Duration) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var worst, sum time.Duration
	first := 0
	for i := range l.at {
		sum += l.late[i]
		for l.at[i].Sub(l.at[first]) > window {
			sum -= l.late[first]
			first++
		}
		worst = max(worst, sum)
	}
	return worst
}

// longest returns the largest single lateness.
func (l *lateness) longest() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var m time.Duration
	for _, d := range l.late {
		m = max(m, d)
	}
	return m
}

// stallTick is how often watchStalls asks to run.
const stallTick = 5 * time.Millisecond

// watchStalls measures, until stop, how late this process runs a goroutine that asks to
// run every stallTick; stop returns the longest delay. While this process is held still
// (the machine's other work, a garbage collection), its timers fire late, and a deadline
// can pass before the process sees the bytes that arrived in time. A watch not stopped
// by the test's end is stopped then.
func watchStalls(t *testing.T) (stop func() time.Duration) {
	var l lateness
	done, stopped := make(chan struct{}), make(chan struct{})
	var once sync.Once
	end := func() { once.Do(func() { close(done) }); <-stopped }
	t.Cleanup(end)
	go func() {
		defer close(stopped)
		t := time.NewTimer(stallTick)
		defer t.Stop()
		for {
			t0 := time.Now()
			t.Reset(stallTick)
			select {
			case <-done:
				return
			case <-t.C:
			}
			now := time.Now()
			l.add(now, now.Sub(t0)-stallTick)
		}
	}()
	return func() time.Duration {
		end()
		return l.longest()
	}
}

// untilConclusive runs attempt up to attempts times. attempt says whether the proxy cut
// its transfer, how much the test's own side lost of its pace (stalled: the client's
// lateness and this process's stalls, see above) and what it saw. An attempt that was
// not cut passes the test; one cut although stalled stayed below allowed fails it; one
// cut after a larger stall is inconclusive and run again. When every attempt is
// inconclusive the test fails: the machine was too loaded to judge.
func untilConclusive(t *testing.T, attempts int, allowed time.Duration, attempt func(t *testing.T) (cut bool, stalled time.Duration, what string)) {
	t.Helper()
	for i := 1; i <= attempts; i++ {
		cut, stalled, what := attempt(t)
		switch {
		case !cut:
			t.Log(what)
			return
		case stalled < allowed:
			t.Fatalf("cut although the client kept its pace (it and this process lost %s, less than %s): %s", stalled, allowed, what)
		default:
			t.Logf("attempt %d inconclusive: the client or this process lost %s (%s or more lets a deadline pass): %s", i, stalled, allowed, what)
		}
	}
	t.Fatalf("all %d attempts inconclusive: the machine held the test's own side still too long to judge", attempts)
}

// slowReaderEnv, when set, makes the test binary a slow reader (slowReaderChild).
const slowReaderEnv = "PROXY_TEST_SLOW_READER"

// slowRead describes a slow reader: a GET for host and path over HTTP/1.1 to addr whose
// answer is read chunk bytes every pace.
type slowRead struct {
	addr, host, path string
	chunk            int
	pace             time.Duration
	window           time.Duration // the window of the lateness it reports
}

// readSlowlyElsewhere runs r in a process of its own (this test binary again), so that
// its pace does not depend on how this loaded, race-instrumented process schedules its
// goroutines. It returns the body bytes read, the status, and the reader's worst
// lateness within r.window, and how long it read (from its request on).
func readSlowlyElsewhere(t *testing.T, r slowRead) (n int64, status int, late, took time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %s %d %s %s", slowReaderEnv, r.addr, r.host, r.path, r.chunk, r.pace, r.window))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("slow reader process: %v\n%s", err, out)
	}
	var lateNS, tookNS int64
	if _, err := fmt.Sscanf(string(out), "status %d read %d late %d took %d", &status, &n, &lateNS, &tookNS); err != nil {
		t.Fatalf("slow reader process said %q", out)
	}
	return n, status, time.Duration(lateNS), time.Duration(tookNS)
}

// slowReaderChild is the child's side of readSlowlyElsewhere (TestMain calls it first):
// when slowReaderEnv is set it reads as told, prints "status S read N late L took T"
// (nanoseconds) and returns true.
func slowReaderChild() bool {
	spec := os.Getenv(slowReaderEnv)
	if spec == "" {
		return false
	}
	var r slowRead
	var pace, window string
	if _, err := fmt.Sscanf(spec, "%s %s %s %d %s %s", &r.addr, &r.host, &r.path, &r.chunk, &pace, &window); err != nil {
		fmt.Println("bad", slowReaderEnv, spec, err)
		os.Exit(2)
	}
	var err1, err2 error
	r.pace, err1 = time.ParseDuration(pace)
	r.window, err2 = time.ParseDuration(window)
	if err1 != nil || err2 != nil {
		fmt.Println("bad", slowReaderEnv, spec, err1, err2)
		os.Exit(2)
	}
	start := time.Now()
	status, n, late, err := r.read()
	if err != nil {
		fmt.Println("slow reader:", err)
		os.Exit(1)
	}
	fmt.Printf("status %d read %d late %d took %d\n", status, n, late.Nanoseconds(), time.Since(start).Nanoseconds())
	return true
}

// read sends the request and reads the answer's body at r's pace until it ends or
// fails; it returns the status, the bytes read and its worst lateness within r.window.
func (r slowRead) read() (status int, n int64, late time.Duration, err error) {
	c, err := net.Dial("tcp", r.addr)
	if err != nil {
		return 0, 0, 0, err
	}
	defer c.Close()
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", r.path, r.host); err != nil {
		return 0, 0, 0, err
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, 0, 0, err
	}
	var l lateness
	buf := make([]byte, r.chunk)
	for {
		// A round is planned to take r.pace: what it takes beyond is lost, whether the
		// reader was held (its own scheduling) or waited for bytes (then the proxy's
		// writes were not waiting for it, and nothing lost could cut it).
		t0 := time.Now()
		time.Sleep(r.pace) // the reader's pace is the input under test
		k, err := io.ReadFull(res.Body, buf)
		n += int64(k)
		now := time.Now()
		l.add(now, now.Sub(t0)-r.pace)
		if err != nil {
			break
		}
	}
	return res.StatusCode, n, l.worst(r.window), nil
}
