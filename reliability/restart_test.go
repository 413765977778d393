package reliability

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/binarytest"
	"github.com/serve-zone/ingress/internal/testwait"
	"github.com/serve-zone/ingress/relaysim"
	"github.com/serve-zone/ingress/routetable"
	"github.com/serve-zone/ingress/stats"
)

// gateBackend holds every request until release is closed, then answers "done PATH" with
// a body trickled over a moment (so a response is also in flight at the stop).
type gateBackend struct {
	release chan struct{}
	arrived atomic.Int64
}

func newGateBackend(t *testing.T) (*gateBackend, routetable.Target) {
	t.Helper()
	g := &gateBackend{release: make(chan struct{})}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.arrived.Add(1)
		<-g.release
		w.Header().Set("Content-Length", fmt.Sprint(len("done ")+len(r.URL.Path)+10))
		fmt.Fprintf(w, "done %s", r.URL.Path)
		for range 10 {
			w.(http.Flusher).Flush()
			time.Sleep(20 * time.Millisecond)
			_, _ = w.Write([]byte("."))
		}
	})}
	ln := listen(t)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return g, binarytest.TargetOf(t, ln.Addr().String(), "lease-gate")
}

// TestSIGTERMUnderLoad: a graceful stop under load fails no request in flight: requests
// waiting on their target and responses half sent all complete, and no request gets an
// error status while the ingress drains.
func TestSIGTERMUnderLoad(t *testing.T) {
	t.Parallel()
	gate, gateTg := newGateBackend(t)
	fast := echoBackend(t, "fast")
	p, _ := standalone(t, binarytest.TableJSON(t, 1, nil, binarytest.Route("slow.rel.test", "", false, gateTg), binarytest.Route("fast.rel.test", "", false, fast)),
		"--drain-timeout", "20s")

	ctx, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	l := runLoadTolerant(ctx, t, p.HTTP, "fast.rel.test", 4)
	const inFlight = 24
	type answer struct {
		code int
		body string
		err  error
	}
	answers := make(chan answer, inFlight)
	for i := range inFlight {
		go func() {
			c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Minute}
			defer c.CloseIdleConnections()
			code, body, err := do(context.Background(), c, http.MethodGet, p.HTTP, "slow.rel.test", fmt.Sprintf("/slow/%d", i))
			answers <- answer{code, body, err}
		}()
	}
	testwait.UntilWhy(t, waitLimit, "every slow request reached its target", func() (bool, string) {
		n := gate.arrived.Load()
		return n == inFlight, fmt.Sprintf("%d of %d", n, inFlight)
	})
	from := p.LineCount()
	p.Signal(syscall.SIGTERM)
	p.WaitLineFrom(from, waitLimit, func(m map[string]any) bool {
		return strings.HasPrefix(fmt.Sprint(m["msg"]), "stopping")
	})
	close(gate.release)
	for range inFlight {
		a := <-answers
		if a.err != nil || a.code != 200 || !strings.HasPrefix(a.body, "done /slow/") || !strings.HasSuffix(a.body, "..........") {
			t.Fatalf("an in-flight request at SIGTERM: %d %q %v, want 200 and its whole body", a.code, a.body, a.err)
		}
	}
	if code := p.Wait(waitLimit); code != 0 {
		t.Fatalf("exit status %d, want 0:\n%s", code, binarytest.Tail(p.Stderr(), tailLines))
	}
	stopLoad()
	l.wg.Wait()
	if bad := l.badStatus.Load(); bad > 0 || l.n.Load() == 0 {
		t.Fatalf("load during the drain: %d answered, %d with an error status (%v)", l.n.Load(), bad, l.firstErr())
	}
	t.Logf("load: %d answered, %d refused at the closed listener", l.n.Load(), l.failed.Load())
}

// tolerantLoad counts the answers of a load during a stop: transport errors are expected
// once the listener is closed, an answer other than 200 never is.
type tolerantLoad struct {
	load
	badStatus atomic.Int64
}

func runLoadTolerant(ctx context.Context, t *testing.T, addr, host string, workers int) *tolerantLoad {
	l := &tolerantLoad{}
	c := client(t)
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				code, _, err := do(ctx, c, http.MethodGet, addr, host, fmt.Sprintf("/load/%d/%d", w, i))
				switch {
				case err != nil:
					l.failed.Add(1)
					if ctx.Err() == nil {
						// connection refused once the listener closed: back off a little
						select {
						case <-ctx.Done():
						case <-time.After(5 * time.Millisecond):
						}
					}
				case code != 200:
					l.badStatus.Add(1)
					l.mu.Lock()
					if l.first == nil {
						l.first = fmt.Errorf("status %d", code)
					}
					l.mu.Unlock()
				default:
					l.n.Add(1)
				}
			}
		}()
	}
	return l
}

