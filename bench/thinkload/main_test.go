package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"

	"github.com/serve-zone/ingress/bench/internal/loadtool"
)

// server answers GET /1k with 1 KiB over HTTP/1.1 and HTTP/2 (TLS by ALPN), plain
// HTTP/1.1 and HTTP/3, and records the client addresses it saw and the protocols.
type server struct {
	mu      sync.Mutex
	sources map[string]bool
	protos  map[string]int
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	s.mu.Lock()
	s.sources[host] = true
	s.protos[r.Proto]++
	s.mu.Unlock()
	if r.URL.Path != "/1k" || r.Host != "bench.test" {
		http.Error(w, "wrong request", http.StatusBadRequest)
		return
	}
	_, _ = w.Write(bytes.Repeat([]byte("x"), 1024))
}

func TestRunEveryKind(t *testing.T) {
	cert, der, err := loadtool.SelfSigned("bench.test")
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	leaf, _ := x509.ParseCertificate(der)
	roots.AddCert(leaf)
	for _, kind := range []string{"h1", "tls", "h2", "h3"} {
		t.Run(kind, func(t *testing.T) {
			s := &server{sources: map[string]bool{}, protos: map[string]int{}}
			var addr string
			switch kind {
			case "h1":
				srv := httptest.NewServer(s)
				t.Cleanup(srv.Close)
				addr = strings.TrimPrefix(srv.URL, "http://")
			case "h3":
				pc, err := net.ListenPacket("udp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				srv := &http3.Server{TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}, Handler: s}
				done := make(chan error, 1)
				go func() { done <- srv.Serve(pc) }()
				t.Cleanup(func() {
					_ = srv.Close()
					if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
						t.Errorf("serve: %v", err)
					}
					_ = pc.Close()
				})
				addr = pc.LocalAddr().String()
			default:
				srv := httptest.NewUnstartedServer(s)
				srv.EnableHTTP2 = kind == "h2"
				srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
				srv.StartTLS()
				t.Cleanup(srv.Close)
				addr = strings.TrimPrefix(srv.URL, "https://")
			}
			c := config{addr: addr, host: "bench.test", path: "/1k", proto: kind, roots: roots,
				conns: 12, sources: 4, openAt: 4, think: 20 * time.Millisecond,
				warmup: 50 * time.Millisecond, duration: 400 * time.Millisecond, timeout: 10 * time.Second}
			sum, err := run(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			sum.write(&out)
			t.Log("\n" + out.String())
			n, failed := 0, 0
			var spent time.Duration
			for _, r := range sum.results {
				n += len(r.latencies)
				for _, l := range r.latencies {
					spent += l
				}
				failed += r.failed
				if r.firstErr != nil {
					t.Errorf("a request failed: %v", r.firstErr)
				}
			}
			// Each connection sends a request, waits for its answer, thinks 20 ms on
			// average: over the window, conns x duration / (think + mean latency)
			// requests (about 240 when answers are quick; a loaded machine's slow answers
			// make it fewer). Far from it means the think time is not what it says.
			expect := 0.0
			if n > 0 {
				expect = float64(c.conns) * float64(c.duration) / float64(c.think+spent/time.Duration(n))
			}
			if failed != 0 || float64(n) < expect/2 || float64(n) > 2*expect || sum.open != 12 {
				t.Fatalf("%d requests, %d failed, %d connections open; want about %.0f (at a mean latency of %s), none failed, 12",
					n, failed, sum.open, expect, spent/time.Duration(max(n, 1)))
			}
			want := map[string]string{"h1": "HTTP/1.1", "tls": "HTTP/1.1", "h2": "HTTP/2.0", "h3": "HTTP/3.0"}[kind]
			s.mu.Lock()
			defer s.mu.Unlock()
			if len(s.sources) != 4 || len(s.protos) != 1 || s.protos[want] == 0 {
				t.Fatalf("the server saw addresses %v and protocols %v; want 4 addresses and %s only", s.sources, s.protos, want)
			}
		})
	}
}

func TestCheckRefuses(t *testing.T) {
	for _, tt := range []struct {
		name string
		c    config
	}{
		{"non-loopback", config{addr: "192.0.2.1:80", proto: "h1", conns: 1, sources: 1, openAt: 1, think: time.Second, duration: time.Second}},
		{"unknown kind", config{addr: "127.0.0.1:80", proto: "h9", conns: 1, sources: 1, openAt: 1, think: time.Second, duration: time.Second}},
		{"no connections", config{addr: "127.0.0.1:80", proto: "h1", sources: 1, openAt: 1, think: time.Second, duration: time.Second}},
		{"TLS without a CA", config{addr: "127.0.0.1:80", proto: "tls", conns: 1, sources: 1, openAt: 1, think: time.Second, duration: time.Second}},
	} {
		if err := tt.c.check("", ""); err == nil {
			t.Errorf("%s: accepted", tt.name)
		}
	}
}

func TestSource(t *testing.T) {
	for _, tt := range []struct {
		i, sources int
		want       string
	}{{0, 250, "127.0.1.1"}, {249, 250, "127.0.1.250"}, {250, 250, "127.0.1.1"}, {250, 500, "127.0.2.1"}, {7, 3, "127.0.1.2"}} {
		if got := source(tt.i, tt.sources).String(); got != tt.want {
			t.Errorf("source(%d, %d) = %s, want %s", tt.i, tt.sources, got, tt.want)
		}
	}
}
