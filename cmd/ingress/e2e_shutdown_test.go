package main

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
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
)

// TestE2ESIGTERMUnderLoad: SIGTERM while 8 clients keep a slow backend busy. Every request
// that was answered got 200 (none cut off or answered 5xx while draining); the only
// acceptable failure is a refused connection after the listener closed; the process exits
// 0 well within --drain-timeout.
func TestE2ESIGTERMUnderLoad(t *testing.T) {
	buildBinary(t)
	t.Parallel()
	const (
		host    = "load.example.test"
		clients = 8
		drain   = 5 * time.Second
	)
	var inFlight atomic.Int64
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inFlight.Add(1)
		defer inFlight.Add(-1)
		time.Sleep(50 * time.Millisecond) // part of what is tested: a slow backend keeps requests in flight
		fmt.Fprintf(w, "backend %s %s", r.Host, r.URL.Path)
	}))
	t.Cleanup(slow.Close)
	target := binarytest.TargetOf(t, slow.Listener.Addr().String(), "lease-backend")
	file := filepath.Join(t.TempDir(), "routes.json")
	if err := os.WriteFile(file, binarytest.TableJSON(t, 1, nil, binarytest.Route(host, "", false, target)), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startIngress(t, nil, binarytest.BaseArgs("--routes", file, "--drain-timeout", drain.String())...)
	waitStatus(t, httpClient(t), p.Admin, "", "/readyz", http.StatusOK)

	var (
		ok       atomic.Int64
		refused  atomic.Int64
		mu       sync.Mutex
		failures []error
		wg       sync.WaitGroup
		warm     sync.WaitGroup
	)
	warm.Add(clients)
	for i := range clients {
		c := httpClient(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			first := true
			for {
				r, err := get(c, p.HTTP, host, "/slow")
				switch {
				case err != nil && errors.Is(err, syscall.ECONNREFUSED):
					refused.Add(1)
					if first {
						warm.Done()
					}
					return // the listener is closed: the drain has begun
				case err != nil:
					err = fmt.Errorf("client %d: %w", i, err)
				case r.status != http.StatusOK:
					err = fmt.Errorf("client %d: status %d %q", i, r.status, r.body)
				}
				if err != nil {
					mu.Lock()
					failures = append(failures, err)
					mu.Unlock()
					if first {
						warm.Done()
					}
					return
				}
				ok.Add(1)
				if first {
					first = false
					warm.Done()
				}
			}
		}()
	}
	warm.Wait() // every client got an answer
	// SIGTERM when every client has a request at the backend: the drain must answer them.
	testwait.Until(t, e2eWait, "a request of every client in flight", func() bool { return inFlight.Load() == clients })
	before := ok.Load()
	start := time.Now()
	p.Signal(syscall.SIGTERM)
	code := p.Wait(drain + 2*time.Second)
	elapsed := time.Since(start)
	wg.Wait()

	if len(failures) > 0 {
		t.Fatalf("%d requests failed during the graceful stop (%d answered 200, %d refused): %v; stderr:\n%s",
			len(failures), ok.Load(), refused.Load(), errors.Join(failures...), p.Stderr())
	}
	if code != 0 {
		t.Fatalf("exit status %d, want 0; stderr:\n%s", code, p.Stderr())
	}
	if elapsed >= drain {
		t.Fatalf("the stop took %s, not within --drain-timeout %s", elapsed, drain)
	}
	if refused.Load() != clients {
		t.Fatalf("%d clients ended with a refused connection, want all %d", refused.Load(), clients)
	}
	if before < clients {
		t.Fatalf("only %d requests answered before SIGTERM", before)
	}
	if ok.Load() == before {
		t.Fatal("no request in flight at SIGTERM was answered: the drain was not exercised")
	}
	t.Logf("%d requests answered (%d before SIGTERM), stop took %s", ok.Load(), before, elapsed)
}

// TestE2ESecondSignalStopsAtOnce: the first SIGTERM starts a drain that would wait up to
// --drain-timeout for a request still in flight; a second signal ends the process at once
// with a non-zero status.
func TestE2ESecondSignalStopsAtOnce(t *testing.T) {
	buildBinary(t)
	t.Parallel()
	const host = "hang.example.test"
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); hang.Close() })
	file := filepath.Join(t.TempDir(), "routes.json")
	target := binarytest.TargetOf(t, hang.Listener.Addr().String(), "lease-hang")
	if err := os.WriteFile(file, binarytest.TableJSON(t, 1, nil, binarytest.Route(host, "", false, target)), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startIngress(t, nil, binarytest.BaseArgs("--routes", file, "--drain-timeout", "60s")...)
	waitStatus(t, httpClient(t), p.Admin, "", "/readyz", http.StatusOK)

	hc := httpClient(t)
	go func() { _, _ = get(hc, p.HTTP, host, "/hang") }()
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the request never reached the target")
	}
	p.Signal(syscall.SIGTERM)
	p.WaitLine(5*time.Second, func(m map[string]any) bool { return m["msg"] == "stopping: draining in-flight requests" })
	// While it drains, /readyz says so (issue 34: it said "no route table applied").
	if r := waitStatus(t, httpClient(t), p.Admin, "", "/readyz", http.StatusServiceUnavailable); !strings.HasPrefix(r.body, "not ready: draining") {
		t.Fatalf("/readyz while draining: %q", r.body)
	}
	start := time.Now()
	p.Signal(syscall.SIGTERM)
	if code := p.Wait(5 * time.Second); code == 0 {
		t.Fatalf("exit status 0 after a second signal, want non-zero; stderr:\n%s", p.Stderr())
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("the second signal took %s to stop the process", d)
	}
}
