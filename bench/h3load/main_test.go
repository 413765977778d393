package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/serve-zone/ingress/bench/internal/loadtool"

	"github.com/quic-go/quic-go/http3"
)

// h3Server is an HTTP/3 server on 127.0.0.1 that answers /ok with 200 and anything else with
// 503, and records the client addresses (one per QUIC connection) and the most requests it
// had in flight at once.
type h3Server struct {
	addr, caFile string
	mu           sync.Mutex
	clients      map[string]int
	inFlight     atomic.Int64
	maxInFlight  atomic.Int64
}

func startH3Server(t *testing.T) *h3Server {
	t.Helper()
	cert, der, err := loadtool.SelfSigned("bench.test")
	if err != nil {
		t.Fatal(err)
	}
	s := &h3Server{caFile: filepath.Join(t.TempDir(), "ca.pem"), clients: map[string]int{}}
	if err := os.WriteFile(s.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = pc.LocalAddr().String()
	srv := &http3.Server{
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := s.inFlight.Add(1)
			defer s.inFlight.Add(-1)
			for m := s.maxInFlight.Load(); n > m && !s.maxInFlight.CompareAndSwap(m, n); m = s.maxInFlight.Load() {
			}
			s.mu.Lock()
			s.clients[r.RemoteAddr]++
			s.mu.Unlock()
			time.Sleep(time.Millisecond) // part of what is tested: a handler slow enough that concurrent requests overlap
			if r.URL.Path != "/ok" || r.Host != "bench.test" {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			_, _ = w.Write([]byte("0123456789abcdef"))
		}),
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(pc) }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
		_ = pc.Close()
	})
	return s
}

func TestRun(t *testing.T) {
	tests := []struct {
		name, path string
		wantOK     bool
	}{
		{"200 counts as success", "/ok", true},
		{"non-200 counts as failure", "/fail", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := startH3Server(t)
			c := config{addr: srv.addr, serverName: "bench.test", path: tt.path, conns: 3, streams: 4, duration: 300 * time.Millisecond}
			if err := c.check(srv.caFile); err != nil {
				t.Fatal(err)
			}
			s := run(context.Background(), c)
			var ok, failed int
			for _, r := range s.results {
				ok += len(r.latencies)
				failed += r.failed
			}
			var out bytes.Buffer
			report(&out, s)
			if tt.wantOK {
				if ok == 0 || failed != 0 {
					t.Fatalf("ok %d, failed %d\n%s", ok, failed, out.String())
				}
				if !strings.Contains(out.String(), " 0 failed in ") || strings.Contains(out.String(), "first error") {
					t.Errorf("report:\n%s", out.String())
				}
			} else {
				if ok != 0 || failed == 0 {
					t.Fatalf("ok %d, failed %d\n%s", ok, failed, out.String())
				}
				if !strings.Contains(out.String(), "first error: h3load: status 503") {
					t.Errorf("report:\n%s", out.String())
				}
			}
			srv.mu.Lock()
			clients := len(srv.clients)
			srv.mu.Unlock()
			if clients != c.conns || s.dials != int64(c.conns) {
				t.Errorf("%d client connections, %d dials, want %d of each", clients, s.dials, c.conns)
			}
			if m := srv.maxInFlight.Load(); m < 2 || m > int64(c.conns*c.streams) {
				t.Errorf("at most %d requests in flight, want 2 to %d", m, c.conns*c.streams)
			}
			for _, prefix := range []string{"connections: ", "rate: ", "latency ms: p50 ", "quic: 3 dials, TLS 1.3 "} {
				if !strings.Contains(out.String(), "\n"+prefix) && !strings.HasPrefix(out.String(), prefix) {
					t.Errorf("report lacks %q:\n%s", prefix, out.String())
				}
			}
		})
	}
}

func TestRunStopsWithContext(t *testing.T) {
	srv := startH3Server(t)
	c := config{addr: srv.addr, serverName: "bench.test", path: "/ok", conns: 1, streams: 2, duration: time.Minute}
	if err := c.check(srv.caFile); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	s := run(ctx, c)
	if d := time.Since(t0); d > 10*time.Second {
		t.Fatalf("run took %v after its context ended", d)
	}
	if s.elapsed >= c.duration {
		t.Fatalf("elapsed %v: the context did not stop the workers", s.elapsed)
	}
}

func TestCheck(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "empty.pem")
	if err := os.WriteFile(ca, []byte("no certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		c    config
		ca   string
	}{
		{"non-loopback address", config{addr: "192.0.2.1:443", conns: 1, streams: 1, duration: time.Second}, ca},
		{"zero connections", config{addr: "127.0.0.1:443", conns: 0, streams: 1, duration: time.Second}, ca},
		{"zero streams", config{addr: "127.0.0.1:443", conns: 1, streams: 0, duration: time.Second}, ca},
		{"no certificate in the CA file", config{addr: "127.0.0.1:443", conns: 1, streams: 1, duration: time.Second}, ca},
		{"missing CA file", config{addr: "127.0.0.1:443", conns: 1, streams: 1, duration: time.Second}, filepath.Join(t.TempDir(), "none.pem")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.c.check(tt.ca); err == nil {
				t.Fatal("check accepted it")
			}
		})
	}
}
