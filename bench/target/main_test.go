package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

func TestHandler(t *testing.T) {
	srv := httptest.NewServer(newHandler())
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
