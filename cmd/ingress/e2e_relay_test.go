package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/binarytest"
	"github.com/serve-zone/ingress/internal/testwait"
	"github.com/serve-zone/ingress/relaysim"
)

const (
	e2eBearer = "e2e-bearer-Zq7!secret-value"
	e2eNode   = "node-e2e-1"
)

// startRelay starts a relaysim on addr that accepts only e2eBearer.
func startRelay(t *testing.T, addr string) (*relaysim.Server, string) {
	t.Helper()
	rs := relaysim.New(relaysim.Options{})
	origin, err := rs.Start(addr)
	if err != nil {
		t.Fatalf("relaysim on %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	rs.ExpectedBearer(e2eBearer)
	return rs, origin
}

// registrations returns the decoded registerClusterIngress requests rs received.
func registrations(t *testing.T, rs *relaysim.Server) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, c := range rs.Calls() {
		if c.Method != "registerClusterIngress" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(c.Request, &m); err != nil {
			t.Fatalf("registration body: %v", err)
		}
		out = append(out, m)
	}
	return out
}

// checkRegistration asserts the body of a registration: bearer, node and stamped version.
func checkRegistration(t *testing.T, reg map[string]any) {
	t.Helper()
	if reg["bearer"] != e2eBearer || reg["nodeId"] != e2eNode || reg["version"] != "9.8.7-test" {
		t.Fatalf("registration carries bearer ok=%v nodeId %v version %v, want the configured ones",
			reg["bearer"] == e2eBearer, reg["nodeId"], reg["version"])
	}
}

// knownRevisions returns the knownRevision of every route-table pull rs received (-1 for null).
func knownRevisions(t *testing.T, rs *relaysim.Server) []int64 {
	t.Helper()
	var out []int64
	for _, c := range rs.Calls() {
		if c.Method != "getClusterIngressRouteTable" {
			continue
		}
		var body struct {
			KnownRevision *int64 `json:"knownRevision"`
		}
		if err := json.Unmarshal(c.Request, &body); err != nil {
			t.Fatalf("pull body: %v", err)
		}
		if body.KnownRevision == nil {
			out = append(out, -1)
		} else {
			out = append(out, *body.KnownRevision)
		}
	}
	return out
}

// queryAllPages pages through getClusterTrafficStatistics for today with limit 1 and
// returns the entries and the number of pages.
func queryAllPages(t *testing.T, rs *relaysim.Server) ([]statEntry, int, error) {
	t.Helper()
	day := today()
	var all []statEntry
	var cursor *string
	for pages := 1; ; pages++ {
		req := map[string]any{"fromDayUtc": day, "toDayUtc": day, "limit": 1}
		if cursor != nil {
			req["cursor"] = *cursor
		}
		raw, err := rs.QueryStatistics(ctxT(t, e2eWait), req)
		if err != nil {
			return nil, pages, err
		}
		var page statPage
		if err := json.Unmarshal(raw, &page); err != nil {
			return nil, pages, fmt.Errorf("page %d: %v: %s", pages, err, raw)
		}
		if len(page.Statistics) > 1 {
			return nil, pages, fmt.Errorf("page %d has %d entries with limit 1", pages, len(page.Statistics))
		}
		all = append(all, page.Statistics...)
		if page.NextCursor == nil {
			return all, pages, nil
		}
		if len(page.Statistics) == 0 {
			return nil, pages, fmt.Errorf("page %d is empty but has a nextCursor", pages)
		}
		if pages > 20 {
			return nil, pages, errors.New("more than 20 pages")
		}
		cursor = page.NextCursor
	}
}

// TestE2ERelayMode runs the binary against relaysim: it registers with the bearer,
// pulls, applies a table on a hint, answers statistics page by page, and survives a
// relay restart on the same port while its applied table keeps serving.
func TestE2ERelayMode(t *testing.T) {
	buildBinary(t)
	t.Parallel()
	_, target := echoBackend(t, "backend", 0)
	const (
		hostA = "a.example.test"
		hostB = "b.example.test"
		wild  = "*.w.example.test"
		hostC = "c.example.test"
	)
	rs, origin := startRelay(t, "127.0.0.1:0")
	rs.SetTable(binarytest.TableJSON(t, 1, nil, binarytest.Route(hostA, "", false, target)), 1)

	p := startIngress(t, binarytest.RelayEnv(e2eBearer, origin, e2eNode), binarytest.BaseArgs()...)
	c := httpClient(t)

	if err := rs.WaitCalls(ctxT(t, e2eWait), "registerClusterIngress", 1); err != nil {
		t.Fatalf("%v; stderr:\n%s", err, p.Stderr())
	}
	checkRegistration(t, registrations(t, rs)[0])
	waitStatus(t, c, p.Admin, "", "/readyz", http.StatusOK)

	counts := map[string]int64{}
	hit := func(host, countAs string) {
		t.Helper()
		r := mustGet(t, c, p.HTTP, host, "/x", http.StatusOK)
		if want := "backend " + host + " /x"; r.body != want {
			t.Fatalf("body %q, want %q", r.body, want)
		}
		counts[countAs]++
	}
	hit(hostA, hostA)
	mustGet(t, c, p.HTTP, hostB, "/x", http.StatusNotFound) // not routed yet, not counted

	// Revision 2 adds a hostname and a wildcard; the hint makes the ingress pull it.
	rs.SetTable(binarytest.TableJSON(t, 2, nil,
		binarytest.Route(hostA, "", false, target), binarytest.Route(hostB, "", false, target), binarytest.Route(wild, "", false, target)), 2)
	if err := rs.PushHint(ctxT(t, e2eWait), 2); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, c, p.HTTP, hostB, "/x", http.StatusOK)
	counts[hostB]++
	for range 3 {
		hit(hostA, hostA)
	}
	hit(hostB, hostB)
	hit("one.w.example.test", wild)
	hit("two.w.example.test", wild)
	if got := knownRevisions(t, rs); len(got) < 2 || got[len(got)-1] != 1 {
		t.Fatalf("pulls' knownRevision = %v, want the last (after the hint) to be 1", got)
	}

	// Page through the statistics with limit 1: ordered by hostname, exact counts.
	order := []string{wild, hostA, hostB} // byte order: '*' < 'a'
	testwait.UntilWhy(t, e2eWait, "statistics paged with limit 1", func() (bool, string) {
		got, pages, err := queryAllPages(t, rs)
		if err != nil {
			return false, err.Error()
		}
		if pages != len(order) {
			return false, fmt.Sprintf("%d pages, want %d: %+v", pages, len(order), got)
		}
		if why := checkEntries(got, today(), e2eNode, order, counts); why != "" {
			return false, why
		}
		return true, ""
	})

	// Restart the relay on the same port while requests keep flowing.
	relayAddr := strings.TrimPrefix(origin, "http://")
	var (
		stopLoad  = make(chan struct{})
		loadWG    sync.WaitGroup
		loadOK    atomic.Int64
		loadErrMu sync.Mutex
		loadErr   error
	)
	lc := httpClient(t)
	loadWG.Add(1)
	go func() {
		defer loadWG.Done()
		for {
			select {
			case <-stopLoad:
				return
			default:
			}
			r, err := get(lc, p.HTTP, hostA, "/during")
			if err == nil && r.status != http.StatusOK {
				err = fmt.Errorf("status %d %q", r.status, r.body)
			}
			if err != nil {
				loadErrMu.Lock()
				loadErr = errors.Join(loadErr, err)
				loadErrMu.Unlock()
				return
			}
			loadOK.Add(1)
			time.Sleep(10 * time.Millisecond) // part of what is tested: the pace of the background load

		}
	}()
	if err := rs.Close(); err != nil {
		t.Fatalf("close relaysim: %v", err)
	}
	// The ingress notices the loss and tries again; serve nothing for a moment.
	p.WaitLine(e2eWait, func(m map[string]any) bool { return m["msg"] == "backing off" })
	during := loadOK.Load()
	testwait.UntilWhy(t, e2eWait, "requests served while the relay is away", func() (bool, string) {
		return loadOK.Load() >= during+5, fmt.Sprintf("%d requests", loadOK.Load()-during)
	})

	var rs2 *relaysim.Server
	testwait.UntilWhy(t, e2eWait, "relaysim restarted on "+relayAddr, func() (bool, string) {
		s := relaysim.New(relaysim.Options{})
		o, err := s.Start(relayAddr)
		if err != nil {
			_ = s.Close()
			var opErr *net.OpError
			if errors.As(err, &opErr) {
				return false, err.Error()
			}
			t.Fatalf("relaysim restart: %v", err)
		}
		if o != origin {
			t.Fatalf("restarted relay origin %s, want %s", o, origin)
		}
		rs2 = s
		return true, ""
	})
	t.Cleanup(func() { _ = rs2.Close() })
	rs2.ExpectedBearer(e2eBearer)
	rs2.SetTable(binarytest.TableJSON(t, 3, nil, binarytest.Route(hostA, "", false, target), binarytest.Route(hostB, "", false, target),
		binarytest.Route(hostC, "", false, target), binarytest.Route(wild, "", false, target)), 3)

	if err := rs2.WaitCalls(ctxT(t, 10*time.Second), "registerClusterIngress", 1); err != nil {
		t.Fatalf("no registration with the restarted relay: %v; stderr:\n%s", err, p.Stderr())
	}
	checkRegistration(t, registrations(t, rs2)[0])
	waitStatus(t, c, p.HTTP, hostC, "/x", http.StatusOK)
	if got := knownRevisions(t, rs2); len(got) == 0 || got[0] != 2 {
		t.Fatalf("first pull from the restarted relay has knownRevision %v, want 2 (the applied one)", got)
	}
	close(stopLoad)
	loadWG.Wait()
	if loadErr != nil {
		t.Fatalf("a request failed while the relay restarted: %v", loadErr)
	}
	// The statistics survive the reconnection: the same counts (plus the load) on the new relay.
	testwait.UntilWhy(t, e2eWait, "statistics after the relay restart", func() (bool, string) {
		got, _, err := queryAllPages(t, rs2)
		if err != nil {
			return false, err.Error()
		}
		want := map[string]int64{wild: counts[wild], hostA: counts[hostA] + loadOK.Load(), hostB: counts[hostB], hostC: 1}
		why := checkEntries(got, today(), e2eNode, []string{wild, hostA, hostB, hostC}, want)
		return why == "", why
	})

	// The session reconnected once, and no metric quotes the bearer.
	metrics := mustGet(t, c, p.Admin, "", "/metrics", http.StatusOK).body
	if !regexp.MustCompile(`(?m)^ingress_relay_reconnects_total [1-9]`).MatchString(metrics) {
		t.Errorf("ingress_relay_reconnects_total does not count the reconnection")
	}
	if strings.Contains(metrics, e2eBearer) {
		t.Fatal("/metrics quotes the bearer")
	}
	p.Stop(e2eWait)
	p.AssertNoSecret(e2eBearer)
}

