package main

// Helpers of the end-to-end tests: each test runs the real ingress binary (built once by
// buildBinary) as a child process on loopback through the shared harness
// (internal/binarytest), reads its JSON log lines from stderr and talks to it over real
// sockets.

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/binarytest"
	"github.com/serve-zone/ingress/internal/testwait"
	"github.com/serve-zone/ingress/routetable"
)

// e2eWait bounds every poll of the end-to-end tests. Generous: the events come within
// milliseconds, but a loaded 2-core machine running the suite under -race starts several
// binaries at once, and a poll ends at its event, not at the bound.
const e2eWait = 15 * time.Second

// ingressProc is one running ingress binary.
type ingressProc = binarytest.Proc

// execIngress starts the binary with only PATH and env in its environment and collects
// its stderr. It does not wait for anything; the cleanup kills a process still running.
func execIngress(t *testing.T, env []string, args ...string) *ingressProc {
	t.Helper()
	return binarytest.Exec(t, buildBinary(t), env, args...)
}

// startIngress starts the binary and waits for its "ingress started" line, whose bound
// addresses it records.
func startIngress(t *testing.T, env []string, args ...string) *ingressProc {
	t.Helper()
	return binarytest.Start(t, buildBinary(t), e2eWait, env, args...)
}

// httpClient returns a keep-alive client whose idle connections are closed at cleanup.
// It never follows redirects.
func httpClient(t *testing.T) *http.Client {
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
		ForceAttemptHTTP2: true,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{
		Transport:     tr,
		Timeout:       e2eWait,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// result is one answered request.
type result struct {
	status int
	header http.Header
	body   string
}

// get sends GET http://addr/path with Host host.
func get(c *http.Client, addr, host, path string) (result, error) {
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return result{}, err
	}
	req.Host = host
	resp, err := c.Do(req)
	if err != nil {
		return result{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return result{}, err
	}
	return result{resp.StatusCode, resp.Header, string(b)}, nil
}

// mustGet sends the request and fails the test unless it is answered with want.
func mustGet(t *testing.T, c *http.Client, addr, host, path string, want int) result {
	t.Helper()
	r, err := get(c, addr, host, path)
	if err != nil {
		t.Fatalf("GET %s%s (Host %s): %v", addr, path, host, err)
	}
	if r.status != want {
		t.Fatalf("GET %s%s (Host %s) = %d %q, want %d", addr, path, host, r.status, r.body, want)
	}
	return r
}

// waitStatus polls GET host until it is answered with want.
func waitStatus(t *testing.T, c *http.Client, addr, host, path string, want int) result {
	t.Helper()
	var last result
	testwait.UntilWhy(t, e2eWait, fmt.Sprintf("GET %s%s (Host %s) answered %d", addr, path, host, want), func() (bool, string) {
		r, err := get(c, addr, host, path)
		if err != nil {
			return false, err.Error()
		}
		last = r
		return r.status == want, fmt.Sprintf("got %d %q", r.status, r.body)
	})
	return last
}

// echoBackend is a workload on 127.0.0.1 that answers "name host path" and counts
// its requests.
func echoBackend(t *testing.T, name string, delay time.Duration) (*httptest.Server, routetable.Target) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if delay > 0 {
			time.Sleep(delay) // part of what is tested: a slow backend keeps requests in flight
		}
		fmt.Fprintf(w, "%s %s %s", name, r.Host, r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	return srv, binarytest.TargetOf(t, srv.Listener.Addr().String(), "lease-"+name)
}

// statEntry is one IClusterTrafficStatistics.
type statEntry struct {
	DayUtc          string `json:"dayUtc"`
	NodeID          string `json:"nodeId"`
	Hostname        string `json:"hostname"`
	Requests        int64  `json:"requests"`
	BytesIn         int64  `json:"bytesIn"`
	BytesOut        int64  `json:"bytesOut"`
	Connections     int64  `json:"connections"`
	BackendFailures struct {
		Connect   int64 `json:"connect"`
		Handshake int64 `json:"handshake"`
		Request   int64 `json:"request"`
	} `json:"backendFailures"`
}

// statPage is one getClusterTrafficStatistics response.
type statPage struct {
	Statistics []statEntry `json:"statistics"`
	NextCursor *string     `json:"nextCursor"`
}

// checkEntries compares entries with want (hostname → requests, in the order expected)
// for day and node, and returns what differs.
func checkEntries(got []statEntry, day, node string, want []string, requests map[string]int64) string {
	var problems []string
	if len(got) != len(want) {
		problems = append(problems, fmt.Sprintf("%d entries, want %d", len(got), len(want)))
	}
	for i, e := range got {
		if i < len(want) && e.Hostname != want[i] {
			problems = append(problems, fmt.Sprintf("entry %d is %q, want %q", i, e.Hostname, want[i]))
		}
		if e.DayUtc != day || e.NodeID != node {
			problems = append(problems, fmt.Sprintf("entry %d: day %s node %s, want %s %s", i, e.DayUtc, e.NodeID, day, node))
		}
		if e.Requests != requests[e.Hostname] {
			problems = append(problems, fmt.Sprintf("%s: %d requests, want %d", e.Hostname, e.Requests, requests[e.Hostname]))
		}
		if e.Requests > 0 && (e.BytesIn <= 0 || e.BytesOut <= 0) {
			problems = append(problems, fmt.Sprintf("%s: bytes in %d out %d, want both positive", e.Hostname, e.BytesIn, e.BytesOut))
		}
		if f := e.BackendFailures; f.Connect+f.Handshake+f.Request != 0 {
			problems = append(problems, fmt.Sprintf("%s: backend failures %+v, want none", e.Hostname, f))
		}
	}
	return strings.Join(problems, "; ")
}

// today is the UTC day of now.
func today() string { return time.Now().UTC().Format(time.DateOnly) }

// closedOrigin returns an http origin on loopback where nothing listens.
func closedOrigin(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// ctxT is a context that ends with the test or after limit.
func ctxT(t *testing.T, limit time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	t.Cleanup(cancel)
	return ctx
}