// TestKill9AndRestart: after kill -9, an ingress restarted on its state directory serves
// the last table before the relay answers, and its statistics lost at most one
// persistence interval of requests.
func TestKill9AndRestart(t *testing.T) {
	t.Parallel()
	const host = "kept.rel.test"
	backend := echoBackend(t, "kept")
	dir := filepath.Join(t.TempDir(), "state")
	rs, origin := startRelay(t)
	rs.SetTable(binarytest.TableJSON(t, 9, nil, binarytest.Route(host, "", false, backend)), 9)
	p := start(t, binarytest.RelayEnv(testBearer, origin, testNode), binarytest.BaseArgs("--state-dir", dir)...)
	waitReady(t, p)

	// Count completed requests over time, long enough for a snapshot to be written while
	// they run.
	var (
		mu    sync.Mutex
		times []time.Time // completion time of each request
	)
	ctx, stopLoad := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	c := client(t)
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				code, _, err := do(ctx, c, http.MethodGet, p.HTTP, host, fmt.Sprintf("/%d/%d", w, i))
				if err == nil && code == 200 {
					mu.Lock()
					times = append(times, time.Now())
					mu.Unlock()
				}
				time.Sleep(2 * time.Millisecond) // a steady trickle, not a flood
			}
		}()
	}
	// Kill half an interval after the first snapshot: the worst case loses almost one
	// interval of requests, and at least half an interval's must survive.
	started := time.Now()
	snapshot := filepath.Join(dir, stats.SnapshotFile)
	testwait.UntilWhy(t, 2*stats.DefaultSnapshotInterval, "a snapshot written while the load ran", func() (bool, string) {
		fi, err := os.Stat(snapshot)
		if err != nil {
			return false, err.Error()
		}
		return fi.ModTime().After(started.Add(time.Second)), "snapshot at " + fi.ModTime().Format(time.TimeOnly)
	})
	time.Sleep(stats.DefaultSnapshotInterval / 2) // the load runs on meanwhile
	p.Signal(syscall.SIGKILL)
	killedAt := time.Now()
	p.Wait(waitLimit)
	stopLoad()
	wg.Wait()
	mu.Lock()
	total := int64(len(times))
	var mustKeep int64 // completed at least one interval (and a margin) before the kill
	for _, at := range times {
		if at.Before(killedAt.Add(-stats.DefaultSnapshotInterval - time.Second)) {
			mustKeep++
		}
	}
	mu.Unlock()
	_ = rs.Close()

	// The relay is back, but never answers the registration: the last table serves.
	rs2 := relaysim.New(relaysim.Options{})
	if _, err := rs2.Start(strings.TrimPrefix(origin, "http://")); err != nil {
		t.Fatalf("relay again on %s: %v", origin, err)
	}
	t.Cleanup(func() { _ = rs2.Close() })
	rs2.DropAnswers("registerClusterIngress", -1)
	p2 := start(t, binarytest.RelayEnv(testBearer, origin, testNode), binarytest.BaseArgs("--state-dir", dir)...)
	if got := mustStatus(t, client(t), p2.HTTP, host, "/after", 200); got != "kept /after" {
		t.Fatalf("after the restart: %q, want the last table's target", got)
	}
	if err := rs2.WaitCalls(ctxFor(t, waitLimit), "registerClusterIngress", 1); err != nil {
		t.Fatalf("the restarted ingress did not call the relay: %v", err)
	}
	if st := scrape(t, p2.Admin).get("ingress_route_table_revision"); st != 9 {
		t.Fatalf("revision %v after the restart, want 9", st)
	}
	kept := requestsToday(t, p2.Admin, host) - 1 // minus /after
	t.Logf("kill -9: %d requests before the kill, %d restored, %d had to be", total, kept, mustKeep)
	if kept < mustKeep || kept > total {
		t.Fatalf("statistics restored %d requests; %d were served, of which %d more than one persistence interval before the kill",
			kept, total, mustKeep)
	}
}

// requestsToday reads today's request count of host from the admin statistics.
func requestsToday(t *testing.T, admin, host string) int64 {
	t.Helper()
	day := time.Now().UTC().Format(time.DateOnly)
	resp, err := adminClient.Get(fmt.Sprintf("http://%s%s?fromDayUtc=%s&toDayUtc=%s&limit=1000", admin, stats.HandlerPath, day, day))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var page struct {
		Statistics []struct {
			Hostname string `json:"hostname"`
			Requests int64  `json:"requests"`
		} `json:"statistics"`
	}
	if err := json.Unmarshal(b, &page); err != nil {
		t.Fatalf("statistics: %v: %s", err, b)
	}
	for _, e := range page.Statistics {
		if e.Hostname == host {
			return e.Requests
		}
	}
	return 0
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
