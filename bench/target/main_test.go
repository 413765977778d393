package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/serve-zone/ingress/internal/testwait"
)

func TestHandler(t *testing.T) {
	srv := httptest.NewServer(newHandler(&counters{}))
	defer srv.Close()
	tests := []struct {
		method, path string
		status, size int
	}{
		{http.MethodGet, "/64", http.StatusOK, 64},
		{http.MethodGet, "/16k", http.StatusOK, 16 << 10},
		{http.MethodHead, "/16k", http.StatusOK, 0},
		{http.MethodGet, "/other", http.StatusNotFound, -1},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, srv.URL+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.status)
			}
			if tt.size < 0 {
				return
			}
			if len(body) != tt.size {
				t.Errorf("body %d bytes, want %d", len(body), tt.size)
			}
			if tt.status == http.StatusOK && tt.method == http.MethodGet {
				if got := resp.Header.Get("Content-Length"); got != strconv.Itoa(tt.size) {
					t.Errorf("Content-Length %q, want %d", got, tt.size)
				}
			}
		})
	}
}

func TestRunRefusesNonLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", "10.0.0.1:80", "localhost"} {
		if err := run(addr); err == nil {
			t.Errorf("run(%q) = nil, want an error", addr)
		}
	}
}

// TestCounts: /_counts says how many requests, /flood requests and connections the target
// saw, and the most connections open at once (reset to those open now with ?reset).
func TestCounts(t *testing.T) {
	cn := &counters{}
	srv := httptest.NewUnstartedServer(newHandler(cn))
	srv.Config.ConnState = cn.connState
	srv.Start()
	defer srv.Close()
	get := func(c *http.Client, path string) string {
		t.Helper()
		resp, err := c.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	a, b := &http.Client{Transport: &http.Transport{}}, &http.Client{Transport: &http.Transport{}}
	get(a, "/flood")
	get(b, "/64")
	get(a, "/flood")
	want := "requests 4\nflood 2\nconnections_opened 2\nconnections_open 2\npeak_open 2\n"
	if got := get(a, "/_counts"); got != want {
		t.Errorf("/_counts = %q, want %q", got, want)
	}
	b.Transport.(*http.Transport).CloseIdleConnections()
	testwaitOpen(t, cn, 1)
	if got, want := get(a, "/_counts?reset"), "requests 5\nflood 2\nconnections_opened 2\nconnections_open 1\npeak_open 1\n"; got != want {
		t.Errorf("/_counts?reset = %q, want %q", got, want)
	}
	a.Transport.(*http.Transport).CloseIdleConnections()
}

// testwaitOpen waits until the target sees n connections open (a closed client
// connection reaches the server's ConnState a moment later).
func testwaitOpen(t *testing.T, cn *counters, n int64) {
	t.Helper()
	testwait.Until(t, 5*time.Second, "the closed connection seen by the target", func() bool { return cn.open.Load() == n })
}