// TestE2ENoTableYet: while the relay has computed no table, the registered ingress is not
// ready and answers every request 503 with Retry-After; the first table makes it ready.
func TestE2ENoTableYet(t *testing.T) {
	buildBinary(t)
	t.Parallel()
	_, target := echoBackend(t, "backend", 0)
	rs, origin := startRelay(t, "127.0.0.1:0")
	rs.SetTableNull()

	p := startIngress(t, binarytest.RelayEnv(e2eBearer, origin, e2eNode), binarytest.BaseArgs()...)
	c := httpClient(t)
	// The acceptance says revision null: registered, and nothing to pull yet.
	p.WaitLine(e2eWait, func(m map[string]any) bool { return m["msg"] == "registered with the relay" })
	mustGet(t, c, p.Admin, "", "/healthz", http.StatusOK)
	mustGet(t, c, p.Admin, "", "/readyz", http.StatusServiceUnavailable)
	for _, host := range []string{"a.example.test", "unknown.example.test"} {
		r := mustGet(t, c, p.HTTP, host, "/", http.StatusServiceUnavailable)
		if r.header.Get("Retry-After") == "" {
			t.Fatalf("503 for %s without Retry-After: %v", host, r.header)
		}
	}

	rs.SetTable(binarytest.TableJSON(t, 1, nil, binarytest.Route("a.example.test", "", false, target)), 1)
	if err := rs.PushHint(ctxT(t, e2eWait), 1); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, c, p.Admin, "", "/readyz", http.StatusOK)
	mustGet(t, c, p.HTTP, "a.example.test", "/", http.StatusOK)
	if got := knownRevisions(t, rs); len(got) == 0 || got[0] != -1 {
		t.Fatalf("pulls' knownRevision = %v, want the first to be null", got)
	}
	p.Stop(e2eWait)
	p.AssertNoSecret(e2eBearer)
}
