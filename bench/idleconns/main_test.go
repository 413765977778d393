package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestOpenHoldsKeepAliveConnections(t *testing.T) {
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if r.Host != "bench.test" {
			http.Error(w, "wrong host", http.StatusBadRequest)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	conns, err := open(plain, addr, "bench.test", "/64", 20)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	if err != nil {
		t.Fatal(err)
	}
	if len(conns) != 20 || requests.Load() != 20 {
		t.Fatalf("%d connections, %d requests; want 20 and 20", len(conns), requests.Load())
	}
	// The connections are still open: a second request on one of them is answered.
	c := conns[0].(net.Conn)
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("GET /64 HTTP/1.1\r\nHost: bench.test\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 12)
	if _, err := c.Read(buf); err != nil || string(buf) != "HTTP/1.1 200" {
		t.Fatalf("second request: %q, %v", buf, err)
	}
}

func TestOpenRefuses(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	tests := []struct{ name, addr string }{
		{"non-loopback", "192.0.2.1:80"},
		{"server closes", addr},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conns, err := open(plain, tt.addr, "bench.test", "/", 2)
			for _, c := range conns {
				_ = c.Close()
			}
			if err == nil {
				t.Fatal("open succeeded, want an error")
			}
		})
	}
}

// TestOpenOverTLS: -tls holds HTTP/1.1 connections over TLS, -h2 HTTP/2 ones, each after
// one request (one TLS connection each).
func TestOpenOverTLS(t *testing.T) {
	for _, tt := range []struct {
		name  string
		m     mode
		proto string
	}{{"tls", overTLS, "HTTP/1.1"}, {"h2", h2, "HTTP/2.0"}} {
		t.Run(tt.name, func(t *testing.T) {
			var requests, conns atomic.Int64
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				if r.Proto != tt.proto || r.Host != "bench.test" {
					http.Error(w, r.Proto+" for "+r.Host, http.StatusBadRequest)
					return
				}
				_, _ = w.Write([]byte("ok"))
			}))
			srv.EnableHTTP2 = tt.m == h2
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					conns.Add(1)
				}
			}
			srv.StartTLS()
			defer srv.Close()
			held, err := open(tt.m, strings.TrimPrefix(srv.URL, "https://"), "bench.test", "/64", 10)
			defer func() {
				for _, c := range held {
					_ = c.Close()
				}
			}()
			if err != nil {
				t.Fatal(err)
			}
			if len(held) != 10 || requests.Load() != 10 || conns.Load() != 10 {
				t.Fatalf("%d held, %d requests on %d connections; want 10 of each", len(held), requests.Load(), conns.Load())
			}
		})
	}
}
